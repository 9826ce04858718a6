"""A physical prior for an engine step's time, so that what-if can say how the step cost grows past
the batches and token budgets the recording reached (the fitted linear cost knows nothing beyond
them).

Decode is memory-bound: each step reads the weights once per forward pass, plus the KV the running
sequences hold, at the GPU's memory bandwidth; adding a sequence to the batch costs only its KV.
Prefill is compute-bound: two FLOPs per parameter per token, plus attention's quadratic part. The
roofline takes the larger of the two. The figures are the node's GPU's datasheet values (looked up
by its NVML name) or, with no known GPU, this host's own memory bandwidth and matmul rate, measured
once and cached; the model's shape is counted from its config.json. The result is unscaled: the
caller fits one factor on the recorded steps, which absorbs what a roofline ignores (kernel
efficiency, tensor parallelism, the engine's overheads), so only the shape matters here.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stagelens.bounded_read import read_bounded
from stagelens.errors import UserError

CONFIG_MAX_BYTES = 4 * 1024 * 1024
COPY_BYTES = 256 * 1024 * 1024     # far past any CPU cache: the copy runs at memory speed
# best of: the fastest run is the one least disturbed by the rest of the host
REPEATS = 3

# (words the NVML name must hold, memory bandwidth B/s, dense 16-bit tensor FLOP/s), from NVIDIA's
# datasheets. Most specific first: the first entry whose words are all in the name wins (A100 80GB
# before A100, L40S and L40 are different words, GH200 before H200).
GPUS: tuple[tuple[tuple[str, ...], float, float], ...] = (
    (("a100", "80gb", "pcie"), 1.935e12, 312e12),
    (("a100", "80gb"), 2.039e12, 312e12),            # SXM4
    (("a100",), 1.555e12, 312e12),                   # 40GB, PCIe and SXM4 alike
    (("gh200", "144g"), 4.9e12, 989e12),             # HBM3e
    (("gh200",), 4.0e12, 989e12),                    # HBM3 (96 GB)
    (("h200", "nvl"), 4.8e12, 835e12),
    (("h200",), 4.8e12, 989e12),                     # SXM
    (("h100", "pcie"), 2.0e12, 756e12),
    (("h100", "nvl"), 3.9e12, 835e12),
    (("h100",), 3.35e12, 989e12),                    # SXM ("NVIDIA H100 80GB HBM3")
    (("h20",), 4.0e12, 148e12),
    (("b200",), 8.0e12, 2250e12),
    (("l40s",), 864e9, 362e12),
    (("l40",), 864e9, 181e12),
    (("l4",), 300e9, 121e12),
    (("a10g",), 600e9, 70e12),
    (("a10",), 600e9, 125e12),
    (("a30",), 933e9, 165e12),
    (("t4",), 320e9, 65e12),                         # fp16 (no bf16)
    (("v100s",), 1.134e12, 130e12),
    (("v100", "pcie"), 900e9, 112e12),
    (("v100",), 900e9, 125e12),                      # SXM2
    (("rtx", "6000", "ada"), 960e9, 364e12),
    (("rtx", "a6000"), 768e9, 155e12),
    (("rtx", "4090"), 1008e9, 165e12),               # fp32 accumulate, as a serving engine runs it
)

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1,
               "float8_e5m2": 1, "int8": 1}
# what serving engines load a model in when its config names no dtype
DEFAULT_DTYPE_BYTES = 2


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_bandwidth_bytes_s: float
    # dense 16-bit tensor FLOP/s for GPUs; measured float32 matmul FLOP/s for the host
    peak_flops: float
    source: str                  # "table" or "measured"


@dataclass(frozen=True)
class ModelShape:
    name: str
    parameters: int
    weight_bytes: int
    kv_bytes_per_token: int
    layers: int
    hidden: int
    source: str                  # path of the config read, or "assumed"


@dataclass(frozen=True)
class Prior:
    hardware: Hardware
    model: ModelShape
    # assumed, not measured: the part of a prediction it prices may be this many times off either
    # way
    spread = 2.0

    def seconds(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float,
                kv_tokens: float, forwards: float = 1) -> float:
        """Roofline time of one engine step, unscaled: the larger of the bytes it reads (weights
        per forward, the running sequences' KV) over the bandwidth and the FLOPs it does (2 per
        parameter per token, 4 per layer per hidden unit per prefill pair, attention's QK^T and
        AV) over the peak rate."""
        m, hw = self.model, self.hardware
        memory = (forwards * m.weight_bytes + kv_tokens * m.kv_bytes_per_token) / hw.memory_bandwidth_bytes_s
        compute = (2 * m.parameters * (prefill_tokens + decode_seqs)
                   + 4 * m.layers * m.hidden * prefill_pairs) / hw.peak_flops
        return max(memory, compute)

    def describe(self) -> list[str]:
        hw, m = self.hardware, self.model
        if hw.source == "measured":
            machine = (f"measured: {hw.name}, {_rate(hw.memory_bandwidth_bytes_s, 'B/s')} memory "
                       f"(numpy copy), {_rate(hw.peak_flops, 'FLOP/s')} (float32 matmul, numpy) on "
                       f"this host, no known GPU")
        else:
            machine = (f"assumed: {hw.name} from its product name, "
                       f"{_rate(hw.memory_bandwidth_bytes_s, 'B/s')} memory, "
                       f"{_rate(hw.peak_flops, 'FLOP/s')} (16-bit tensor, dense)")
        element = m.weight_bytes / m.parameters if m.parameters else DEFAULT_DTYPE_BYTES
        origin = "a shape assumed, no config read" if m.source == "assumed" else f"from {m.source}"
        model = (f"assumed: model {m.name}, {_count(m.parameters)} parameters "
                 f"({_rate(m.weight_bytes, 'B')} in {element * 8:g}-bit weights), "
                 f"{_binary(m.kv_bytes_per_token)} of KV per token, {origin}")
        return [machine, model]


def _rate(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _count(n: int) -> str:
    return f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M"


def _binary(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


def gpu_hardware(nvml_name: str) -> Hardware | None:
    """The datasheet figures of the GPU NVML calls `nvml_name` (its words matched
    case-insensitively, so that "A10" is not found in "A100"); None for a GPU not in the table."""
    words = set("".join(c if c.isalnum() else " " for c in nvml_name.lower()).split())
    for needed, bandwidth, flops in GPUS:
        if words.issuperset(needed):
            return Hardware(nvml_name, bandwidth, flops, "table")
    return None


def _machine_key() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    cpu = line.split(":", 1)[-1].strip()
                    break
    except OSError:
        pass
    return {"node": platform.node(), "cpu": cpu or platform.processor(), "cpus": os.cpu_count()}


def _measure_host() -> tuple[float, float]:
    """(memory bandwidth B/s, float32 matmul FLOP/s) of this host, best of a few runs each."""
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)                    # first touch maps the pages: not part of a copy's cost
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    # a copy reads and writes every byte (STREAM's count)
    bandwidth = 2 * src.nbytes / max(best, 1e-9)
    del src, dst

    def matmul_rate(n: int, runs: int, at_least_s: float = 0.0) -> float:
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        best, began = math.inf, time.perf_counter()
        for i in range(100):
            if i >= runs and time.perf_counter() - began >= at_least_s:
                break
            start = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - start)
        return 2 * n**3 / max(best, 1e-9)

    # the first products run slow (BLAS threads starting, clocks rising): warm up on small ones for
    # a while, then time larger ones, where the call's overhead is negligible, if the host is fast
    # enough to keep this short
    rate = matmul_rate(1024, REPEATS, at_least_s=0.2)
    if 2 * 2048**3 / rate < 0.25:
        rate = max(rate, matmul_rate(2048, REPEATS))
    return bandwidth, rate


def _positive(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def host_hardware(cache_dir: Path | None = None) -> Hardware:
    """This host's memory bandwidth and matmul rate, measured once per machine and cached as
    JSON; a cache that cannot be read, or that another machine wrote, is measured again and
    rewritten (one that cannot be written is only skipped)."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = Path(base) / "stagelens"
    path = Path(cache_dir) / "host-hardware.json"
    key = _machine_key()
    name = f"host CPU ({key['cpu']})" if key["cpu"] else "host CPU"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        bandwidth, flops = cached["memory_bandwidth_bytes_s"], cached["peak_flops"]
        if cached["machine"] == key and _positive(bandwidth) and _positive(flops):
            return Hardware(name, float(bandwidth), float(flops), "measured")
    except (OSError, ValueError, TypeError, KeyError):
        pass
    bandwidth, flops = _measure_host()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"machine": key, "memory_bandwidth_bytes_s": bandwidth,
                                       "peak_flops": flops}),
                           encoding="utf-8")
        os.replace(partial, path)          # whole or not at all: a reader never sees half a file
    except OSError:
        pass
    return Hardware(name, bandwidth, flops, "measured")


