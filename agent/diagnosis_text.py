"""The diagnosis as plain text, for the commands: the verdict with each stage's evidence, a run's
account (its tail and episodes), and the before/after table of its recommendations applied
(`lab --fixed`)."""

from __future__ import annotations

from stagelens.diagnosis.model import Diagnosis
from stagelens.fmt import BOUND_MARK
from stagelens.runbook_files import runbook_stem

_MARK = {"firing": "FIRING", "warn": "warn", "ok": "ok", "unknown": "unknown", "info": "info"}
_ORIGIN = {"inferred": "  (inferred)", "not observable": "  (not observable on this engine)"}


def render_diagnosis(d: Diagnosis, verbose: bool = True) -> str:
    head = f"verdict: {_MARK[d.verdict]}"
    if d.root_stage:
        head += f" — root stage: {d.root_stage}"
    if d.unavailable:
        head += f" — {d.unavailable}"
    lines = [head]
    if d.engine:
        lines.append(f"engine: {d.engine}")
    if d.disagreement:
        lines.append(f"note: {d.disagreement}")
    for s in d.stages:
        lines.append(f"\n[{_MARK[s.state]}] {s.stage}" + (f" since {s.since}" if s.since and s.state != "ok" else "")
                     + (f" (a consequence of {s.consequence_of})" if s.consequence_of else ""))
        lines.append(f"  {s.explanation}")
        if verbose:
            for e in s.evidence:
                value = "n/a" if e.value is None else BOUND_MARK.get(e.bound, "") + f"{e.value:.4g}"
                limits = f"warn {_limit(e.warn)} / firing {_limit(e.firing)}"
                origin = _ORIGIN.get(e.provenance, "")
                lines.append(f"    {_MARK[e.state]:<7} {e.signal:<30} {value:>10} {e.unit:<17} {limits}{origin}")
        for r in s.recommendations if s.state in ("warn", "firing") else []:
            lines.append(f"  -> {r.text}")
        if s.state in ("warn", "firing"):
            lines.append(f"  runbook: {s.runbook}  (stagelens runbook {runbook_stem(s.runbook)})")
    return "\n".join(lines)


def render_run(run) -> str:
    """A run's account (agent.diagnosis.whole_run.RunDiagnosis): its tail, its episodes, and,
    where the verdict comes from the tail, the last window's state."""
    import datetime as dt

    def clock(t: float) -> str:
        return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")

    lines = []
    if run.tail is not None:
        lines.append(f"tail: {run.tail.sentence()}")
    for i, ep in enumerate(run.episodes):
        peak = (f"; peak {ep.peak.label} {BOUND_MARK.get(ep.peak.bound, '')}{ep.peak.value:.3g}"
                if ep.peak and ep.peak.value is not None else "")
        mark = "  <- the tail's requests" if i in run.tail_episodes else ""
        lines.append(f"episode: {ep.stage} {_MARK[ep.state]} {clock(ep.start_unix)}-{clock(ep.end_unix)}"
                     f"{' (still on at the end)' if ep.open else ''}{peak}{mark}")
    if not run.episodes:
        lines.append("episodes: none (no stage left ok)")
    if run.basis == "tail":
        end = run.at_end
        lines.append(f"verdict from the tail: {run.diagnosis.root_stage} explains the run's P99; at the end of the "
                     f"run: {_MARK[end.verdict]}" + (f" (root {end.root_stage})" if end.root_stage else ""))
    return "\n".join(lines)


def _limit(value) -> str:
    return "-" if value is None else f"{value:g}"


ROWS = (
    ("throughput", "throughput_tokens_per_s", "{:.1f} tok/s", "higher"),
    ("P99 latency", "latency_p99_s", "{:.2f} s", "lower"),
    ("P50 TTFT", "ttft_p50_s", "{:.2f} s", "lower"),
    ("compute utilisation", "engine_busy_ratio", "{:.0%}", None),
    ("KV fragmentation", "kv_fragmentation_ratio", "{:.2f}", "lower"),
    ("scheduler wait p99", "decided_wait_p99_s", "{:.3f} s", "lower"),
    ("head-of-line share", "head_of_line_share", "{:.2f}", "lower"),
    ("step-time inflation", "step_time_inflation", "{:.2f}x", "lower"),
    ("preemptions", "preemptions", "{:d}", "lower"),
    ("model loads", "model_loads", "{:d}", "lower"),
)


def _fmt(fmt: str, value) -> str:
    return "-" if value is None else fmt.format(value)


def render_before_after(before: dict, after: dict, verdict_before: str, verdict_after: str) -> str:
    lines = [f"{'':<22}{'before':>16}{'after (fixed)':>16}{'change':>10}"]
    for label, key, fmt, better in ROWS:
        b, a = before.get(key), after.get(key)
        change = ""
        if better and isinstance(b, int | float) and isinstance(a, int | float) and b:
            change = f"{(a - b) / abs(b):+.0%}"
        lines.append(f"{label:<22}{_fmt(fmt, b):>16}{_fmt(fmt, a):>16}{change:>10}")
    lines.append(f"{'verdict':<22}{verdict_before:>16}{verdict_after:>16}")
    return "\n".join(lines)
