"""The clients of a soak against `/v1/completions`: well-behaved ones, ones that leave early, hostile ones.

Each request ends in one `Outcome`. A request is *lost* when it neither completed nor got an answer with
a reason: a client that stayed got no response, our timeout ran out, a 5xx (or a 5xx error event in a
stream), a stream without `[DONE]`. A 4xx is an answer with a reason, never lost. Clients that leave
on purpose cannot be lost once they have sent (or seen their first token).

Hostile bodies go over a raw socket that stops writing once an answer comes, as curl does: a server
may answer 413 and close before a 2 MB body is all sent, and the write that then fails must not cost
the answer (an asyncio transport drops what it had read when a write fails).
The `/metrics` scraper runs in its own process, so this process's event loop and GIL do not add to
the latency it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import random
import select
import socket
import time
from dataclasses import dataclass

from stagelens.lab.workload import WorkloadConfig, WorkloadPlan

PATH = "/v1/completions"
LEAVER_MAX_TOKENS = 256      # long enough that the server must abort, not finish, a client that left

# Hostile kinds and the status each must get.
INVALID = {"bad_json": 400, "max_tokens_0": 400, "prompt_too_long": 400, "unknown_model": 404,
           "unsupported_n": 400, "nan": 400, "infinity": 400, "oversized": 413}
NORMAL = ("complete", "stream")
LEAVING = ("leave_at_once", "stream_leave_after_first")
KINDS = NORMAL + LEAVING + tuple(INVALID)
OVERSIZED_BYTES = 2 * 2**20


@dataclass
class Outcome:
    kind: str
    sent: float                       # seconds from the start of the soak
    status: int | None = None         # HTTP status; None when none came (or the client did not wait)
    seconds: float | None = None      # from sending to the answer (a stream: to its end)
    chunks: int = 0                   # streamed chunks carrying text
    finish_reason: str | None = None
    lost: str | None = None           # why it counts as lost; None when answered (or left on purpose)


def invalid_body(kind: str, prompt: list[int], max_model_len: int) -> bytes:
    """The raw body of a hostile request of `kind`."""
    if kind == "bad_json":
        return b'{"prompt": "hi", "max_tokens": 8'
    if kind == "nan":
        return b'{"prompt":"hi","temperature":NaN}'
    if kind == "infinity":
        return b'{"prompt":"hi","max_tokens":8,"temperature":Infinity}'
    if kind == "oversized":
        return b'{"prompt":"' + b"a" * OVERSIZED_BYTES + b'"}'
    body = {"prompt": prompt, "max_tokens": 8}
    if kind == "max_tokens_0":
        body["max_tokens"] = 0
    elif kind == "prompt_too_long":
        body["prompt"] = (prompt * (max_model_len // max(1, len(prompt)) + 2))[:max_model_len + 1]
    elif kind == "unknown_model":
        body["model"] = "no-such-model"
    elif kind == "unsupported_n":
        body["n"] = 2
    return json.dumps(body).encode()


def _head(host: str, port: int, length: int) -> bytes:
    return (f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()


async def send_and_leave(host: str, port: int, body: bytes, out: Outcome) -> None:
    """Send the whole request, then close the socket at once."""
    try:
        _, writer = await asyncio.open_connection(host, port)
        writer.write(_head(host, port, len(body)) + body)
        await writer.drain()
        writer.close()
    except OSError as exc:
        out.lost = f"could not send: {type(exc).__name__}"


def _post_reading(host: str, port: int, data: bytes, timeout: float) -> bytes:
    """Send `data` as curl does: stop sending as soon as the server answers; then read the status line.
    A blocking socket, checked for an answer before each write, so a write that fails on a server that
    already closed cannot throw away the answer it sent first (as an asyncio transport would)."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as s:
        view, sent = memoryview(data), 0
        while sent < len(data):
            readable, writable, _ = select.select([s], [s], [], max(0.0, deadline - time.monotonic()))
            if readable or not writable:
                break
            try:
                sent += s.send(view[sent:sent + (1 << 16)])
            except OSError:
                break
        got = b""
        while b"\r\n" not in got:
            s.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = s.recv(4096)
            except OSError:
                if got:
                    break
                raise
            if not chunk:
                break
            got += chunk
        return got


async def raw_post(host: str, port: int, body: bytes, timeout: float, out: Outcome) -> None:
    """A raw body; the status of whatever answer comes, even one sent before the body was all read."""
    t0 = time.monotonic()
    try:
        data = await asyncio.to_thread(_post_reading, host, port, _head(host, port, len(body)) + body, timeout)
    except TimeoutError:
        out.lost = "no answer within our timeout"
        return
    except OSError as exc:
        out.lost = f"connection broken without an answer: {type(exc).__name__}"
        return
    finally:
        out.seconds = time.monotonic() - t0
    parts = data.split(b"\r\n", 1)[0].split()
    if len(parts) >= 2 and parts[1].isdigit():
        out.status = int(parts[1])
        if out.status >= 500:
            out.lost = f"HTTP {out.status}"
    else:
        out.lost = "the connection closed without an answer"


async def complete(client, url: str, body: dict, timeout: float, out: Outcome) -> None:
    t0 = time.monotonic()
    try:
        r = await client.post(url, json=body, timeout=timeout)
    except Exception as exc:   # a request that broke is a figure, not the end of the soak
        out.lost = f"{type(exc).__name__}: {exc}"[:200]
        return
    out.seconds, out.status = time.monotonic() - t0, r.status_code
    if r.status_code >= 500:
        out.lost = f"HTTP {r.status_code}"
    elif r.status_code == 200:
        with contextlib.suppress(ValueError, AttributeError):     # not JSON, or not the shape: lost below
            out.finish_reason = (r.json().get("choices") or [{}])[0].get("finish_reason")
        if out.finish_reason is None:
            out.lost = "200 without a finish_reason"


