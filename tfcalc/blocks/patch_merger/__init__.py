"""A patch merger after a vision tower's blocks (`patch_merger`; Qwen2-VL's PatchMerger, Qwen2.5-VL's
Qwen2_5_VLPatchMerger): the norm ln_q over each patch's d_model (the spec's norm: LayerNorm in Qwen2-VL, RMSNorm in
Qwen2.5-VL), then each merge_size x merge_size block of patches (kinds.patch_embedding.merge_size = m) concatenated
into one row of D * m^2, and an MLP: Linear(D m^2, D m^2) with a bias, GELU (exact: nn.GELU, whatever the blocks'
activation), Linear(D m^2, d_out) with a bias. Its rows are what reaches the language model: patches / m^2 tokens per
image, d_out (out_hidden_size, the language model's hidden_size) wide (`tokens_out`).

Llama 4's vision adapter (Llama4VisionPixelShuffleMLP) is the same kind with its own sizes: no norm (`norm` false),
the class token dropped first (a tower whose patch embedding has one), each 2 x 2 block of patches concatenated by its
pixel shuffle (ratio 0.5: merge_size 2), then Linear(D m^2, d_hidden) without a bias, GELU, Linear(d_hidden, d_out)
without a bias, and GELU again on its output (`out_activation`).

Qwen3-VL's DeepStack (`deepstack`: the blocks listed, deepstack_visual_indexes): after each listed block a merger of
its own reads that block's output, its norm after the concatenation (over D m^2: use_postshuffle_norm), the same MLP;
its rows are added to the language model's hidden states at the image's tokens after its first blocks (an add, no
matmul: not counted here).

GLM-4.1V's (`glu`; Glm4vVisionModel's post_layernorm, downsample and Glm4vVisionPatchMerger): the norm (its
post_layernorm, RMSNorm) over each patch, each m x m block through downsample (a Conv2d of kernel = stride = m: one
matmul over the blocks, Linear(D m^2, d_out) with a bias), proj Linear(d_out, d_out), a LayerNorm (weight and bias),
GELU, then a gated MLP without biases: act(gate(x)) * up(x) (d_out -> glu, the tower's activation), down (glu ->
d_out).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, GATE_MULTIPLY, BlockKind, Ctx, register
from ...arch.ops import Elementwise, Matmul, Norm, Op
from ...sizes import Count, Size


class MergerSizes(BaseModel):
    """The `patch_merger` kind's own sizes (a spec's `[kinds.patch_merger]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    d_out: Size = Field(description="The merger's output width, the language model's (Qwen2-VL's vision "
                                    "hidden_size, Qwen2.5-VL's out_hidden_size).")
    d_hidden: Size | None = Field(None, description="The first linear's output width (Llama 4's "
                                                    "projector_input_dim); None: D m^2, its input's.")
    norm: bool = Field(True, description="A norm (the spec's) over each patch before the merge (Qwen2-VL's ln_q; "
                                         "Llama 4 has none).")
    bias: bool = Field(True, description="Biases on its two linears (Llama 4's have none).")
    out_activation: bool = Field(False, description="GELU on the second linear's output too (Llama4VisionMLP2).")

    def hidden(self, spec) -> int:
        """The first linear's output width."""
        m = spec.sizes("patch_embedding").merge_size
        return self.d_hidden if self.d_hidden is not None else spec.d_model * m * m

    deepstack: list[Count] = Field([], description="Blocks (0-based) after each of which a merger of its own reads "
                                                   "that block's output, its norm after the concatenation (Qwen3-VL's "
                                                   "deepstack_visual_indexes); [] : none.")

    glu: Size | None = Field(
        None, description="GLM-4.1V's merger (Glm4vVisionPatchMerger): each concatenated block through `downsample`, "
                          "Linear(D m^2, d_out) with a bias (its Conv2d of kernel = stride = m), then `proj` "
                          "Linear(d_out, d_out), a LayerNorm, GELU, and a gated MLP d_out -> glu -> d_out (gate, up: "
                          "the tower's activation on gate; down), no biases; glu is the vision config's "
                          "intermediate_size. None: Qwen2-VL's MLP.")

    def problems(self, spec) -> list[str]:
        if spec.inputs != "images":
            return [f"kinds.patch_merger: a merger of image patches needs a model of images (inputs='images'), got "
                    f"inputs={spec.inputs!r}"]
        out = []
        if len(set(self.deepstack)) != len(self.deepstack):
            out.append(f"kinds.patch_merger.deepstack={self.deepstack}: a block listed twice")
        outside = [i for i in self.deepstack if i >= spec.n_layers]
        if outside:
            out.append(f"kinds.patch_merger.deepstack={self.deepstack}: {', '.join(map(str, outside))} name no block "
                       f"of n_layers={spec.n_layers}")
        return out


def tokens_out(spec, height: int, width: int) -> int:
    """Tokens one image of height x width pixels gives the language model after the merger: its patches / m^2."""
    sizes = spec.sizes("patch_embedding")
    return sizes.patches(height, width) // sizes.merge_size ** 2


def patch_merger(ctx: Ctx) -> list[Op]:
    spec = ctx.spec
    patches = spec.sizes("patch_embedding")
    D, m = spec.d_model, patches.merge_size
    sizes = spec.sizes("patch_merger")
    d_out, F = sizes.d_out, sizes.hidden(spec)
    T = ctx.b * (ctx.s - int(patches.class_token))  # every image's patches (a class token dropped first: Llama 4)
    rows = T // m ** 2  # the merged tokens of every image
    gelu = ACTIVATION_FLOPS["gelu"]
    glu = sizes.glu
    if glu is not None:  # GLM-4.1V
        return [
            Norm("merger/norm", spec.norm, T, D),  # post_layernorm over every patch [T, D]
            # m x m patches concatenated (the Conv2d's kernel): x [T / m^2, D m^2] @ W: [D m^2, d_out], a bias
            Matmul("merger/downsample", rows, D * m * m, d_out, bias=True),
            Matmul("merger/proj", rows, d_out, d_out),  # [T / m^2, d_out] @ [d_out, d_out]
            Norm("merger/proj_norm", "layernorm", rows, d_out),  # post_projection_norm
            Elementwise("merger/proj", "activation", rows * d_out, gelu, "gelu"),
            Matmul("merger/gate", rows, d_out, glu),  # [T / m^2, d_out] @ [d_out, glu]
            Matmul("merger/up", rows, d_out, glu, shares_input=True),  # the same x as gate's
            Elementwise("merger/up", "activation", rows * glu, ACTIVATION_FLOPS[spec.activation] + GATE_MULTIPLY,
                        spec.activation, multiplies=2),  # act(gate) * up keeps both
            Matmul("merger/down", rows, glu, d_out),  # [T / m^2, glu] @ [glu, d_out]
        ]
    return [
        *([Norm("merger/norm", spec.norm, T, D)] if sizes.norm else []),  # ln_q over every patch [T, D]
        # m x m patches concatenated: x [T / m^2, D m^2] @ W: [D m^2, F] (F = D m^2 in Qwen2-VL)
        Matmul("merger/up", rows, D * m * m, F, bias=sizes.bias),
        Elementwise("merger/up", "activation", rows * F, gelu, "gelu"),
        Matmul("merger/down", rows, F, d_out, bias=sizes.bias),  # [T / m^2, F] @ [F, d_out]
        *([Elementwise("merger/down", "activation", rows * d_out, gelu, "gelu")] if sizes.out_activation else []),
    ] + [op for _ in sizes.deepstack for op in (  # one merger per listed block, on its output:
        Norm("deepstack/norm", spec.norm, rows, D * m * m),  # the norm after the concatenation [T / m^2, D m^2]
        Matmul("deepstack/up", rows, D * m * m, F, bias=sizes.bias),  # [T / m^2, D m^2] @ [D m^2, F]
        Elementwise("deepstack/up", "activation", rows * F, gelu, "gelu"),
        Matmul("deepstack/down", rows, F, d_out, bias=sizes.bias),  # [T / m^2, F] @ [F, d_out]
    )]


register(BlockKind("patch_merger", patch_merger, in_block=False, sizes=MergerSizes,
                   reference=f"{__name__}.reference",
                   components=((r"merger\.(norm|up|down|downsample|proj|proj_norm|gate)", r"merger/\1"),
                               (r"deepstack\.\d+\.(norm|up|down)", r"deepstack/\1"))))
