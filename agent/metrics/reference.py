"""The metrics reference (docs/metrics.md), written from the catalogue: `python -m
stagelens.metrics.reference` prints it, and a test holds the committed file to it."""

from __future__ import annotations

import textwrap

from stagelens.catalogue import FIGURES, FLAG, INFO, STATE_DOC, Figure

WIDTH = 116
SHOWN_KIND = {FLAG: "gauge of 0 or 1", INFO: "gauge of 1, the labels its value"}
HEADER = f"""# Metrics reference

Every series `stagelens serve` exports at `/metrics`, from its one declaration in `agent/catalogue.py`
(this file is written from it: `python -m stagelens.metrics.reference > docs/metrics.md`). Base units, a
`stagelens_` prefix, counters end in `_total`. "From" names the engine snapshot field a figure reads
([snapshot.md](snapshot.md)); "judged by" the signal of the diagnosis that judges it ([stages.md](stages.md)).
States are encoded {STATE_DOC}.
"""


def reference_markdown() -> str:
    entries = [_entry(f) for f in sorted(FIGURES, key=lambda f: f.metric or "") if f.metric]
    return HEADER + "\n" + "".join(entries)


def _entry(figure: Figure) -> str:
    facts = [SHOWN_KIND.get(figure.kind, figure.kind) + (f", {figure.unit}" if figure.unit else "")]
    if figure.labels:
        facts.append("labels " + ", ".join(f"`{label}`" for label in figure.labels))
    if figure.field:
        facts.append(f"from `{figure.field}`")
    if figure.signal:
        facts.append(f"judged by `{figure.signal}`")
    text = f"- `{figure.metric}` ({'; '.join(facts)}): {figure.help}"
    return textwrap.fill(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False,
                         break_long_words=False) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
