"""T5 v1.0 (ReLU) and v1.1 / FLAN (gated-gelu) (T5ForConditionalGeneration): an encoder and a decoder with relative
position bias in the first block of each stack, pre-norm RMSNorm, no biases, a final norm per stack, one shared token
table."""

from __future__ import annotations

from ..hf import SHADOWED, refuse_if
from .registry import Difference, Family, register

_BLOCK = r"(?P<stack>encoder|decoder)\.block\.\d+\.layer\.\d+\."
COMPONENTS = [
    (r"shared", "embedding/token"),
    (_BLOCK + r"SelfAttention\.(q|k|v)", "{stack}/attention/qkv"),
    (_BLOCK + r"SelfAttention", "{stack}/attention/core"),
    (_BLOCK + r"SelfAttention\.o", "{stack}/attention/out"),
    (_BLOCK + r"SelfAttention\.relative_attention_bias", "{stack}/attention/relative_bias"),
    (r"(?P<stack>encoder|decoder)\.block\.\d+\.layer\.0\.layer_norm", "{stack}/attention/norm"),
    (r"decoder\.block\.\d+\.layer\.1\.EncDecAttention\.q", "decoder/cross_attention/q"),
    (r"decoder\.block\.\d+\.layer\.1\.EncDecAttention\.(k|v)", "decoder/cross_attention/kv"),
    (r"decoder\.block\.\d+\.layer\.1\.EncDecAttention", "decoder/cross_attention/core"),
    (r"decoder\.block\.\d+\.layer\.1\.EncDecAttention\.o", "decoder/cross_attention/out"),
    (r"decoder\.block\.\d+\.layer\.1\.layer_norm", "decoder/cross_attention/norm"),
    (r"encoder\.block\.\d+\.layer\.1\.layer_norm", "encoder/mlp/norm"),
    (r"decoder\.block\.\d+\.layer\.2\.layer_norm", "decoder/mlp/norm"),
    (_BLOCK + r"DenseReluDense\.(wi|wi_1)", "{stack}/mlp/up"),
    (_BLOCK + r"DenseReluDense\.wi_0", "{stack}/mlp/gate"),  # gated: act(wi_0 x) * wi_1 x
    (_BLOCK + r"DenseReluDense\.wo", "{stack}/mlp/down"),
    (r"(?P<stack>encoder|decoder)\.final_layer_norm", "{stack}/final_norm"),
    (r"lm_head", "head"),
]


def t5(cfg: dict, notes: list[str]) -> dict:
    """T5 v1.0 (ReLU) and v1.1 / FLAN (gated-gelu): relative position bias, pre-norm RMSNorm, no biases."""
    proj = cfg["feed_forward_proj"]
    refuse_if(cfg, "feed_forward_proj", proj not in ("relu", "gated-gelu", "gelu", "gated-relu", "gated-silu"),
              "known: relu, gelu, gated-gelu, gated-relu, gated-silu")
    gated = proj.startswith("gated-")
    # transformers: gated-gelu runs gelu_new (the tanh approximation)
    activation = "gelu_tanh" if proj == "gated-gelu" else proj.removeprefix("gated-")
    layers = cfg["num_layers"]
    # T5Config takes a null num_decoder_layers from num_layers' own value, before num_hidden_layers (its alias) is set
    decoder = cfg["num_decoder_layers"]
    if decoder is None:
        decoder = cfg.get(SHADOWED, {}).get("num_layers", layers)
    tie = cfg.get("tie_word_embeddings", True)
    if tie is False:
        notes.append("tie_word_embeddings=false: the head is counted untied, as the v1.1/FLAN checkpoints hold it "
                     "(transformers 5 builds T5 from a config with a tied head: vocab_size x d_model fewer)")
    return dict(n_encoder_layers=layers, n_layers=decoder, d_model=cfg["d_model"],
                n_heads=cfg["num_heads"], d_head=cfg["d_kv"], d_ff=cfg["d_ff"],
                vocab_size=cfg["vocab_size"], mlp="gated" if gated else "standard", activation=activation,
                norm="rmsnorm", norm_position="pre", final_norm=True, bias=False, positions="relative",
                relative_attention_buckets=cfg["relative_attention_num_buckets"], tie_embeddings=tie,
                context=512)


def untied_head(d: Difference) -> str | None:
    """transformers 5 builds T5 from a config with its head tied: V x D fewer parameters than an untied checkpoint."""
    head = d.spec.vocab_size * d.spec.d_model
    if (d.config.get("tie_word_embeddings") is False and d.figure == "params" and d.component in ("head", "total")
            and d.excess == -head):
        return (f"tie_word_embeddings=false, so tfcalc counts the checkpoint's untied head (V x D = {head:,}); "
                "transformers 5 ties T5's head when built from a config (docs/hf-configs.md)"
                if d.component == "head" else "the head's V x D, above")
    return None


register(Family(
    "t5", mapper=t5, components=COMPONENTS, encoder_decoder=True, known=untied_head,
    layer_keys={"num_layers": "n_encoder_layers", "num_decoder_layers": "n_layers"},
    aliases=dict(hidden_size="d_model", num_attention_heads="num_heads", num_hidden_layers="num_layers",
                 head_dim="d_kv"),
    defaults=dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=None,
                  num_heads=8, relative_attention_num_buckets=32, feed_forward_proj="relu"),
    types=dict(vocab_size="size", d_model="size", d_kv="size", d_ff="size", num_layers="size",
               num_decoder_layers="size?", num_heads="size", relative_attention_num_buckets="size",
               feed_forward_proj="str", tie_word_embeddings="bool")))
