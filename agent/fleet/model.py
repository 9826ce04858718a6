"""What the fleet view shows: one row a node, read from Prometheus (agent/fleet/query.py), rendered
as text or JSON (agent/fleet/output.py) and on the fleet screen (agent/tui/fleet/).

A node is one scrape target of the agents' job: Prometheus's `instance` label. Its row holds what
its agent last exported (agent/metrics/diagnosis.py: stage states -1 unknown, 0 ok, 1 warn, 2
firing) and whether that is current: the target down, or frames stale, says so rather than showing
old states as live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.catalogue import STATE_VALUES
from stagelens.vocabulary import STAGES, STATES

STATE_OF_VALUE = {value: state for state, value in STATE_VALUES.items()}
# a node's status (NodeRow.status), most severe first
STATUSES = ("down", "firing", "warn", "ok", "unknown")
# an agent samples every second or few: a latest frame older than this is not current
FRAME_STALE_S = 30.0


@dataclass(frozen=True)
class StageCell:
    stage: str
    state: str                       # unknown | ok | warn | firing
    since_unix: float | None = None  # when it entered that state


@dataclass(frozen=True)
class Evidence:
    """The node's worst signal: its state, value and unit, e.g. scheduler_wait_p99 firing 0.9
    seconds."""
    stage: str
    signal: str
    state: str
    value: float | None
    # the signal's unit (agent.diagnosis.signals): seconds, ratio, ...
    unit: str = ""


@dataclass(frozen=True)
class NodeRow:
    instance: str                        # Prometheus's instance label: host:port of the agent
    # the target's other labels (cluster, model, gpu, ...) for filters
    labels: dict[str, str]
    up: bool                             # the last scrape succeeded
    verdict: str                         # the worst stage state; "unknown" when down
    root_stage: str | None
    stages: dict[str, StageCell]         # by stage, in STAGES order
    evidence: Evidence | None = None     # the worst signal, None when all are ok or unknown
    tail: dict[str, float] | None = None  # the P99 TTFT tail's share by stage, where exported
    # seconds since the agent's latest frame (stale past a few intervals)
    frame_age_s: float | None = None
    collector_failures: int = 0          # collectors failing in the latest frame
    url: str | None = None               # the agent's base URL, for `tui --connect`

    @property
    def frame_stale(self) -> bool:
        """Up, but its agent's latest frame is old: the states shown are not current."""
        return self.frame_age_s is not None and self.frame_age_s > FRAME_STALE_S

    @property
    def status(self) -> str:
        """down, or the verdict (unknown for one the fleet does not know)."""
        if not self.up:
            return "down"
        return self.verdict if self.verdict in STATES else "unknown"

    @property
    def severity(self) -> int:
        """Higher is worse: unknown 0, ok, warn, firing, down 4."""
        return len(STATUSES) - 1 - STATUSES.index(self.status)


def by_severity(row: NodeRow) -> tuple[int, str]:
    """The rows' order: most severe first (down, firing, warn, ok, unknown), then by instance."""
    return -row.severity, row.instance


def counts(rows) -> dict[str, int]:
    """How many rows have each status, in STATUSES order."""
    out = dict.fromkeys(STATUSES, 0)
    for row in rows:
        out[row.status] += 1
    return out


@dataclass(frozen=True)
class FleetView:
    rows: list[NodeRow] = field(default_factory=list)   # most severe first
    # when Prometheus answered; None: it never has
    fetched_unix: float | None = None
    # why this refresh has no answer (the rows are the last)
    error: str | None = None
    prometheus: str = ""

    @property
    def stale(self) -> bool:
        return self.error is not None


def stage_cells(states: dict[str, tuple[str, float | None]]) -> dict[str, StageCell]:
    """Every stage, unknown where nothing was exported."""
    return {s: StageCell(s, *states.get(s, ("unknown", None))) for s in STAGES}