async def stream(client, url: str, body: dict, timeout: float, out: Outcome, leave_after_first: bool) -> None:
    """A streaming request: chunks counted, `[DONE]` required; or, leaving, closed at the first token."""
    t0 = time.monotonic()
    done = False
    try:
        async with client.stream("POST", url, json=body, timeout=timeout) as r:
            out.status = r.status_code
            if r.status_code != 200:
                await r.aread()
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:     # the server failed it mid-stream: its code is the status
                        out.status = int(chunk["error"].get("code") or 500)
                        continue
                    choices = chunk.get("choices") or []
                    if choices and choices[0].get("text"):
                        out.chunks += 1
                    if choices and choices[0].get("finish_reason"):
                        out.finish_reason = choices[0]["finish_reason"]
                    if leave_after_first and out.chunks:
                        return      # leaving the block closes the connection mid-stream
    except Exception as exc:
        out.lost = f"{type(exc).__name__}: {exc}"[:200]
        return
    finally:
        out.seconds = time.monotonic() - t0
    if out.status is not None and out.status >= 500:
        out.lost = f"HTTP {out.status}"
    elif out.status == 200 and not done:
        out.lost = "the stream ended without [DONE]"
    elif out.status == 200 and out.finish_reason is None and not leave_after_first:
        out.lost = "[DONE] without a finish_reason"


async def one(kind: str, client, host: str, port: int, prompt: list[int], max_tokens: int, max_model_len: int,
              timeout: float, out: Outcome) -> None:
    url = f"http://{host}:{port}{PATH}"
    if kind in INVALID:
        await raw_post(host, port, invalid_body(kind, prompt, max_model_len), min(timeout, 30.0), out)
    elif kind == "leave_at_once":
        body = {"prompt": prompt, "max_tokens": LEAVER_MAX_TOKENS}
        await send_and_leave(host, port, json.dumps(body).encode(), out)
    elif kind == "complete":
        await complete(client, url, {"prompt": prompt, "max_tokens": max_tokens}, timeout, out)
    else:
        leaving = kind == "stream_leave_after_first"
        body = {"prompt": prompt, "max_tokens": LEAVER_MAX_TOKENS if leaving else max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        await stream(client, url, body, timeout, out, leaving)


async def run_mix(host: str, port: int, cfg: WorkloadConfig, mix: dict[str, float], max_model_len: int,
                  vocab_size: int = 256, timeout: float = 60.0, drain: float = 60.0) -> list[Outcome]:
    """Seeded Poisson arrivals at `cfg.rate` for `cfg.duration` s, each of a kind drawn from `mix`; then
    in-flight requests get `drain` s. Prompts and lengths come from the workload plan, so they replay."""
    import httpx

    plan = WorkloadPlan(cfg, vocab_size, max_model_len)
    pick = random.Random(cfg.seed + 1)     # the kinds from their own stream: the plan's lengths do not shift
    kinds, weights = list(mix), list(mix.values())
    outcomes: list[Outcome] = []
    tasks: list[asyncio.Task] = []
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout, connect=10.0)) as client:
        t0 = time.monotonic()
        while True:
            p = plan.next()
            if p.at >= cfg.duration:
                break
            kind = pick.choices(kinds, weights)[0]
            await asyncio.sleep(max(0.0, t0 + p.at - time.monotonic()))
            out = Outcome(kind, time.monotonic() - t0)
            outcomes.append(out)
            tasks.append(asyncio.create_task(one(kind, client, host, port, p.prompt, p.max_tokens, max_model_len,
                                                 timeout, out)))
        await asyncio.sleep(max(0.0, t0 + cfg.duration - time.monotonic()))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=drain)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    for out in outcomes:
        if out.lost is None and out.status is None and out.kind not in LEAVING:
            out.lost = "still open when the drain ran out"
    return outcomes


def labelled(text: str, name: str, label: str) -> dict[str, float]:
    """`{label value: sample value}` of one metric family in Prometheus text exposition."""
    out = {}
    prefix = name + "{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, value = line[len(prefix):].rpartition("} ")
        for pair in labels.split(","):
            key, _, quoted = pair.partition("=")
            if key == label:
                out[quoted.strip('"')] = out.get(quoted.strip('"'), 0.0) + float(value)
    return out


def scrape_loop(host: str, port: int, interval: float, seconds: float, results,
                paths: tuple[str, ...] = ("/metrics", "/healthz")) -> None:
    """Run in a process of its own: GET each of `paths` every `interval` s for `seconds`, over one
    kept-alive connection (as Prometheus does). `/healthz` goes the same way through the server without
    rendering anything: what it costs is the server's load, what /metrics costs beyond it is the render.
    Puts `({path: latencies in seconds}, failures)` on `results`."""
    latencies: dict[str, list[float]] = {path: [] for path in paths}
    failures, parent = 0, os.getppid()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while next_at < end and os.getppid() == parent:    # the soak killed outright: stop with it
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += interval
        for path in paths:
            t = time.perf_counter()
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    latencies[path].append(time.perf_counter() - t)
                else:
                    failures += 1
            except (OSError, http.client.HTTPException):
                failures += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.close()
    results.put((latencies, failures))
