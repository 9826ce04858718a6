"""The agent in-process with the bundled lab engine (agent.lab.host): the engine runs a scenario's
workload in the background, round after round, and each poll takes one sample. `apply_fix` restarts
the engine with the diagnosis's settings.

Everything that touches the engine runs on the poller's worker thread; `apply_fix` and `set_paused`
(UI thread) only leave a request for it.
"""

from __future__ import annotations

import threading

from stagelens.node_sampling import NodeSampling
from stagelens.tui.feed import Feed, Poll, sampled

ENDLESS_S = 24 * 3600.0     # without --duration the workload runs until the TUI exits


class LocalFeed(Feed):
    kind = "local"
    can_fix = True

    def __init__(self, flags: dict, scenario: str | None = None, nvml_snapshot: str | None = None,
                 interval: float = 1.0) -> None:
        from stagelens.lab.settings import scenario_configs

        super().__init__()
        self.flags = {k: v for k, v in flags.items() if v is not None}
        if "duration" not in self.flags:
            self.flags["duration"] = ENDLESS_S
        self.scenario = scenario
        self.nvml_snapshot = nvml_snapshot
        self.interval = interval
        scenario_configs(self.flags, scenario)   # bad flags fail here, before the TUI starts
        self.applied: dict = {}
        self._pending_fix: dict | None = None
        self._lock = threading.Lock()
        self._host = self._sampling = None

    @property
    def label(self) -> str:
        return f"local lab{' ' + self.scenario if self.scenario else ''}"

    # --- the worker thread ------------------------------------------------------------------------
    def open(self) -> Poll:
        from stagelens.lab.host import EngineHost

        self._host = EngineHost()
        self._sampling = NodeSampling(self._host, self.nvml_snapshot, self.interval)
        self._start()
        return Poll(note="engine started")

    def _start(self) -> None:
        from stagelens.lab.settings import scenario_configs

        engine_cfg, workload_cfg = scenario_configs(self.flags, self.scenario, self.applied)
        self._host.start(engine_cfg, workload_cfg, repeat=True, grace_s=0.0)

    def poll(self) -> Poll:
        with self._lock:
            fix, self._pending_fix = self._pending_fix, None
        if fix is not None:
            self.applied.update(fix)
            self._start()
            return Poll(note="engine restarted with the fix")
        if self.paused or self._sampling is None:
            return Poll()
        return sampled(self._sampling)

    def close(self) -> None:
        if self._host is not None:
            self._host.stop()
        if self._sampling is not None:
            self._sampling.close()

    # --- the UI thread ----------------------------------------------------------------------------
    def apply_fix(self, flags: dict) -> None:
        with self._lock:
            self._pending_fix = dict(flags)

    def whatif_window(self) -> dict | None:
        host = self._host
        return host.whatif_window() if host is not None else None
