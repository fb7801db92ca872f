"""Whisper (whisper) and the audio front end (`audio_conv`): exact against transformers' WhisperForConditionalGeneration
and WhisperModel (sum(numel) on meta, FlopCounterMode over one eager forward, the convolutions included, per
component), the published whisper-base and whisper-large-v3 parameter counts, the reference model's audio front end
under `check`, the audio workload (--audio-seconds) and its refusals."""

import json
import warnings

import pytest
import torch
import transformers
from hf_oracle import hf_config, meta_params, write
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from tfcalc import ModelSpec, TfcalcError, Workload, count, load_preset
from tfcalc.cli import app
from tfcalc.hf import DEFAULTS, read_hf_config
from tfcalc.verify import check, hf_model

runner = CliRunner()

# token ids inside a tiny vocabulary (WhisperConfig's defaults, 50256..50258, are outside it: nn.Embedding refuses
# a padding_idx beyond its rows)
IDS = dict(pad_token_id=1, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3)


# openai/whisper-large-v3's config.json, the keys that shape the model (as the preset's `source` says where it was read;
# benchmarks/accuracy.py holds the preset to transformers' class built from it)
WHISPER_LARGE_V3 = {
    "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "d_model": 1280,
    "encoder_layers": 32, "decoder_layers": 32, "encoder_attention_heads": 20, "decoder_attention_heads": 20,
    "encoder_ffn_dim": 5120, "decoder_ffn_dim": 5120, "activation_function": "gelu", "num_mel_bins": 128,
    "max_source_positions": 1500, "max_target_positions": 448, "vocab_size": 51866, "scale_embedding": False,
    "num_hidden_layers": 32, "pad_token_id": 50256, "bos_token_id": 50257, "eos_token_id": 50257,
    "decoder_start_token_id": 50258, "torch_dtype": "float16",
}


def tiny(**change) -> dict:
    return {"model_type": "whisper", "d_model": 32, "encoder_layers": 2, "decoder_layers": 3,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
            "vocab_size": 97, "num_mel_bins": 8, "max_source_positions": 12, "max_target_positions": 20, **IDS,
            **change}


def whisper_params(D: int, L_enc: int, L_dec: int, F: int, V: int, mel: int, src: int, tgt: int) -> int:
    """WhisperForConditionalGeneration's parameters with proj_out tied, written out by module."""
    attention = 4 * D * D + 3 * D  # q, k, v, out; biases on q, v, out (k_proj has none)
    mlp = D * F + F + F * D + D  # fc1, fc2 with biases
    norm = 2 * D  # a LayerNorm's weight and bias
    return ((mel * 3 * D + D) + (D * 3 * D + D)  # conv1 [D, mel, 3], conv2 [D, D, 3], their biases
            + src * D  # the encoder's embed_positions (frozen, a parameter)
            + L_enc * (attention + mlp + 2 * norm) + norm  # encoder layers, its layer_norm
            + V * D + tgt * D  # the decoder's embed_tokens (proj_out tied to it) and embed_positions
            + L_dec * (2 * attention + mlp + 3 * norm) + norm)  # self- and cross-attention, 3 norms; layer_norm


def test_whisper_base_published_pin():
    # whisper-base: 6 + 6 layers 512 wide (8 heads), MLP 2048, 80 mel bins, 51,865 tokens, 1,500 and 448 positions
    # conv1 123,392 + conv2 786,944 + encoder positions 768,000 + 6 x 3,151,872 + 1,024
    #   + tokens 26,554,880 + decoder positions 229,376 + 6 x 4,203,008 + 1,024
    assert whisper_params(512, 6, 6, 2048, 51865, 80, 1500, 448) == 72_593_920
    config = {"model_type": "whisper", "d_model": 512, "encoder_layers": 6, "decoder_layers": 6,
              "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
              "decoder_ffn_dim": 2048, "vocab_size": 51865, "num_mel_bins": 80}
    assert meta_params(transformers.WhisperForConditionalGeneration, config) == 72_593_920
    spec = ModelSpec(n_encoder_layers=6, n_layers=6, d_model=512, n_heads=8, d_ff=2048, vocab_size=51865,
                     seq_len=448, max_positions=448, norm="layernorm", k_bias=False, shared_embeddings=False,
                     inputs="audio", kinds={"audio_conv": {"mel_bins": 80, "positions": 1500}})
    assert count(spec).params.total == 72_593_920


