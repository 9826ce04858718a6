"""Recommendations name the flags of the engine they are for: the bundled engine's as explain.py writes them,
vLLM's and SGLang's spelling on engines read from outside."""

from stagelens.diagnosis.explain import explain
from stagelens.diagnosis.model import Evidence, Recommendation
from stagelens.diagnosis.recommendation_flags import FLAGS, for_engine
from stagelens.engine_hooks.records.snapshot import (
    Clock,
    ColdPathFigures,
    Counters,
    EngineInfo,
    EngineSnapshot,
    KvFigures,
    SchedulerFigures,
    Window,
)
from stagelens.frame import Frame


def _frame(source: str) -> Frame:
    engine = EngineSnapshot(
        clock=Clock(monotonic=1.0, wall=1.0), engine=EngineInfo(source=source, block_size=16),
        window=Window(span_s=10.0, kv=KvFigures(), scheduler=SchedulerFigures(head_of_line_share=0.8),
                      cold_path=ColdPathFigures()), counters=Counters())
    return Frame(1.0, 1.0, "node", engine=engine)


HOL = Evidence("head_of_line_blocking", "head-of-line blocking", 0.8, 0.3, 0.5, "ratio", "10s", "firing")


def test_the_bundled_engine_keeps_its_own_flags_and_settings():
    _, recs = explain("scheduler", "firing", [HOL], _frame("hooks"))
    chunked = next(r for r in recs if r.text.startswith("--enable-chunked-prefill"))
    assert chunked.flags == {"enable_chunked_prefill": True, "max_num_batched_tokens": 512,
                             "long_prefill_token_threshold": 128}


def test_vllm_is_told_its_own_flags_with_a_gpu_budget():
    _, recs = explain("scheduler", "firing", [HOL], _frame("vllm"))
    texts = [r.text for r in recs]
    assert any(t.startswith("--enable-chunked-prefill --max-num-batched-tokens 8192 "
                            "--long-prefill-token-threshold 2048: split long prefills") for t in texts), texts
    assert any(t.startswith("--scheduling-policy priority") for t in texts), texts
    assert all(not r.flags for r in recs)        # the bundled engine's settings mean nothing to vLLM
    assert not any("--policy short-first" in t for t in texts)


def test_sglang_is_told_its_own_flags_and_where_it_has_none():
    _, recs = explain("scheduler", "firing", [HOL], _frame("sglang"))
    texts = [r.text for r in recs]
    assert any(t.startswith("--chunked-prefill-size 8192: split long prefills") for t in texts), texts
    assert any(t.startswith("sglang has no equivalent of --policy short-first") for t in texts), texts


def test_inline_flags_and_knobs_an_engine_lacks():
    recs = [Recommendation("--max-num-seqs 6: admit fewer (or give the cache more memory with --kv-cache-memory)",
                           {"max_num_seqs": 6}),
            Recommendation("--allocator paged: reserve KV block by block", {"allocator": "paged"})]
    vllm = [r.text for r in for_engine(recs, "vllm")]
    assert vllm[0] == "--max-num-seqs 6: admit fewer (or give the cache more memory with --gpu-memory-utilization)"
    assert vllm[1].startswith("KV slots in use far exceed")
    sglang = [r.text for r in for_engine(recs, "sglang")]
    assert sglang[0].startswith("--max-running-requests 6: admit fewer") and "--mem-fraction-static" in sglang[0]
    assert for_engine(recs, "hooks") is recs and for_engine(recs, None) is recs


def test_every_setting_explain_recommends_is_mapped_for_both_engines():
    settings = {"enable_chunked_prefill", "max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs",
                "block_size", "policy", "num_preload_models", "max_resident_models", "allocator"}
    for engine in ("vllm", "sglang"):
        assert set(FLAGS[engine]) == settings


def test_a_stage_ok_on_node_signals_alone_says_what_it_could_not_see():
    node = Evidence("pcie_backpressure", "PCIe backpressure", 0.1, 0.3, 0.5, "ratio", "10s", "ok",
                    provenance="measured")
    unseen = Evidence("step_time_inflation", "step-time inflation", None, 1.2, 1.5, "ratio", "10s", "unknown",
                      provenance="not observable")
    sentence, recs = explain("cold_path", "ok", [node, unseen], _frame("vllm"))
    assert sentence.startswith("cold path healthy on the node's signals only (PCIe backpressure 0.10)")
    assert "step_time_inflation not observable on this engine" in sentence and recs == []
    # with an engine signal judged, or on the hooks, OK is plain
    seen = Evidence("step_time_inflation", "step-time inflation", 1.0, 1.2, 1.5, "ratio", "10s", "ok",
                    provenance="measured")
    assert explain("cold_path", "ok", [node, seen], _frame("hooks"))[0].startswith("cold path healthy: ")
