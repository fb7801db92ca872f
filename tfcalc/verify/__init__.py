"""Analytic counts against fvcore and torch's FlopCounterMode on the reference model (imports torch)."""

from .checker import CheckReport, check

__all__ = ["check", "CheckReport"]
