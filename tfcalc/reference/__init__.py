"""The real PyTorch model built from a ModelSpec. torch is imported here and below, never on the count path."""

from .model import Transformer, build_model, example_inputs

__all__ = ["Transformer", "build_model", "example_inputs"]
