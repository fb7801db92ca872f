"""Voxtral read whole (voxtral, its audio tower voxtral_encoder and VoxtralMultiModalProjector): exact against
transformers' VoxtralForConditionalGeneration (sum(numel) on meta per component, FlopCounterMode over the audio tower,
the projector, the language model and lm_head traced on meta), the audio tower alone against VoxtralEncoder, the
reference model under `check` (train step included), the published Voxtral-Mini-3B-2507 and Voxtral-Small-24B-2507
totals, the audio workload (whole windows of 30 s) and the refusals."""

import pytest
import transformers
from hf_oracle import meta_params, write
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.arch.towers import audio_windows, image_tokens, select
from tfcalc.cli import app
from tfcalc.hf import read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# mistralai/Voxtral-Mini-3B-2507's config.json, the fields that shape the model (the preset's `source` says where they
# were read: the published configuration as an MLX conversion's test decodes it; transformers' defaults agree)
MINI = {"model_type": "voxtral", "audio_token_id": 24, "projector_hidden_act": "gelu",
        "audio_config": {"model_type": "voxtral_encoder", "hidden_size": 1280, "num_hidden_layers": 32,
                         "intermediate_size": 5120, "num_attention_heads": 20, "num_mel_bins": 128,
                         "max_source_positions": 1500},
        "text_config": {"vocab_size": 131072, "max_position_embeddings": 131072, "hidden_size": 3072,
                        "intermediate_size": 8192, "num_hidden_layers": 30, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "head_dim": 128,
                        "tie_word_embeddings": False, "rope_theta": 100000000}}
# mistralai/Voxtral-Small-24B-2507's config.json, verbatim in its hub duplicate huggingface.co/Abc7347/this ("Duplicate
# from mistralai/Voxtral-Small-24B-2507"; transformers_version 4.54.0.dev0), the keys transformers reads
SMALL = {"model_type": "voxtral", "architectures": ["VoxtralForConditionalGeneration"], "audio_token_id": 24,
         "projector_hidden_act": "gelu", "hidden_size": 5120, "vocab_size": 131072,
         "audio_config": {"activation_function": "gelu", "head_dim": 64, "hidden_size": 1280,
                          "intermediate_size": 5120, "max_source_positions": 1500, "model_type": "voxtral_encoder",
                          "num_attention_heads": 20, "num_hidden_layers": 32, "num_key_value_heads": 20,
                          "num_mel_bins": 128, "scale_embedding": False, "vocab_size": 51866},
         "text_config": {"attention_bias": False, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                         "intermediate_size": 32768, "max_position_embeddings": 131072, "mlp_bias": False,
                         "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 40,
                         "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
                         "rope_theta": 100000000.0, "sliding_window": None, "vocab_size": 131072}}

# Whisper large-v3's encoder, by module: conv1 [1280, 128, 3] + bias, conv2 [1280, 1280, 3] + bias, the frozen table
# [1500, 1280]; 32 blocks of q, v, out with biases and k without (4 * 1280^2 + 3 * 1280), fc1 and fc2 with biases
# (2 * 1280 * 5120 + 5120 + 1280), two LayerNorms (4 * 1280); the final LayerNorm
AUDIO = (128 * 3 * 1280 + 1280 + 1280 * 3 * 1280 + 1280 + 1500 * 1280
         + 32 * (4 * 1280 ** 2 + 3 * 1280 + 2 * 1280 * 5120 + 5120 + 1280 + 4 * 1280) + 2 * 1280)


def tiny(**audio) -> dict:
    """A small Voxtral: a Llama of 32 wide, an encoder of 16 wide over 12 positions (24 mel frames a window), the
    projector reading rows of 4 frames (intermediate_size 64)."""
    return {"model_type": "voxtral", "architectures": ["VoxtralForConditionalGeneration"], "audio_token_id": 24,
            "text_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 99,
                            "max_position_embeddings": 256},
            "audio_config": {"model_type": "voxtral_encoder", "hidden_size": 16, "num_attention_heads": 4,
                             "intermediate_size": 64, "num_hidden_layers": 2, "num_mel_bins": 8,
                             "max_source_positions": 12, **audio}}


