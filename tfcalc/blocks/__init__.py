"""Block kinds, one module each: its builder (op records from the spec, the workload, the stack and the layer), the
names its reference modules carry (`check` maps counters onto components with them) and its reference torch module
(`<kind>/reference.py`, imported only when a model is built: counting never imports torch). Each registers itself
in `tfcalc.arch.builders.KINDS`; the inventory and the reference model compose a block by looping over
`tfcalc.arch.Layer.kinds`. docs/architecture.md tells how a kind is added.

- `embedding`, `head`: the model's frame (each stack's embedding and final norm, the pooler and the head).
- `attention` (with multi-head latent attention), `cross_attention`, `mlp`, `moe` (and the experts beside a dense
  MLP), `per_layer` (Gemma 4's per-layer input): the sublayers of a block.
- `conv` (LFM2's short convolution), `mamba` (Mamba's selective scan), `mamba2` (Mamba2's SSD mixer),
  `gated_deltanet` (Qwen3-Next's linear attention): the mixers of hybrid models, and `parallel_hybrid` (Falcon-H1's
  attention and Mamba2 side by side on one norm), registered lazily (imported when a spec names them).
- `patch_embedding` (ViT's patches, class token and position table; Qwen2-VL's 3-D patches): a model of images'
  input in place of `embedding`, `window_attention` (Qwen2.5-VL's attention within windows of the patch grid) and
  `patch_merger` (Qwen2-VL's merger after the blocks) and `patch_pooler` (Gemma 4's pooler after the blocks),
  registered lazily.
- `window_merger` (MiniCPM-V's window-attention merger between two blocks of its vision tower: one token per 2 x 2
  window, the blocks after it over a quarter of the patches), registered lazily.
- `tile_position` (Llama 3.2 Vision's norm and gated tile table between its local and global encoders) and
  `layer_gates` (the tanh gates of its global encoder's blocks), registered lazily.
- `attention_pool` (SigLIP's attention-pooling head: a probe attending to the stack's tokens, a norm, an MLP): in
  the model's head, after the final norm, registered lazily.
- `audio_conv` (Whisper's two convolutions over mel frames and its frozen position table): a model of audio's encoder
  input in place of `embedding` (`ModelSpec.stack_input`), registered lazily; with `subsample`, Gemma 4's audio
  front end (two Conv2d of stride 2).
- `conformer` (Gemma 4's audio block: two half feed-forwards, chunked attention with relative positions, a light
  convolution) and `token_projection` (a linear over every token after a tower's stack), registered lazily.
"""

# in the model's order: the frame's embedding, the sublayers, the frame's final norm and head
from . import embedding  # noqa: F401, I001  (each registers)
from . import attention, cross_attention, mlp, moe, per_layer  # noqa: F401
from . import head  # noqa: F401
from ..arch.builders import register_lazily

# the sequence mixers of hybrid models and the input of a model of images: each module registers its kind when a
# spec first names it
for _name in ("conv", "mamba2", "gated_deltanet", "mamba", "parallel_hybrid", "patch_embedding", "attention_pool",
              "audio_conv", "window_attention", "patch_merger", "patch_pooler", "tile_position", "layer_gates",
              "window_merger", "conformer", "token_projection"):
    register_lazily(_name, f"{__name__}.{_name}")
