"""One prediction: the served requests replayed through the simulator under some settings, and
what it says (the serving figures, the KV use, each stage's state, how much of it lies outside
the fitted range)."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.catalogue import DECIDED_WAIT_P99
from stagelens.engine_hooks.records.stats import percentile
from stagelens.whatif.figures import COMPARED, serving_figures, stage_states
from stagelens.whatif.fit import StepCost
from stagelens.whatif.settings import Settings
from stagelens.whatif.simulator import SimRequest, Simulation, Simulator
from stagelens.whatif.workload import ServedRequest

LAG_STRIDE = 7919       # a prime: consecutive requests take lags far apart in the sorted list
# more than this share of steps outside the fitted range: the prediction says so
OUTSIDE_SHARE = 0.05


@dataclass
class Prediction:
    settings: Settings
    figures: dict
    stages: dict
    simulation: Simulation
    # where the part past the recorded range is assumed (a prior): figure -> (low, high) with that
    # part off by the prior's spread either way
    bounds: dict[str, tuple[float | None, float | None]] | None = None

    @property
    def outside_share(self) -> float:
        log = self.simulation.log
        return log.steps_outside / log.steps if log.steps else 0.0

    @property
    def extrapolated(self) -> bool:
        return self.outside_share > OUTSIDE_SHARE

    def to_dict(self) -> dict:
        out = dict(self.figures)
        out["stages"] = self.stages
        out["steps"] = self.simulation.log.steps
        out["outside_fitted_range"] = {"share_of_steps": self.outside_share,
                                       "extrapolated": self.extrapolated}
        if self.bounds:
            out["range"] = {k: list(v) for k, v in self.bounds.items()}
        return out


def predicted_range(p: Prediction, cost: StepCost, requests: list[ServedRequest]) -> dict:
    """Each compared figure under the assumed part of the step cost (`cost.beyond`) divided and
    multiplied by its spread: (lowest, highest) of the two and the prediction itself."""
    spread = cost.beyond.spread
    runs = [p] + [predict(p.settings, cost.with_beyond(cost.beyond, cost.beyond_scale * f), requests)
                  for f in (1 / spread, spread)]
    out = {}
    for key in COMPARED:
        values = [r.figures.get(key) for r in runs]
        known = [v for v in values if v is not None]
        out[key] = (min(known), max(known)) if known else (None, None)
    return out


def can_run(r: ServedRequest, settings: Settings) -> bool:
    """Whether the engine takes the request at all: it refuses a prompt that leaves no room for
    one output token within max_model_len (engine_hooks/engine/engine.py). Any other fits its KV
    cache, which the settings' checks make hold one request of max_model_len: one that could not
    would wait at the head of the queue for ever."""
    return r.prompt_tokens < settings.max_model_len


def replay(requests: list[ServedRequest], settings: Settings) -> list[SimRequest]:
    """The requests to simulate (those the engine takes: `can_run`), each under a model the
    settings serve: a name the engine published (an engine read from outside serves `tiny-llama`,
    not `model-0`) takes a served name no request uses, in the order the names first arrive, so
    that one model served is one model resident."""
    served = settings.model_names
    seen = list(dict.fromkeys(r.model for r in requests))
    free = iter([name for name in served if name not in seen])
    renamed = {name: next(free, name) for name in seen if name not in served}
    return [SimRequest(r.request_id, renamed.get(r.model, r.model), r.arrival, r.prompt_tokens,
                       r.output_tokens)
            for r in requests if can_run(r, settings)]


def left_out(requests: list[ServedRequest], settings: Settings) -> dict:
    """How many requests the simulation could never run (`can_run`), and how many it ends early
    at max_model_len (prompt and output longer than it): said beside the figures, which leave the
    first out and count the second only as far as they ran."""
    runs = [r for r in requests if can_run(r, settings)]
    cut = sum(1 for r in runs if r.prompt_tokens + r.output_tokens > settings.max_model_len)
    return {"requests_never_run": len(requests) - len(runs), "requests_cut_at_max_model_len": cut}


def _fragmentation(log, read_from_outside: bool) -> float | None:
    """Reserved slots holding no token, as the diagnosis counts them for the engine's kind: the
    bundled engine's hooks count every empty slot; from outside, each running sequence's last,
    partial block is the block size's floor, not fragmentation
    (agent/sources/inference/figures.py)."""
    reserved = log.kv_reserved_slots - (log.kv_floor_slots if read_from_outside else 0)
    return 1 - log.kv_tokens_cached / reserved if reserved > 0 else None


def predict(settings: Settings, cost: StepCost, requests: list[ServedRequest], trace: bool = False) -> Prediction:
    sim = Simulator(settings, cost.seconds, cost.load_time)
    if trace:
        sim.trace = []
    result = sim.run(replay(requests, settings))
    lags = cost.output_lags_s
    for i, r in enumerate(result.requests if lags else ()):
        # the lags seen, each request one of them, spread over all
        lag = lags[i * LAG_STRIDE % len(lags)]
        r.first_token = None if r.first_token is None else r.first_token + lag
        r.finished = None if r.finished is None else r.finished + lag
    done = [r for r in result.requests if r.finished is not None]
    window = (requests[0].arrival, requests[-1].arrival)
    figures = serving_figures(done, window)
    figures["requests_unfinished"] = len(result.requests) - len(done)
    figures.update(left_out(requests, settings))
    log = result.log
    figures["model_loads"] = len(result.loads)
    figures["engine_busy_ratio"] = log.busy_s / (result.end - window[0]) if result.end > window[0] else None
    decided = [r.scheduled - r.seen for r in result.requests if r.scheduled is not None and r.seen is not None]
    span = result.end - window[0]
    # over time, as the frames sample it (a second of an idle engine holds no block)
    figures["kv_used_ratio_mean"] = log.kv_used_share_seconds / span if span > 0 else None
    signals = {
        "kv_fragmentation_ratio": _fragmentation(log, settings.read_from_outside),
        "scheduler_wait_p99": percentile(decided, 99),
        "requests_waiting_on_model": log.waiting_on_model_s / span if span > 0 else None,
    }
    figures[DECIDED_WAIT_P99.key] = signals[DECIDED_WAIT_P99.signal]
    return Prediction(settings, figures, stage_states(signals), result)
