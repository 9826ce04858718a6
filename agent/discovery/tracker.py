"""`Discovery`: the engines on this node, refreshed, each followed across refreshes.

An engine is known by its identity, (kind, served model or model or command line without
--port/--host, GPUs): one restarted (a new pid) or moved to another port is the same entry,
updated and said so; an engine of another kind on a port another served is a new entry, and the
old one is said gone. Engines sharing an identity (the same model twice, on the same GPUs) are told
apart by their port. At most `max_engines` are listed; the report says how many were left out."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from stagelens.discovery.cmdline import identity_words
from stagelens.discovery.model import MAX_ENGINES, DiscoveredEngine, DiscoveryReport, PodDevices
from stagelens.discovery.pod_resources import DEFAULT_SOCKET, list_pod_resources
from stagelens.discovery.processes import Candidate, Scan, scan_processes

Identity = tuple[str, str, tuple[str, ...] | None]
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}
MAX_NOTES = 200       # notes said once are remembered; a node's churn past this starts over


class Discovery:
    """`refresh()` scans the processes (and the kubelet's pod resources) and answers the report;
    `report` is the last one. `processes` (a callable giving psutil processes) narrows the scan
    (tests); `pod_resources_socket` None reads no pods."""

    def __init__(self, pod_resources_socket: str | None = DEFAULT_SOCKET,
                 processes: Callable[[], Iterable[psutil.Process]] | None = None,
                 max_engines: int = MAX_ENGINES) -> None:
        self.pod_resources_socket = pod_resources_socket
        self.processes = processes
        self.max_engines = max_engines
        self.report = DiscoveryReport()
        self.agent_urls: dict[str, int] = {}
        self._known: dict[Identity, DiscoveredEngine] = {}
        self._said: set[str] = set()

    def refresh(self) -> DiscoveryReport:
        scan = scan_processes(self.processes() if self.processes else None)
        self.agent_urls = scan.agent_urls
        notes: list[str] = []
        candidates = self._refuse_the_agent(scan, notes)
        merged: list[str] = []
        candidates = _merge_urls(candidates, merged)
        pods, pod_note = self._pods()
        kept = self._follow(candidates, notes)
        left_out = scan.left_out + max(0, len(kept) - self.max_engines)
        engines = kept[:self.max_engines]
        for engine, candidate in engines:
            _join_pod(engine, candidate, pods)
        if left_out:
            notes.append(f"{left_out} more engine processes left out: "
                         f"at most {self.max_engines} are listed")
        if scan.unreadable:
            notes.append(f"{scan.unreadable} processes' command lines not readable: not looked at")
        if pod_note:
            notes.append(pod_note)
        # what a process or a URL is (unreadable, shared) is said at its first refresh, not at each
        once = [n for n in [n for e, _ in engines for n in e.notes] + merged if self._first_time(n)]
        listed = sorted((e for e, _ in engines), key=lambda e: (e.port, e.url, e.name))
        holding = [p for p in pods if p.devices]
        self.report = DiscoveryReport(listed, holding, once + notes, left_out, scan.scanned)
        return self.report

    def agent_url(self, url: str) -> str | None:
        """The line refusing `url` when a stagelens agent (this one or another) listens there: the
        same port on the same host, or on loopback or any address for a loopback URL."""
        url = url.rstrip("/")
        host, port = _host_port(url)
        for agent, pid in self.agent_urls.items():
            agent_host, agent_port = _host_port(agent)
            if port == agent_port and (host == agent_host or {host, agent_host} <= LOOPBACK):
                return f"{url} is the stagelens agent itself (process {pid}), not an engine"
        return None

    def _refuse_the_agent(self, scan: Scan, notes: list[str]) -> list[Candidate]:
        kept = []
        for candidate in scan.candidates:
            refusal = self.agent_url(candidate.url)
            if refusal:
                notes.append(f"{refusal}: process {candidate.pid} ({candidate.kind}) left out")
            else:
                kept.append(candidate)
        return kept

    def _pods(self) -> tuple[list[PodDevices], str | None]:
        if self.pod_resources_socket is None:
            return [], None
        answer = list_pod_resources(self.pod_resources_socket)
        return answer.pods, answer.error

    def _follow(self, candidates: list[Candidate],
                notes: list[str]) -> list[tuple[DiscoveredEngine, Candidate]]:
        """Each candidate as the entry it was last time (updated) or a new one; the entries not seen
        again are gone, said so with what took their URL."""
        keys = _identities(candidates)
        # engines seen before first, so a node past the bound keeps listing the ones it listed
        order = sorted(range(len(candidates)), key=lambda i: (keys[i] not in self._known, i))
        found: dict[Identity, tuple[DiscoveredEngine, Candidate]] = {}
        for i in order:
            found[keys[i]] = (self._update(keys[i], candidates[i], notes, found), candidates[i])
        for key, old in self._known.items():
            if key not in found:
                taker = next((e for e, _ in found.values() if e.url == old.url), None)
                after = f"; a {taker.kind} engine ({taker.name}) now serves {old.url}" \
                    if taker else ""
                notes.append(f"{old.name} ({old.kind} at {old.url}, process {old.pid}) "
                             f"is gone{after}")
        self._known = {key: engine for key, (engine, _) in found.items()}
        return list(found.values())

    def _update(self, key: Identity, candidate: Candidate, notes: list[str],
                found: dict[Identity, tuple[DiscoveredEngine, Candidate]]) -> DiscoveredEngine:
        rec = candidate.recognised
        old = self._known.get(key)
        taken = {e.name for e, _ in found.values()}
        name = old.name if old else _new_name(candidate, taken)
        engine = DiscoveredEngine(
            name=name, kind=candidate.kind, url=candidate.url, pid=candidate.pid,
            command=" ".join(candidate.argv)[:400], model=rec.served_name or rec.model,
            gpus=candidate.gpus, how=candidate.how, notes=list(candidate.notes))
        if old and old.pid != engine.pid:
            notes.append(f"{name} restarted: process {old.pid} -> {engine.pid}")
        if old and old.url != engine.url:
            notes.append(f"{name} moved: {old.url} -> {engine.url}")
        return engine

    def _first_time(self, note: str) -> bool:
        if note in self._said:
            return False
        if len(self._said) >= MAX_NOTES:
            self._said.clear()
        self._said.add(note)
        return True


def _identities(candidates: list[Candidate]) -> list[Identity]:
    """Each candidate's identity; those two or more share take their port too."""
    keys: list[Identity] = []
    for c in candidates:
        what = c.recognised.served_name or c.recognised.model or identity_words(c.argv)
        keys.append((c.kind, what, tuple(c.gpus) if c.gpus is not None else None))
    return [(k[0], f"{k[1]} @{c.url}", k[2]) if keys.count(k) > 1 else k
            for k, c in zip(keys, candidates, strict=True)]


def _new_name(candidate: Candidate, taken: set[str]) -> str:
    port = candidate.url.rsplit(":", 1)[1]
    base = candidate.recognised.served_name or f"{candidate.kind}-{port}"
    for name in (base, f"{base}-{port}", f"{base}-{port}-{candidate.pid}"):
        if name not in taken:
            return name
    return f"{base}-{candidate.pid}-{len(taken)}"


def _merge_urls(candidates: list[Candidate], notes: list[str]) -> list[Candidate]:
    """One candidate per URL: the one listening there (else the oldest); the others said."""
    by_url: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_url.setdefault(c.url, []).append(c)
    kept = []
    for url, group in by_url.items():
        group.sort(key=lambda c: (not c.listening, c.create_time, c.pid))
        kept.append(group[0])
        if len(group) > 1:
            others = ", ".join(f"process {c.pid} ({c.kind})" for c in group[1:])
            notes.append(f"{len(group)} engines on one URL {url}: "
                         f"process {group[0].pid} ({group[0].kind}) "
                         f"listed, {others} merged into it")
    kept.sort(key=lambda c: (c.create_time, c.pid))
    return kept


def _join_pod(engine: DiscoveredEngine, candidate: Candidate, pods: list[PodDevices]) -> None:
    """The pod whose name is the process's HOSTNAME (a pod's hostname is its name by default)."""
    if not candidate.hostname:
        return
    matches = [p for p in pods if p.name == candidate.hostname]
    if len(matches) == 1:
        engine.pod, engine.pod_devices = matches[0].pod, matches[0].devices


def _host_port(url: str) -> tuple[str, int | None]:
    """HOST and PORT of http://HOST:PORT[/...] (brackets off an IPv6 host; None for no port)."""
    where = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = where.rpartition(":")
    return host.strip("[]").lower(), int(port) if port.isdigit() else None