def test_whisper_large_v3_preset_against_transformers():
    spec = load_preset("whisper-large-v3")
    # the preset's published config (its `source`): 32 + 32 layers 1280 wide, 20 heads, MLP 5120, 128 mel bins
    config = {k: v for k, v in WHISPER_LARGE_V3.items() if k != "torch_dtype"}
    expected = whisper_params(1280, 32, 32, 5120, 51866, 128, 1500, 448)
    assert expected == 1_543_490_560  # the figure commonly published for large-v3, verified here
    assert meta_params(transformers.WhisperForConditionalGeneration, config) == expected
    result = count(spec)
    assert result.params.total == expected
    # the front end on 30 s: conv1 over 3,000 frames, conv2 (stride 2) over 1,500 positions
    flops = result.flops.components
    assert flops["encoder/embedding/conv1"] == 2 * 3000 * 1280 * 128 * 3
    assert flops["encoder/embedding/conv2"] == 2 * 1500 * 1280 * 1280 * 3
    assert result.params.components["encoder/embedding/position"] == 1500 * 1280


def test_defaults_are_transformers_defaults():
    config = transformers.WhisperConfig()
    for key, value in DEFAULTS["whisper"].items():
        assert value == getattr(config, key), key
    assert transformers.AutoModelForSpeechSeq2Seq._model_mapping[type(config)] is \
        transformers.WhisperForConditionalGeneration


@pytest.mark.parametrize("change, cls", [
    ({}, transformers.WhisperForConditionalGeneration),
    ({"architectures": ["WhisperModel"]}, transformers.WhisperModel),
    ({"tie_word_embeddings": False}, transformers.WhisperForConditionalGeneration),
    ({"encoder_layers": 1, "decoder_layers": 2, "activation_function": "relu", "d_model": 48,
      "encoder_attention_heads": 3, "decoder_attention_heads": 3}, transformers.WhisperForConditionalGeneration),
])
def test_whisper_is_exact_against_transformers_eager_on_cpu(tmp_path, change, cls):
    """Parameters and forward FLOPs of transformers' class run for real (fp32, CPU, eager attention) under
    FlopCounterMode: mel frames [B, num_mel_bins, 2 x max_source_positions], decoder tokens of --seq-len."""
    config = tiny(**change)
    spec = read_hf_config(write(tmp_path, config)).spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = cls._from_config(hf_config(config), attn_implementation="eager").eval()
    assert count(spec).params.total == sum(p.numel() for p in model.parameters())
    batch, tokens = 2, 7
    mel = torch.randn(batch, config["num_mel_bins"], 2 * config["max_source_positions"])
    ids = torch.randint(config["vocab_size"], (batch, tokens))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_features=mel, decoder_input_ids=ids)
    assert count(spec, Workload(batch_size=batch, seq_len=tokens)).flops.forward == counter.get_total_flops()


configs = st.fixed_dictionaries({
    "heads": st.sampled_from([1, 2, 4]), "head_dim": st.sampled_from([4, 8]), "encoder_layers": st.integers(1, 3),
    "decoder_layers": st.integers(1, 3), "ffn": st.integers(8, 64), "vocab_size": st.integers(8, 120),
    "num_mel_bins": st.integers(1, 12), "max_source_positions": st.integers(1, 24),
    "max_target_positions": st.integers(4, 24), "activation_function": st.sampled_from(["gelu", "relu", "gelu_new"]),
    "tie_word_embeddings": st.booleans(), "architectures": st.sampled_from([None, ["WhisperModel"]]),
    "batch": st.integers(1, 3), "tokens": st.integers(1, 4),
})


