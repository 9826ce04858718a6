"""The engine's observer seam: every step and every request's end reach observers on the engine thread, and
an observer that raises is counted, never a failed step or request."""

from stagelens.engine_hooks.engine import EngineConfig, FinishReason, LLMEngine, SamplingParams


def _engine(model_dir) -> LLMEngine:
    return LLMEngine(EngineConfig(model="tiny", model_dir=model_dir, max_model_len=128, kv_cache_memory="2MiB",
                                  max_num_batched_tokens=64, device="cpu"))


class Tally:
    def __init__(self):
        self.steps, self.ended, self.waiting_seen = 0, [], set()

    def on_step(self, engine, stats, batch):
        self.steps += 1
        self.waiting_seen.update(batch.waiting_reasons)

    def on_request_end(self, engine, request):
        self.ended.append((request.request_id, request.finish_reason))


class Broken:
    def on_step(self, engine, stats, batch):
        raise RuntimeError("observer bug")

    def on_request_end(self, engine, request):
        raise KeyError("observer bug")


def test_observers_see_every_step_and_every_end_and_a_broken_one_changes_nothing(model_dir, caplog):
    engine = _engine(model_dir)
    tally = Tally()
    engine.add_observer(Broken())
    engine.add_observer(tally)
    requests = [engine.submit([1, 2, 3 + i], SamplingParams(max_tokens=4)) for i in range(3)]
    engine.run_until_idle(60)
    assert all(r.finish_reason == FinishReason.LENGTH and len(r.output_token_ids) == 4 for r in requests)
    assert tally.steps == engine.totals.steps > 0
    assert sorted(tally.ended) == sorted((r.request_id, FinishReason.LENGTH) for r in requests)
    assert engine.observer_errors["Broken"] == tally.steps + len(requests)
    assert sum("observer Broken failed" in r.message for r in caplog.records) == 1   # logged once, then counted


def test_a_removed_observer_hears_nothing_more(model_dir):
    engine = _engine(model_dir)
    tally = Tally()
    engine.add_observer(tally)
    engine.submit([1, 2, 3], SamplingParams(max_tokens=2))
    engine.run_until_idle(60)
    seen = tally.steps
    engine.remove_observer(tally)
    engine.submit([4, 5, 6], SamplingParams(max_tokens=2))
    engine.run_until_idle(60)
    assert tally.steps == seen and len(tally.ended) == 1
