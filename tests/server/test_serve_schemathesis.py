"""Property-based requests from the OpenAPI spec against the real app: no input gives a 5xx, and the engine
keeps serving afterwards.

In `make test` the run is derandomized (the same cases every time, so CI cannot fail at random);
`make fuzz` sets STAGELENS_FUZZ_EXAMPLES and runs thousands of fresh cases. What a fuzz finds becomes a
seeded regression test (test_engine_faults.py, test_serve_hardening.py)."""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app

DGX = "tests/fixtures/nvml/dgx_a100.json"
TOKEN = "fuzz-token"
FUZZ_EXAMPLES = int(os.environ.get("STAGELENS_FUZZ_EXAMPLES", "0"))


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("schemathesis-models"))
    runtime = AgentRuntime(interval=0.5, nvml_snapshot=DGX, request_timeout=30, lab=LabSettings(
        {"model": "tiny", "max_model_len": 128, "kv_cache_memory": "1MiB", "device": "cpu", "model_dir": model_dir},
        None))
    runtime.start()
    runtime.sampler.tick()
    yield runtime
    runtime.stop()


@pytest.fixture(scope="module")
def api_schema(runtime):
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(runtime, token=TOKEN))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=FUZZ_EXAMPLES or 25, derandomize=not FUZZ_EXAMPLES, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@pytest.mark.slow
def test_no_input_breaks_the_server(case, runtime):
    body = case.body
    if case.path == "/v1/completions" and isinstance(body, dict) and isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = max(1, min(body["max_tokens"], 8))   # keep generation short
    if case.path == "/api/v1/scenario" and isinstance(body, dict) and body.get("name") not in (None, "healthy"):
        body["name"] = None       # restart the bare engine: a scenario's workload would load the fuzz run
    if case.path == "/api/v1/bandwidth-probe":
        pytest.skip("measures memory bandwidth for seconds; its input is empty (covered in test_serve_hardening)")
    response = case.call(headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code} {response.text[:300]}"
    trouble = runtime.lab.trouble()
    assert trouble is None or "restarting" in trouble, trouble
