"""Property-based requests from the OpenAPI spec against the real app: no input gives a 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from agent.runtime import AgentRuntime, LabSettings
from agent.server.app import create_app

DGX = "tests/fixtures/nvml/dgx_a100.json"


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("schemathesis-models"))
    runtime = AgentRuntime(interval=0.5, nvml_snapshot=DGX, lab=LabSettings(
        {"model": "tiny", "max_model_len": 128, "kv_cache_memory": "1MiB", "device": "cpu", "model_dir": model_dir},
        None))
    runtime.start()
    runtime.sampler.tick()
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(runtime, token="not-given-to-clients"))
    runtime.stop()


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_breaks_the_server(case):
    body = case.body
    if case.path == "/v1/completions" and isinstance(body, dict) and isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = max(1, min(body["max_tokens"], 8))   # keep generation short
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code} {response.text[:300]}"
