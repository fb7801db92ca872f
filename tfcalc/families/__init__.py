"""Hugging Face model families read from config.json, one module each: every module calls `tfcalc.hf.register`
with transformers' defaults for the fields it reads, their JSON kinds, a mapper to ModelSpec fields and the
module-name table `check --hf-config` compares component by component.

A family module imports only tfcalc.hf and tfcalc's own modules (never transformers: the count path stays light).
"""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
