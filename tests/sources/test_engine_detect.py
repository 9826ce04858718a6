"""Knowing what is read: the engine and its names' generation from a scrape, and a scrape that is not the engine
asked for (another engine, its metrics off) as a failed collection with one line saying what was found."""

import subprocess
import sys
from pathlib import Path

import pytest

from stagelens.sources.scrape.engine_names import EngineMismatchError, generation
from stagelens.sources.scrape.engine_source import VllmSource
from stagelens.sources.scrape.prometheus_text import parse_exposition
from tests.helpers.metrics_server import MetricsServer

REAL = Path(__file__).parents[1] / "fixtures" / "real"
ENGINES = Path(__file__).parents[1] / "fixtures" / "engines"
DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def runtime_only(text: str) -> str:
    """The capture without its engine: what the Python client alone publishes (python_*, process_*, http_*)."""
    return "\n".join(line for line in text.splitlines() if "vllm:" not in line) + "\n"


def without(text: str, *families: str) -> str:
    """The capture without the lines (samples, HELP and TYPE) of `families`."""
    def family(line: str) -> str:
        return line.split()[2] if line.startswith("# ") else line.split("{", 1)[0].split(" ", 1)[0]
    return "\n".join(line for line in text.splitlines() if not line or family(line) not in families) + "\n"


@pytest.mark.parametrize("text, kind, said", [
    (real("vllm_v0_idle_qwen25_coder_1_5b.txt"), "vllm", "vLLM V0 (gpu_cache_usage_perc, no engine label)"),
    # a V0 build publishing none of the families only V0 had: told by its families' lack of an engine label
    (without(real("vllm_v0_idle_qwen25_coder_1_5b.txt"), "vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc",
             "vllm:gpu_prefix_cache_hit_rate"), "vllm", "vLLM V0 (gpu_cache_usage_perc, no engine label)"),
    # ... where V1, with the old usage name only, labels every family with its engine
    (without(real("vllm_v1_0.10_idle_qwen3_4b.txt"), "vllm:kv_cache_usage_perc"), "vllm",
     "vLLM V1 (0.8/0.9-style names)"),
    (real("vllm_v1_0.10_idle_qwen3_4b.txt"), "vllm", "vLLM V1 (0.10-style names)"),
    (real("vllm_v1_0.28_hybrid_idle_qwen38_27b.txt"), "vllm", "vLLM V1 (0.11+ names)"),
    ((ENGINES / "vllm_v1_new_names.txt").read_text(), "vllm", "vLLM V1 (0.11+ names), 2 data-parallel engines"),
    (real("sglang_0.3_idle_gemma2_9b.txt"), "sglang", "SGLang 0.3 (num_requests_running, label name)"),
    (real("sglang_0.4_overloaded_llama31_8b.txt"), "sglang", "SGLang 0.4 (num_running_reqs, label model_name)"),
    (real("sglang_0.5_busy_qwen32b_excerpt.txt"), "sglang", "SGLang 0.4.4+ (num_running_reqs, per-rank labels)"),
], ids=["vllm-v0", "vllm-v0-without-v0-only-families", "vllm-v1-old-usage-name", "vllm-v1-0.10",
        "vllm-v1-0.28-hybrid", "vllm-v1-dp", "sglang-0.3", "sglang-0.4", "sglang-0.5"])
def test_each_generation_is_named(text, kind, said):
    assert generation(parse_exposition(text), kind, "http://h/metrics") == said


@pytest.mark.parametrize("text, kind, said", [
    (runtime_only(real("vllm_v1_0.10_idle_qwen3_4b.txt")), "sglang",
     "only http_*/process_*/python_* metrics at http://h/metrics, no sglang:* one: is this SGLang? "
     "(SGLang publishes them only with --enable-metrics)"),
    (runtime_only(real("vllm_v1_0.10_idle_qwen3_4b.txt")), "vllm",
     "only http_*/process_*/python_* metrics at http://h/metrics, no vllm:* one: is this vLLM? "
     "(vLLM turns them off with --disable-log-stats)"),
    (real("vllm_v1_0.10_idle_qwen3_4b.txt"), "sglang",
     "no sglang:* metric at http://h/metrics, but 26 vllm:* ones: is this vLLM? (--engine vllm)"),
    (real("sglang_0.4_overloaded_llama31_8b.txt"), "vllm",
     "no vllm:* metric at http://h/metrics, but 12 sglang:* ones: is this SGLang? (--engine sglang)"),
    ("", "vllm", "no metric at all at http://h/metrics: is this vLLM's /metrics?"),
], ids=["runtime-only-as-sglang", "runtime-only-as-vllm", "vllm-as-sglang", "sglang-as-vllm", "empty"])
def test_a_scrape_without_the_engine_says_what_it_holds(text, kind, said):
    with pytest.raises(EngineMismatchError) as caught:
        generation(parse_exposition(text), kind, "http://h/metrics")
    assert str(caught.value) == said


def test_the_source_refuses_the_wrong_engine_rather_than_reading_nothing():
    served = MetricsServer(real("sglang_0.4_overloaded_llama31_8b.txt"))
    try:
        with pytest.raises(EngineMismatchError, match="is this SGLang"):
            VllmSource(served.url, kind="vllm").snapshot(1.0)
    finally:
        served.close()


@pytest.mark.parametrize("body, kind, said", [
    (runtime_only(real("vllm_v1_0.10_idle_qwen3_4b.txt")), "sglang", "only http_*/process_*/python_* metrics"),
    (real("vllm_v1_0.10_idle_qwen3_4b.txt"), "sglang", "but 26 vllm:* ones: is this vLLM? (--engine vllm)"),
], ids=["runtime-only", "vllm-as-sglang"])
def test_diagnose_on_the_wrong_engine_exits_unknown_in_one_line(body, kind, said):
    served = MetricsServer(body)
    try:
        done = subprocess.run([sys.executable, "-m", "stagelens.cli", "--nvml-snapshot", DGX, "diagnose",
                               "--duration", "1", "--engine", kind, "--engine-url", served.url],
                              capture_output=True, text=True, timeout=60)
    finally:
        served.close()
    assert done.returncode == 3, done
    last = done.stderr.strip().splitlines()[-1]
    assert f"the engine at {served.url} is not read as --engine {kind}: " in last and said in last, done.stderr
    assert "Traceback" not in done.stderr and not done.stdout
