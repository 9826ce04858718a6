"""The scrape-time collector: reads the latest frame and diagnosis and turns them into metric
families.

Each section is reported like a node_exporter collector, with its own success and duration, so a bug
in one section leaves the others' series in place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client.registry import Collector

from stagelens.catalogue import SCRAPE_COLLECTOR_DURATION, SCRAPE_COLLECTOR_SUCCESS
from stagelens.metrics import agent, cold_path, diagnosis, gpu, host, kv, links, scheduler, tail, topology
from stagelens.metrics.families import Scrape

log = logging.getLogger(__name__)

SECTIONS = (
    ("agent", agent.collect),
    ("diagnosis", diagnosis.collect),
    ("kv", kv.collect),
    ("scheduler", scheduler.collect),
    ("cold_path", cold_path.collect),
    ("tail", tail.collect),
    ("gpu", gpu.collect),
    ("links", links.collect),
    ("topology", topology.collect),
    ("host", host.collect),
)


class StagelensCollector(Collector):
    def __init__(self, latest_frame: Callable[[], object], latest_diagnosis: Callable[[], object] = lambda: None,
                 sections=SECTIONS) -> None:
        self.latest_frame = latest_frame
        self.latest_diagnosis = latest_diagnosis
        self.sections = sections

    def describe(self) -> Iterable:
        return []   # the series depend on the frame: nothing to check for clashes at registration

    def collect(self) -> Iterable:
        out = Scrape()
        frame = self._read("read_frame", self.latest_frame, out)
        found = self._read("read_diagnosis", self.latest_diagnosis, out)
        for name, section in self.sections:
            started = time.perf_counter()
            try:
                section(out, frame, found)
                ok = True
            except Exception:   # one broken section must not cost the scrape the others
                log.exception("metrics section %s failed", name)
                ok = False
            _status(out, name, ok, started)
        return out.families()

    @staticmethod
    def _read(name: str, source: Callable[[], object], out: Scrape):
        started = time.perf_counter()
        try:
            value = source()
        except Exception:
            log.exception("%s failed during a scrape", name)
            _status(out, name, False, started)
            return None
        _status(out, name, True, started)
        return value


def _status(out: Scrape, name: str, ok: bool, started: float) -> None:
    out.add(SCRAPE_COLLECTOR_SUCCESS, ok, collector=name)
    out.add(SCRAPE_COLLECTOR_DURATION, time.perf_counter() - started, collector=name)
