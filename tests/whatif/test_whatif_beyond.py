"""The step cost past the recorded range: the bundled engine's real profile (tiny model, CPU), its cache, and
the widened cost that is the recording's own fit inside the range and the profile's growth beyond it."""

import json

import pytest

from stagelens.lab.step_profile import cache_path, profiled_steps
from stagelens.whatif.beyond import calibrated, fit_profile
from stagelens.whatif.fit import BUSY_GAP_S, duration, fit_steps


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    import torch

    cache = tmp_path_factory.mktemp("cache")
    # one thread: beside the other test worker's torch on a 2-core CI machine, a 2-thread batch of 128 waited on
    # its threads' barrier (90 ms a step against 5 ms alone), more than 128 steps of one sequence
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("XDG_CACHE_HOME", str(cache))
            steps, path, measured = profiled_steps("tiny", "float32", "cpu")
            again, _, measured_again = profiled_steps("tiny", "float32", "cpu")
    finally:
        torch.set_num_threads(threads)
    return steps, path, measured, again, measured_again


@pytest.mark.slow
def test_a_profile_is_measured_once_then_read_from_its_cache(profile):
    steps, path, measured, again, measured_again = profile
    assert measured and not measured_again
    assert again == steps and path.exists()
    assert max(s["decode_seqs"] for s in steps) >= 128 and max(s["prefill_tokens"] for s in steps) >= 2048


def test_a_corrupt_profile_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cache_path("tiny", "float32", "cpu")
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "stagelens-step-profile/1", "steps": [{"start": "soon"}]}')
    steps, _, measured = profiled_steps("tiny", "float32", "cpu")
    assert measured and steps
    assert json.loads(path.read_text())["steps"] == steps


def test_the_engines_decode_step_costs_less_a_sequence_as_the_batch_grows(profile):
    """What one slope fitted on small batches cannot know: the engine's step of 128 sequences costs far less than
    128 steps of 1. Each is read as its fastest step: a busy machine only adds time, and the profile holds 5 steps
    of 128, so on CI the middle one was preempted too (83 ms against 1.2 ms a step of 1; 0.03x here)."""
    def fastest_decode(batch: int) -> float:
        return min(s["end"] - s["start"] for s in profile[0] if s["decode_seqs"] == batch and not s["prefill_tokens"])

    assert fastest_decode(128) < 0.5 * 128 * fastest_decode(1)


def test_the_profiles_fit_prices_each_stretch_of_the_batch_by_its_own_slope():
    """Fitted on a known engine whose sequences cost 0.5 ms each up to 4 and 0.1 ms past: never less for more
    work, and a batch of 128 at what it costs, not at 128 times a batch of 1's share."""
    cost = fit_profile(_steps_of([(0, d, 0) for d in (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)]
                                 + [(p, 0, 0) for p in (16, 64, 256, 1024)]))
    times = [cost.seconds(0, 0, b, 0) for b in range(0, 200)]
    assert all(a <= b for a, b in zip(times, times[1:], strict=False))
    assert cost.seconds(0, 0, 128, 0) == pytest.approx(_engine_step_seconds(0, 128, 0), rel=0.02)


def _engine_step_seconds(prefill: int, decode: int, kv: int) -> float:
    """A known engine: a decode sequence costs 0.5 ms up to 4 at once, 0.1 ms each past that (the batch's matmul
    grows cheaper a row), plus 1 µs a KV token held and 20 µs a prefill token."""
    return 1e-3 + 5e-4 * min(decode, 4) + 1e-4 * max(0, decode - 4) + 1e-6 * kv + 2e-5 * prefill


def _steps_of(cells) -> list[dict]:
    steps, t = [], 0.0
    for i, (prefill, decode, kv) in enumerate(cells):
        seconds = _engine_step_seconds(prefill, decode, kv)
        steps.append({"index": i, "start": t, "end": t + seconds, "prefill_tokens": prefill, "prefill_pairs": 0,
                      "decode_tokens": decode, "prefill_seqs": int(prefill > 0), "decode_seqs": decode,
                      "kv_tokens_cached": kv, "kv_slots_reserved": kv, "waiting": 0, "running": decode,
                      "preempted": 0, "loading": False, "forwards": 1})
        t += seconds + 0.5
    return steps