def test_voxtral_mini_3b_is_4_676_271_104_parameters_as_its_generation_class(tmp_path):
    assert AUDIO == 636_968_960
    # 30 blocks of q [3072, 4096], k and v [3072, 1024], o [4096, 3072], gate, up, down [3072, 8192], two RMSNorms;
    # the token table and the untied lm_head [131072, 3072]; the final norm
    text = 30 * (2 * 3072 * 4096 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072) + 2 * 131072 * 3072 + 3072
    projector = 5120 * 3072 + 3072 * 3072  # linear_1, linear_2, no biases
    assert (text, projector) == (4_014_136_320, 25_165_824)
    spec = read_hf_config(write(tmp_path, MINI)).spec
    result = count(spec)
    assert result.params.total == text + AUDIO + projector == 4_676_271_104 == meta_params(
        transformers.VoxtralForConditionalGeneration, MINI)
    assert (result.towers["text"]["params"], result.towers["audio"]["params"],
            result.towers["connectors"]["params"]) == (text, AUDIO, projector)
    assert count(select(spec, "audio")).params.total == AUDIO == meta_params(transformers.VoxtralEncoder,
                                                                             MINI["audio_config"])
    assert count(load_preset("voxtral-mini-3b")).params.total == 4_676_271_104
    assert load_preset("voxtral-mini-3b").replace(name=None) == spec.replace(name=None)


def test_voxtral_small_24b_is_24_261_800_960_parameters_as_its_generation_class(tmp_path):
    # 40 blocks of q [5120, 4096], k and v [5120, 1024], o [4096, 5120], a SwiGLU of 32768, two RMSNorms; the token
    # table and the untied head [131072, 5120]; the final norm. The same audio tower; the projector 5120 -> 5120 -> 5120
    text = 40 * (2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 32768 + 2 * 5120) + 2 * 131072 * 5120 + 5120
    assert text == 23_572_403_200
    total = text + AUDIO + 2 * 5120 * 5120
    spec = read_hf_config(write(tmp_path, SMALL)).spec
    assert count(spec).params.total == total == 24_261_800_960 == meta_params(
        transformers.VoxtralForConditionalGeneration, SMALL)


def test_audio_is_padded_to_whole_windows_of_30_s_each_375_tokens_of_the_prompt():
    spec = load_preset("voxtral-mini-3b").replace(seq_len=4096)
    # 45 s of audio a sequence, two sequences: each padded to two windows of 3,000 frames, 1,500 positions each,
    # every 4 concatenated into one of 375 rows a window
    w = Workload(batch_size=2, seq_len=4096, mel_frames=4500)
    assert audio_windows(spec, w) == 4 and image_tokens(spec, w) == 4 * 375
    result = count(spec, w)
    conv = 2 * 4 * 3000 * (128 * 3) * 1280 + 2 * 4 * 1500 * (1280 * 3) * 1280  # conv1 over every frame, conv2 strided
    assert result.flops.components["audio/embedding/conv1"] + result.flops.components["audio/embedding/conv2"] == conv
    # q k^T of every window, 20 heads of 64 in each of the 32 blocks
    assert result.flops.components["audio/attention/scores"] == 32 * 2 * 4 * 20 * 1500 * 1500 * 64
    assert result.flops.components["multi_modal_projector/linear_1"] == 2 * 1500 * 5120 * 3072
    assert result.flops.components["multi_modal_projector/linear_2"] == 2 * 1500 * 3072 * 3072
    # the default: one window a sequence
    assert audio_windows(spec, Workload(batch_size=3, seq_len=1024)) == 3
    # in decode the audio was encoded at the prefill: the tower and the projector hold their weights, do no work
    decode = count(spec, Workload(phase="decode", seq_len=1, context=4095, mel_frames=4500))
    assert decode.towers["audio"]["forward"] == decode.towers["connectors"]["forward"] == 0
    assert decode.towers["audio"]["params"] == AUDIO


def test_whole_voxtral_equals_its_generation_class_and_the_reference_model(tmp_path):
    path = write(tmp_path, tiny())
    spec = read_hf_config(path).spec
    assert spec.towers["audio"].inputs == "audio" and spec.connectors[0].merge == 4
    # two sequences of 0.3 s each: 30 frames, padded to two windows of 24 frames (12 positions, 3 tokens each)
    w = Workload(batch_size=2, seq_len=40, mel_frames=30)
    assert audio_windows(spec, w) == 4 and image_tokens(spec, w) == 12
    report = hf_model.compare(path, spec, w)
    assert report.match, [r for r in report.rows if not r.match]
    assert not [r for r in report.rows if "unmapped" in r.component or "outside" in r.component]
    components = {r.component for r in report.rows}
    assert {"audio/embedding/conv1", "audio/embedding/position", "audio/attention/core",
            "multi_modal_projector/linear_1", "multi_modal_projector/linear_2", "head"} <= components
    total = next(r for r in report.rows if r.figure == "forward" and r.component == "total")
    assert total.transformers == count(spec, w).flops.forward
    checked = check(spec, workload=w, train=True)
    assert checked.match
    # the audio tower alone against VoxtralEncoder on one window
    tower = select(spec, "audio")
    assert count(tower).params.total == meta_params(transformers.VoxtralEncoder, tiny()["audio_config"])
    alone = hf_model.compare(path, tower, Workload(seq_len=12))
    assert alone.match and alone.model_class == "VoxtralEncoder"


