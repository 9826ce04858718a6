"""An engine's Prometheus exposition text, parsed into families of labelled samples.

prometheus_client's parser does the reading; this keeps only what an engine source needs (each
family's type and its samples) and turns any parse failure into one `ExpositionError` whose message
is a single line, so a collector failure reads cleanly in a frame.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agent.errors import CollectError


class ExpositionError(CollectError, ValueError):
    """A body that is not Prometheus exposition text."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str            # the sample's own name: `x_total`, `x_bucket`, `x_sum`, ...
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    name: str            # as the parser names it: a counter's without `_total`
    type: str            # counter | gauge | histogram | summary | info | unknown | ...
    samples: tuple[Sample, ...]


class Exposition:
    """The families of one scrape, found by the name the engine exposes (a counter's with `_total` too)."""

    def __init__(self, families: dict[str, Family]) -> None:
        self.families = families

    def family(self, name: str) -> Family | None:
        found = self.families.get(name)
        if found is None and name.endswith("_total"):
            found = self.families.get(name[: -len("_total")])   # the parser drops a counter's suffix
        return found

    def first(self, names: tuple[str, ...]) -> Family | None:
        """The first of `names` this scrape has (names are listed newest generation first)."""
        for name in names:
            found = self.family(name)
            if found is not None:
                return found
        return None


def parse_exposition(text: str) -> Exposition:
    """The families of `text`; ExpositionError when it is not exposition text."""
    families: dict[str, Family] = {}
    try:
        for f in text_string_to_metric_families(text):
            if f.name.endswith("_created"):
                continue     # prometheus_client's creation times, a family of their own in text 0.0.4
            samples = tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in f.samples
                            if not s.name.endswith("_created"))   # creation times are not figures
            if f.name in families:   # lines without a # TYPE come one family a sample: keep every label set
                samples = families[f.name].samples + samples
            families[f.name] = Family(f.name, f.type, samples)
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on a malformed line
        raise ExpositionError(f"not Prometheus exposition text: {_one_line(exc)}") from exc
    return Exposition(families)


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
