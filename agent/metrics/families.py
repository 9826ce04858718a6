"""The metric families of one scrape, built by name. A value that is None is left out, never exported as 0."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class Scrape:
    def __init__(self) -> None:
        self._families: dict[str, tuple[Metric, tuple[str, ...]]] = {}

    def gauge(self, name: str, doc: str, value, **labels) -> None:
        self._add(GaugeMetricFamily, name, doc, value, labels)

    def counter(self, name: str, doc: str, value, **labels) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        self._add(CounterMetricFamily, name, doc, value, labels)

    def flag(self, name: str, doc: str, value: bool | None, **labels) -> None:
        """A 0/1 gauge from a boolean (None left out)."""
        self.gauge(name, doc, None if value is None else int(bool(value)), **labels)

    def families(self) -> list[Metric]:
        return [family for family, _ in self._families.values()]

    def _add(self, kind, name: str, doc: str, value, labels: dict) -> None:
        if value is None or isinstance(value, bool | str):
            if value is None:
                return
            raise TypeError(f"{name}: a sample value must be a number, got {value!r}")
        keys = tuple(labels)
        entry = self._families.get(name)
        if entry is None:
            entry = self._families[name] = (kind(name, doc, labels=keys), keys)
        family, known = entry
        if keys != known:
            raise ValueError(f"{name}: labels {keys} differ from the family's {known}")
        family.add_metric([_label(labels[k]) for k in keys], float(value))


def _label(value) -> str:
    return "" if value is None else str(value)