@settings(max_examples=6, deadline=None)
@given(configs)
def test_check_hf_config_matches_every_component_of_generated_configs(tmp_path_factory, c):
    """transformers' class on meta against tfcalc's count of the same config.json, parameters and forward FLOPs
    (FlopCounterMode over one eager forward of a whole window of mel frames and `tokens` decoder tokens), component by
    component: the convolutions, the tables, every projection and attention core, the head."""
    config = {"model_type": "whisper", "d_model": c["heads"] * c["head_dim"], "encoder_attention_heads": c["heads"],
              "decoder_attention_heads": c["heads"], "encoder_ffn_dim": c["ffn"], "decoder_ffn_dim": c["ffn"],
              **{k: c[k] for k in ("encoder_layers", "decoder_layers", "vocab_size", "num_mel_bins",
                                   "max_source_positions", "max_target_positions", "activation_function",
                                   "tie_word_embeddings")}, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
              "decoder_start_token_id": 0, **({"architectures": c["architectures"]} if c["architectures"] else {})}
    path = write(tmp_path_factory.mktemp("whisper"), config)
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=c["batch"], seq_len=c["tokens"]))
    assert report.match, report.verdict()
    assert not [r for r in report.rows if r.component.startswith("(")]  # every module mapped
    model = "WhisperModel" if c["architectures"] else "WhisperForConditionalGeneration"
    assert report.model_class == model


def test_check_hf_config_matches_every_component(tmp_path):
    path = write(tmp_path, tiny())
    spec = read_hf_config(path).spec
    report = hf_model.compare(path, spec, Workload(batch_size=2, seq_len=9))
    assert report.match, report.verdict()
    matched = {(r.figure, r.component) for r in report.rows if r.match}
    assert {("forward", "encoder/embedding/conv1"), ("forward", "encoder/embedding/conv2"),
            ("params", "encoder/embedding/position"), ("params", "decoder/embedding/token"),
            ("forward", "decoder/cross_attention/kv")} <= matched
    # transformers runs the whole window: another audio length is compared there, and says so
    report = hf_model.compare(path, spec, Workload(batch_size=1, seq_len=4, mel_frames=10))
    assert report.match and any("whole window of 24 mel frames" in n for n in report.notes)


