"""The FastAPI application around an `AgentRuntime`."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from stagelens.server import api, chat, completions, control, errors, models
from stagelens.server.frames_stream import HeavyReads
from stagelens.server.limits import MAX_BODY_BYTES, BodyLimit


def create_app(runtime, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="stagelens", version="0.1.0", redirect_slashes=False,
                  description="Which LLM-serving bottleneck stage is firing: KV cache, scheduler or cold path.")
    app.state.runtime = runtime
    app.state.token = token
    # /api/v1/frames reads of a long history, bounded in number
    app.state.heavy_reads = HeavyReads()
    errors.install(app)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.get("/metrics", tags=["metrics"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus exposition; OpenMetrics (with trace-id exemplars) when the scraper asks for
        it."""
        accept = request.headers.get("accept")
        # a page already rendered (the sampler renders each frame's) is served from the event loop:
        # a hop to a worker thread waited on the GIL behind the intake's decoding
        page = runtime.metrics.ready(accept)
        body, content_type = page if page is not None else await run_in_threadpool(runtime.metrics.render, accept)
        return Response(body, media_type=content_type)

    app.include_router(api.router)
    app.include_router(control.router)
    app.include_router(models.router)
    app.include_router(completions.router)
    app.include_router(chat.router)
    return app
