"""An HTTP load generator for any OpenAI-compatible `/v1/completions`: asyncio and httpx, streaming.

Open loop: requests leave at the seeded Poisson arrival times of the workload plan, whether or not
the server keeps up (a closed loop would slow down with the server and hide its queue). Closed loop
with `concurrency`: that many requests in flight. Prompts are token-id lists, so their lengths are
exact on any server. Client-side TTFT is the time to the first streamed chunk that carries text.
Bounded: at most `max_requests` requests, each within `request_timeout`, and in-flight ones are
given `drain_timeout` after arrivals stop; what is still open then is cancelled and counted as
failed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from stagelens.lab.workload import PlannedRequest, WorkloadConfig, WorkloadPlan


@dataclass
class RequestRecord:
    sent: float                                   # seconds from the start of the run
    prompt_tokens: int
    max_tokens: int
    first_chunk: float | None = None
    done: float | None = None
    chunk_times: list[float] = field(default_factory=list)   # one per chunk carrying text
    # the server's usage when it says, else chunks with text
    output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.done is not None


@dataclass
class LoadRun:
    records: list[RequestRecord]
    started: float                                # time.monotonic() at the start
    duration: float

    @property
    def finished(self) -> int:
        return sum(1 for r in self.records if r.ok)

    def tokens_between(self, a: float, b: float) -> int:
        return sum(1 for r in self.records for t in r.chunk_times if a <= t < b)


@dataclass
class LoadOptions:
    # prompt token ids are drawn below this: valid for any real vocabulary
    vocab_size: int = 256
    max_model_len: int = 2048
    # the `model` field; None: the plan's model with --models > 1, else omitted
    served_model: str | None = None
    ignore_eos: bool = False
    request_timeout: float = 60.0
    drain_timeout: float = 60.0
    max_requests: int = 100_000
    max_connections: int = 1000


def _body(p: PlannedRequest, cfg: WorkloadConfig, opts: LoadOptions) -> dict:
    body = {"prompt": p.prompt, "max_tokens": p.max_tokens, "temperature": cfg.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    model = opts.served_model or (p.model if cfg.models > 1 else None)
    if model:
        body["model"] = model
    if opts.ignore_eos:
        body["ignore_eos"] = True
    return body


async def _one(client, url: str, p: PlannedRequest, cfg: WorkloadConfig, opts: LoadOptions,
               t0: float, record: RequestRecord) -> None:
    usage_tokens = None
    try:
        async with client.stream("POST", url, json=_body(p, cfg, opts), timeout=opts.request_timeout) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode("utf-8", "replace")
                record.error = f"HTTP {r.status_code}: {text[:200]}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    record.done = time.monotonic() - t0
                    break
                chunk = json.loads(data)
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    now = time.monotonic() - t0
                    if record.first_chunk is None:
                        record.first_chunk = now
                    record.chunk_times.append(now)
                if choices and choices[0].get("finish_reason"):
                    record.finish_reason = choices[0]["finish_reason"]
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
            if record.done is None:
                record.error = "the stream ended without [DONE]"
    except asyncio.CancelledError:
        record.error = "cancelled: still open when the drain timeout ran out"
        raise
    except Exception as exc:   # one failed request is a figure, not the end of the run
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.output_tokens = usage_tokens if usage_tokens is not None else len(record.chunk_times)


async def generate_load(base_url: str, cfg: WorkloadConfig, opts: LoadOptions | None = None,
                        on_progress=None) -> LoadRun:
    """Drive `base_url` with the workload `cfg` for `cfg.duration` seconds, then wait for what is
    in flight."""
    import httpx

    opts = opts or LoadOptions()
    url = base_url.rstrip("/") + "/v1/completions"
    plan = WorkloadPlan(cfg, opts.vocab_size, opts.max_model_len)
    records: list[RequestRecord] = []
    tasks: list[asyncio.Task] = []
    limits = httpx.Limits(max_connections=opts.max_connections,
                          max_keepalive_connections=opts.max_connections)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(opts.request_timeout, connect=10.0)) as client:
        t0 = time.monotonic()
        deadline = t0 + cfg.duration

        def launch(p: PlannedRequest) -> asyncio.Task:
            record = RequestRecord(time.monotonic() - t0, len(p.prompt), p.max_tokens)
            records.append(record)
            task = asyncio.create_task(_one(client, url, p, cfg, opts, t0, record))
            tasks.append(task)
            if on_progress:
                on_progress(records)
            return task

        if cfg.concurrency is None:
            while len(records) < opts.max_requests:
                p = plan.next()
                if t0 + p.at >= deadline:
                    break
                await asyncio.sleep(max(0.0, t0 + p.at - time.monotonic()))
                launch(p)
        else:
            async def worker() -> None:
                while time.monotonic() < deadline and len(records) < opts.max_requests:
                    await launch(plan.next())
            workers = [asyncio.create_task(worker()) for _ in range(cfg.concurrency)]
            await asyncio.wait(workers,
                               timeout=max(0.0, deadline - time.monotonic()) + opts.drain_timeout)
            for w in workers:
                w.cancel()
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=opts.drain_timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return LoadRun(records, t0, cfg.duration)