def test_check_hf_config_of_the_published_large_v3_on_the_command_line(tmp_path):
    path = write(tmp_path, WHISPER_LARGE_V3)  # (torch_dtype float16: the mel frames are fed in the model's dtype)
    spec = read_hf_config(path).spec
    assert count(spec).params.components == count(load_preset("whisper-large-v3")).params.components
    # one block per stack (written into encoder_layers and decoder_layers), the whole window, 448 decoder tokens
    report = hf_model.compare(path, spec.replace(n_encoder_layers=1, n_layers=1), Workload(seq_len=448))
    assert report.match, report.verdict()
    # (-L is written where transformers reads each count: the encoder's into num_hidden_layers, the alias it gives)
    assert any("num_hidden_layers=1, decoder_layers=1" in n for n in report.notes), report.notes
    # and on the command line, a tiny config of the same layout
    r = runner.invoke(app, ["check", "--hf-config", str(write(tmp_path, tiny())), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["transformers"]["match"] and data["transformers"]["model_class"] == "WhisperForConditionalGeneration"


def test_reference_model_builds_the_audio_front_end_for_check():
    spec = ModelSpec(n_encoder_layers=2, n_layers=2, d_model=32, n_heads=4, d_ff=40, vocab_size=50, seq_len=10,
                     max_positions=12, k_bias=False, shared_embeddings=False, inputs="audio",
                     kinds={"audio_conv": {"mel_bins": 6, "positions": 16}})
    for workload in (None, Workload(batch_size=2, seq_len=5, mel_frames=20),
                     Workload(phase="decode", seq_len=1, context=4, mel_frames=20)):
        report = check(spec, "meta", workload=workload)
        assert report.match, [r for r in report.forward if not r.match]
        counted = {row.component: row.flop_counter for row in report.forward}
        if workload is None or workload.phase == "train":
            b, frames = (1, 32) if workload is None else (2, 20)
            assert counted["encoder/embedding/conv1"] == 2 * b * frames * 32 * 6 * 3
            assert counted["encoder/embedding/conv2"] == 2 * b * (frames // 2) * 32 * 32 * 3
        params = {row.component: row.model for row in report.params}
        assert params["encoder/embedding/position"] == 16 * 32
        # q and v have biases, k has none: 3 x 32 + 32 x 96 in each self-attention
        assert params["encoder/attention/qkv"] == 2 * (32 * 96 + 2 * 32)


def test_train_step_leaves_out_the_mel_frames_gradient():
    # FlopCounterMode over forward + backward on CPU: conv1 computes its weight gradient, not the mel frames' (an
    # input), so backward = 2 x forward - conv1's forward
    spec = load_preset("whisper-large-v3").replace(n_layers=1, n_encoder_layers=1, d_model=64, n_heads=2, d_ff=96,
                                                   vocab_size=101, kinds={"audio_conv": {"mel_bins": 8,
                                                                                         "positions": 20}})
    workload = Workload(batch_size=2, seq_len=6, mel_frames=30)
    result = count(spec, workload)
    conv1 = 2 * 2 * 30 * 64 * 8 * 3
    assert result.flops.components["encoder/embedding/conv1"] == conv1
    assert result.flops.backward == 2 * result.flops.forward - conv1
    report = check(spec, "cpu", train=True, workload=workload)
    assert report.match and report.train.match and report.train.flop_counter == result.flops.train_step


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["WhisperForAudioClassification"]},
     "architectures=['WhisperForAudioClassification'] is not modelled"),
    ({"decoder_attention_heads": 2}, "decoder_attention_heads=2 is not modelled: encoder_attention_heads=4 differs"),
    ({"decoder_ffn_dim": 64}, "decoder_ffn_dim=64 is not modelled: encoder_ffn_dim=48 differs"),
    ({"activation_function": "tanh"}, "activation_function='tanh' is not modelled"),
    ({"num_mel_bins": "80"}, "num_mel_bins='80': expected an integer"),
])
def test_config_refusals_name_the_field(tmp_path, change, message):
    with pytest.raises(TfcalcError) as e:
        read_hf_config(write(tmp_path, tiny(**change)))
    assert message in str(e.value)


