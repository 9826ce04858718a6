"""What-if of an engine read from outside: its served model's own name is the one model resident (no load
invented for it), its large blocks' last, partial block is the block size's floor, not fragmentation, as
the diagnosis counts it from outside; it takes requests as long as it was seen to serve (or as `--today
max-model-len=N` says), and what it would refuse or cut is said, never left to stall the simulation."""

import dataclasses

import pytest

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline
from stagelens.errors import UserError
from stagelens.whatif.fit import fit_steps
from stagelens.whatif.predict import predict
from stagelens.whatif.predict_all import today_settings, what_if
from stagelens.whatif.report import render_whatif
from stagelens.whatif.settings import Settings, parse_set
from stagelens.whatif.workload import Observed, ServedRequest
from tests.whatif.test_whatif_fit import synthetic_steps


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


def _spans_only(requests: list[ServedRequest]) -> Observed:
    """What an engine read from outside leaves: its requests' spans, none of its settings."""
    timelines = [RequestTimeline(r.request_id, r.model, r.prompt_tokens, r.output_tokens, r.arrival,
                                 chunks=[PrefillChunk(r.arrival, r.arrival + 0.01, r.prompt_tokens, 0)])
                 for r in requests]
    return Observed("spans.jsonl", requests, timelines=timelines)


LONG = ServedRequest("long", "m", 3.1, 3000, 5000)      # a long prompt and a long answer: 8,000 tokens in all


def test_an_outside_engine_takes_requests_as_long_as_it_was_seen_to_serve():
    """Not the bundled engine's 2,048 tokens: that ended the long request after one output token, silently."""
    observed = _spans_only([*_requests("m"), LONG])
    settings = today_settings(observed)
    assert settings.max_model_len == 8000
    prediction = predict(settings, fit_steps(synthetic_steps(200, noise=0.0)), observed.requests)
    (long,) = [r for r in prediction.simulation.requests if r.rid == "long"]
    assert long.outputs == 5000 and long.finished is not None
    assert prediction.figures["requests_cut_at_max_model_len"] == prediction.figures["requests_never_run"] == 0


def test_todays_max_model_len_can_be_given_and_a_request_it_cuts_is_said():
    observed = _spans_only([*_requests("m"), LONG])
    settings = today_settings(observed, parse_set(["max-model-len=4096"], "--today"))
    assert settings.max_model_len == 4096
    result = what_if(observed, [{"max_num_seqs": 4}], settings, cost=fit_steps(synthetic_steps(200, noise=0.0)))
    (long,) = [r for r in result.today.simulation.requests if r.rid == "long"]
    assert long.outputs == 4096 - 3000
    for prediction in (result.today, result.candidates[0][1]):
        assert prediction.to_dict()["requests_cut_at_max_model_len"] == 1
    text = render_whatif(result)
    assert ("an engine read from outside: max_model_len (4096 tokens); the longest request recorded held 8000 "
            "tokens") in text
    assert "1 of 41 requests cut at max_model_len (4096 tokens)" in text


def test_max_model_len_is_no_candidate_to_set():
    with pytest.raises(UserError, match="--set max-model-len: not a flag what-if can change"):
        parse_set(["max-model-len=4096"])


def test_a_request_the_engine_would_refuse_is_left_out_and_said_not_left_to_stall_the_queue():
    """A prompt past max_model_len (and past everything the KV cache holds) arriving first: the engine refuses it.
    Simulated, it held the head of the queue for ever: none of the others finished, and nothing said why."""
    settings = Settings.assumed(None, None)
    huge = ServedRequest("huge", "m", 0.0, 10**6, 20)
    observed = _spans_only([huge, *_requests("m")])
    result = what_if(observed, [{"policy": "short-first"}], settings, cost=fit_steps(synthetic_steps(200, noise=0.0)))
    for prediction in (result.today, result.candidates[0][1]):
        figures = prediction.to_dict()
        assert figures["requests_finished"] == 40 and figures["throughput_tokens_per_s"] > 0
        assert figures["requests_unfinished"] == 0 and figures["requests_never_run"] == 1
    never_run = "1 of 41 requests could never run: a prompt of max_model_len (2048 tokens) or more"
    assert never_run in render_whatif(result)


