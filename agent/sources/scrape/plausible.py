"""What an engine may plausibly say: the rules its figures pass before any of them is read.

An engine read from outside is trusted for nothing. A family whose samples break a rule is refused
whole for that scrape (a histogram missing one bucket would mislead more than no histogram): its
figures read as not observed, never exported, and the refusal is counted and said once. The rules:
- every gauge, counter and histogram sample is a finite number, not below zero (-2e9 running
  requests);
- a histogram's buckets each have a number for `le` (the text Prometheus writes: ASCII, "+Inf") and
  are
  cumulative, each label set's counts never falling as `le` grows (a glitch bucket read as data made
  a firing scheduler "not judged");
- a count of requests stays under MAX_REQUESTS, a ratio under 1;
- the KV cache's configuration labels are whole numbers in range (num_gpu_blocks 2e29 is no GPU's).
(A KV-event sequence's plausible jump is the KV-event subscriber's:
agent/sources/kv_events/subscriber.py.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from stagelens.sources.scrape.prometheus_text import Exposition, Family

# running or waiting on one server: far past any engine's max_num_seqs or queue
MAX_REQUESTS = 1_000_000
MAX_RATIO = 1.0
# an H200's KV cache is ~1e6 blocks of 16
MAX_LABEL = {"block_size": 1 << 16, "num_gpu_blocks": 1 << 32}


@dataclass(frozen=True, slots=True)
class Rule:
    """What one figure's family must hold: its kind (gauge | counter | histogram | info) and a
    bound."""
    kind: str
    # the largest plausible sample value; None: any finite non-negative value
    most: float | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    figure: str
    why: str                       # one line: the family, the sample's value and the rule it broke


def rule_for(figure: str, kind: str) -> Rule:
    """The rule a figure's family is held to, by its name in
    agent.sources.scrape.engine_source.METRICS."""
    if figure in ("running", "waiting", "waiting_by_reason"):
        return Rule(kind, MAX_REQUESTS)
    if figure == "kv_usage":
        return Rule(kind, MAX_RATIO)
    return Rule(kind)


def refuse_implausible(exposition: Exposition, rules: dict[str, tuple[str, Rule]]) -> list[Refusal]:
    """Remove from `exposition` every family that breaks its rule (`rules`: family name ->
    (figure, rule)), and say why, one Refusal a family; a series given twice, already read once
    by the parser, is one too."""
    refused = []
    for name, (figure, rule) in rules.items():
        family = exposition.family(name)
        if family is None:
            continue
        why = _broken(family, rule)
        if why is not None:
            exposition.families.pop(family.name, None)
            refused.append(Refusal(figure, f"{name} {why}"))
    if exposition.duplicates:
        refused.append(Refusal("duplicate_series",
                               f"{exposition.duplicates} series given twice (read once)"))
    return refused


def _broken(family: Family, rule: Rule) -> str | None:
    if rule.kind == "histogram" and family.type == "histogram":
        why = _buckets_broken(family)
        if why is not None:
            return why
    for sample in family.samples:
        if rule.kind == "info":
            for label, most in MAX_LABEL.items():
                text = sample.labels.get(label)
                if text is not None and text != "None" and not _whole_in_range(text, most):
                    return f"label {label}={text[:40]!r} is not a whole number from 1 to {most}"
            continue
        value = sample.value
        if not math.isfinite(value) or value < 0:
            return f"sample {sample.name} = {value:g}: not a finite number of zero or more"
        if rule.most is not None and not sample.name.endswith(("_bucket", "_count", "_sum")) and value > rule.most:
            return f"sample {sample.name} = {value:g}: more than {rule.most:g}"
    return None


_BOUND = re.compile(r"[+-]?(?:inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)",
                    re.IGNORECASE | re.ASCII)


def _buckets_broken(family: Family) -> str | None:
    """Why a histogram's buckets cannot be read as one, or None: an `le` that is no number, or
    counts that fall as `le` grows within a label set."""
    by_set: dict[tuple, list[tuple[float, float]]] = {}
    for sample in family.samples:
        if not sample.name.endswith("_bucket"):
            continue
        text = sample.labels.get("le")
        if text is None or not _BOUND.fullmatch(text):
            shown = "missing" if text is None else repr(text[:40])
            return f"bucket {sample.name} le {shown}: not a number"
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        by_set.setdefault(key, []).append((float(text), sample.value))
    for buckets in by_set.values():
        buckets.sort()
        for (low, below), (high, count) in zip(buckets, buckets[1:], strict=False):
            if count < below:
                return (f"buckets not cumulative: le={high:g} counts {count:g}, fewer than "
                        f"le={low:g}'s {below:g}")
    return None


def _whole_in_range(text: str, most: int) -> bool:
    try:
        value = int(text)
    except ValueError:
        return False
    return 1 <= value <= most
