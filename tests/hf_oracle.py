"""What the family tests share: a config.json written to a folder, and transformers' config class built from it
(its warnings and log lines silenced: a tiny config's token ids are outside its vocabulary)."""

import json
import warnings


def write(folder, config: dict, name: str = "config.json"):
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def hf_config(config: dict):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        return transformers.AutoConfig.for_model(**config)


def meta_params(model_class, config: dict) -> int:
    """transformers' `model_class` built from `config` on the meta device: its parameters (tied ones once)."""
    import torch

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return sum(p.numel() for p in model_class(hf_config(config)).parameters())


def eager_flops(model_class, config: dict, batch: int, seq_len: int, context: int = 0, use_cache: bool = False,
                **implementation) -> int:
    """FlopCounterMode over one forward of `seq_len` tokens of transformers' `model_class` built from `config`
    (`implementation`: `_from_config`'s attn_implementation / experts_implementation), after a prefill of `context`
    tokens (not counted); `use_cache`: the forward keeps a cache even with no prefill."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = model_class._from_config(hf_config(config), **implementation)
        ids = torch.randint(config["vocab_size"], (batch, context + seq_len),
                            generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            cache = model(input_ids=ids[:, :context], use_cache=True).cache if context else None
            with FlopCounterMode(display=False) as counter:
                model(input_ids=ids[:, context:], cache=cache, use_cache=use_cache or bool(context))
    return counter.get_total_flops()
