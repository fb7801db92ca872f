"""LoRA on a multimodal model: the towers run before the language model, so the gradient starts at the first adapted
block in model order (the vision tower's), not at the language model's. Held against PEFT on transformers' own
LlavaForConditionalGeneration under FlopCounterMode (CPU, fp32, eager attention)."""

import warnings

import peft
import pytest
import torch
import transformers
from hf_oracle import hf_config, write
from torch.utils.flop_counter import FlopCounterMode

from tfcalc import Adapters, Workload, count
from tfcalc.hf import read_hf_config

# vision_feature_layer -1: every vision block feeds the projector (at -2 the last block's output reaches no loss and
# torch runs no backward through it: tfcalc does not model that yet, docs/finetuning.md)
LLAVA = {"model_type": "llava", "image_token_index": 299, "vision_feature_layer": -1,
         "text_config": {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "max_position_embeddings": 128},
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 96,
                           "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8}}
PEFT_NAMES = {"q,k,v": ["q_proj", "k_proj", "v_proj"],
              "q,k,v,o,up,down": ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "fc1", "fc2",
                                  "out_proj"]}


def torch_step(config: dict, targets: list[str]) -> tuple[int, int, int]:
    """(forward, backward, trainable) of one sequence of 40 tokens, 16 of them one 32 x 32 image's, through PEFT's
    LoRA (rank 4) on transformers' class."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        cfg = hf_config(config)
        cfg._attn_implementation = "eager"
        model = peft.get_peft_model(transformers.LlavaForConditionalGeneration(cfg),
                                    peft.LoraConfig(r=4, target_modules=targets, lora_dropout=0.0))
        ids = torch.randint(0, 299, (1, 40))
        ids[0, 4:20] = 299  # the image's 16 patches (its class token dropped)
        with FlopCounterMode(display=False) as counter:
            logits = model(input_ids=ids, pixel_values=torch.randn(1, 3, 32, 32)).logits
            forward = counter.get_total_flops()
            logits.float().sum().backward()
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return forward, counter.get_total_flops() - forward, trainable


@pytest.mark.parametrize("targets", sorted(PEFT_NAMES))
def test_a_vlms_adapters_start_the_gradient_in_its_vision_tower(tmp_path, targets):
    spec = read_hf_config(write(tmp_path, LLAVA)).spec
    tuned = count(spec, Workload(batch_size=1, seq_len=40, images=1), adapters=Adapters(4, targets)).finetune
    assert (tuned.forward, tuned.backward, tuned.trainable) == torch_step(LLAVA, PEFT_NAMES[targets])

