"""A model of audio's input (`audio_conv`; Whisper's encoder): a log-mel spectrogram of `mel_bins` channels and F
frames (100 a second) through two convolutions and a position table.

transformers' WhisperEncoder: conv1, a Conv1d of mel_bins -> D channels, kernel 3, padding 1, with a bias (F output
positions), GELU; conv2, a Conv1d of D -> D, kernel 3, stride 2, padding 1, with a bias (F / 2 output positions: the
encoder's tokens), GELU; then the sinusoidal position table embed_positions [positions, D] added (an nn.Embedding
whose weight is frozen, requires_grad False, but a parameter: sum(p.numel()) counts it, and so does tfcalc).
A convolution is counted as torch's FlopCounterMode counts it: one matmul over its output positions,
[B * out, C_in * 3] @ [C_in * 3, C_out] (2 FLOPs per multiply-add; the weight [C_out, C_in, 3], the bias [C_out]).
The position add and the GELUs are not matmuls. transformers runs a whole window, F = 2 * positions (30 s = 3,000
frames); a shorter audio (Workload.mel_frames, even) adds the first F / 2 rows of the table.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...arch.builders import ACTIVATION_FLOPS, BlockKind, Ctx, register
from ...arch.ops import Elementwise, Matmul, Op, Table
from ...sizes import Size

KERNEL = 3  # both convolutions' kernel (Whisper's, fixed)
STRIDE = 2  # conv2's: two mel frames per encoder token
FRAMES_PER_SECOND = 100  # Whisper's feature extractor: hop_length 160 at 16 kHz


class AudioSizes(BaseModel):
    """The `audio_conv` kind's own sizes (a spec's `[kinds.audio_conv]`), WhisperConfig's num_mel_bins and
    max_source_positions."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    mel_bins: Size = Field(80, description="Channels of the log-mel spectrogram: conv1's input (num_mel_bins).")
    positions: Size = Field(1500, description="Rows of the encoder's position table, its longest input in tokens "
                                              "(max_source_positions); the window is 2 x positions mel frames.")

    @property
    def window(self) -> int:
        """Mel frames of the model's window (transformers runs exactly this many): 2 x positions."""
        return STRIDE * self.positions

    def describe(self) -> str:
        return f"mel_bins {self.mel_bins}, positions {self.positions}"

    def problems(self, spec) -> list[str]:
        return []


def audio_conv(ctx: Ctx) -> list[Op]:
    """The encoder's input from mel frames: conv1, GELU, conv2 (stride 2), GELU, the (frozen) position table."""
    spec = ctx.spec
    sizes = spec.sizes("audio_conv")
    D, C, s = spec.d_model, sizes.mel_bins, ctx.s  # s: the encoder's tokens, half the frames (0 in decode)
    frames = STRIDE * s
    gelu = ACTIVATION_FLOPS["gelu"]
    return [
        # (role "features": it reads the input, which needs no gradient: its backward is the weight gradient alone)
        # mel [B, C, F] as conv1's windows x: [B * F, C*3] @ W: [C*3, D] (the Conv1d's weight [D, C, 3], padding 1)
        Matmul(ctx.name("embedding/conv1"), ctx.b * frames, C * KERNEL, D, bias=True, role="features"),
        Elementwise(ctx.name("embedding/conv1"), "activation", ctx.b * frames * D, gelu, "gelu"),
        # [B, D, F] as conv2's windows at stride 2 x: [B * F/2, D*3] @ W: [D*3, D]
        # (it keeps its input [B, D, F] for the weight's gradient, not the windows)
        Matmul(ctx.name("embedding/conv2"), ctx.b * s, D * KERNEL, D, bias=True, role="conv",
               input_kept=ctx.b * frames * D),
        Elementwise(ctx.name("embedding/conv2"), "activation", ctx.b * s * D, gelu, "gelu"),
        Table(ctx.name("embedding/position"), sizes.positions, D, "position", frozen=True),  # [positions, D]
    ]


register(BlockKind("audio_conv", audio_conv, in_block=False, sizes=AudioSizes, reference=f"{__name__}.reference",
                   components=((r"embedding\.(conv1|conv2|position)", r"embedding/\1"),)))