def test_audio_workload_on_the_command_line():
    r = runner.invoke(app, ["count", "-p", "whisper-large-v3", "--audio-seconds", "10", "-N", "100", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["workload"]["mel_frames"] == 1000 and data["workload"]["src_len"] == 500
    assert data["workload"]["seq_len"] == 100
    assert data["flops"]["components"]["encoder/embedding/conv2"] == 2 * 500 * 1280 * 1280 * 3
    r = runner.invoke(app, ["count", "-p", "whisper-large-v3"])
    assert "448 new tokens, 30 s of audio (3,000 mel frames, 1,500 encoder tokens)" in r.output
    # a model of tokens dumps its workload as it always has
    data = json.loads(runner.invoke(app, ["count", "-p", "gpt2", "--json"]).output)
    assert "mel_frames" not in data["workload"]


@pytest.mark.parametrize("args, message", [
    (["count", "-p", "whisper-large-v3", "--audio-seconds", "10.01"], "--audio-seconds 10.01: 1001 mel frames"),
    (["count", "-p", "whisper-large-v3", "--audio-seconds", "30.5"],
     "--audio-seconds 30.5: 3,050 mel frames are 1,525 encoder tokens, more than whisper-large-v3's 1,500"),
    (["count", "-p", "whisper-large-v3", "--audio-seconds", "0"], "--audio-seconds 0: expected a positive number"),
    (["count", "-p", "whisper-large-v3", "--audio-seconds", "ten"], "--audio-seconds ten: expected a positive"),
    (["count", "-p", "gpt2", "--audio-seconds", "10"], "--audio-seconds 10: gpt2 reads tokens, not audio"),
    (["count", "-p", "vit-b16", "--audio-seconds", "10"], "--audio-seconds 10: vit-b16 reads images, not audio"),
    (["count", "-p", "whisper-large-v3", "--src-len", "100"], "--src-len 100: whisper-large-v3's encoder reads audio"),
    (["count", "-p", "whisper-large-v3", "-N", "449"], "seq_len=449 exceeds max_positions=448"),
    (["count", "-p", "whisper-large-v3", "--image-size", "224"], "--image-size 224: whisper-large-v3 reads audio"),
    (["count", "-p", "whisper-large-v3,gpt2", "--audio-seconds", "10"], "--audio-seconds 10: not with a sweep"),
    (["check", "-p", "whisper-large-v3", "--memory", "--tp", "2"],
     "tfcalc check --memory: whisper-large-v3 is a model of audio; its train step is planned and measured on one GPU"),
    (["memory", "-p", "whisper-large-v3"], "tfcalc memory: whisper-large-v3 is a model of audio"),
    (["memory", "-p", "whisper-large-v3", "--phase", "train", "--pp", "2"], "pp=2: whisper-large-v3 is a model of audio"),
    (["infer", "-p", "whisper-large-v3", "--gpu", "h100"], "tfcalc infer: whisper-large-v3 is a model of audio"),
])
def test_bad_audio_input_is_one_line_exit_2(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], r.output


@pytest.mark.parametrize("preset, workload, message", [
    ("whisper-large-v3", Workload(seq_len=10, mel_frames=301), "mel_frames=301: an odd number of mel frames"),
    ("whisper-large-v3", Workload(seq_len=10, mel_frames=3002), "mel_frames=3002: 1501 encoder tokens exceed"),
    ("whisper-large-v3", Workload(seq_len=10, src_len=100, mel_frames=3000),
     "src_len=100: 3000 mel frames are 1500 encoder tokens"),
    ("gpt2", Workload(seq_len=10, mel_frames=300), "mel_frames=300: gpt2 reads tokens, not audio"),
])
def test_library_workload_refusals(preset, workload, message):
    with pytest.raises(TfcalcError) as e:
        count(load_preset(preset), workload)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("change, message", [
    # an audio encoder alone (a multimodal model's audio tower) has no vocabulary, no head
    ({"n_encoder_layers": 0}, "vocab_size=51866 is not modelled with inputs='audio' with n_encoder_layers=0"),
    ({"shared_embeddings": True}, "shared_embeddings=True is not modelled with inputs='audio'"),
    ({"positions": "sinusoidal", "max_positions": None}, "positions='sinusoidal' is not modelled with inputs='audio'"),
    ({"inputs": "tokens"}, "kinds.audio_conv: only for a model of audio"),
    ({"kinds": {"audio_conv": {"mel_bins": 0}}}, "kinds.audio_conv.mel_bins=0"),
])
def test_spec_refusals_name_the_field(change, message):
    with pytest.raises(ValueError) as e:  # (pydantic's ValidationError, one line per problem)
        load_preset("whisper-large-v3").replace(**change)
    assert message in str(e.value)


def test_without_k_bias_only_the_key_bias_goes():
    # k_bias is Whisper's; BART keeps its key bias (the default), and the two differ by one D-wide bias per attention
    bart = load_preset("bart-base")
    no_k = bart.replace(k_bias=False)
    D, attentions = bart.d_model, bart.n_encoder_layers + 2 * bart.n_layers  # self- and cross-attention
    assert count(bart).params.total - count(no_k).params.total == attentions * D
