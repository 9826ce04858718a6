"""An engine's Prometheus exposition text, parsed into families of labelled samples.

prometheus_client's parser does the reading; this keeps only what an engine source needs (each
family's type and its samples) and turns any parse failure into one `ExpositionError` whose message
is a single line, so a collector failure reads cleanly in a frame.

An engine's exposition is a few thousand series; a body of hundreds of thousands (26 MB under the
body cap took 11.5 s and 1.1 GB to parse) is refused before parsing, by a count of its sample lines,
and the parse itself has a deadline in the thread's CPU time, checked between families. A series
given twice (the same name and labels) is read once, its first sample, and counted: adding both up
doubled the engine's figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from stagelens.errors import CollectError
from stagelens.printable import printable


class ExpositionError(CollectError, ValueError):
    """A body that is not Prometheus exposition text."""


class ExpositionTooCostly(ExpositionError):
    """A body past what a scrape is read with: too many series, or a parse past its deadline."""


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
    """The families of one scrape, found by the name the engine exposes (a counter's with
    `_total` too)."""

    def __init__(self, families: dict[str, Family], duplicates: int = 0) -> None:
        self.families = families
        # samples left out: a series already given in this exposition
        self.duplicates = duplicates

    def family(self, name: str) -> Family | None:
        found = self.families.get(name)
        if found is None and name.endswith("_total"):
            # the parser drops a counter's suffix
            found = self.families.get(name[: -len("_total")])
        return found

    def first(self, names: tuple[str, ...]) -> Family | None:
        """The first of `names` this scrape has (names are listed newest generation first)."""
        for name in names:
            found = self.family(name)
            if found is not None:
                return found
        return None


# sample lines: an engine's exposition has a few thousand; this parses in ~0.5 s
MAX_SERIES = 20_000
PARSE_DEADLINE_S = 1.0


def parse_exposition(text: str, max_series: int = MAX_SERIES, deadline_s: float = PARSE_DEADLINE_S) -> Exposition:
    """The families of `text`; ExpositionError when it is not exposition text, holds more than
    `max_series` sample lines, or takes longer than `deadline_s` to parse."""
    series = sample_lines(text)
    if series > max_series:
        raise ExpositionTooCostly(f"the exposition has {series} series, more than the {max_series} an engine's "
                                  "/metrics is read with: refused unparsed")
    # CPU time of this thread, not wall time: on a busy host a thread waiting for a core would give
    # up on a sound scrape; what the deadline bounds is the work a huge or hostile body costs
    deadline = time.thread_time() + deadline_s
    kinds: dict[str, str] = {}
    # lines without a # TYPE come one family a sample: kept whole
    samples_by_family: dict[str, list[Sample]] = {}
    # (sample name, labels) already read, so a repeated series counts once
    seen: set = set()
    duplicates = 0
    try:
        for f in text_string_to_metric_families(text):
            if time.thread_time() > deadline:
                raise ExpositionTooCostly(f"the exposition took longer than {deadline_s:g} s to parse (CPU time): "
                                      "given up")
            if f.name.endswith("_created"):
                # prometheus_client's creation times, a family of their own in text 0.0.4
                continue
            kinds.setdefault(f.name, f.type)
            samples = samples_by_family.setdefault(f.name, [])
            for s in f.samples:
                if s.name.endswith("_created"):
                    continue     # creation times are not figures
                key = (s.name, frozenset(s.labels.items()))
                if key in seen:
                    duplicates += 1
                    continue
                seen.add(key)
                samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    except ExpositionError:
        raise
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on a malformed line
        raise ExpositionError(f"not Prometheus exposition text: {_one_line(exc)}") from exc
    families = {name: Family(name, kinds[name], tuple(samples)) for name, samples in samples_by_family.items()}
    return Exposition(families, duplicates)


def sample_lines(text: str) -> int:
    """How many lines of `text` hold a sample (neither blank nor a comment), counted without
    parsing."""
    lines = text.count("\n") + (not text.endswith("\n"))
    comments = text.count("\n#") + text.startswith("#")
    blanks = text.count("\n\n") + text.startswith("\n")
    return max(lines - comments - blanks, 0)


def _one_line(exc: Exception) -> str:
    # it may quote the engine's own line
    text = printable(" ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