def test_the_widened_cost_is_the_recordings_own_inside_its_range_and_the_profiles_growth_beyond():
    """A profile of a known engine over batches to 128, a recording of batches up to 4: inside the recorded range
    the widened cost is the recording's fit itself; at 128 it prices the engine's steps as they are, where the
    fit's straight line (0.5 ms a sequence) prices them at over three times that."""
    profile = _steps_of([(p, d, 40 * d) for d in (0, 1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
                         for p in ((0,) if d else (16, 64, 256, 1024))])
    recorded = _steps_of([(p, d, 40 * d) for d in (1, 2, 3, 4) for p in (0, 0, 32, 64)] * 3)
    fitted = fit_steps(recorded, sequential=False)
    wide = fitted.with_beyond(calibrated(fit_profile(profile), recorded, BUSY_GAP_S), 1.0)
    for batch in (1, 2, 4):
        assert wide.seconds(0, 0, batch, 40 * batch, False) == fitted.seconds(0, 0, batch, 40 * batch, False)
    truth = _engine_step_seconds(0, 128, 40 * 128)
    predicted, outside = wide.seconds(0, 0, 128, 40 * 128, False)
    straight, _ = fitted.seconds(0, 0, 128, 40 * 128, False)
    assert outside and predicted == pytest.approx(truth, rel=0.1)
    assert straight > 3 * truth


def test_durations_read_in_units_a_person_uses():
    assert [duration(s) for s in (0, 2.5, 0.0112, 0.000236, 5.2e-7)] == ["0", "2.5 s", "11.2 ms", "236 µs",
                                                                          "520 ns"]


def _recorded(source, batches, seconds_of) -> list[dict]:
    """Recorded steps of `batches` (prefill tokens, decoding sequences, KV tokens), each taking
    `seconds_of(steady part, prefill part)` of the profile's."""
    recorded, t = [], 0.0
    for i, (prefill, decode, kv) in enumerate(batches):
        seconds = seconds_of(*source.parts(prefill, prefill * 300, decode, kv))
        recorded.append({"index": i, "start": t, "end": t + seconds, "prefill_tokens": prefill,
                         "prefill_pairs": prefill * 300, "decode_tokens": decode, "prefill_seqs": int(prefill > 0),
                         "decode_seqs": decode, "kv_tokens_cached": kv, "kv_slots_reserved": kv, "waiting": 0,
                         "running": decode, "preempted": 0, "loading": False, "forwards": 1})
        t += seconds + 0.5
    return recorded


def test_the_profile_is_scaled_to_a_recording_part_by_part(profile):
    """A recording whose decodes ran 1.5 times and prefills 2.5 times as long as the profile's: each part gets
    its own factor back (one factor would price a larger prefill by the decodes' slowdown)."""
    source = fit_profile(profile[0])
    batches = [(0, 2, 200), (64, 2, 300), (0, 6, 700), (256, 4, 900)] * 10
    scaled = calibrated(source, _recorded(source, batches, lambda steady, prefill: 1.5 * steady + 2.5 * prefill),
                        BUSY_GAP_S)
    assert scaled.steady_scale == pytest.approx(1.5, rel=1e-6)
    assert scaled.prefill_scale == pytest.approx(2.5, rel=1e-6)
    assert scaled.prefill_step_s == 0


def test_a_prefill_steps_own_fixed_time_is_told_from_its_slope(profile):
    """The served engine spends a fixed time on each step that prefills (scheduling, sampling, hooks) that the bare
    forward lacks. Recorded chunks of 8 to 64 tokens tell it from the per-token slope, so a prefill of 512 is priced
    by the slope alone; a recording whose chunks are all of one size cannot tell them apart and keeps one factor."""
    source = fit_profile(profile[0])

    def served(steady, prefill):
        return 1.3 * steady + 1.1 * prefill + (0.008 if prefill else 0.0)

    varied = [(0, 2, 200), (8, 2, 210), (16, 2, 230), (64, 2, 300), (48, 3, 400)] * 10
    scaled = calibrated(source, _recorded(source, varied, served), BUSY_GAP_S)
    assert (scaled.steady_scale, scaled.prefill_scale, scaled.prefill_step_s) == pytest.approx((1.3, 1.1, 0.008),
                                                                                               rel=1e-3)
    steady, prefill = source.parts(512, 512 * 300, 2, 800)
    assert scaled.seconds(512, 512 * 300, 2, 800) == pytest.approx(served(steady, prefill), rel=1e-3)
    one_size = calibrated(source, _recorded(source, [(0, 2, 200), (64, 2, 300)] * 20, served), BUSY_GAP_S)
    assert one_size.prefill_step_s == 0 and one_size.prefill_scale > 1.1
