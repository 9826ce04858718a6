"""The physical prior of an engine step's time: GPUs found by their NVML names, model shapes counted from their
configs (and bad configs refused in one line), the roofline memory-bound for decode and compute-bound for prefill,
and the host measured once then read from its cache."""

import json
import math

import pytest

from stagelens.errors import UserError
from stagelens.whatif import prior as prior_module
from stagelens.whatif.prior import Prior, gpu_hardware, host_hardware, model_shape, node_prior, read_model_config

LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False, "torch_dtype": "float16"}
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("name, bandwidth, flops", [
    ("NVIDIA A100-SXM4-80GB", 2.039e12, 312e12),
    ("NVIDIA A100-SXM4-40GB", 1.555e12, 312e12),
    ("NVIDIA A100-PCIE-40GB", 1.555e12, 312e12),
    ("NVIDIA A100 80GB PCIe", 1.935e12, 312e12),
    ("NVIDIA H100 80GB HBM3", 3.35e12, 989e12),
    ("NVIDIA H100 PCIe", 2.0e12, 756e12),
    ("NVIDIA H100 NVL", 3.9e12, 835e12),
    ("NVIDIA H200", 4.8e12, 989e12),
    ("NVIDIA H20", 4.0e12, 148e12),
    ("NVIDIA GH200 480GB", 4.0e12, 989e12),
    ("Tesla T4", 320e9, 65e12),
    ("NVIDIA L4", 300e9, 121e12),
    ("NVIDIA L40S", 864e9, 362e12),
    ("NVIDIA L40", 864e9, 181e12),
    ("NVIDIA A10", 600e9, 125e12),
    ("NVIDIA A10G", 600e9, 70e12),
    ("Tesla V100-SXM2-16GB", 900e9, 125e12),
    ("NVIDIA GeForce RTX 4090", 1008e9, 165e12),
    ("NVIDIA RTX 6000 Ada Generation", 960e9, 364e12),
    ("nvidia b200", 8.0e12, 2250e12),
])
def test_gpu_found_by_its_nvml_name(name, bandwidth, flops):
    hw = gpu_hardware(name)
    assert hw is not None
    assert (hw.memory_bandwidth_bytes_s, hw.peak_flops, hw.source, hw.name) == (bandwidth, flops, "table", name)


@pytest.mark.parametrize("name", ["NVIDIA Quadro K2200", "AMD Instinct MI300X", "", "A1000"])
def test_unknown_gpu_is_none(name):
    assert gpu_hardware(name) is None


def test_llama2_7b_shape():
    m = model_shape(LLAMA2_7B, "config.json")
    assert m.parameters == pytest.approx(6.74e9, rel=0.02)
    assert m.weight_bytes == 2 * m.parameters
    assert m.kv_bytes_per_token == 524288
    assert (m.layers, m.hidden, m.name, m.source) == (32, 4096, "LlamaForCausalLM", "config.json")


def test_gqa_shape_and_dtype_override():
    m = model_shape(LLAMA3_8B, "assumed")
    assert m.parameters == pytest.approx(8.03e9, rel=0.02)
    assert m.kv_bytes_per_token == 131072
    wide = model_shape(LLAMA3_8B, "assumed", dtype_bytes=4)
    assert (wide.weight_bytes, wide.kv_bytes_per_token) == (4 * m.parameters, 2 * m.kv_bytes_per_token)


def test_tied_embeddings_drop_the_lm_head():
    untied = model_shape(LLAMA2_7B, "x")
    tied = model_shape({**LLAMA2_7B, "tie_word_embeddings": True}, "x")
    assert untied.parameters - tied.parameters == 32000 * 4096


