"""Diagnosis on constructed frames: every signal, hysteresis, root ordering, unknown data, config."""

import pytest

from stagelens.diagnosis import DiagnosisConfig, diagnose, load_config
from stagelens.diagnosis.evaluate import StageTracker, stage_states
from stagelens.errors import UserError
from tests.helpers.frame_builders import engine_snapshot, frame, series

HEALTHY = {}


def _state(frames, stage):
    return diagnose(frames).stage(stage).state


def _evidence(d, stage, signal):
    return next(e for e in d.stage(stage).evidence if e.signal == signal)


@pytest.mark.parametrize("overrides, stage, signal, expected", [
    ({"kv": {"fragmentation_ratio": 0.25}}, "kv_cache", "kv_fragmentation_ratio", "warn"),
    ({"kv": {"fragmentation_ratio": 0.35}}, "kv_cache", "kv_fragmentation_ratio", "firing"),
    ({"kv": {"access_efficiency": 0.7}}, "kv_cache", "kv_access_efficiency", "warn"),
    ({"kv": {"access_efficiency": 0.5}}, "kv_cache", "kv_access_efficiency", "firing"),
    ({"kv": {"effective_bandwidth_ratio": 0.5}, "device": "cuda:0"}, "kv_cache", "effective_bandwidth_ratio",
     "firing"),
    ({"kv": {"bandwidth_swing_cv": 0.3}, "device": "cuda:0"}, "kv_cache", "bandwidth_swing_cv", "warn"),
    ({"scheduler": {"decided_wait_p99_s": 0.010}}, "scheduler", "scheduler_wait_p99", "warn"),
    ({"scheduler": {"decided_wait_p99_s": 0.050}}, "scheduler", "scheduler_wait_p99", "firing"),
    ({"scheduler": {"waiting_share": 0.5, "busy_ratio_while_waiting": 0.4}}, "scheduler", "compute_utilisation",
     "firing"),
    ({"scheduler": {"head_of_line_share": 0.4}}, "scheduler", "head_of_line_blocking", "warn"),
    ({"scheduler": {"head_of_line_share": 0.6}}, "scheduler", "head_of_line_blocking", "firing"),
    ({"scheduler": {"waiting_share": 0.5, "budget_use_while_waiting": 0.3}}, "scheduler", "token_budget_use", "warn"),
    ({"cold_path": {"step_time_inflation": 1.3}}, "cold_path", "step_time_inflation", "warn"),
    ({"cold_path": {"step_time_inflation": 1.8}}, "cold_path", "step_time_inflation", "firing"),
    ({"scheduler": {"wait_seconds_by_reason": {"model_loading": 1.0}}}, "cold_path", "requests_waiting_on_model",
     "warn"),
    ({"scheduler": {"wait_seconds_by_reason": {"model_loading": 5.0}}}, "cold_path", "requests_waiting_on_model",
     "firing"),
])
def test_each_signal_reaches_its_state(overrides, stage, signal, expected):
    frames = series([overrides] * 4)
    d = diagnose(frames)
    assert _evidence(d, stage, signal).state == expected
    assert d.stage(stage).state == expected
    healthy = diagnose(series([HEALTHY] * 4))
    assert healthy.verdict == "ok" and healthy.stage(stage).state == "ok"


def test_gpu_and_host_signals():
    gpus = [{"utilization_memory_ratio": 0.97, "utilization_gpu_ratio": 0.9,
             "pcie": {"tx_util_ratio": 0.1, "rx_util_ratio": 0.6}}]
    host = {"cpu_iowait_ratio": 0.3, "process": {"uninterruptible_ratio": 0.0}}
    frames = [frame(i, engine_snapshot(), gpus=gpus, host=host) for i in range(3)]
    d = diagnose(frames)
    assert _evidence(d, "kv_cache", "memory_bandwidth_utilisation").state == "firing"
    assert _evidence(d, "cold_path", "pcie_backpressure").value == pytest.approx(0.6)
    assert _evidence(d, "cold_path", "pcie_backpressure").state == "firing"
    assert _evidence(d, "cold_path", "threads_blocked_on_data").state == "firing"


def test_refusals_with_free_memory_count_as_samples_where_they_happened():
    counts = [0, 1, 2, 3, 3]   # cumulative: new refusals in 3 of the 4 intervals
    frames = [frame(i, engine_snapshot(counters={"allocation_failures_with_free_memory_total": c}))
              for i, c in enumerate(counts)]
    e = _evidence(diagnose(frames), "kv_cache", "preemption_with_free_memory")
    assert e.value == pytest.approx(3 / 5) and e.state == "firing"