def test_cli_reads_voxtral_whole_with_its_audio(tmp_path):
    path = write(tmp_path, tiny())
    out = runner.invoke(app, ["count", "--hf-config", str(path), "-N", "40", "--audio-seconds", "0.3"],
                        env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "0.3 s of audio a sequence (2 windows of 24 mel frames; 6 of the tokens)" in out.output
    assert "multi_modal_projector/linear_1" in out.output and "audio/attention/qkv" in out.output
    whole = runner.invoke(app, ["check", "--hf-config", str(path), "-N", "40", "-B", "2", "--audio-seconds", "0.5"])
    assert whole.exit_code == 0 and "transformers: MATCH" in whole.output, whole.output
    tower = runner.invoke(app, ["check", "--hf-config", str(path), "--tower", "audio"])
    assert tower.exit_code == 0 and "transformers: MATCH" in tower.output, tower.output
    text = runner.invoke(app, ["count", "--hf-config", str(path), "--tower", "text"])
    assert text.exit_code == 0 and "audio" not in text.output.split("source:")[0]


@pytest.mark.parametrize("args, says", [
    (["--audio-seconds", "abc"], "--audio-seconds abc: expected a positive number of seconds"),
    (["--audio-seconds", "-3"], "--audio-seconds -3: expected a positive number of seconds"),
    (["-N", "8", "--audio-seconds", "1"], "seq_len=8: the audio's 15 tokens in the prompt do not fit"),
    (["--images", "2"], "--images 2: "),
    (["--tower", "vision"], "has no vision tower (it has text, audio)"),
])
def test_bad_audio_workloads_are_refused_by_name(tmp_path, args, says):
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, tiny())), *args])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1


@pytest.mark.parametrize("audio, says", [
    ({"intermediate_size": 40}, "audio_config.intermediate_size=40 is not modelled"),
    ({"max_source_positions": 10}, "audio_config.max_source_positions=10 is not modelled"),
    ({"num_attention_heads": 3}, "num_attention_heads=3 is not modelled"),
])
def test_configs_the_projector_cannot_read_are_refused_by_name(tmp_path, audio, says):
    out = runner.invoke(app, ["count", "--hf-config", str(write(tmp_path, tiny(**audio)))])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output, out.output


def test_an_audio_tower_is_an_audio_encoder_and_a_model_without_one_takes_no_audio():
    encoder = dict(n_layers=1, d_model=16, n_heads=2, seq_len=6, inputs="audio", causal=False, lm_head=False,
                   kinds={"audio_conv": {"mel_bins": 4, "positions": 6}})
    assert ModelSpec(**encoder).max_positions == 6  # its table: the front end's
    with pytest.raises(ValueError, match="vocab_size=10 is not modelled with inputs='audio' with n_encoder_layers=0"):
        ModelSpec(**encoder, vocab_size=10)
    with pytest.raises(ValueError, match="seq_len=7: inputs='audio' with n_encoder_layers=0"):
        ModelSpec(**{**encoder, "seq_len": 7})
    text = dict(n_layers=1, d_model=16, n_heads=2, seq_len=32, vocab_size=50)
    with pytest.raises(ValueError, match="towers.audio: an audio tower is an audio encoder"):
        ModelSpec(**text, towers={"audio": dict(n_layers=1, d_model=16, n_heads=2, seq_len=4, vocab_size=9)})
    with pytest.raises(TfcalcError, match="mel_frames=100: .* reads tokens, not audio"):
        count(ModelSpec(**text), Workload(seq_len=32, mel_frames=100))
    # an audio encoder alone runs on seq_len tokens, twice as many mel frames
    with pytest.raises(TfcalcError, match="mel_frames=10: .*'s 6 tokens \\(seq_len\\) are 12 mel frames"):
        count(ModelSpec(**encoder), Workload(seq_len=6, mel_frames=10))