@pytest.mark.parametrize("config, key", [
    ({k: v for k, v in LLAMA2_7B.items() if k != "hidden_size"}, "hidden_size"),
    ({**LLAMA2_7B, "num_hidden_layers": "32"}, "num_hidden_layers"),
    ({**LLAMA2_7B, "vocab_size": True}, "vocab_size"),
    ({**LLAMA2_7B, "intermediate_size": -1}, "intermediate_size"),
    ({**LLAMA2_7B, "num_key_value_heads": 0}, "num_key_value_heads"),
    ({**LLAMA2_7B, "head_dim": 64.5}, "head_dim"),
    ({**LLAMA2_7B, "tie_word_embeddings": "no"}, "tie_word_embeddings"),
])
def test_bad_config_names_the_key(config, key):
    with pytest.raises(UserError, match=key):
        model_shape(config, "x")


@pytest.mark.parametrize("config", [[1, 2], "config", None, 7])
def test_config_not_a_dict(config):
    with pytest.raises(UserError, match="JSON object"):
        model_shape(config, "x")


def test_read_model_config_file_and_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    from_dir, from_file = read_model_config(str(tmp_path)), read_model_config(str(tmp_path / "config.json"))
    assert from_dir == from_file
    assert from_dir.source == str(tmp_path / "config.json")
    assert from_dir.kv_bytes_per_token == 131072


def test_read_model_config_errors(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        read_model_config(str(tmp_path / "missing.json"))
    with pytest.raises(UserError, match="cannot read"):
        read_model_config(str(tmp_path))                # a directory with no config.json
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"{not json\xff")
    with pytest.raises(UserError, match="not JSON"):
        read_model_config(str(garbage))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**LLAMA2_7B, "num_attention_heads": None}))
    with pytest.raises(UserError, match="num_attention_heads"):
        read_model_config(str(bad))
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (5 * 2**20) + "{}")
    with pytest.raises(UserError, match="larger than"):
        read_model_config(str(huge))


def h100_7b() -> Prior:
    return Prior(gpu_hardware("NVIDIA H100 80GB HBM3"), model_shape(LLAMA2_7B, "x"))


def test_decode_is_memory_bound():
    p, context = h100_7b(), 128
    one, many = p.seconds(0, 0, 1, context), p.seconds(0, 0, 64, 64 * context)
    assert one == pytest.approx(p.model.weight_bytes / 3.35e12, rel=0.01)    # the weights, read once
    assert one < many < 2 * one
    compute = 2 * p.model.parameters * 64 / p.hardware.peak_flops
    assert many > 2 * compute
    # two forwards (two models in the batch) read the weights twice
    assert p.seconds(0, 0, 1, 0, forwards=2) == pytest.approx(2 * p.seconds(0, 0, 1, 0))


def test_prefill_is_compute_bound_and_linear():
    p = h100_7b()
    t8k, t16k = p.seconds(8192, 0, 0, 8192), p.seconds(16384, 0, 0, 16384)
    assert t8k == pytest.approx(2 * p.model.parameters * 8192 / 989e12, rel=0.01)
    assert t16k / t8k == pytest.approx(2.0, rel=0.01)
    # attention's quadratic part adds compute: 8192 new tokens on 8192 of context each
    assert p.seconds(8192, 8192 * 8192, 0, 8192) > t8k


def test_seconds_monotone_in_each_argument():
    p = h100_7b()
    base = dict(prefill_tokens=512, prefill_pairs=512 * 1024, decode_seqs=16, kv_tokens=20000, forwards=1)
    for arg in base:
        values = [0, 1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e8]
        times = [p.seconds(**{**base, arg: v}) for v in values]
        assert times == sorted(times), arg
        assert times[-1] > times[0], arg


def test_host_measured(tmp_path):
    hw = host_hardware(tmp_path)
    assert hw.source == "measured"
    assert math.isfinite(hw.memory_bandwidth_bytes_s) and hw.memory_bandwidth_bytes_s > 1e8
    assert math.isfinite(hw.peak_flops) and hw.peak_flops > 1e8
    cached = json.loads((tmp_path / "host-hardware.json").read_text())
    assert cached["memory_bandwidth_bytes_s"] == hw.memory_bandwidth_bytes_s


