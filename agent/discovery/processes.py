"""Engines among this node's processes (psutil): which command lines start vLLM or SGLang, the
port each listens on (its own LISTEN sockets or its children's, else --port on its command
line), its CUDA_VISIBLE_DEVICES; and the ports stagelens agents listen on, which are never an
engine. A process whose sockets or environment cannot be read is said so, in its notes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from stagelens.discovery.cmdline import DEFAULT_PORT, Recognised, recognise, summary
from stagelens.printable import printable

# sockets and environments are read for this many engine processes at most (the rest is left out
# before any of that work: a node with thousands of look-alikes costs one pass over the process
# table)
MAX_RESOLVED = 256
ANY_ADDRESS = ("0.0.0.0", "::", "")


@dataclass
class Candidate:
    """One engine process (the top of its process tree), where it serves and how that was read."""

    pid: int
    kind: str
    argv: list[str]
    recognised: Recognised
    url: str
    how: str
    create_time: float = 0.0
    gpus: list[str] | None = None
    hostname: str | None = None       # HOSTNAME in its environment: a pod's name, by default
    notes: list[str] = field(default_factory=list)
    listening: bool = False           # the port is one of its LISTEN sockets (not only a flag)


@dataclass
class Scan:
    candidates: list[Candidate] = field(default_factory=list)
    agent_urls: dict[str, int] = field(default_factory=dict)    # a stagelens agent's URL -> its pid
    scanned: int = 0
    left_out: int = 0          # engine processes past MAX_RESOLVED
    unreadable: int = 0        # processes whose command line could not be read (hidepid)


@dataclass
class _Seen:
    pid: int
    ppid: int
    argv: list[str]
    create_time: float
    recognised: Recognised | None
    denied: bool = False


def scan_processes(processes: Iterable[psutil.Process] | None = None) -> Scan:
    """Every engine among `processes` (all of this node's by default), one per process tree."""
    table: dict[int, _Seen] = {}
    for proc in processes if processes is not None else psutil.process_iter():
        seen = _read(proc)
        if seen is not None:
            table[seen.pid] = seen
    scan = Scan(scanned=len(table), unreadable=sum(s.denied for s in table.values()))
    children: dict[int, list[int]] = {}
    for seen in table.values():
        children.setdefault(seen.ppid, []).append(seen.pid)
    tops = [s for s in table.values() if s.recognised and s.recognised.kind != "stagelens"
            and not _under_same_kind(s, table)]
    tops.sort(key=lambda s: (s.create_time, s.pid))
    scan.left_out = max(0, len(tops) - MAX_RESOLVED)
    for seen in tops[:MAX_RESOLVED]:
        scan.candidates.append(_resolve(seen, _tree(seen.pid, children)))
    for seen in table.values():
        if seen.recognised and seen.recognised.kind == "stagelens":
            _stagelens(seen, scan)
    return scan


def _read(proc: psutil.Process) -> _Seen | None:
    """The process's pid, parent and command line; None for one gone or a zombie (nothing to
    say)."""
    try:
        with proc.oneshot():
            argv = proc.cmdline()
            return _Seen(proc.pid, proc.ppid(), argv, proc.create_time(), recognise(argv))
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        # its command line is not ours to read (hidepid): it cannot be recognised as an engine
        return _Seen(proc.pid, 0, [], 0.0, None, denied=True)


def _under_same_kind(seen: _Seen, table: dict[int, _Seen]) -> bool:
    """Whether an ancestor runs the same engine: vLLM's API server forks its engine core and
    workers (or starts API servers of its own); the tree is one engine, its topmost process."""
    assert seen.recognised is not None
    parent, hops = table.get(seen.ppid), 0
    while parent is not None and hops < 64:
        if parent.recognised and parent.recognised.kind == seen.recognised.kind:
            return True
        parent, hops = table.get(parent.ppid), hops + 1
    return False


def _tree(pid: int, children: dict[int, list[int]]) -> list[int]:
    """`pid` and its descendants, the top first."""
    found, queue = list[int](), [pid]
    while queue and len(found) < 1024:
        top = queue.pop(0)
        found.append(top)
        queue.extend(children.get(top, []))
    return found


def _listening(pids: list[int], notes: list[str]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of each LISTEN socket of `pids`, in their order; a note for a process
    whose sockets cannot be read."""
    found: list[tuple[int, str, int]] = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.AccessDenied:
            notes.append(f"process {pid}: sockets not readable (permission denied)")
            continue
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        found += sorted((pid, c.laddr.ip, c.laddr.port) for c in conns
                        if c.status == psutil.CONN_LISTEN)
    return found


def _resolve(seen: _Seen, tree: list[int]) -> Candidate:
    assert seen.recognised is not None
    rec, notes = seen.recognised, list[str]()
    sockets = _listening(tree, notes)
    address, port, how = _choose_port(rec, sockets, seen.pid, notes)
    host = "127.0.0.1" if address in ANY_ADDRESS else address
    host = f"[{host}]" if ":" in host else host
    gpus, hostname = _environment(seen.pid, notes)
    words = printable(summary(seen.argv))
    return Candidate(seen.pid, rec.kind, seen.argv, rec, f"http://{host}:{port}",
                     f"process {seen.pid}: {words} {how}", seen.create_time, gpus, hostname, notes,
                     listening=how.startswith("listening"))


def _choose_port(rec: Recognised, sockets: list[tuple[int, str, int]], top: int,
                 notes: list[str]) -> tuple[str, int, str]:
    """The address and port clients reach it on, and how that was read: the socket on --port;
    without --port, the top process's socket on the engine's default port, else its lowest (a
    child's sockets are its engine core's or workers': read only where the top has none)."""
    own = [s for s in sockets if s[0] == top] or sockets
    wanted = rec.port or DEFAULT_PORT[rec.kind]
    match = next((s for s in sockets if s[2] == wanted), None)
    if match is None and rec.port is None and own:
        match = own[0]
    if match is not None:
        owner = "" if match[0] == top else f" (its child process {match[0]})"
        return match[1], match[2], f"listening on {match[1] or '*'}:{match[2]}{owner}"
    address = rec.host or "127.0.0.1"
    unread = any(n.endswith("sockets not readable (permission denied)") for n in notes)
    why = "its sockets not readable" if unread else "not listening there yet"
    if rec.port is not None:
        return address, rec.port, f"--port {rec.port} on its command line ({why})"
    return address, wanted, f"{rec.kind}'s default port {wanted} (no --port; {why})"


def _environment(pid: int, notes: list[str]) -> tuple[list[str] | None, str | None]:
    """CUDA_VISIBLE_DEVICES as a list (None when unset or unreadable) and HOSTNAME."""
    try:
        env = psutil.Process(pid).environ()
    except psutil.AccessDenied:
        notes.append(f"process {pid}: environment not readable (permission denied): "
                     "its GPUs unknown")
        return None, None
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None, None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    gpus = None if visible is None else [g.strip() for g in visible.split(",") if g.strip()]
    return gpus, env.get("HOSTNAME")


def _stagelens(seen: _Seen, scan: Scan) -> None:
    """A stagelens process: the ports it listens on are the agent's, never an engine's, but for
    the bundled engine's vLLM face (`serve --engine lab --vllm-face H:P`), an engine it hosts."""
    rec = seen.recognised
    assert rec is not None
    face_port = _port_of(rec.face)
    notes: list[str] = []
    for _, address, port in _listening([seen.pid], notes):
        if port != face_port:
            scan.agent_urls[_url(address, port)] = seen.pid
    if rec.listen and _port_of(rec.listen) is not None:
        host = rec.listen.rsplit(":", 1)[0].strip("[]")
        scan.agent_urls.setdefault(_url(host, _port_of(rec.listen) or 0), seen.pid)
    if rec.face and face_port is not None:
        host = rec.face.rsplit(":", 1)[0].strip("[]")
        url = _url(host, face_port)
        words = printable(summary(seen.argv))
        scan.candidates.append(Candidate(
            seen.pid, "vllm", seen.argv, rec, url,
            f"process {seen.pid}: {words}: the bundled engine's vLLM face on {host}:{face_port}",
            seen.create_time, notes=notes, listening=True))


def _url(address: str, port: int) -> str:
    host = "127.0.0.1" if address in ANY_ADDRESS else address
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def _port_of(host_port: str | None) -> int | None:
    if not host_port or ":" not in host_port:
        return None
    tail = host_port.rsplit(":", 1)[1]
    return int(tail) if tail.isdigit() and 0 < int(tail) < 65536 else None
