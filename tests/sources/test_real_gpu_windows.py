"""Real GPU-scale /metrics windows (tests/fixtures/real/gpu, their origins and expected readings in SOURCES.md
there): pairs of scrapes a published benchmark log took before and after a run on a real GPU server, judged as
one window as the agent meets them (tests/helpers/real_windows.judged_pair), and the reading compared with the
one an expert gives from the same pair and the author's account of the run.

Every window found so far is healthy: nothing published whole shows a V1 server at its KV wall (see SOURCES.md,
"Not found"). A window the product misreads today is marked xfail(strict=True) with what it gets wrong; none is
at present."""

import pytest

from tests.helpers.real_windows import gpu_capture, judged_pair

SEED = "vllm_0.11.2_2xa100_seed_oss_36b"


def states(result) -> dict[str, str]:
    return {s.stage: s.state for s in result.stages}


# (before file or None, after file, gap in seconds (SOURCES.md says how each was derived), engine kind,
#  expected verdict, expected root stage)
WINDOWS = [
    pytest.param(f"{SEED}_c1_c2_c4_before.txt", f"{SEED}_c8_c16_before.txt", 963.0, "vllm", "ok", None,
                 id="seed36b-2xa100-concurrency-1-2-4"),
    pytest.param(f"{SEED}_c8_c16_before.txt", f"{SEED}_c8_c16_after.txt", 1159.0, "vllm", "ok", None,
                 id="seed36b-2xa100-concurrency-8-16"),
    pytest.param(f"{SEED}_8k_request_before.txt", f"{SEED}_8k_request_after.txt", 1485.0, "vllm", "ok", None,
                 id="seed36b-2xa100-one-8k-prompt-cold-prefix"),
    pytest.param(f"{SEED}_64k_request_before.txt", f"{SEED}_64k_request_after.txt", 40.0, "vllm", "ok", None,
                 id="seed36b-2xa100-one-56k-prompt"),
    pytest.param(f"{SEED}_repeat_prefix_before.txt", f"{SEED}_repeat_prefix_after.txt", 26.0, "vllm", "ok", None,
                 id="seed36b-2xa100-repeated-long-prompts-prefix-hits"),
    pytest.param(None, f"{SEED}_idle_head.txt", 0.0, "vllm", "ok", None, id="seed36b-2xa100-idle-after-start"),
]

EXIT_CODES = {"ok": 0, "warn": 1, "firing": 2, "unknown": 3}


@pytest.mark.parametrize("before, after, gap_s, kind, verdict, root", WINDOWS)
def test_a_real_gpu_window_reads_as_an_expert_reads_it(before, after, gap_s, kind, verdict, root):
    result, frame = judged_pair(gpu_capture(before) if before else None, gpu_capture(after), gap_s, kind)
    assert result.verdict == verdict and result.root_stage == root, (states(result), result.unavailable)
    assert result.exit_code == EXIT_CODES[verdict]
    assert result.engine.startswith("vLLM V1 (0.11+ names)") and frame.engine.engine.generation == result.engine
    if verdict == "firing":     # the lever an expert names: a flag and a number
        texts = [r.text for r in result.stage(root).recommendations]
        assert any("--" in t and any(c.isdigit() for c in t) for t in texts), texts
    if verdict == "ok":
        assert set(states(result).values()) == {"ok"}, states(result)


def test_the_window_is_read_against_the_before_scrape():
    """The 56K-token prompt's pair, 40 s apart: every later tick's window still starts at `before` (the last,
    5 s after `after`, spans 45 s), so the request between the scrapes is inside it."""
    result, frame = judged_pair(gpu_capture(f"{SEED}_64k_request_before.txt"),
                                gpu_capture(f"{SEED}_64k_request_after.txt"), 40.0, "vllm")
    assert frame.engine.window.span_s == pytest.approx(45.0)
