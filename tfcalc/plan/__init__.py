"""Plans from the counts: memory, the KV cache, what fits on which accelerator (no torch)."""

from .gpus import Gpu, from_device_name, list_gpus, lookup

__all__ = ["Gpu", "from_device_name", "list_gpus", "lookup"]