def _no_measuring(monkeypatch, figures=(1.0, 2.0)):
    calls = []
    monkeypatch.setattr(prior_module, "_measure_host", lambda: calls.append(1) or figures)
    return calls


def test_host_read_from_cache(tmp_path, monkeypatch):
    calls = _no_measuring(monkeypatch)
    (tmp_path / "host-hardware.json").write_text(json.dumps(
        {"machine": prior_module._machine_key(), "memory_bandwidth_bytes_s": 12.5e9, "peak_flops": 3.0e11}))
    hw = host_hardware(tmp_path)
    assert (hw.memory_bandwidth_bytes_s, hw.peak_flops, calls) == (12.5e9, 3.0e11, [])


def test_default_cache_dir_follows_xdg(tmp_path, monkeypatch):
    calls = _no_measuring(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "stagelens").mkdir()
    (tmp_path / "stagelens" / "host-hardware.json").write_text(json.dumps(
        {"machine": prior_module._machine_key(), "memory_bandwidth_bytes_s": 7e9, "peak_flops": 8e10}))
    assert host_hardware().memory_bandwidth_bytes_s == 7e9
    assert calls == []


@pytest.mark.parametrize("content", [
    "{corrupt", "[]", "null", json.dumps({"machine": {"node": "another host"}, "memory_bandwidth_bytes_s": 1e10,
                                          "peak_flops": 1e11}),
    json.dumps({"memory_bandwidth_bytes_s": -1, "peak_flops": "fast"}),
])
def test_bad_or_foreign_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch, content):
    calls = _no_measuring(monkeypatch, (5e9, 6e10))
    path = tmp_path / "host-hardware.json"
    path.write_text(content)
    hw = host_hardware(tmp_path)
    assert (hw.memory_bandwidth_bytes_s, hw.peak_flops, calls) == (5e9, 6e10, [1])
    assert json.loads(path.read_text())["peak_flops"] == 6e10
    assert host_hardware(tmp_path).peak_flops == 6e10 and calls == [1]     # now read from the rewritten cache


def test_unwritable_cache_still_measures(tmp_path, monkeypatch):
    _no_measuring(monkeypatch, (5e9, 6e10))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert host_hardware(blocker / "sub").memory_bandwidth_bytes_s == 5e9    # its parent is a file


def test_node_prior_picks_the_known_gpu_or_the_host(tmp_path, monkeypatch):
    calls = _no_measuring(monkeypatch, (5e9, 6e10))
    model = model_shape(LLAMA2_7B, "x")
    on_gpu = node_prior(["Matrox G200", "NVIDIA L4", "NVIDIA H200"], model, tmp_path)
    assert (on_gpu.hardware.name, on_gpu.hardware.source, calls) == ("NVIDIA L4", "table", [])
    on_host = node_prior(["Matrox G200"], model, tmp_path)
    assert (on_host.hardware.source, on_host.hardware.peak_flops, calls) == ("measured", 6e10, [1])
    assert node_prior([], model, tmp_path).hardware.source == "measured"


def test_describe_says_measured_or_assumed():
    model = model_shape(LLAMA3_8B, "/models/llama3/config.json")
    gpu = Prior(gpu_hardware("NVIDIA H100 80GB HBM3"), model).describe()
    host = Prior(prior_module.Hardware("host CPU", 20e9, 5e11, "measured"), model).describe()
    assert gpu[0].startswith("assumed:") and "3.35 TB/s" in gpu[0] and "989 TFLOP/s" in gpu[0]
    assert host[0].startswith("measured:") and "20 GB/s" in host[0] and "500 GFLOP/s" in host[0]
    assert "8.03 B parameters" in gpu[1] and "128 KiB of KV per token" in gpu[1] and "/models/llama3" in gpu[1]
    assert not any("%" in line for line in gpu + host)
    bare = prior_module.ModelShape("m", 0, 0, 0, 1, 1, "assumed")
    assert "assumed" in Prior(gpu_hardware("Tesla T4"), bare).describe()[1]
