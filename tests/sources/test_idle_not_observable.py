"""A signal an engine read from outside cannot give reads "not observable" whether the engine is idle or busy:
only what the engine publishes may read ok because the situation it judges did not arise. The stages are still
judged, from what the engine does give."""

import pytest

from stagelens.diagnosis.evaluate import diagnose
from tests.helpers.frame_builders import engine_snapshot, frame
from tests.helpers.real_captures import Serving, capture, judged

NEVER_FROM_VLLM = ("kv_access_efficiency", "effective_bandwidth_ratio", "bandwidth_swing_cv", "compute_utilisation",
                   "token_budget_use", "head_of_line_blocking")


@pytest.fixture(params=["vllm_v1_0.10_idle_qwen3_4b.txt", "vllm_v0_idle_qwen25_coder_1_5b.txt",
                        "vllm_v1_0.28_hybrid_idle_qwen38_27b.txt"])
def idle_vllm(request):
    served = Serving(capture(request.param))
    yield served
    served.server.close()


def rows(result) -> dict:
    return {e.signal: e for s in result.stages for e in s.evidence}


def test_an_idle_vllm_never_reads_ok_on_what_it_cannot_give(idle_vllm):
    result, _ = judged(idle_vllm, "vllm")
    evidence = rows(result)
    for signal in NEVER_FROM_VLLM:      # no spans reach the agent here: head-of-line blocking is not told either
        assert (evidence[signal].state, evidence[signal].provenance) == ("unknown", "not observable"), signal
    # what vLLM publishes may still say the situation did not arise (no request seen waiting or running, the
    # excerpts without the request histograms included); every stage judged, exit 0
    wait = evidence["scheduler_wait_p99"]
    assert (wait.state, wait.provenance, wait.applicable) == ("ok", "inferred", False)
    assert result.verdict == "ok" and result.exit_code == 0 and {s.state for s in result.stages} == {"ok"}


def idle_outside(busy_ratio=None, spans: int = 0) -> list:
    """Frames of an idle engine read from outside: nothing ran, finished or waited in the window."""
    snap = engine_snapshot(kv={"access_efficiency": None, "effective_bandwidth_ratio": None,
                               "bandwidth_swing_cv": None, "fragmentation_ratio": None},
                           scheduler={"steps": 0, "requests_finished": 0, "running": 0, "decided_wait_p99_s": None,
                                      "busy_ratio": busy_ratio, "busy_ratio_while_waiting": None,
                                      "budget_use_while_waiting": None, "head_of_line_share": None},
                           source="sglang", device=None)
    snap["intake"] = {"traces.llm_request_spans": spans}
    return [frame(i, snap) for i in range(4)]


def test_what_an_engine_gives_idle_reads_ok_and_what_it_does_not_reads_not_observable():
    given = rows(diagnose(idle_outside(busy_ratio=0.0, spans=12)))   # SGLang's GPU execution; spans received
    assert (given["compute_utilisation"].state, given["compute_utilisation"].provenance) == ("ok", "inferred")
    assert (given["head_of_line_blocking"].state, given["head_of_line_blocking"].provenance) == ("ok", "inferred")
    assert given["token_budget_use"].state == "unknown"                  # never published from outside
    not_given = rows(diagnose(idle_outside()))
    for signal in ("compute_utilisation", "head_of_line_blocking", "token_budget_use", "kv_access_efficiency"):
        assert (not_given[signal].state, not_given[signal].provenance) == ("unknown", "not observable"), signal