def _integer(config: dict, key: str, default: int | None = None) -> int:
    value = config.get(key)
    if value is None and default is not None:
        return default
    if value is None:
        raise UserError(f"model config: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"model config: {key} must be a positive integer, got {value!r}")
    return value


def model_shape(config: dict, source: str, dtype_bytes: int | None = None) -> ModelShape:
    """The shape of a decoder-only transformer from its Hugging Face config.json (a multimodal
    one's text_config when the top level has no hidden_size); `dtype_bytes` overrides the
    config's torch_dtype."""
    if not isinstance(config, dict):
        raise UserError(f"model config: expected a JSON object, got {type(config).__name__}")
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    hidden = _integer(config, "hidden_size")
    layers = _integer(config, "num_hidden_layers")
    intermediate = _integer(config, "intermediate_size")
    vocab = _integer(config, "vocab_size")
    heads = _integer(config, "num_attention_heads")
    kv_heads = _integer(config, "num_key_value_heads", heads)
    head_dim = _integer(config, "head_dim", hidden // heads or 1)
    tied = config.get("tie_word_embeddings", False)   # Llama's default; configs that tie say so
    if not isinstance(tied, bool):
        raise UserError(f"model config: tie_word_embeddings must be true or false, got {tied!r}")
    if dtype_bytes is None:
        dtype = config.get("torch_dtype") or config.get("dtype")
        dtype_bytes = DTYPE_BYTES.get(dtype, DEFAULT_DTYPE_BYTES) if isinstance(dtype, str) else DEFAULT_DTYPE_BYTES
    elif isinstance(dtype_bytes, bool) or not isinstance(dtype_bytes, int) or dtype_bytes <= 0:
        raise UserError(f"dtype_bytes must be a positive integer, got {dtype_bytes!r}")

    # q and o, k and v
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate                                                # gate, up, down
    per_layer = attention + mlp + 2 * hidden                                       # two norms
    parameters = vocab * hidden + layers * per_layer + hidden + (0 if tied else vocab * hidden)
    architectures = config.get("architectures")
    names = (config.get("_name_or_path"), architectures[0] if isinstance(architectures, list) and architectures
             else None, config.get("model_type"))
    name = next((n for n in names if isinstance(n, str) and n), "unnamed")
    return ModelShape(name=name, parameters=parameters,
                      weight_bytes=parameters * dtype_bytes,
                      kv_bytes_per_token=2 * layers * kv_heads * head_dim * dtype_bytes,
                      layers=layers, hidden=hidden, source=source)


def read_model_config(path: str) -> ModelShape:
    """The shape of the model whose config.json is at `path` (the file, or the directory holding
    it)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    raw = read_bounded(file, CONFIG_MAX_BYTES, f"model config {file}: cannot read it: {{error}}",
                       f"model config {file}: larger than {CONFIG_MAX_BYTES // 2**20} MiB, not a config.json")
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"model config {file}: not JSON ({exc})") from None
    try:
        return model_shape(config, str(file))
    except UserError as exc:
        raise UserError(f"{exc} (in {file})") from None


def node_prior(gpu_names: list[str], model: ModelShape, cache_dir: Path | None = None) -> Prior:
    """The prior on the node's GPU (the first of `gpu_names`, as NVML reports them, that the
    table knows), else on this host as measured."""
    for name in gpu_names:
        hardware = gpu_hardware(name)
        if hardware is not None:
            return Prior(hardware, model)
    return Prior(host_hardware(cache_dir), model)
