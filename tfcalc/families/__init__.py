"""Hugging Face model families read from config.json, as data: each module registers `Family` records (registry.py)
with transformers' defaults for the fields read, their JSON kinds, attribute aliases, a mapper to ModelSpec fields
and the module-name table `check --hf-config` compares component by component; a family sharing another's layout is
one `Family(..., like=...)` line. Layouts that several model types share live in one module each (llama.py, gemma.py,
bert.py, gpt2.py, bart.py); the others have a module of their own.

A family module imports only tfcalc.hf (the shared helpers) and tfcalc's own modules, never transformers: the count
path stays light.
"""

# tfcalc.hf loads every family module (registry.load), after the helpers they import: importing one of them first
# goes through it too, so that no family is missing from the registry or from tfcalc.hf's views
from .. import hf  # noqa: F401, E402
