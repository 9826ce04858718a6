"""The metric families of one scrape, each from its catalogue figure. A value that is None is
left out, never exported as 0."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from stagelens.catalogue import COUNTER, FLAG, GAUGE, INFO, Figure

_FAMILY_OF_KIND = {GAUGE: GaugeMetricFamily, FLAG: GaugeMetricFamily, INFO: GaugeMetricFamily,
                   COUNTER: CounterMetricFamily}


class Scrape:
    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, figure: Figure, value, **labels) -> None:
        """One sample of `figure`, labelled with exactly the labels it declares. A flag's value
        is a boolean (exported 0/1); an info's is 1, its labels the information."""
        if figure.kind == FLAG:
            value = None if value is None else int(bool(value))
        elif figure.kind == INFO:
            value = 1
        if value is None:
            return
        if isinstance(value, bool | str):
            raise TypeError(f"{figure.metric}: a sample value must be a number, got {value!r}")
        # the declared order is the usual one: the sets are built only when it differs
        if tuple(labels) != figure.labels and set(labels) != set(figure.labels):
            raise ValueError(f"{figure.metric}: labels {sorted(labels)} differ from the figure's {figure.labels}")
        family = self._families.get(figure.metric)
        if family is None:
            kind = _FAMILY_OF_KIND[figure.kind]
            family = self._families[figure.metric] = kind(figure.metric, figure.help,
                                                          labels=figure.labels)
        family.add_metric([_label(labels[k]) for k in figure.labels], float(value))

    def add_as_held(self, snapshot, figures: Iterable[Figure]) -> None:
        """Each of `figures` as the engine snapshot holds it, at its field."""
        for figure in figures:
            self.add(figure, figure.read(snapshot))

    def families(self) -> list[Metric]:
        return list(self._families.values())


def _label(value) -> str:
    return "" if value is None else str(value)
