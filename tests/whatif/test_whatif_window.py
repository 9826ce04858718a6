"""A running agent's what-if window (`whatif --connect`) is held to the checks a bundle's lines are: a window that
lies (steps as a string, a field missing, NaN, a load's model an object, a step ending before it starts, settings
the engine would refuse) is one CollectError naming the answer and the field, never a TypeError, KeyError,
ZeroDivisionError or LinAlgError deep in the fit or the simulator."""

import copy
import math

import pytest

from stagelens.bundle import engine_settings
from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline
from stagelens.errors import CollectError
from stagelens.lab.bundled_engine import EngineConfig
from stagelens.whatif.predict_all import today_settings, what_if
from stagelens.whatif.workload import observed_from_window
from tests.whatif.test_whatif_fit import synthetic_steps

SOURCE = "http://127.0.0.1:9/api/v1/whatif/window"
SECONDS = "a finite number of seconds within 9.56e+10 of 0"


def _timeline(i: int) -> dict:
    arrival = 10.0 + i * 0.3
    return RequestTimeline(f"r{i}", "model-0", 40 + i, 8, arrival, finished=arrival + 0.4, first_token=arrival + 0.1,
                           chunks=[PrefillChunk(arrival + 0.02, arrival + 0.1, 40 + i, i)]).to_dict()


def window() -> dict:
    """What the hosted lab engine's window holds (agent/lab/host.py `whatif_window`)."""
    config = EngineConfig(model="tiny", device="cpu", dtype="float32", max_model_len=256)
    return {"timelines": [_timeline(i) for i in range(12)], "engine_config": engine_settings(config),
            "steps": synthetic_steps(60, noise=0.0), "loads": [{"model": "model-0", "start": 1.0, "end": 2.5,
                                                               "seconds": 1.5, "ok": True}]}


def test_a_window_as_an_agent_serves_it_is_replayed():
    observed = observed_from_window(SOURCE, window(), [])
    result = what_if(observed, [{"max_num_seqs": 2}], today_settings(observed))
    assert result.today.figures["requests_finished"] == 12 and result.today.settings.enable_chunked_prefill is True


def _set(path: str, value):
    """A change to the window: `path` is 'steps.0.start' and the like; `value` DROP removes the field."""
    def change(w: dict) -> None:
        *parents, last = path.split(".")
        node = w
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is DROP:
            del node[last]
        else:
            node[int(last) if isinstance(node, list) else last] = value
    return change


DROP = object()


@pytest.mark.parametrize("change, message", [
    (_set("steps", "abc"), "steps: must be a list, got 'abc'"),
    (_set("steps.3.start", DROP), "steps[3].start: missing"),
    (_set("steps.0.start", math.nan), f"steps[0].start: must be {SECONDS}, got nan"),
    (_set("steps.0.prefill_tokens", "64"), "steps[0].prefill_tokens: must be a finite number in [0, 2**53], got '64'"),
    (_set("steps.0.decode_seqs", 10**400), "steps[0].decode_seqs: must be a finite number in [0, 2**53], got a "
                                           "1329-bit number"),
    (_set("steps.0.loading", "no"), "steps[0].loading: must be true or false, got 'no'"),
    (_set("steps.5.end", 0.0), "steps[5]: ends (0.0) before it starts"),
    (_set("loads", {"model": "m"}), "loads: must be a list, got {'model': 'm'}"),
    (_set("loads.0", 7), "loads[0]: must be an object with model, start, end, seconds, ok, got 7"),
    (_set("loads.0.model", {"name": "m"}), "loads[0].model: must be a string, got {'name': 'm'}"),
    (_set("loads.0.seconds", None), "loads[0].seconds: must be a finite number in [0, 2**53], got null"),
    (_set("timelines", DROP), "timelines: must be a list, got null"),
    (_set("timelines.2.request_id", DROP), "timelines[2]: request_id: missing"),
    (_set("timelines.2.model", {"name": "m"}), "timelines[2]: model: must be a string or null, got {'name': 'm'}"),
    (_set("timelines.2.arrival", math.inf), f"timelines[2]: arrival: must be {SECONDS}, got inf"),
    (_set("timelines.2.first_token", 1.0), "timelines[2]: first_token: 1.0 is before the arrival (10.6)"),
    (_set("engine_config", "tiny"), "engine_config: must be an object, got 'tiny'"),
    (_set("engine_config.kv_bytes_per_token", 0), "engine_config: kv_bytes_per_token: must be what a token of "
                                                  "model 'tiny' takes (256 or 512 bytes), got 0"),
    (_set("engine_config.enable_chunked_prefill", "no"), "engine_config: enable_chunked_prefill: must be true or "
                                                         "false, got 'no'"),
    (_set("engine_config.max_model_len", DROP), "engine_config: max_model_len: missing"),
    (_set("engine_config.max_num_seqs", 0), "engine_config: --max-num-seqs: must be a whole number in [1, 1024]"),
])
def test_a_window_that_lies_is_one_error_naming_the_field(change, message):
    lying = copy.deepcopy(window())
    change(lying)
    with pytest.raises(CollectError) as caught:
        observed = observed_from_window(SOURCE, lying, [])
        what_if(observed, [], today_settings(observed))      # what ended in a TypeError and the like
    assert str(caught.value).startswith(f"{SOURCE}: {message}"), str(caught.value)


@pytest.mark.parametrize("answer", [[], "window", None])
def test_an_answer_that_is_not_a_window_is_named(answer):
    with pytest.raises(CollectError, match=f"^{SOURCE}: must be an object"):
        observed_from_window(SOURCE, answer, [])
