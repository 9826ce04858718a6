"""Read-only routes: diagnosis, topology, frames, slowest requests, health."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from stagelens.server.frames_stream import FramesResponse

router = APIRouter()


@router.get("/healthz", tags=["health"])
def healthz() -> dict:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz", tags=["health"])
def readyz(request: Request):
    """Ready once a sample has been taken (and the lab engine, if hosted, runs)."""
    ok, why = request.app.state.runtime.ready()
    return JSONResponse({"status": "ready" if ok else "not ready", "detail": why},
                        status_code=200 if ok else 503)


@router.get("/api/v1/diagnosis", tags=["diagnosis"])
def diagnosis(request: Request) -> dict:
    """The current verdict: the `diagnose --json` document, with `fix`: the recommended settings
    and their predicted effect on the recent window, when a stage recommends an engine setting."""
    runtime = request.app.state.runtime
    d = runtime.latest_diagnosis()
    if d is None:
        raise HTTPException(503, "no sample taken yet: retry in a second")
    document = d.to_dict()
    # the fix's predicted effect (stagelens whatif), when there is a fix
    effect = runtime.predicted_fix(d)
    if effect is not None:
        document["fix"] = effect
    return document


@router.get("/api/v1/config", tags=["diagnosis"])
def config(request: Request) -> dict:
    """The thresholds and hysteresis this agent judges with, in the `--config` file's shape."""
    return request.app.state.runtime.diagnosis_config.to_dict()


@router.get("/api/v1/topology", tags=["node"])
def topology(request: Request) -> dict:
    """The `topo --json` document of this node."""
    from stagelens.probes.errors import NoDriverError
    from stagelens.probes.topology import topology_json

    try:
        return topology_json(request.app.state.runtime.backend)
    except NoDriverError as exc:
        raise HTTPException(503, f"no NVIDIA driver: {exc}") from None


FRAMES_LIMIT = 120           # two minutes at the default interval: what the TUI plots
MAX_FRAMES_LIMIT = 100_000   # past any history (`serve --history`)
HEAVY_FRAMES = FRAMES_LIMIT  # a read of more is bounded in how many run at once


@router.get("/api/v1/frames", tags=["frames"])
def frames(request: Request,
           since: float | None = Query(default=None, ge=0,
                                       description="only frames taken after this Unix time"),
           limit: int = Query(default=FRAMES_LIMIT, ge=1, le=MAX_FRAMES_LIMIT,
                              description="at most this many frames, the newest")) -> list:
    """Frames kept in the agent's history, oldest first: the newest `limit` of those after
    `since`. A frame of an 8-GPU node is some 50 KB of JSON, so the whole history is never the
    default; the answer is streamed (agent/server/frames_stream.py), and at most a few reads of
    more than 120 frames run at once."""
    chosen = request.app.state.runtime.frames(since)[-limit:]
    heavy = request.app.state.heavy_reads if len(chosen) > HEAVY_FRAMES else None
    if heavy is not None:
        heavy.enter()
    return FramesResponse(chosen, heavy)


@router.get("/api/v1/requests/slowest", tags=["requests"])
def slowest(request: Request, n: int = Query(default=10, ge=1, le=1000)) -> list:
    """The slowest recent requests with their timelines (waits with reasons, prefill chunks,
    preemptions)."""
    return request.app.state.runtime.slowest_requests(n)


@router.get("/api/v1/whatif/window", tags=["requests"])
def whatif_window(request: Request) -> dict:
    """What `stagelens whatif --connect` replays: the recent finished requests' timelines and,
    for the hosted lab engine, its settings, steps and model loads (the flight recorder's rings:
    the last few thousand)."""
    return request.app.state.runtime.whatif_window()
