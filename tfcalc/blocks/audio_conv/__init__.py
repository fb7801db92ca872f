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
from ...arch.ops import Elementwise, Matmul, Norm, Op, Table
from ...sizes import Size

KERNEL = 3  # both convolutions' kernel (Whisper's, fixed)
STRIDE = 2  # conv2's: two mel frames per encoder token
FRAMES_PER_SECOND = 100  # Whisper's feature extractor: hop_length 160 at 16 kHz
SAMPLE_RATE, HOP = 16_000, 160  # both feature extractors': 16 kHz, a frame every 160 samples (10 ms)


class AudioSizes(BaseModel):
    """The `audio_conv` kind's own sizes (a spec's `[kinds.audio_conv]`), WhisperConfig's num_mel_bins and
    max_source_positions."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    mel_bins: Size = Field(80, description="Channels of the log-mel spectrogram: conv1's input (num_mel_bins).")
    positions: Size = Field(1500, description="Rows of the encoder's position table, its longest input in tokens "
                                              "(max_source_positions); the window is 2 x positions mel frames.")

    subsample: list[Size] = Field([], description="Gemma 4's front end: the channels of its two Conv2d of stride 2 "
                                                  "(subsampling_conv_channels, [c0, c1]); [] : Whisper's two Conv1d "
                                                  "and position table.")
    frame_length: Size | None = Field(None, description="Samples per STFT frame of a semicausal feature extractor "
                                                        "(Gemma 4's: 320, frame_length_ms 20 at 16 kHz), a frame "
                                                        "every 160 samples; None: Whisper's, 100 frames a second.")
    pad_to: Size = Field(1, description="The feature extractor pads each clip's samples to a multiple of this "
                                        "(Gemma 4's pad_to_multiple_of: 128).")
    max_samples: Size | None = Field(None, description="The feature extractor truncates a clip there (Gemma 4's "
                                                       "max_length: 480,000 samples, 30 s); None: windows of 2 x "
                                                       "positions frames.")

    @property
    def window(self) -> int:
        """Mel frames of the model's window: 2 x positions (transformers runs exactly this many); with a front end of
        its own (`max_samples`), the frames of the longest clip."""
        if self.max_samples is not None and self.frame_length is not None:
            return self.frames(self.max_samples)
        return STRIDE * self.positions

    @property
    def whole_windows(self) -> bool:
        """The tower runs whole windows (Whisper's and Voxtral's processors pad the audio to them); else each clip as
        long as it is, up to one window (Gemma 4's)."""
        return not self.subsample

    @property
    def stride(self) -> int:
        """Mel frames per token of the front end: 2 (Whisper's conv2), 2^len(subsample) (Gemma 4's Conv2d)."""
        return 2 ** len(self.subsample) if self.subsample else STRIDE

    def tokens(self, frames: int) -> int:
        """The tokens `frames` mel frames make: half of them (Whisper's), or each stride-2 Conv2d's ceil(F / 2)."""
        if not self.subsample:
            return frames // STRIDE
        for _ in self.subsample:
            frames = -(-frames // 2)  # (F + 2 * 1 - 3) // 2 + 1
        return frames

    def frames_for(self, tokens: int) -> int:
        """Mel frames that make `tokens` tokens: the window's where they make that many, else stride x tokens."""
        return self.window if self.tokens(self.window) == tokens else self.stride * tokens

    def frames(self, samples: int) -> int:
        """Mel frames of a clip of `samples` samples (a semicausal extractor): padded to pad_to, frame_length / 2 zeros
        before it, windows of frame_length + 1 samples every 160."""
        padded = -(-samples // self.pad_to) * self.pad_to
        return max((padded + self.frame_length // 2 - (self.frame_length + 1)) // HOP + 1, 0)

    def prompt_tokens(self, samples: int) -> int:
        """Tokens the processor puts in the prompt for a clip of `samples` real samples: its mask's, each frame valid
        when its last sample is real audio, subsampled as the Conv2d subsample it (every stride-th frame)."""
        reach = self.frame_length - self.frame_length // 2  # a frame's last sample past its start
        return min(max(-(-(samples - reach) // (HOP * self.stride)), 0), self.tokens(self.frames(samples)))

    def describe(self) -> str:
        if self.subsample:
            return f"mel_bins {self.mel_bins}, subsample {self.subsample}, window {self.window} frames"
        return f"mel_bins {self.mel_bins}, positions {self.positions}"

    def problems(self, spec) -> list[str]:
        out = []
        if self.subsample and len(self.subsample) != 2:
            out.append(f"kinds.audio_conv.subsample={self.subsample}: two Conv2d channels (Gemma 4's) are modelled")
        elif self.subsample and _bins(self.mel_bins) * self.subsample[1] != (self.subsample[0] // 4) * \
                self.subsample[1]:
            out.append(f"kinds.audio_conv.mel_bins={self.mel_bins}: {_bins(self.mel_bins)} frequency rows after the "
                       f"two Conv2d, but input_proj reads subsample[0] // 4 = {self.subsample[0] // 4} of them")
        if (self.frame_length is None) != (self.max_samples is None) or (self.frame_length and not self.subsample):
            out.append("kinds.audio_conv: frame_length and max_samples go together, with subsample (Gemma 4's front "
                       "end)")
        return out


def _bins(mel_bins: int) -> int:
    """Frequency rows after the two stride-2 Conv2d: ceil(ceil(mel_bins / 2) / 2)."""
    return -(-(-(-mel_bins // 2)) // 2)


def audio_conv(ctx: Ctx) -> list[Op]:
    """The encoder's input from mel frames: conv1, GELU, conv2 (stride 2), GELU, the (frozen) position table."""
    spec = ctx.spec
    sizes = spec.sizes("audio_conv")
    if sizes.subsample:
        return subsample(ctx, sizes)
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


def subsample(ctx: Ctx, sizes: AudioSizes) -> list[Op]:
    """Gemma 4's front end: two Conv2d (3 x 3, stride 2, padding 1, no bias) over [B, 1, F, mel_bins], each with a
    LayerNorm over its channels (no bias) and ReLU, then input_proj over each token's M2 x c1 features."""
    D, (c0, c1), b, s = ctx.spec.d_model, sizes.subsample, ctx.b, ctx.s
    frames = ctx.workload.mel_frames or sizes.frames_for(s)
    f1, m1 = -(-frames // 2), -(-sizes.mel_bins // 2)  # the first Conv2d's output positions (time, frequency)
    m2 = -(-m1 // 2)  # the second's: s x m2
    if not s:
        f1 = 0
    relu = ACTIVATION_FLOPS["relu"]
    return [
        # (role "features": it reads the input, which needs no gradient) x: [B * F1 * M1, 1*9] @ W: [9, c0]
        Matmul(ctx.name("embedding/conv0"), b * f1 * m1, KERNEL * KERNEL, c0, role="features"),
        Norm(ctx.name("embedding/norm0"), "layernorm_no_bias", b * f1 * m1, c0),
        Elementwise(ctx.name("embedding/norm0"), "activation", b * f1 * m1 * c0, relu, "relu"),
        # [B, c0, F1, M1] as the second's windows x: [B * s * M2, c0*9] @ W: [c0*9, c1] (it keeps its input)
        Matmul(ctx.name("embedding/conv1"), b * s * m2, c0 * KERNEL * KERNEL, c1, role="conv",
               input_kept=b * f1 * m1 * c0),
        Norm(ctx.name("embedding/norm1"), "layernorm_no_bias", b * s * m2, c1),
        Elementwise(ctx.name("embedding/norm1"), "activation", b * s * m2 * c1, relu, "relu"),
        Matmul(ctx.name("embedding/proj"), b * s, m2 * c1, D),  # x: [B * s, M2 * c1] @ W: [M2 * c1, D]
    ]


register(BlockKind("audio_conv", audio_conv, in_block=False, sizes=AudioSizes, reference=f"{__name__}.reference",
                   components=((r"embedding\.(conv0|conv1|conv2|position|norm0|norm1|proj)", r"embedding/\1"),)))
