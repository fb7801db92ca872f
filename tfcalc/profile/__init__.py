"""Timed runs of the reference model: achieved FLOP/s, MFU, predicted against measured time (imports torch)."""

from .runner import ProfileResult, profile

__all__ = ["profile", "ProfileResult"]
