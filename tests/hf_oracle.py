"""What the family tests share: a config.json written to a folder, and transformers' config class built from it
(its warnings and log lines silenced: a tiny config's token ids are outside its vocabulary)."""

import json
import warnings


def write(folder, config: dict, name: str = "config.json"):
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def hf_config(config: dict):
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        return transformers.AutoConfig.for_model(**config)
