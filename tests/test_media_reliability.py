"""A reliability pass over the multimodal command line and API (count, compare, check, memory, infer with --tower,
--image-size, --images, --audio-seconds; tfcalc.count and the plans with a Workload of images or audio): each case
here is one a fuzz round found. The rule: exit 0, or exit 2 with one `tfcalc: error:` line naming the flag (or the
API's field) and the value as typed; never a traceback, never a flag silently dropped."""

import pytest
from typer.testing import CliRunner

from tfcalc import TfcalcError, Workload, count, load_preset
from tfcalc.cli import app

runner = CliRunner()


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (args, r.exit_code, r.output, r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcalc: error: "), r.output
    return lines[0]


# ---- the API: images on a model with an audio tower and no vision tower ------------------------------------------

def test_images_on_a_model_without_a_vision_tower_name_images_not_a_missing_image_size():
    # Voxtral has a text and an audio tower: images=2 with no image_size was a TypeError (None[0]) in the message
    with pytest.raises(TfcalcError, match=r"^images=2: voxtral-mini-3b has no vision tower"):
        count(load_preset("voxtral-mini-3b"), Workload(seq_len=4096, images=2))
