"""One latency summary (engine_hooks/records/stats.py) behind the lab's, the load test's and the TUI's figures."""

from stagelens.engine_hooks.records.stats import latency_summary
from stagelens.lab.summary import summarize
from stagelens.loadtest.stats import Sample, window_figures


def test_the_summary_names_each_series_percentiles_in_the_order_given():
    got = latency_summary(ttft=[0.1, 0.2, 0.3], latency=[])
    assert list(got) == ["ttft_p50_s", "ttft_p99_s", "latency_p50_s", "latency_p99_s"]
    assert got["ttft_p50_s"] == 0.2 and got["latency_p50_s"] is None and got["latency_p99_s"] is None


def test_the_load_test_window_keeps_its_keys_and_figures():
    samples = [Sample(arrival=i, ttft=0.01 * (i + 1), latency=0.1 * (i + 1)) for i in range(5)]
    samples.append(Sample(arrival=5, ttft=None, latency=None, ok=False))
    got = window_figures(samples)
    assert list(got) == ["requests", "requests_failed", "latency_p50_s", "latency_p99_s", "ttft_p50_s", "ttft_p99_s"]
    assert got["requests"] == 5 and got["requests_failed"] == 1
    assert got["latency_p50_s"] == 0.30000000000000004 and got["ttft_p50_s"] == 0.03


def test_a_lab_run_without_finished_requests_has_no_percentiles():
    got = summarize([], elapsed=1.0, window_s=1.0, window_tokens=0)
    assert [k for k in got if k.endswith("_p50_s") or k.endswith("_p99_s")] == [
        "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "latency_p50_s", "latency_p99_s"]
    assert all(got[k] is None for k in ("ttft_p50_s", "tpot_p99_s", "latency_p99_s"))
