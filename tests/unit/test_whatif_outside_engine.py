"""What-if of an engine read from outside: its served model's own name is the one model resident (no load
invented for it), and its large blocks' last, partial block is the block size's floor, not fragmentation, as
the diagnosis counts it from outside."""

import dataclasses

from agent.whatif.fit import fit_steps
from agent.whatif.predict import predict
from agent.whatif.settings import Settings
from agent.whatif.workload import ServedRequest
from tests.unit.test_whatif_fit import synthetic_steps


def _requests(model: str, n: int = 40) -> list[ServedRequest]:
    return [ServedRequest(f"r{i}", model, i * 0.2, 40 + i % 7, 20) for i in range(n)]


def test_an_engines_own_model_name_is_its_resident_model():
    outside = Settings.assumed(None, None)
    cost = fit_steps(synthetic_steps(200, noise=0.0))
    named = predict(outside, cost, _requests("tiny-llama"))
    assert named.figures["model_loads"] == 0 and named.stages["cold_path"]["state"] == "ok"
    assert named.figures["ttft_p99_s"] == predict(outside, cost, _requests("model-0")).figures["ttft_p99_s"]


def test_a_second_name_beyond_the_models_served_is_a_model_to_load():
    outside = Settings.assumed(None, None)
    cost = fit_steps(synthetic_steps(200, noise=0.0))
    two = _requests("tiny-llama")[:20] + [dataclasses.replace(r, model="other") for r in _requests("x")[20:]]
    assert predict(outside, cost, two).figures["model_loads"] >= 1


def test_a_large_blocks_floor_is_fragmentation_only_for_the_bundled_engines_hooks():
    """128-token blocks, 40-token requests: two thirds of each block empty. From outside that is the block
    size's floor (ok); the bundled engine's hooks count every empty slot (firing), and so does its prediction."""
    outside = dataclasses.replace(Settings.assumed(None, None), block_size=128)
    bundled = dataclasses.replace(outside, read_from_outside=False)
    cost = fit_steps(synthetic_steps(200, noise=0.0))
    assert predict(outside, cost, _requests("m")).stages["kv_cache"]["state"] == "ok"
    assert predict(bundled, cost, _requests("m")).stages["kv_cache"]["state"] == "firing"
