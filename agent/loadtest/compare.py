"""`bench compare`: a run against a saved baseline, point by point; a P99 worse by more than the
tolerance is a regression (exit 1), for CI after every change, as the report's method asks."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.errors import UserError
from stagelens.loadtest.results import Results
from stagelens.loadtest.variables import label


@dataclass
class Row:
    value: object
    baseline: float | None
    current: float | None
    regressed: bool
    note: str

    @property
    def change(self) -> float | None:
        if self.baseline and self.current is not None:
            return self.current / self.baseline - 1
        return None


def _key(value) -> str:
    return label(value)


def compare(baseline: Results, current: Results, tolerance: float, metric: str = "latency") -> list[Row]:
    if baseline.variable != current.variable:
        raise UserError(f"the runs vary different settings: baseline {baseline.flag}, current {current.flag}")
    attr = "ttft_p99_s" if metric == "ttft" else "latency_p99_s"
    now = {_key(p.value): p for p in current.points}
    rows = []
    for b in baseline.points:
        c = now.pop(_key(b.value), None)
        before = getattr(b, attr)
        if c is None:
            rows.append(Row(b.value, before, None, False, "not in the current run"))
            continue
        after = getattr(c, attr)
        if before is None or after is None:
            regressed = before is not None and after is None and c.requests == 0
            rows.append(Row(b.value, before, after, regressed,
                            "no finished requests" if regressed else "no P99"))
            continue
        regressed = after > before * (1 + tolerance)
        rows.append(Row(b.value, before, after, regressed,
                        f"P99 up more than {tolerance:.0%}" if regressed else ""))
    for c in now.values():
        rows.append(Row(c.value, None, getattr(c, attr), False, "not in the baseline"))
    if all(r.note in ("not in the current run", "not in the baseline") for r in rows):
        raise UserError(f"no {baseline.flag} value in common between the baseline and the current run")
    return rows


def render_comparison(rows: list[Row], flag: str, metric: str) -> str:
    def ms(v):
        return "—" if v is None else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"

    out = [f"{flag[2:]:>16}  {'baseline P99':>13}  {'current P99':>12}  {'change':>7}  verdict",]
    for r in rows:
        change = "—" if r.change is None else f"{r.change * 100:+.0f}%"
        verdict = "REGRESSED" if r.regressed else "ok" if r.baseline is not None and r.current is not None else "—"
        note = f" ({r.note})" if r.note else ""
        out.append(f"{label(r.value):>16}  {ms(r.baseline):>13}  {ms(r.current):>12}  {change:>7}  {verdict}{note}")
    bad = [r for r in rows if r.regressed]
    what = "TTFT P99" if metric == "ttft" else "P99 latency"
    if bad:
        out.append(f"regression: {what} worse at {flag[2:]}=" + ", ".join(label(r.value) for r in bad))
    else:
        out.append(f"no regression: {what} within the tolerance at every common point")
    return "\n".join(out)
