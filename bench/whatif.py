"""What-if's accuracy against the lab: record a run under A, predict B from A's recording alone, run B on the
same arrivals (same seed) and compare.

    python bench/whatif.py [--duration 15] [--only SCENARIO,...] [--through hooks|vllm] [--json | --markdown]
                           [--keep DIR]

`--through vllm` predicts from A's `llm_request` spans alone, as from a vLLM server read from outside (the
bundled engine's vLLM face): the step cost fitted on the spans' prefill and decode intervals
(agent/whatif/spans.py); with `--keep` the B runs of an earlier `--through hooks` run in the same directory
are reused, and so is A read through the vLLM face, its spans' timelines kept beside its recording.

The matrix: each scenario's recommended fix and two other flag changes (the three candidates of which the
prediction must pick the best by P99 TTFT), healthy under 1.5x, 2x, 3x and 4x its rate and hol-blocking under
2x (the same requests arriving faster: the lab's seeded Poisson draws scaled), and the cold-load scenario's
residency changes. Each A is also predicted from itself (the fidelity check). B's figures are measured from its
own recording, the same way as the prediction's (agent/whatif/figures.py). Prints the error table per case,
the medians and the choices, beside their targets. Never pass/fail. A choice is `right` when the candidate
picked is the one measured best, `within noise` when it is not but the two cannot be told apart here (each run
twice: their measured P99 ranges overlap); the strict share is the one held to the target. A set whose lowest
predicted P99 is alike another's (agent/whatif/figures.py ALIKE: the same schedule, the change binding nowhere
at that load) makes no choice: it is reported apart and left out of the shares, and each scenario's candidates
are chosen, on A's predictions alone, so that none does.

Two more columns separate the simulator's error from the machine's. `twins`: every run (each A and each B) is
run twice on the same arrivals and seed, and the twins' disagreement (the second against the first, which is
the one compared) stands beside the prediction's error: the noise floor, as a prediction cannot be judged
finer than the machine repeats itself. `own cost` predicts B with the step cost fitted on B's own steps (what
the scheduling and KV simulation alone gets wrong). A case whose prediction lies outside the range of batches
the cost was fitted on is marked `*`, and the medians are given again over the cases within range.

One short run warms the machine before the matrix (the first run of a process pays for loading torch and the
model). `--keep DIR` keeps the recordings there, named by what was run (scenario, flags, rate, duration,
seed, twin), and a later invocation with the same DIR reuses those it finds instead of running them again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _whatif_beyond as beyond  # noqa: E402  (bench/ is the script's own directory)
from _report import emit  # noqa: E402

from stagelens.bundle import BundleWriter  # noqa: E402
from stagelens.engine_hooks.records.timeline import RequestTimeline  # noqa: E402
from stagelens.lab.scenario_run import run_lab  # noqa: E402
from stagelens.lab.scenarios import SCENARIOS  # noqa: E402
from stagelens.lab.settings import build_configs  # noqa: E402
from stagelens.whatif.figures import alike, relative_error, serving_figures  # noqa: E402
from stagelens.whatif.predict_all import what_if  # noqa: E402
from stagelens.whatif.recommended import recommended_changes  # noqa: E402
from stagelens.whatif.settings import as_set_flags  # noqa: E402
from stagelens.whatif.spans import fit_spans  # noqa: E402
from stagelens.whatif.workload import Observed, from_bundle, from_timelines  # noqa: E402

NVML_SNAPSHOT = "tests/fixtures/nvml/dgx_a100.json"   # a node to probe on any machine: only the engine matters
RECOMMENDED = "recommended"
CANDIDATES = {    # scenario -> its three candidates (field -> value, or the diagnosis's own fix)
    "healthy": [{"max_num_seqs": 2}, {"max_num_batched_tokens": 128}, {"policy": "short-first"}],
    # its contiguous cache holds four sequences and the load never asks for more: a bigger cache or a cap of four
    # would be today's schedule again (predicted alike the paged allocator, measured apart by run-to-run drift)
    "kv-fragmentation": [RECOMMENDED, {"kv_cache_memory": "40MiB"}, {"max_num_seqs": 3}],
    "hol-blocking": [RECOMMENDED, {"enable_chunked_prefill": True}, {"policy": "short-first"}],
    "cold-load": [RECOMMENDED, {"max_resident_models": 2}, {"max_resident_models": 3}],
    # 96MiB of contiguous cache holds as many sequences as the load brings, as the paged allocator does
    "chain": [RECOMMENDED, {"kv_cache_memory": "64MiB"}, {"max_num_seqs": 4}],
}
RATE_SCALES = {"healthy": (1.5, 2.0, 3.0, 4.0), "hol-blocking": (2.0,)}
COMPARED = ("ttft_p50_s", "ttft_p99_s", "throughput_tokens_per_s")
MARKDOWN_HEADINGS = {"ttft_p50_s": ("P50 TTFT", "s"), "ttft_p99_s": ("P99 TTFT", "s"),
                     "throughput_tokens_per_s": ("throughput", "tok/s")}
WARM_UP_S = 3.0           # arrivals of the warm-up run before the matrix
OUTSIDE_MARK = "*"        # a case whose prediction lies outside the fitted range
LOAD_AVERAGES: list[float] = []     # the machine's 1-minute load average as each run started
TARGETS = {"median_abs_error_ttft_p50": 0.10, "median_abs_error_ttft_p99": 0.20,
           "median_abs_error_throughput": 0.10, "fidelity_median_abs_error_ttft_p50": 0.05,
           "best_of_three_right_share": 0.90}
TARGETS_THROUGH_VLLM = {"median_abs_error_ttft_p99": 0.25}   # spans alone: no steps to fit on, a looser target


def record(path: Path, scenario: str, duration: float, seed: int, changes: dict | None = None,
           rate_scale: float = 1.0, outside: bool = False):
    """One lab run of `scenario` with `changes`, its arrivals `rate_scale` times as fast, recorded to `path`
    (with `outside`, also read through its vLLM interfaces); its LabResult."""
    defaults = SCENARIOS[scenario].defaults if scenario in SCENARIOS else beyond.BASES[scenario]
    flags = {"duration": duration / rate_scale, "seed": seed, **(changes or {})}
    if rate_scale != 1:
        flags["rate"] = defaults["rate"] * rate_scale
    engine_cfg, workload_cfg = build_configs(flags, defaults)
    writer = BundleWriter.open(str(path), source=f"bench whatif {scenario}")
    try:
        return run_lab(engine_cfg, workload_cfg, interval=1.0, nvml_snapshot=NVML_SNAPSHOT,
                       listeners=(writer.on_frame,), on_start=writer.follow, outside=outside)
    finally:
        writer.close()


def recording_path(workdir: Path, scenario: str, duration: float, seed: int, changes: dict | None = None,
                   rate_scale: float = 1.0, outside: bool = False, twin: int = 0) -> Path:
    """Where the run of these arguments is kept: named by all of them, so that `--keep` reuses only the same run."""
    key = json.dumps([scenario, duration, seed, changes or {}, rate_scale, outside], sort_keys=True, default=str)
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return workdir / f"{scenario}-{digest}-{'outside' if outside else 'hooks'}-{twin}.jsonl"


def recorded(workdir: Path, scenario: str, duration: float, seed: int, log, label: str, changes: dict | None = None,
             rate_scale: float = 1.0, outside: bool = False, twin: int = 0) -> tuple[Path, object]:
    """(the recording of this run, its LabResult, or None when an earlier invocation's recording is reused).
    A run read through its vLLM face (`outside`) keeps the timelines its spans gave beside the bundle, which
    does not hold them (`spans_path`): a recording without them is not reused."""
    path = recording_path(workdir, scenario, duration, seed, changes, rate_scale, outside, twin)
    if path.exists() and path.stat().st_size and (not outside or spans_path(path).exists()):
        log(f"{scenario}: {label} (twin {twin}) reused from {path}")
        return path, None
    LOAD_AVERAGES.append(os.getloadavg()[0])
    log(f"{scenario}: {label} (twin {twin}), load average {LOAD_AVERAGES[-1]:.1f}")
    partial = path.with_suffix(".partial")
    result = record(partial, scenario, duration, seed, changes, rate_scale, outside)
    if outside:
        spans_path(path).write_text(json.dumps([t.to_dict() for t in result.outside_timelines]))
    partial.replace(path)       # only a run that completed is kept for reuse
    return path, result


def spans_path(recording: Path) -> Path:
    return recording.with_suffix(".spans.json")


def outside_timelines(recording: Path) -> list[RequestTimeline]:
    """The request timelines the spans of a run read through its vLLM face gave (kept by `recorded`)."""
    return [RequestTimeline.from_dict(t) for t in json.loads(spans_path(recording).read_text())]


def twin_difference(workdir: Path, scenario: str, duration: float, seed: int, log, label: str, first: dict,
                    changes: dict | None = None, rate_scale: float = 1.0) -> dict:
    """The second twin's figures against the first's (relative), per compared key."""
    path, _ = recorded(workdir, scenario, duration, seed, log, label, changes, rate_scale, twin=1)
    return _twin_gap(first, measured(path))


def measured(path: Path) -> dict:
    return _figures(from_bundle(str(path)))


def _figures(observed: Observed) -> dict:
    return serving_figures(observed.requests, observed.window)


def compare(case: str, predicted: dict, truth: dict, twins: dict, own: dict | None = None) -> dict:
    """One case's row; `predicted`: a prediction's JSON (Prediction.to_dict: its figures and whether it lies
    outside the fitted range)."""
    outside = bool((predicted.get("outside_fitted_range") or {}).get("extrapolated"))
    row = {"case": case, "outside_fitted_range": outside}
    for key in COMPARED:
        row[key] = {"measured": truth.get(key), "predicted": predicted.get(key),
                    "error": relative_error(predicted.get(key), truth.get(key)), "twins": twins.get(key),
                    "own_cost_error": relative_error((own or {}).get(key), truth.get(key))}
    return row


def measured_with_own_cost(path: Path) -> tuple[dict, dict]:
    """(B's figures as measured, B predicted with the step cost fitted on B's own steps: the simulation's
    error alone), its recording read once."""
    observed = from_bundle(str(path))
    return _figures(observed), what_if(observed, []).today.figures


def run_scenario(scenario: str, duration: float, seed: int, workdir: Path, log) -> tuple[list[dict], dict | None]:
    """(the rows of its cases, the best-of-three choice) for one scenario."""
    a_path, _ = recorded(workdir, scenario, duration, seed, log, "A")
    observed = from_bundle(str(a_path))
    candidates = three_candidates(scenario, lambda: recommended_changes(observed))
    result = what_if(observed, candidates)
    twins = twin_difference(workdir, scenario, duration, seed, log, "A", result.measured)
    rows = [compare(f"{scenario}: A from A (fidelity)", result.today.to_dict(), result.measured, twins)
            | {"fidelity": True}]
    choices = []
    for changes, prediction in result.candidates:
        label = f"B {as_set_flags(changes)}"
        b_path, _ = recorded(workdir, scenario, duration, seed, log, label, changes)
        truth, own = measured_with_own_cost(b_path)
        twins = twin_difference(workdir, scenario, duration, seed, log, label, truth, changes)
        rows.append(compare(f"{scenario}: {_flags(changes)}", prediction.to_dict(), truth, twins, own))
        choices.append(Candidate(_flags(changes), prediction.figures["ttft_p99_s"], truth["ttft_p99_s"],
                                 _twin_value(truth, twins, "ttft_p99_s")))
    for scale in RATE_SCALES.get(scenario, ()):
        label = f"rate x{scale:g}"
        b_path, _ = recorded(workdir, scenario, duration, seed, log, label, rate_scale=scale)
        truth, own = measured_with_own_cost(b_path)
        twins = twin_difference(workdir, scenario, duration, seed, log, label, truth, rate_scale=scale)
        scaled = what_if(observed, [], result.today.settings, result.cost, scale_rate=scale)
        rows.append(compare(f"{scenario}: rate x{scale:g}", scaled.today.to_dict(), truth, twins, own))
    return rows, best_of_three(scenario, choices)


class Candidate(NamedTuple):
    flags: str
    predicted_p99_s: float | None
    measured_p99_s: float | None
    twin_p99_s: float | None        # the same run again: what the machine lets the measurement repeat to

    def measured_range(self) -> tuple[float, float]:
        both = [v for v in (self.measured_p99_s, self.twin_p99_s) if v is not None]
        return min(both), max(both)


def best_of_three(scenario: str, choices: list[Candidate]) -> dict | None:
    """The candidate the prediction picks (lowest predicted P99 TTFT) against the one measured best. `right`:
    the same one; `right_within_noise`: or the two cannot be told apart on this machine, their twins' measured
    ranges overlapping (neither is measurably better than the other). `decided`: no other candidate is predicted
    alike the one picked (else the prediction made no choice, and `alike` names those it could not tell apart)."""
    if len(choices) != 3 or any(c.predicted_p99_s is None or c.measured_p99_s is None for c in choices):
        return None
    picked = min(choices, key=lambda c: c.predicted_p99_s)
    best = min(choices, key=lambda c: c.measured_p99_s)
    same = [c.flags for c in choices if c is not picked and alike(c.predicted_p99_s, picked.predicted_p99_s)]
    (picked_low, picked_high), (best_low, best_high) = picked.measured_range(), best.measured_range()
    return {"scenario": scenario, "picked": picked.flags, "best": best.flags, "right": picked is best,
            "decided": not same, "alike": same,
            "right_within_noise": picked is best or (picked_low <= best_high and best_low <= picked_high),
            "picked_measured_p99_s": picked.measured_p99_s, "best_measured_p99_s": best.measured_p99_s,
            "picked_twins_p99_s": [picked_low, picked_high], "best_twins_p99_s": [best_low, best_high]}


def three_candidates(scenario: str, recommended) -> list[dict]:
    """The scenario's three candidates, the diagnosis's own fix (`recommended()`) in place of RECOMMENDED; three
    distinct changes, or a best-of-three that is a best-of-two would pass for one."""
    candidates = [dict(recommended()) if c == RECOMMENDED else dict(c) for c in CANDIDATES[scenario]]
    if len({json.dumps(c, sort_keys=True) for c in candidates}) != len(candidates):
        raise SystemExit(f"bench/whatif.py: {scenario}'s candidates repeat one change ({candidates}); "
                         "the recommended fix is one of the others: give the scenario another candidate")
    return candidates


def _twin_value(first: dict, twins: dict, key: str) -> float | None:
    """The second twin's figure, from the first's and their relative difference."""
    if first.get(key) is None or twins.get(key) is None:
        return None
    return first[key] * (1 + twins[key])


def run_scenario_outside(scenario: str, duration: float, seed: int, workdir: Path, log) -> tuple[list[dict], None]:
    """A read through its vLLM interfaces only (spans: arrivals, lengths, prefill and decode intervals; no steps),
    its settings as the operator knows them; each B measured by the hooks (the same recordings as `--through
    hooks`, reused with `--keep`)."""
    path, _ = recorded(workdir, scenario, duration, seed, log, "A through vllm", outside=True)
    hooks = from_bundle(str(path))
    spans = outside_timelines(path)
    observed = Observed(f"{path} (spans)", from_timelines(str(path), spans), hooks.engine_config,
                        frames=hooks.frames, timelines=hooks.timelines)
    candidates = three_candidates(scenario, lambda: recommended_changes(hooks))
    result = what_if(observed, candidates, cost=fit_spans(spans))
    truth = measured(path)
    twins = twin_difference(workdir, scenario, duration, seed, log, "A", truth)
    rows = [compare(f"{scenario}: A from A's spans (fidelity)", result.today.to_dict(), truth, twins)
            | {"fidelity": True}]
    for changes, prediction in result.candidates:
        label = f"B {as_set_flags(changes)}"
        b_path, _ = recorded(workdir, scenario, duration, seed, log, label, changes)
        truth = measured(b_path)
        twins = twin_difference(workdir, scenario, duration, seed, log, label, truth, changes)
        rows.append(compare(f"{scenario}: {_flags(changes)} (from spans)", prediction.to_dict(), truth, twins))
    return rows, None


def run_beyond(name: str, duration: float, seed: int, workdir: Path, log) -> tuple[list[dict], None]:
    """A's own configuration (bench/_whatif_beyond.py), each B far past what A ran: a flag or a faster rate,
    each measured and held to whether its P99 moved as far as measured.

    Runs are interleaved (A and every B, then each one's twin) so that a machine drifting over minutes moves
    A and B alike, and each B's truth is its twins' mean: near capacity, one run of B differs from its twin by
    half, and a prediction of what B does is judged against the best measure of it this machine gives. The
    prediction still comes from A's first run alone, as a user's would; `error_first_run` keeps the error
    against B's first run."""
    # (the run's label in the log, the case's name in the table, its flag change, its rate factor)
    runs = [(f"rate x{c:g}", f"rate x{c:g}", None, c) if isinstance(c, float)
            else (f"B {as_set_flags(c)}", _flags(c), c, 1.0) for c in beyond.CASES[name]]
    paths = {twin: [recorded(workdir, name, duration, seed, log, label, change, scale, twin=twin)[0]
                    for label, _, change, scale in [("A", "A", None, 1.0), *runs]] for twin in (0, 1)}
    observed = from_bundle(str(paths[0][0]))
    changes = [c for c in beyond.CASES[name] if isinstance(c, dict)]
    result = what_if(observed, changes)
    predicted = dict(zip((json.dumps(c, sort_keys=True) for c in changes), (p for _, p in result.candidates),
                         strict=True))
    # each recording read once: A's first run is what was observed, each B's first run gives its own cost too
    b_firsts = [measured_with_own_cost(p) for p in paths[0][1:]]
    firsts = [result.measured, *(figures for figures, _ in b_firsts)]
    truths = [_twin_mean(first, measured(second)) for first, second in zip(firsts, paths[1], strict=True)]
    a_truth, a_twins = truths[0]
    rows = [compare(f"{name}: A from A (fidelity)", result.today.to_dict(), a_truth, a_twins) | {"fidelity": True}]
    for (_, case_name, change, scale), (first, own), (truth, twins) in zip(runs, b_firsts, truths[1:], strict=True):
        figures = (what_if(observed, [], result.today.settings, result.cost, scale_rate=scale).today.to_dict()
                   if change is None else predicted[json.dumps(change, sort_keys=True)].to_dict())
        row = compare(f"{name}: {case_name}", figures, truth, twins, own)
        for key in COMPARED:
            row[key]["error_first_run"] = relative_error(figures.get(key), first.get(key))
        row["direction"] = beyond.direction(a_truth["ttft_p99_s"], truth["ttft_p99_s"],
                                            result.today.figures["ttft_p99_s"], figures["ttft_p99_s"])
        rows.append(row)
    return rows, None


def _twin_mean(first: dict, second: dict) -> tuple[dict, dict]:
    """(the twins' mean of each compared figure, the second's difference from the first)."""
    mean = {key: None if first.get(key) is None or second.get(key) is None
            else (first[key] + second[key]) / 2 for key in COMPARED}
    return mean, _twin_gap(first, second)


def _twin_gap(first: dict, second: dict) -> dict:
    """The second twin's figures against the first's (relative), per compared key."""
    return {key: relative_error(second.get(key), first.get(key)) for key in COMPARED}


def _flags(changes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in as_set_flags(changes).items())


def summary(rows: list[dict], choices: list[dict]) -> dict:
    def median_abs(key: str, kind: str, error: str = "error", outside: bool | None = None) -> float | None:
        """Over the rows of `kind`; with `outside`, only those predicted outside (True) or within (False) range."""
        errors = [abs(r[key][error]) for r in rows if _kind(r) == kind and r[key][error] is not None
                  and (outside is None or r["outside_fitted_range"] == outside)]
        return statistics.median(errors) if errors else None

    cases = [r for r in rows if _kind(r) == "case"]
    out = {"cases": len(cases), "cases_outside_fitted_range": sum(r["outside_fitted_range"] for r in cases)}
    names = (("ttft_p50_s", "ttft_p50"), ("ttft_p99_s", "ttft_p99"), ("throughput_tokens_per_s", "throughput"))
    for key, name in names:
        out[f"median_abs_error_{name}"] = median_abs(key, "case")
        out[f"twins_median_abs_difference_{name}"] = median_abs(key, "case", "twins")
        out[f"within_range_median_abs_error_{name}"] = median_abs(key, "case", outside=False)
        out[f"outside_range_median_abs_error_{name}"] = median_abs(key, "case", outside=True)
        out[f"own_cost_median_abs_error_{name}"] = median_abs(key, "case", "own_cost_error")
        if any("error_first_run" in r[key] for r in cases):
            out[f"first_run_median_abs_error_{name}"] = median_abs(key, "case", "error_first_run")
        out[f"fidelity_median_abs_error_{name}"] = median_abs(key, "fidelity")
        out[f"fidelity_twins_median_abs_difference_{name}"] = median_abs(key, "fidelity", "twins")
    decided = [c for c in choices if c["decided"]]
    out["best_of_three_decided"], out["best_of_three_alike"] = len(decided), len(choices) - len(decided)
    out["best_of_three_right_share"] = sum(c["right"] for c in decided) / len(decided) if decided else None
    out["best_of_three_right_within_noise_share"] = \
        sum(c["right_within_noise"] for c in decided) / len(decided) if decided else None
    if LOAD_AVERAGES:
        out["load_average_1m_mean"] = statistics.fmean(LOAD_AVERAGES)
        out["load_average_1m_max"] = max(LOAD_AVERAGES)
    return out


def _kind(row: dict) -> str:
    return "fidelity" if row.get("fidelity") else "case"


def table(rows: list[dict]) -> str:
    """The error table: `*` marks a case predicted outside the fitted range."""
    names = _case_names(rows)
    width = max(len(n) for n in names)
    columns = "measured predicted  error  twins own-cost"
    head = f"{'case':<{width}}  " + "  ".join(f"{k.removesuffix('_s'):>{len(columns)}}" for k in COMPARED)
    lines = [head, f"{'':<{width}}  " + "  ".join(columns for _ in COMPARED)]
    for name, r in zip(names, rows, strict=True):
        cells = [f"{m:>8} {p:>9} {e:>6} {t:>6} {o:>8}" for m, p, e, t, o in (_cells(r, k) for k in COMPARED)]
        lines.append(f"{name:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def markdown_table(rows: list[dict]) -> str:
    """The error table of the runs in docs/measurements/ (one wide table; there, split per figure); the
    own-cost columns only where some case has them (not through the vLLM face)."""
    own = any(r[k]["own_cost_error"] is not None for r in rows for k in COMPARED)
    head, rule = ["case"], ["---"]
    for key in COMPARED:
        name, unit = MARKDOWN_HEADINGS[key]
        head += [f"{name} measured / predicted ({unit})", "error", "twins"] + (["own cost"] if own else [])
        rule += ["---:"] * (4 if own else 3)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for name, r in zip(_case_names(rows), rows, strict=True):
        cells = [name]
        for measured, predicted, error, twins, own_cost in (_cells(r, k) for k in COMPARED):
            cells += [f"{measured} / {predicted}", error, twins] + ([own_cost] if own else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _case_names(rows: list[dict]) -> list[str]:
    return [r["case"] + (f" {OUTSIDE_MARK}" if r["outside_fitted_range"] else "") for r in rows]


def _cells(row: dict, key: str) -> tuple[str, str, str, str, str]:
    """Measured, predicted, error, twins, own-cost error of one figure of one case, as printed."""
    c = row[key]
    return (_num(c["measured"]), _num(c["predicted"]),
            *(_percent(c[e]) for e in ("error", "twins", "own_cost_error")))


def _percent(value) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _twins(values: list[float]) -> str:
    low, high = values
    return _num(low) if low == high else f"{_num(low)}-{_num(high)}"


def _num(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def through_lab(args, scenarios: list[str], log) -> tuple[list[dict], list[dict]]:
    """The rows and choices of each scenario (or case past the recorded range) run in the lab."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        log("warm-up")
        record(Path(tmp) / "warm-up.jsonl", "healthy", WARM_UP_S, args.seed)
        rows, choices = [], []
        for scenario in scenarios:
            run = (run_beyond if args.beyond else run_scenario_outside if args.through == "vllm"
                   else run_scenario)
            scenario_rows, choice = run(scenario, args.duration, args.seed, workdir, log)
            rows += scenario_rows
            choices += [choice] if choice else []
    return rows, choices


def through_real_vllm(log, keep: str | None) -> list[dict]:
    """bench/_whatif_real_vllm.py's cases as rows (no twins: a vLLM server start costs half a minute)."""
    import _whatif_real_vllm

    rows = []
    for case, predicted, truth in _whatif_real_vllm.run(log=log, keep=keep):
        row = compare(case, predicted, truth, {})
        rows.append(row | {"fidelity": True} if "fidelity" in case else row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=15.0,
                        help="seconds of arrivals of each run (the documented figures take 30: a run of "
                             "15 s at 3 requests/s holds a few dozen requests, whose P99 is the slowest one)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="scenarios, comma-separated")
    parser.add_argument("--keep", help="keep the recordings in this directory, and reuse those already there")
    parser.add_argument("--beyond", action="store_true",
                        help="the cases past the recorded range (bench/_whatif_beyond.py) instead of the scenarios")
    parser.add_argument("--through", choices=("hooks", "vllm", "real-vllm"), default="hooks",
                        help="vllm: predict from A's llm_request spans only, as from an engine read from outside")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--markdown", action="store_true", help="the error table in Markdown (docs/measurements/)")
    args = parser.parse_args()
    scenarios = args.only.split(",") if args.only else list(beyond.CASES if args.beyond else CANDIDATES)
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:6.0f}s] {text}", file=sys.stderr, flush=True)

    if args.through == "real-vllm":
        rows, choices = through_real_vllm(log, args.keep), []
    else:
        rows, choices = through_lab(args, scenarios, log)
    figures = summary(rows, choices)
    targets = (beyond.TARGETS if args.beyond else TARGETS_THROUGH_VLLM if args.through != "hooks" else TARGETS)
    moved = [r["direction"] for r in rows if (r.get("direction") or {}).get("moved")]
    if args.beyond:
        figures["p99_moved_by_3x_measured"] = len(moved)
        figures["p99_moved_by_3x_predicted_so"] = sum(d["held"] for d in moved)
    if args.json:
        emit({"rows": rows, "choices": choices, "summary": figures, "targets": targets}, True)
        return
    print(markdown_table(rows) if args.markdown else table(rows))
    outside = [r["case"] for r in rows if r["outside_fitted_range"]]
    print(f"{OUTSIDE_MARK}: predicted outside the range of batches the step cost was fitted on: "
          + (", ".join(outside) if outside else "none"))
    print()
    for r in rows:
        d = r.get("direction")
        if d and d["moved"]:
            print(f"{r['case']}: P99 TTFT measured x{d['measured_ratio']:.3g} of A's, predicted "
                  f"x{d['predicted_ratio']:.3g}: {'held' if d['held'] else 'MISSED'}")
    for c in choices:
        verdict = ("right" if c["right"] else "within noise" if c["right_within_noise"] else "WRONG") \
            if c["decided"] else f"no choice: predicted alike {', '.join(c['alike'])}"
        print(f"{c['scenario']}: picked {c['picked']} (measured P99 TTFT {_twins(c['picked_twins_p99_s'])} s), "
              f"best {c['best']} ({_twins(c['best_twins_p99_s'])} s): {verdict}")
    print()
    emit({**figures, **{f"target_{k}": v for k, v in targets.items()}}, False)


if __name__ == "__main__":
    main()
