"""The step cost fitted on synthetic steps of known cost: the coefficients come back, the error on the steps is
reported, and a batch far past those seen is flagged as outside the fitted range."""

import random

import pytest

from stagelens.whatif.fit import FitError, fit_steps


def synthetic_steps(n: int, noise: float, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    steps, t = [], 0.0
    for i in range(n):
        prefill = rng.choice([0, 0, 0, 64, 200, 512])
        decode = rng.randint(0 if prefill else 1, 16)
        kv = rng.randint(100, 4000)                    # tokens the running sequences hold
        context = rng.randint(0, 1000) if prefill else 0
        pairs = prefill * (context + prefill)
        forwards = rng.choice([1, 1, 2])
        loading = rng.random() < 0.1
        seconds = (0.004 + 2e-5 * prefill + 3e-8 * pairs + 5e-4 * decode + 1e-6 * kv + 0.002 * (forwards - 1)
                   + (0.003 if loading else 0.0))
        seconds *= 1 + rng.uniform(-noise, noise)
        steps.append({"index": i, "start": t, "end": t + seconds, "prefill_tokens": prefill, "prefill_pairs": pairs,
                      "forwards": forwards,
                      "decode_tokens": decode, "prefill_seqs": int(prefill > 0), "decode_seqs": decode,
                      "kv_tokens_cached": kv, "kv_slots_reserved": kv + 15 * (i % 5), "waiting": 0, "running": decode,
                      "preempted": 0, "loading": loading})
        t += seconds + 0.5       # idle between steps: each step's time is its own
    return steps


def test_the_fit_recovers_the_cost_of_noiseless_steps():
    cost = fit_steps(synthetic_steps(300, noise=0.0))
    c = cost.coefficients
    assert c["fixed"] == pytest.approx(0.004, rel=1e-6)
    assert c["prefill_tokens"] == pytest.approx(2e-5, rel=1e-6)
    assert c["decode_seqs"] == pytest.approx(5e-4, rel=1e-6)
    assert c["kv_tokens"] == pytest.approx(1e-6, rel=1e-6)
    assert c["loading"] == pytest.approx(0.003, rel=1e-6)
    assert c["prefill_pairs"] == pytest.approx(3e-8, rel=1e-6)
    assert c["extra_forwards"] == pytest.approx(0.002, rel=1e-6)
    assert cost.error_median < 1e-6 and cost.steps == 300


def test_the_fit_reports_its_error_on_noisy_steps_and_keeps_coefficients_non_negative():
    cost = fit_steps(synthetic_steps(400, noise=0.2))
    assert 0.03 < cost.error_median < 0.2            # about half the ±20% spread
    assert all(v >= 0 for v in cost.coefficients.values())
    assert cost.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=0.15)


def test_a_coefficient_that_would_be_negative_is_dropped():
    steps = synthetic_steps(200, noise=0.0)
    for s in steps:             # time falls with the KV held: no physical step does that
        s["end"] = s["start"] + 0.01 - 1e-6 * s["kv_tokens_cached"] + 1e-5 * s["prefill_tokens"]
    cost = fit_steps(steps)
    assert cost.coefficients["kv_tokens"] == 0.0
    assert all(v >= 0 for v in cost.coefficients.values())


def test_a_batch_far_past_the_observed_range_is_flagged():
    cost = fit_steps(synthetic_steps(100, noise=0.0))
    inside = cost.seconds(200, 200 * 400, 8, 2000, False)
    outside = cost.seconds(4000, 4000 * 4000, 8, 2000, False)
    assert inside[1] is False and outside[1] is True
    assert outside[0] > inside[0]