def test_an_outside_engine_whose_kv_cache_is_not_known_holds_its_longest_request():
    """No block count published: the assumed cache (the bundled engine's 16,384 tokens) grows to hold the
    longest request seen, as the engine's own must have, rather than refuse the what-if."""
    settings = Settings.assumed(None, None, longest=50_884).changed({})
    assert settings.max_model_len == 50_884 and settings.num_blocks * settings.block_size >= 50_884
    published = Settings.assumed(None, 1024, longest=50_884)     # 1,024 blocks of 16: the longest it could hold
    assert published.max_model_len == 16_384 and published.changed({}).num_blocks == 1024


def test_todays_max_model_len_is_taken_past_the_kv_cache_assumed_when_none_is_published():
    """No KV blocks published: the cache assumed grew to hold the longest request recorded, not the max_model_len
    `--today` gives, and `--today max-model-len=32768` was refused in words about --kv-cache-memory, a flag the user
    never gave (issue 49 item 1)."""
    observed = _spans_only([*_requests("m"), LONG])
    settings = today_settings(observed, parse_set(["max-model-len=32768"], "--today"))
    assert settings.max_model_len == 32768 and settings.num_blocks * settings.block_size >= 32768
    prediction = predict(settings, fit_steps(synthetic_steps(200, noise=0.0)), observed.requests)
    assert prediction.figures["requests_cut_at_max_model_len"] == prediction.figures["requests_never_run"] == 0


def test_todays_max_model_len_past_a_published_kv_cache_is_refused_naming_today():
    published = dataclasses.replace(_spans_only([*_requests("m"), LONG]), frames=[_vllm_frame(num_blocks=1024)])
    with pytest.raises(UserError, match=r"^--today max-model-len=32768: --kv-cache-memory: .* hold 16384 tokens"):
        today_settings(published, parse_set(["max-model-len=32768"], "--today"))


def _vllm_frame(num_blocks: int | None = None):
    """A frame of a vLLM read from outside: its block size and KV blocks, not its max_model_len."""
    from tests.helpers.frame_builders import engine_snapshot, frame

    snapshot = engine_snapshot(source="vllm", model="tiny-llama", max_model_len=None, max_num_batched_tokens=None,
                               enable_chunked_prefill=None, policy=None, models=None, max_num_seqs=None)
    snapshot["usage"] = None if num_blocks is None else {"num_blocks": num_blocks, "used_blocks": 10}
    return frame(0.0, snapshot)


def _long_prompts_bundle(path, count: int = 300) -> int:
    """A bundle as `record --engine vllm` writes it: vLLM's frames, its spans' timelines, `count` requests of
    3,000-token prompts; the output tokens served."""
    import json

    lines = [{"format": "stagelens-bundle/1", "created_unix": 0, "source": "record vllm http://e:8000"}]
    served = 0
    for i in range(count):
        arrival, outputs = i * 0.2, 20 + i % 31
        first = arrival + 0.3
        served += outputs
        timeline = RequestTimeline(f"r{i}", "tiny-llama", 3000, outputs, arrival, first + outputs * 0.02,
                                   first_token=first, finish_reason="length",
                                   chunks=[PrefillChunk(arrival + 0.01, first, 3000, 0)])
        lines.append({"kind": "timeline", "timeline": timeline.to_dict()})
    lines += [{"kind": "frame", "frame": _vllm_frame(num_blocks=4096).to_dict()}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return served


@pytest.mark.parametrize("today, longest", [([], 3050), (["--today", "max-model-len=8192"], 8192)])
def test_whatif_on_an_outside_recording_of_long_prompts_predicts_what_was_served(tmp_path, capsys, today, longest):
    """The issue's recording: 300 requests of 3,000-token prompts from a vLLM (which publishes no max_model_len).
    Under the bundled engine's 2,048 tokens none would run: 0 output tokens predicted against those served, TPOT
    none. The limit is the longest request served, or --today's."""
    import json

    from stagelens.cli import run

    path = tmp_path / "vllm.jsonl"
    served = _long_prompts_bundle(path)
    assert run(["whatif", "--replay", str(path), "--json", *today]) == 0
    doc = json.loads(capsys.readouterr().out)
    predicted = doc["today"]["predicted"]
    assert doc["today"]["settings"]["max_model_len"] == longest
    assert predicted["output_tokens"] == served and predicted["tpot_p50_s"] is not None
    assert predicted["requests_never_run"] == predicted["requests_cut_at_max_model_len"] == 0