def test_bandwidth_signals_are_shown_but_not_judged_on_a_cpu():
    d = diagnose(series([{"kv": {"effective_bandwidth_ratio": 0.2, "bandwidth_swing_cv": 0.9}}] * 3))
    e = _evidence(d, "kv_cache", "effective_bandwidth_ratio")
    assert e.state == "info" and e.value == pytest.approx(0.2)
    assert d.stage("kv_cache").state == "ok"


def test_missing_data_is_unknown_never_ok():
    frames = [frame(i) for i in range(3)]          # no engine, no GPU, no host
    d = diagnose(frames)
    assert {s.state for s in d.stages} == {"unknown"}
    assert d.verdict == "unknown" and d.exit_code == 3
    assert all(e.state == "unknown" and e.value is None for s in d.stages for e in s.evidence)


def test_not_applicable_is_healthy_with_no_value():
    d = diagnose(series([HEALTHY] * 3))
    e = _evidence(d, "cold_path", "step_time_inflation")   # no model load in the window
    assert e.state == "ok" and e.value is None


def test_hysteresis_needs_rise_samples_to_fire_and_clear_samples_to_clear():
    high, low = {"kv": {"fragmentation_ratio": 0.5}}, HEALTHY
    states = [s["kv_cache"] for _, s in stage_states(series([low, high, high, high, low, low, low, low]))]
    assert states == ["ok", "warn", "firing", "firing", "firing", "firing", "ok", "ok"]


def test_a_flapping_signal_never_fires_and_never_hides_behind_ok():
    high, low = {"kv": {"fragmentation_ratio": 0.5}}, HEALTHY
    states = [s["kv_cache"] for _, s in stage_states(series([high, low] * 6))]
    assert states == ["warn", "ok"] * 6     # each firing sample unconfirmed: warn while it fires, never firing
    states = [s["kv_cache"] for _, s in stage_states(series([high, high, low] * 4))]
    assert states[2:] == ["firing"] * (len(states) - 2)   # one low sample in three never clears it


def _tracked(levels, rise=2, clear=3):
    tracker = StageTracker(rise, clear)
    out = []
    for t, level in enumerate(levels):
        tracker.update(level, float(t))
        out.append((tracker.state, tracker.unconfirmed))
    return out


def test_a_firing_sample_after_missing_data_is_warn_with_its_sample_count_never_ok():
    assert _tracked(["unknown", "firing"]) == [("unknown", 0), ("warn", 1)]
    assert _tracked(["firing"]) == [("warn", 1)]


def test_a_signal_alternating_unknown_and_firing_is_reported_firing():
    states = [state for state, _ in _tracked(["unknown", "firing"] * 4)]
    assert states[-1] == "firing" and "ok" not in states


def test_one_missing_sample_keeps_the_state_and_an_engine_gone_is_unknown_at_once():
    assert [s for s, _ in _tracked(["firing", "firing", "unknown", "unknown", "unknown"])] == \
        ["warn", "firing", "firing", "firing", "unknown"]      # unknown after `clear` missing samples
    tracker = StageTracker(2, 3)
    for t in range(3):
        tracker.update("firing", float(t))
    tracker.update("unknown", 3.0, gone=True)
    assert tracker.state == "unknown"


def test_rise_and_clear_come_from_config():
    high = {"kv": {"fragmentation_ratio": 0.5}}
    config = DiagnosisConfig(rise=4, clear=1)
    states = [s["kv_cache"] for _, s in stage_states(series([high] * 4 + [HEALTHY]), config)]
    assert states == ["warn", "warn", "warn", "firing", "ok"]


def test_root_is_the_stage_whose_evidence_began_first():
    frag, wait = {"kv": {"fragmentation_ratio": 0.5}}, {"scheduler": {"decided_wait_p99_s": 0.5}}
    both = {**frag, **wait}
    assert diagnose(series([wait, wait, wait, both, both, both])).root_stage == "scheduler"
    assert diagnose(series([frag, frag, frag, both, both, both])).root_stage == "kv_cache"


def test_chain_order_breaks_a_tie():
    both = {"kv": {"fragmentation_ratio": 0.5}, "scheduler": {"decided_wait_p99_s": 0.5},
            "cold_path": {"step_time_inflation": 2.0}}
    assert diagnose(series([both] * 4)).root_stage == "kv_cache"


def test_scheduler_waits_caused_by_another_stage_are_its_consequence():
    waits = {"decided_wait_p99_s": 0.5, "wait_seconds_by_reason": {"model_loading": 3.0, "token_budget": 0.1}}
    cold = {"cold_path": {"step_time_inflation": 1.3}, "scheduler": waits}   # cold path only warns
    d = diagnose(series([cold] * 4))
    assert d.stage("scheduler").state == "firing" and d.stage("scheduler").consequence_of == "cold_path"
    assert d.verdict == "firing" and d.root_stage == "cold_path"


