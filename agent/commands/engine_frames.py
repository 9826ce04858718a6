"""The frames an engine named on the command line answered in, or why it gave none: what
`diagnose` judges, for one engine or each of several."""

from __future__ import annotations

from stagelens.errors import CollectError


def _answered_kinds() -> frozenset[str]:
    """The collector errors of an engine that answered, with what is not read (a frame keeps the
    error's type by name): an HTTP error, a gzip body, an HTML page, too many series, a parse
    past its deadline, a pause after such an answer."""
    from stagelens.sources.scrape.engine_source import ANSWER_REFUSED
    from stagelens.sources.scrape.heavy_answers import ReadPaused
    from stagelens.sources.scrape.prometheus_text import ExpositionTooCostly

    return frozenset(c.__name__ for c in (*ANSWER_REFUSED, ExpositionTooCostly, ReadPaused))


def engine_frames(frames: list, engine_source) -> list:
    """The frames to judge: with an engine named on the command line, those in which it answered.
    A busy engine past the scrape's deadline now and then leaves its window to the scrapes it
    answered (a frame without it would read "no engine is observed"). An engine that never
    answered is a failure to collect, said as such, and so is one that answered once: a window is
    the change between two of its scrapes."""
    if engine_source is None:
        return frames
    failed = [c.error or "" for f in frames for c in f.failed_collectors() if c.name == "engine"]
    answered = [f for f in frames if (c := f.collector("engine")) is not None and c.success]
    # the last answer refused says what was refused; the pauses after it say only that they follow it
    causes = [e for e in failed if not e.startswith("ReadPaused: ")] or failed
    # the reason without the exception's type
    kind, _, reason = (causes[-1] if causes else "").partition(": ")
    refused_kinds = _answered_kinds()
    # it answered, with none of the engine's metrics
    if not answered and kind == "EngineMismatchError":
        raise CollectError(f"the engine at {engine_source.url} is not read as --engine "
                           f"{engine_source.kind}: {reason}")
    # it answered, with what is not read: say what and why
    if not answered and kind in refused_kinds:
        raise CollectError(f"the engine at {engine_source.url} answered, but its answer was "
                           f"refused: {reason or kind}")
    if not answered:
        raise CollectError(f"the engine at {engine_source.url} did not answer: {reason or kind}")
    if len(answered) < 2:
        raise CollectError(f"the engine at {engine_source.url} answered {len(answered)} of {len(frames)} scrapes: "
                           f"a window needs two (its counters and histograms are read as their change); give "
                           f"--duration longer" + (f" (the others: {reason or kind})" if failed else ""))
    return answered
