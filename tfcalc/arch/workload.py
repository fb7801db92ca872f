"""The workload: what the model is run on. Parameters never depend on it; FLOPs, bytes and memory do.

A workload is `batch_size` sequences, each processing `seq_len` new tokens (the queries) that attend to the
`context` tokens already in the KV cache and to themselves (the keys: context + seq_len), and, for an
encoder-decoder, `src_len` encoder tokens. The phase says what runs:
- train: every token is processed and scored (the head over every position); no cache.
- prefill: the prompt is processed into the cache; the head scores only the last token of each sequence.
- decode: one new token per sequence against `context` cached ones; the head scores that token. An
  encoder-decoder's encoder output (and its cross-attention keys and values) is cached from the prefill.
A model of images (ViT) runs `batch_size` images of `image_size` (H, W) pixels, each `seq_len` tokens: its patches and
the class token (train only: a bidirectional encoder has no cache).
A model of audio (Whisper) runs `batch_size` spectrograms of `mel_frames` log-mel frames (100 a second; 3,000 for
Whisper's 30-second window), its encoder over mel_frames / 2 tokens (`src_len`), its decoder over `seq_len` tokens.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..sizes import Count, Size

PHASES = ("train", "prefill", "decode")


def _pair(value):
    """[H, W] as JSON writes an image size (a dumped workload reads back); anything else as given, checked strictly."""
    return tuple(value) if isinstance(value, list) else value


class Workload(BaseModel):
    """>>> Workload(seq_len=1, context=8192, phase="decode").keys
    8193
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    phase: Literal["train", "prefill", "decode"] = Field("train", description="train, prefill or decode.")
    batch_size: Size = Field(1, description="Sequences (B).")
    seq_len: Size = Field(description="New tokens per sequence: the queries (the decoder's, for an "
                                      "encoder-decoder); 1 when decoding.")
    context: Count = Field(0, description="Tokens per sequence already in the KV cache, attended to as keys.")
    src_len: Size | None = Field(None, description="Encoder tokens per sequence (encoder-decoder only).")
    image_size: Annotated[tuple[Size, Size] | None, BeforeValidator(_pair)] = Field(
        None, description="A model of images (ViT): each sequence is one image of (height, width) pixels, seq_len its "
                          "patches and the class token. A model with a vision tower: each image's size. None: the "
                          "model's own image size.")
    images: Count | None = Field(None, description="A model with a vision tower: images in the step, each encoded "
                                                    "once by the tower (None: one; 0: a prompt of text alone). A "
                                                    "model of images alone (ViT) runs batch_size images.")
    mel_frames: Size | None = Field(
        None, description="A model of audio (Whisper): log-mel frames per sequence (100 a second), an even number; "
                          "the encoder's src_len is half of them. None: not set (a model of audio: its own window).")

    @model_validator(mode="after")
    def _check(self) -> Workload:
        problems = []
        if self.phase == "train" and self.context:
            problems.append(f"context={self.context}: a train step has no KV cache (use phase='prefill' or "
                            "'decode')")
        if self.phase == "decode" and self.seq_len != 1:
            problems.append(f"seq_len={self.seq_len}: decode processes one new token per sequence; give the "
                            "cached tokens as context")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def model_dump(self, **kwargs) -> dict:
        """image_size only for a workload of images, as [H, W] (as JSON writes it, and CSV as every other list),
        mel_frames only for a workload of audio: a workload of tokens dumps as it always has. (A method, not a
        pydantic serializer: that module's import is a millisecond of every command's start.)"""
        data = super().model_dump(**kwargs)
        if data.get("image_size") is None:
            data.pop("image_size", None)
        else:
            data["image_size"] = list(data["image_size"])
        if data.get("images") is None:
            data.pop("images", None)
        if data.get("mel_frames", 0) is None:  # only for a workload of audio
            data.pop("mel_frames")
        return data

    @property
    def keys(self) -> int:
        """Keys each new token may attend to in self-attention: the cache and the new tokens."""
        return self.context + self.seq_len

    @property
    def tokens(self) -> int:
        """New (decoder) tokens in the step: batch_size * seq_len."""
        return self.batch_size * self.seq_len

    @property
    def scored(self) -> int:
        """Positions per sequence that the head scores: all in training, the last one otherwise."""
        return self.seq_len if self.phase == "train" else 1

    def describe(self) -> str:
        if self.images is not None:
            parts = [f"{self.phase}: B={self.batch_size} N={self.seq_len} token{'s' if self.seq_len != 1 else ''}"]
            if self.context:
                parts.append(f"context={self.context} cached")
            size = "" if self.image_size is None else f" of {self.image_size[0]}x{self.image_size[1]}"
            parts.append(f"{self.images} image{'s' if self.images != 1 else ''}{size}")
            return " ".join(parts)
        if self.image_size is not None:
            H, W = self.image_size
            return (f"{self.phase}: {self.batch_size} image{'s' if self.batch_size != 1 else ''} of {H}x{W}, "
                    f"N={self.seq_len} tokens")
        parts = [f"{self.phase}: B={self.batch_size}"]
        if self.mel_frames is not None:
            parts.append(f"audio={self.mel_frames / 100:g}s ({self.mel_frames} mel frames)")
        if self.src_len is not None:
            parts.append(f"src_len={self.src_len}")
        parts.append(f"N={self.seq_len} new token{'s' if self.seq_len != 1 else ''}")
        if self.context:
            parts.append(f"context={self.context} cached")
        return " ".join(parts)