def test_more_forwards_a_step_than_any_seen_is_flagged():
    one_model = synthetic_steps(100, noise=0.0)
    for s in one_model:
        s["forwards"] = 1
    cost = fit_steps(one_model)      # the cost of a second model's forward was never seen: unknown, not free
    assert cost.seconds(200, 200 * 400, 8, 2000, False, forwards=1)[1] is False
    assert cost.seconds(200, 200 * 400, 8, 2000, False, forwards=2)[1] is True
    seen_two = fit_steps(synthetic_steps(100, noise=0.0))
    assert seen_two.seconds(200, 200 * 400, 8, 2000, False, forwards=2)[1] is False
    assert seen_two.seconds(200, 200 * 400, 8, 2000, False, forwards=3)[1] is True


def test_too_few_steps_is_an_error_that_says_so():
    with pytest.raises(FitError, match="too few"):
        fit_steps(synthetic_steps(3, noise=0.0))


def test_a_models_loads_replay_the_times_its_loads_took_in_turn():
    loads = [{"model": "model-1", "start": 0, "end": 0.7, "seconds": 0.7, "ok": True},     # its first: slow
             {"model": "model-1", "start": 5, "end": 5.2, "seconds": 0.2, "ok": True},
             {"model": "model-1", "start": 9, "end": 9.3, "seconds": 0.3, "ok": True},
             {"model": "model-2", "start": 9, "end": 9.4, "seconds": 9.9, "ok": False}]
    cost = fit_steps(synthetic_steps(50, noise=0.0), loads)
    assert [cost.load_time("model-1", n) for n in range(6)] == pytest.approx([0.7, 0.2, 0.3, 0.2, 0.3, 0.2])
    assert cost.load_time("model-3") == pytest.approx(0.4)    # never seen loaded: the mean of the loads seen
    assert cost.load_time("model-2") == pytest.approx(0.4)    # its only load failed
    assert cost.loads == 3


def prefills_after_pauses(n: int, cold_extra: float, pauses=(0.01, 0.3, 0.7, 1.6), seed: int = 3) -> list[dict]:
    """Steps that each prefill 64-512 tokens after a pause drawn from `pauses`; a prefill more than 1 s after the
    last costs `cold_extra` more per token."""
    rng = random.Random(seed)
    steps, t, last_prefill_end = [], 0.0, -10.0
    for i in range(n):
        t += rng.choice(pauses)
        prefill, decode = rng.choice([64, 200, 512]), rng.randint(0, 8)
        per_token = 2e-5 + (cold_extra if t - last_prefill_end > 1.0 else 0.0)
        seconds = 0.004 + per_token * prefill + 5e-4 * decode
        steps.append({"index": i, "start": t, "end": t + seconds, "prefill_tokens": prefill,
                      "prefill_pairs": prefill * prefill, "forwards": 1, "decode_tokens": decode, "prefill_seqs": 1,
                      "decode_seqs": decode, "kv_tokens_cached": 0, "kv_slots_reserved": 0,
                      "waiting": 0, "running": decode, "preempted": 0, "loading": False})
        t += seconds
        last_prefill_end = t
    return steps


def test_a_prefill_long_after_the_last_is_fitted_as_cold_at_the_threshold_that_fits():
    cost = fit_steps(prefills_after_pauses(300, cold_extra=6e-6))
    assert cost.cold_after_s == 1.0
    assert cost.coefficients["cold_prefill_tokens"] == pytest.approx(6e-6, rel=1e-3)
    assert cost.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=1e-3)
    warm, _ = cost.seconds(200, 200 * 200, 2, 200, False, since_prefill_s=0.4)
    cold, _ = cost.seconds(200, 200 * 200, 2, 200, False, since_prefill_s=1.6)
    assert cold - warm == pytest.approx(200 * 6e-6, rel=1e-3)


def test_with_every_prefill_cold_there_is_no_cold_term_to_split_the_prefill_cost_with():
    cost = fit_steps(prefills_after_pauses(100, cold_extra=0.0, pauses=(2.0, 3.0)))
    assert cost.cold_after_s is None
    assert cost.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=1e-3)
    soon, late = (cost.seconds(200, 0, 0, 0, False, since_prefill_s=s) for s in (0.1, 9.0))
    assert soon == late
