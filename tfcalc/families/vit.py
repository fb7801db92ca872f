"""ViT (model_type vit): transformers' ViTModel and ViTForImageClassification.

A bidirectional pre-norm encoder of images: ViTEmbeddings (the patches' Conv2d of kernel and stride patch_size, the
class token cls_token [1, 1, D] and the position table position_embeddings [patches + 1, D]; tfcalc's
`patch_embedding` kind), then per layer layernorm_before, q_proj, k_proj, v_proj (biases by qkv_bias), o_proj (a
bias), layernorm_after, fc1, the activation (hidden_act), fc2 (biases), and a final layernorm.
The class counted is the one the config's `architectures` names: ViTForImageClassification (ViTModel without its
pooler, and a classifier D -> num_labels with a bias on the class token's final state: num_labels is len(id2label),
else the config's num_labels, default 2; 0 labels: no classifier); without it (or with ViTModel), ViTModel as
AutoModel builds it, with its pooler (a dense D -> pooler_output_size with a bias and pooler_act on the class token).
Keys that do not change a count are not read: layer_norm_eps, the dropouts, initializer_range, encoder_stride (only
ViTForMaskedImageModeling's decoder reads it; that class is refused).
"""

from __future__ import annotations

from ..hf import SEQ_LEN_CAP, Unmodelled, activation_of, refuse_if, show
from ..sizes import MAX_DIGITS
from .registry import Family, register

COMPONENTS = [  # transformers' module (and parameter) names -> tfcalc components (check --hf-config)
    (r"(?:vit\.)?embeddings\.patch_embeddings\.projection", "embedding/patch"),
    (r"(?:vit\.)?embeddings\.cls_token", "embedding/class_token"),  # parameters of ViTEmbeddings itself
    (r"(?:vit\.)?embeddings\.position_embeddings", "embedding/position"),
    (r"(?:vit\.)?layers\.\d+\.layernorm_before", "attention/norm"),
    (r"(?:vit\.)?layers\.\d+\.attention\.(q_proj|k_proj|v_proj)", "attention/qkv"),
    (r"(?:vit\.)?layers\.\d+\.attention", "attention/core"),
    (r"(?:vit\.)?layers\.\d+\.attention\.o_proj", "attention/out"),
    (r"(?:vit\.)?layers\.\d+\.layernorm_after", "mlp/norm"),
    (r"(?:vit\.)?layers\.\d+\.mlp\.fc1", "mlp/up"),
    (r"(?:vit\.)?layers\.\d+\.mlp\.fc2", "mlp/down"),
    (r"(?:vit\.)?layernorm", "final_norm"),
    (r"(?:vit\.)?pooler\.dense", "pooler"),
    (r"classifier", "classifier"),
]

CLASSES = ("ViTModel", "ViTForImageClassification")  # the classes tfcalc counts


def _sides(cfg: dict, key: str) -> tuple[int, int]:
    """(height, width) of image_size or patch_size: one integer, or a list of two (transformers' to_2tuple)."""
    value = cfg[key]
    if isinstance(value, int):
        return value, value
    refuse_if(cfg, key, len(value) != 2, "expected one integer or [height, width]")
    return value[0], value[1]


def classes(cfg: dict) -> int:
    """ViTForImageClassification's num_labels: the labels id2label names, else num_labels (PreTrainedConfig's
    default 2)."""
    labels, given = cfg.get("id2label"), cfg.get("num_labels")
    if labels is None:
        return 2 if given is None else given
    refuse_if(cfg, "num_labels", given is not None and given != len(labels),
              f"id2label names {len(labels)} labels (transformers refuses the two disagreeing)")
    return len(labels)


def vit(cfg: dict, notes: list[str]) -> dict:
    architectures = cfg.get("architectures") or ["ViTModel"]
    unknown = [a for a in architectures if a not in CLASSES]
    refuse_if(cfg, "architectures", bool(unknown), f"{', '.join(unknown)}: tfcalc counts {' and '.join(CLASSES)}")
    refuse_if(cfg, "architectures", len(set(architectures)) > 1, "name one class")
    H, W = _sides(cfg, "image_size")
    p, q = _sides(cfg, "patch_size")
    for key, sides in (("image_size", (H, W)), ("patch_size", (p, q))):
        refuse_if(cfg, key, max(sides) >= 10**MAX_DIGITS, f"sizes have at most {MAX_DIGITS} digits")
    refuse_if(cfg, "patch_size", p != q, "a patch of another height than width (the patch embedding's patches are "
                                         "square)")
    if H % p or W % p:
        raise Unmodelled(f"image_size={show(cfg['image_size'])} is not modelled: not a multiple of patch_size={p} "
                         "(the patches would not cover the image)")
    classifier = architectures[0] == "ViTForImageClassification"
    n_classes = classes(cfg) if classifier else None
    refuse_if(cfg, "num_labels", n_classes is not None and n_classes < 0, "a number of labels is 0 or more")
    D = cfg["hidden_size"]
    pooled = cfg.get("pooler_output_size") or D  # ViTConfig: None (or 0) is hidden_size
    fields = dict(n_layers=cfg["num_hidden_layers"], d_model=D, n_heads=cfg["num_attention_heads"],
                  d_ff=cfg["intermediate_size"], activation=activation_of(cfg, "hidden_act"), norm="layernorm",
                  norm_position="pre", bias=True, qkv_bias=cfg["qkv_bias"], causal=False, lm_head=False,
                  inputs="images", kinds={"patch_embedding": {"image_size": H if H == W else [H, W], "patch_size": p,
                                                              "channels": cfg["num_channels"]}})
    if classifier:
        notes.append("ViTForImageClassification: ViTModel without its pooler, a classifier of "
                     f"{n_classes} labels on the class token")
        if n_classes:
            fields["n_classes"] = n_classes
    else:
        fields["pooler"] = True
        if pooled != D:
            fields["d_pooler"] = pooled
        if cfg["pooler_act"] != "tanh":
            notes.append(f"pooler_act={show(cfg['pooler_act'])}: an activation, not a matmul (not in forward)")
    # the default workload: one image at image_size, its patches and the class token, however many (not capped)
    fields["seq_len"] = (H // p) * (W // p) + 1
    fields["context"] = min(fields["seq_len"], SEQ_LEN_CAP)
    return fields


register(Family(
    "vit", mapper=vit, components=COMPONENTS,
    defaults=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                  hidden_act="gelu", image_size=224, patch_size=16, num_channels=3, qkv_bias=True,
                  pooler_output_size=None, pooler_act="tanh"),  # architectures, id2label, num_labels: PreTrainedConfig's (read when given)
    types=dict(hidden_size="size", num_hidden_layers="size", num_attention_heads="size", intermediate_size="size",
               hidden_act="str", image_size="size|sizes", patch_size="size|sizes", num_channels="size",
               qkv_bias="bool", pooler_output_size="int?", pooler_act="str", architectures="strings?",
               id2label="object?", num_labels="int?"),
))
