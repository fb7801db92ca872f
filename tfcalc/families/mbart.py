"""mBART: BART's layout (learned positions with an offset of 2 rows, a norm after each stack's embeddings, biases,
one token table shared by both stacks and the head) made pre-norm, with a final layer_norm after each stack.
scale_embedding multiplies the token embeddings by sqrt(d_model): elementwise, no parameters, not counted.
MBartConfig's defaults, kinds and attribute_map are BartConfig's."""

from __future__ import annotations

from .bart import COMPONENTS as BART_COMPONENTS
from .bart import bart
from .registry import Family, register

COMPONENTS = [  # BART's names, with each stack's final layer_norm
    *BART_COMPONENTS[:-1],
    (r"model\.(?P<stack>encoder|decoder)\.layer_norm", "{stack}/final_norm"),
    BART_COMPONENTS[-1],  # lm_head
]


def mbart(cfg: dict, notes: list[str]) -> dict:
    return bart(cfg, notes) | dict(norm_position="pre", final_norm=True)


register(Family("mbart", like="bart", mapper=mbart, components=COMPONENTS))
