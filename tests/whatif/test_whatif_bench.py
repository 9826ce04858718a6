"""bench/whatif.py's bookkeeping, without running the lab: each prediction's error beside its twins' disagreement
(the noise floor), the cases predicted outside the fitted range marked and their medians apart, and `--keep`
reusing a recording of the same run only."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "whatif.py"


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH.parent))        # the script imports its neighbour bench/_report.py
        spec = importlib.util.spec_from_file_location("bench_whatif", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def _row(bench, case, measured, predicted, twin, outside=False, fidelity=False):
    figures = {"outside_fitted_range": {"extrapolated": outside}}
    truth, guess = {}, dict(figures)
    for key in bench.COMPARED:
        truth[key], guess[key] = measured, predicted
    twins = {key: twin for key in bench.COMPARED}
    return bench.compare(case, guess, truth, twins) | ({"fidelity": True} if fidelity else {})


def test_the_summary_gives_the_twins_floor_beside_the_error_and_the_medians_within_range(bench):
    rows = [_row(bench, "s: A from A (fidelity)", 1.0, 1.02, 0.3, fidelity=True),
            _row(bench, "s: one", 1.0, 1.1, 0.2),
            _row(bench, "s: two", 1.0, 1.3, -0.4),
            _row(bench, "s: three", 1.0, 3.0, 0.1, outside=True)]
    figures = bench.summary(rows, [])
    assert figures["cases"] == 3 and figures["cases_outside_fitted_range"] == 1
    assert figures["median_abs_error_ttft_p99"] == pytest.approx(0.3)
    assert figures["twins_median_abs_difference_ttft_p99"] == pytest.approx(0.2)
    assert figures["within_range_median_abs_error_ttft_p99"] == pytest.approx(0.2)
    assert figures["outside_range_median_abs_error_ttft_p99"] == pytest.approx(2.0)
    assert figures["fidelity_median_abs_error_ttft_p50"] == pytest.approx(0.02)
    assert figures["fidelity_twins_median_abs_difference_ttft_p50"] == pytest.approx(0.3)
    lines = bench.table(rows).splitlines()
    assert lines[-1].startswith("s: three *") and "+200%" in lines[-1] and "+10%" in lines[-1]
    assert not any(line.startswith("s: two *") for line in lines)


def test_the_markdown_table_has_own_cost_columns_only_where_a_case_was_predicted_from_its_own_steps(bench):
    through_spans = [_row(bench, "s: A from A's spans (fidelity)", 1.0, 1.02, 0.3, fidelity=True),
                     _row(bench, "s: one (from spans)", 2.0, 3.0, 0.1, outside=True)]
    with_own = through_spans + [bench.compare("s: two", {"ttft_p99_s": 1.5}, {"ttft_p99_s": 1.0}, {},
                                              own={"ttft_p99_s": 0.9})]
    spans_lines, own_lines = bench.markdown_table(through_spans).splitlines(), \
        bench.markdown_table(with_own).splitlines()
    assert "own cost" not in spans_lines[0] and own_lines[0].count("own cost") == len(bench.COMPARED)
    assert all(line.count("|") == spans_lines[0].count("|") for line in spans_lines)
    assert all(line.count("|") == own_lines[0].count("|") for line in own_lines)
    assert spans_lines[-1].startswith("| s: one (from spans) * | 2 / 3 | +50% | +10% |")
    assert "| 1 / 1.5 | +50% | - | -10% |" in own_lines[-1]


def test_keep_reuses_a_recording_of_the_same_run_and_only_of_it(bench, tmp_path, monkeypatch):
    runs = []

    def fake_record(path, scenario, duration, seed, changes=None, rate_scale=1.0, outside=False):
        runs.append((scenario, changes, rate_scale))
        Path(path).write_text("{}\n")
        return "lab result"

    monkeypatch.setattr(bench, "record", fake_record)
    log = [].append
    first, result = bench.recorded(tmp_path, "healthy", 15, 1, log, "B", {"max_num_seqs": 2})
    assert result == "lab result" and first.exists()
    again, result = bench.recorded(tmp_path, "healthy", 15, 1, log, "B", {"max_num_seqs": 2})
    assert (again, result) == (first, None) and len(runs) == 1
    twin, _ = bench.recorded(tmp_path, "healthy", 15, 1, log, "B", {"max_num_seqs": 2}, twin=1)
    other, _ = bench.recorded(tmp_path, "healthy", 15, 1, log, "B", {"max_num_seqs": 4})
    longer, _ = bench.recorded(tmp_path, "healthy", 20, 1, log, "B", {"max_num_seqs": 2})
    assert len({first, twin, other, longer}) == 4 and len(runs) == 4


def test_a_run_read_through_the_vllm_face_is_reused_with_the_timelines_its_spans_gave(bench, tmp_path,
                                                                                     monkeypatch):
    from stagelens.engine_hooks.records.timeline import RequestTimeline

    runs = []

    def fake_record(path, scenario, duration, seed, changes=None, rate_scale=1.0, outside=False):
        runs.append(outside)
        Path(path).write_text("{}\n")
        return SimpleNamespace(outside_timelines=[RequestTimeline("r1", "m", 12, 3, arrival=5.0, finished=6.0)])

    monkeypatch.setattr(bench, "record", fake_record)
    log = [].append
    first, result = bench.recorded(tmp_path, "healthy", 15, 1, log, "A", outside=True)
    again, reused = bench.recorded(tmp_path, "healthy", 15, 1, log, "A", outside=True)
    assert (again, reused) == (first, None) and runs == [True]
    assert [t.to_dict() for t in bench.outside_timelines(again)] == [t.to_dict() for t in result.outside_timelines]
    bench.spans_path(first).unlink()        # kept by an earlier bench that did not keep the spans: run again
    bench.recorded(tmp_path, "healthy", 15, 1, log, "A", outside=True)
    assert runs == [True, True] and bench.outside_timelines(first)[0].prompt_tokens == 12


def test_a_run_cut_short_is_not_reused(bench, tmp_path, monkeypatch):
    def broken_record(path, *args, **kwargs):
        Path(path).write_text("{}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "record", broken_record)
    with pytest.raises(KeyboardInterrupt):
        bench.recorded(tmp_path, "healthy", 15, 1, [].append, "A")
    assert not bench.recording_path(tmp_path, "healthy", 15, 1).exists()


def test_a_pick_is_right_when_measured_best_and_within_noise_only_when_the_twins_overlap(bench):
    fast, slow = bench.Candidate("fast", 0.2, 1.0, 1.1), bench.Candidate("slow", 0.1, 1.3, 1.05)
    choice = bench.best_of_three("s", [fast, slow, bench.Candidate("third", 0.3, 2.0, 2.0)])
    assert (choice["picked"], choice["best"], choice["right"]) == ("slow", "fast", False)
    assert choice["right_within_noise"] and choice["picked_twins_p99_s"] == [1.05, 1.3]
    apart = bench.best_of_three("s", [fast, bench.Candidate("slow", 0.1, 1.3, 1.2), bench.Candidate("t", 1, 2, 2)])
    assert not apart["right"] and not apart["right_within_noise"]
    assert bench.best_of_three("s", [fast, slow, bench.Candidate("unmeasured", 0.3, None, None)]) is None
    figures = bench.summary([], [choice, apart])
    assert figures["best_of_three_right_share"] == 0 and figures["best_of_three_right_within_noise_share"] == 0.5


def test_a_recommended_fix_equal_to_another_candidate_is_refused_not_counted_twice(bench):
    assert bench.three_candidates("cold-load", lambda: {"max_resident_models": 4})[0] == {"max_resident_models": 4}
    with pytest.raises(SystemExit, match="repeat one change"):
        bench.three_candidates("cold-load", lambda: {"max_resident_models": 2})
    assert len(bench.three_candidates("healthy", lambda: 1 / 0)) == 3      # no fix asked of a healthy run


def test_a_pick_predicted_alike_another_makes_no_choice_and_stays_out_of_the_shares(bench):
    right = bench.best_of_three("a", [bench.Candidate("best", 0.1, 1.0, 1.0), bench.Candidate("x", 0.2, 2.0, 2.0),
                                      bench.Candidate("y", 0.3, 3.0, 3.0)])
    # the same schedule priced alike: the measured order of the two is the machine's, not the change's
    tied = bench.best_of_three("b", [bench.Candidate("paged", 0.2000, 1.3, 1.3),
                                     bench.Candidate("more memory", 0.2001, 1.0, 1.0),
                                     bench.Candidate("cap", 0.5, 2.0, 2.0)])
    assert right["decided"] and not tied["decided"] and tied["alike"] == ["more memory"]
    figures = bench.summary([], [right, tied])
    assert (figures["best_of_three_decided"], figures["best_of_three_alike"]) == (1, 1)
    assert figures["best_of_three_right_share"] == 1.0
    assert bench.summary([], [tied])["best_of_three_right_share"] is None


def test_the_steps_bench_groups_the_recordings_by_the_scenario_in_their_names(bench, tmp_path):
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCH.parent))
        spec = importlib.util.spec_from_file_location("bench_whatif_steps", BENCH.parent / "whatif_steps.py")
        steps_bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(steps_bench)
    for scenario in ("kv-fragmentation", "healthy"):
        path = bench.recording_path(tmp_path, scenario, 30, 2, {"max_num_seqs": 3}, 1.5, twin=1)
        assert steps_bench.scenario_of(path) == scenario
