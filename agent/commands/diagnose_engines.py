"""`stagelens diagnose` with `--engine-url` given more than once: every engine sampled on a thread
of its own for the same duration, each judged on its own window, the node's verdict the worst
(agent/diagnosis/engines.py).

One engine never delays or changes another's reading: each has its own source, scrape deadline,
window and diagnosis, and one that does not answer is said with its reason while the others are
judged.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from stagelens.commands.flags import OUTSIDE_ENGINES, OutsideFlags, check_http_url, engine_spec
from stagelens.diagnosis.engines import EngineDiagnosis, NodeDiagnosis
from stagelens.errors import CollectError, UserError
from stagelens.http_client import redact_url

MAX_ENGINES = 64   # what one agent judges at once: each is a thread and a scrape a tick
# the receivers that listen for one engine's traces and events: per engine, not per node
ONE_ENGINE_ONLY = ("otlp_receiver", "otlp_receiver_grpc", "otlp_forward", "kv_events")


@dataclass(frozen=True)
class NamedEngine:
    name: str
    kind: str
    url: str
    gpus: tuple[str, ...] | None = None      # CUDA_VISIBLE_DEVICES where discovery read it
    found: str = "named on the command line"


def discovered_engines(named: list[NamedEngine]) -> tuple[list[NamedEngine], list[str]]:
    """The engines `named`, each with the GPUs its process holds where one on this node serves
    its URL, then those found on this node and not named (agent/discovery); and what discovery
    said. UserError for a named URL that is a stagelens agent."""
    from stagelens.discovery import Discovery

    discovery = Discovery(pod_resources_socket=None)
    report = discovery.refresh()
    for engine in named:
        refusal = discovery.agent_url(engine.url)
        if refusal:
            raise UserError(f"--engine-url: {refusal}")
    by_url = {_where(e.url): e for e in report.engines}
    out = []
    for engine in named:
        seen = by_url.pop(_where(engine.url), None)
        gpus = tuple(seen.gpus) if seen is not None and seen.gpus is not None else None
        out.append(dataclasses.replace(engine, gpus=gpus))
    taken = {e.name for e in out}
    for found in by_url.values():
        name = found.name if found.name not in taken else f"{found.name}-{found.port}"
        taken.add(name)
        out.append(NamedEngine(name, found.kind, found.url,
                               None if found.gpus is None else tuple(found.gpus), found.how))
    notes = list(report.notes)
    if not report.engines:
        notes.append(f"discovery found no vLLM or SGLang server among {report.scanned} processes")
    return out[:MAX_ENGINES], notes


def named_engines(kind: str, outside: OutsideFlags) -> list[NamedEngine]:
    """The engines `--engine-url` names, each with a name unique on the node (as given, else
    KIND-PORT, else KIND-HOST-PORT); UserError for a URL given twice, a name given twice, too
    many engines, or a receiver flag, which listens for one engine only."""
    given = [f"--{f.replace('_', '-')}" for f in ONE_ENGINE_ONLY if getattr(outside, f)]
    if given:
        raise UserError(f"{', '.join(given)}: one engine's receivers, given with several "
                        f"--engine-url (diagnose them one at a time to read their traces)")
    if len(outside.engine_urls) > MAX_ENGINES:
        raise UserError(f"--engine-url {len(outside.engine_urls)} times: at most {MAX_ENGINES} "
                        f"engines at once")
    specs = []
    for text in outside.engine_urls:
        name, engine_kind, url = engine_spec(text, kind)
        if engine_kind not in OUTSIDE_ENGINES:
            raise UserError(f"--engine-url {redact_url(url)}: its kind is not known: give --engine "
                            f"{' or '.join(OUTSIDE_ENGINES)}, or KIND=URL")
        check_http_url("--engine-url", url)
        specs.append((name, engine_kind, url.rstrip("/")))
    _refuse_twice([_where(url) for _, _, url in specs], "two engines on one URL")
    engines = [NamedEngine(name or _default_name(kind, url, specs), kind, url)
               for name, kind, url in specs]
    _refuse_twice([e.name for e in engines], "two engines with one name")
    return engines


def _where(url: str) -> str:
    parts = urlsplit(url)
    host = {"localhost": "127.0.0.1", "::1": "127.0.0.1"}.get(parts.hostname or "", parts.hostname)
    return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}{parts.path}"


def _default_name(kind: str, url: str, specs: list) -> str:
    parts = urlsplit(url)
    port = str(parts.port or "")
    same_port = [u for _, _, u in specs if str(urlsplit(u).port or "") == port]
    host = (parts.hostname or "").replace(":", "-")
    return f"{kind}-{port}" if len(same_port) == 1 and port else f"{kind}-{host}-{port}".rstrip("-")


def _refuse_twice(values: list[str], what: str) -> None:
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise UserError(f"--engine-url: {what}: {', '.join(twice)}")


def diagnose_engines(engines: list[NamedEngine], nvml_snapshot: str | None, duration: float,
                     config, notes: list[str] | None = None) -> NodeDiagnosis:
    """Each engine sampled with this node for `duration` on a thread of its own, then judged."""
    results: list[EngineDiagnosis | None] = [None] * len(engines)

    def watch(i: int, engine: NamedEngine) -> None:
        results[i] = _diagnosed(engine, nvml_snapshot, duration, config)

    threads = [threading.Thread(target=watch, args=(i, e), name=f"engine-{e.name}", daemon=True)
               for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r or EngineDiagnosis(e.name, e.kind, redact_url(e.url), None, "its reading stopped",
                                 found=e.found)
            for r, e in zip(results, engines, strict=True)]
    unjudged = sum(1 for d in done if d.diagnosis is None)
    said = [f"{unjudged} of {len(done)} engines not judged"] if unjudged else []
    return NodeDiagnosis(done, [*(notes or []), *said])


def _diagnosed(engine: NamedEngine, nvml_snapshot: str | None, duration: float,
               config) -> EngineDiagnosis:
    """One engine's diagnosis, or its reason for none: what stops its reading stays with it."""
    from stagelens.commands.engine_frames import engine_frames
    from stagelens.commands.flags import open_engine_source
    from stagelens.diagnosis.whole_run import judge_run
    from stagelens.node_sampling import sample_for

    def said(diagnosis, error: str | None) -> EngineDiagnosis:
        return EngineDiagnosis(engine.name, engine.kind, redact_url(engine.url), diagnosis, error,
                               None if engine.gpus is None else list(engine.gpus), engine.found)

    try:
        # the source `--engine KIND --engine-url URL` opens for one engine
        source = open_engine_source(engine.kind, OutsideFlags(engine.url))
        frames = engine_frames(sample_for(nvml_snapshot, duration, engine_source=source), source)
        diagnosis = judge_run(frames, [], config).diagnosis
    except (CollectError, UserError) as exc:
        return said(None, str(exc))
    # one engine's failure is its own, said, never the node's
    except Exception as exc:   # noqa: BLE001
        return said(None, f"internal error reading it: {type(exc).__name__}: {exc}"[:300])
    return said(diagnosis, diagnosis.unavailable if diagnosis.verdict == "unknown" else None)


def render_node(node: NodeDiagnosis) -> str:
    """The node's verdict and the engine it comes from, then each engine's diagnosis."""
    from stagelens.diagnosis_text import render_diagnosis
    from stagelens.printable import printable, printable_lines

    worst = node.worst
    head = f"node: {node.verdict}"
    if worst is not None and node.verdict != "ok":
        head += f", worst engine {worst.name}" + (f" (root stage: {worst.diagnosis.root_stage})"
                                                   if worst.diagnosis and worst.diagnosis.root_stage
                                                   else "")
    lines = [head, *(f"note: {n}" for n in node.notes)]
    for e in node.engines:
        lines.append(f"\n== {e.name} ({e.kind}, {e.url}): {e.verdict}")
        if e.diagnosis is None:
            lines.append(printable(f"not judged: {e.error}"))
        else:
            # an engine's text is the engine's: printable only
            lines.append(printable_lines(render_diagnosis(e.diagnosis)))
    return "\n".join(lines)
