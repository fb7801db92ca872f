"""tfcalc: exact parameter and FLOP counts of transformers, checked against real PyTorch models.

>>> import tfcalc
>>> spec = tfcalc.load_preset("gpt3")
>>> result = tfcalc.count(spec)
>>> result.params.total
174604259328
>>> long = tfcalc.load_preset("llama3-8b").replace(seq_len=32768)
>>> tfcalc.count(long).flops.forward_causal < tfcalc.count(long).flops.forward
True
"""

import importlib

__version__ = "0.1.0"

# Names are imported on first use, so that `python -m tfcalc` can configure the process before pydantic loads.
_EXPORTS = {
    "ModelSpec": ".spec",
    "count": ".counts",
    "Workload": ".arch",
    "build": ".arch",
    "CountResult": ".counts",
    "Adapters": ".plan.adapters",
    "load_preset": ".presets",
    "find_preset": ".presets",
    "list_presets": ".presets",
    "TfcalcError": ".errors",
    "serving_capacity": ".plan.serve",
    "request_life": ".plan.request",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfcalc' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