def test_explanations_carry_the_numbers_and_recommendations_name_flags():
    contiguous = {"kv": {"fragmentation_ratio": 0.91, "sequence_lengths": [180] * 20}, "allocator": "contiguous"}
    kv = diagnose(series([contiguous] * 3)).stage("kv_cache")
    assert "0.91 > 0.30" in kv.explanation and "reserves 2048 slots" in kv.explanation and "180" in kv.explanation
    assert kv.recommendations[0].flags == {"allocator": "paged"}
    assert kv.recommendations[0].text.startswith("--allocator paged")
    hol = {"scheduler": {"head_of_line_share": 0.8, "decided_wait_p99_s": 2.0}, "enable_chunked_prefill": False}
    sched = diagnose(series([hol] * 3)).stage("scheduler")
    flags = {k: v for r in sched.recommendations for k, v in r.flags.items()}
    assert flags["enable_chunked_prefill"] is True and flags["policy"] == "short-first"
    assert "--max-num-batched-tokens 512" in " ".join(r.text for r in sched.recommendations)


def test_block_size_is_chosen_by_a_sweep_over_observed_lengths():
    lengths = [20 + 7 * i for i in range(40)]   # 20 .. 293 tokens: blocks of 128 waste a third
    paged = {"kv": {"fragmentation_ratio": 0.35, "sequence_lengths": lengths}, "block_size": 128}
    recs = diagnose(series([paged] * 3)).stage("kv_cache").recommendations
    chosen = recs[0].flags["block_size"]
    assert chosen < 128
    from stagelens.diagnosis.explain import block_waste
    assert block_waste(lengths, chosen) <= 0.10 < block_waste(lengths, chosen * 2)


def test_long_contexts_get_the_reports_batch_formula():
    long = {"kv": {"fragmentation_ratio": 0.35}, "max_model_len": 131072}
    recs = diagnose(series([long] * 3)).stage("kv_cache").recommendations
    batch = [r for r in recs if "64K" in r.text][0].flags["max_num_seqs"]
    assert batch == int(min(8, 32 / (131072 / 4096) ** 0.6))


def test_config_file_and_flags_override_thresholds(tmp_path):
    path = tmp_path / "stagelens.toml"
    path.write_text("[diagnosis]\nrise = 1\n\n[thresholds.kv_fragmentation_ratio]\nwarn = 0.5\nfiring = 0.8\n")
    config = load_config(str(path), ["head_of_line_blocking=0.1:0.2"])
    assert config.rise == 1
    assert config.threshold("kv_fragmentation_ratio").firing == 0.8
    assert config.threshold("head_of_line_blocking").warn == 0.1
    d = diagnose(series([{"kv": {"fragmentation_ratio": 0.6}}]), config)
    assert d.stage("kv_cache").state == "warn"


@pytest.mark.parametrize("text, words", [
    ("[thresholds.kv_fragmentation_ratio\nwarn = 1\n", "line 1"),
    ("[thresholds.no_such_signal]\nwarn = 1\n", "unknown signal"),
    ("[thresholds.kv_fragmentation_ratio]\nwarn = 'high'\n", "must be a number"),
    ("[thresholds.kv_fragmentation_ratio]\nwarn = 0.5\nfiring = 0.1\n", "must be past warn"),
    ("[diagnosis]\nrise = 0\n", "rise: must be a whole number in [1, 100] samples"),
    ("[alerts]\nx = 1\n", "unknown section"),
])
def test_a_malformed_config_names_the_file_and_what_is_wrong(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_config(str(path))
    assert str(path) in str(info.value) and words in str(info.value)


def test_a_bad_threshold_flag_is_refused():
    with pytest.raises(UserError, match="SIGNAL=WARN:FIRING"):
        load_config(None, ["kv_fragmentation_ratio=lots"])


@pytest.mark.parametrize("kv, root", [
    ({"fragmentation_ratio": 0.25}, "scheduler"),          # KV warns, but nothing held a request back
    ({"full_while_waiting_share": 0.3}, "kv_cache"),       # the cache had no room while they waited
])
def test_an_outside_queue_is_the_kv_caches_only_where_the_cache_was_pressed(kv, root):
    """An outside engine does not say why its queue waited. The chain's order charges the queue to the KV cache
    where the cache was full or preempting; fragmentation alone holds nothing back (vLLM admits a request whenever
    a free block takes it): a real vLLM with 3,072-token prompts chunked 32 a step read fragmentation 0.2 from its
    long partial prefills and its head-of-line blocking was called the KV cache's consequence (before)."""
    waits = {"decided_wait_p99_s": 0.4, "head_of_line_share": 0.99, "wait_seconds_by_reason": {"queued": 2.7}}
    d = diagnose(series([{"kv": kv, "scheduler": waits, "source": "vllm"}] * 4))
    assert d.stage("kv_cache").state == "warn" and d.stage("scheduler").state == "firing"
    assert d.root_stage == root
