"""Routes that change state; each needs the bearer token."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.server.auth import TokenFirst, require_token

# TokenFirst checks the token before the body is parsed; the dependency says so in the OpenAPI
# document
router = APIRouter(dependencies=[Depends(require_token)], route_class=TokenFirst, tags=["control"])


class ScenarioStart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None,
                             description=f"one of {', '.join(SCENARIOS)}; null for none")
    fixed: bool = Field(default=False, description="apply the current diagnosis's recommendations")


@router.post("/api/v1/scenario")
def start_scenario(body: ScenarioStart, request: Request) -> dict:
    """Restart the hosted lab engine with a scenario (and, with `fixed`, the diagnosis's fix)."""
    runtime = request.app.state.runtime
    if runtime.lab is None:
        raise HTTPException(409, "no lab engine is hosted: start `stagelens serve --engine lab`")
    if body.name is not None and body.name not in SCENARIOS:
        raise HTTPException(422, f"unknown scenario {body.name!r}; known: {', '.join(SCENARIOS)}")
    applied = {}
    if body.fixed:
        from stagelens.lab.fixes import fix_flags

        d = runtime.latest_diagnosis()
        applied = fix_flags(d) if d else {}
    try:
        runtime.start_lab(body.name, applied)
    except UserError as exc:   # the running engine was not touched
        what = f"the fix {applied} for scenario {body.name!r}" if applied else f"scenario {body.name!r}"
        raise HTTPException(409, f"cannot start {what}: {exc}") from None
    return {"scenario": body.name, "applied": applied}


@router.post("/api/v1/bandwidth-probe")
async def bandwidth_probe(request: Request) -> dict:
    """Measure this node's plain copy bandwidth again (probes/bandwidth.py): what the device's
    memory does on a large copy. The diagnosis does not use it; attention is judged against its
    own ideal-layout curve."""
    from stagelens.probes.bandwidth import get_reference_bandwidth

    device = "cpu"
    lab = request.app.state.runtime.lab
    if lab is not None and lab.engine is not None:
        device = str(lab.engine.device)
    reference = await asyncio.to_thread(get_reference_bandwidth, device, refresh=True)
    return reference.to_dict()
