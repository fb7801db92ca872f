"""Plans from the counts: memory, the KV cache, what fits on which accelerator (no torch). The datasheet table
(`tfcalc.plan.gpus`) is imported on first use of its names here, not with the package: `count` never needs it."""

__all__ = ["Gpu", "from_device_name", "list_gpus", "lookup"]


def __getattr__(name: str):
    if name in __all__:
        from . import gpus

        return getattr(gpus, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
