"""Where the step cost past the recorded range comes from (agent/whatif/beyond.py): for the
bundled engine its profile, measured here once on the model, dtype and device it was recorded
with; for an engine read from outside the roofline prior of the node's GPU (from the frames' NVML
sample, else this host measured) and the model's shape from its config (`--model-config`). Either
is scaled to the recording's own steps. None where neither can be had: the fit's straight line
goes on, and the text says so."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from stagelens.whatif.beyond import calibrated, fit_profile
from stagelens.whatif.fit import BUSY_GAP_S, StepCost

# the share of a datasheet's bandwidth and FLOPs that serving kernels reach
ROOFLINE_EFFICIENCY = 0.6


@dataclass
class Wider:
    model_config: str | None = None     # an outside engine's model config.json (file or directory)
    # a callable taking one line, for the profile's one-time wait
    progress: object = None
    note: str | None = None             # why nothing widened the cost, once asked

    def widen(self, cost: StepCost, observed) -> StepCost | None:
        if not observed.engine_config:
            prior = self._prior(observed)
            # a roofline prices the work alone: the engine's own overheads are in the recorded fit
            # at the range's edge, and the work past it runs at the share of the datasheet's rates
            # real kernels reach
            return None if prior is None else cost.with_beyond(prior, 1 / ROOFLINE_EFFICIENCY)
        profile = self._profile(observed)
        if profile is None:
            return None
        scaled = calibrated(profile, observed.steps, BUSY_GAP_S)
        if scaled is None:
            self.note = "no recorded step to scale the profile to"
            return None
        return cost.with_beyond(scaled, 1.0)

    def _profile(self, observed):
        from stagelens.lab.bundled_engine import ConfigError, EngineConfig
        from stagelens.lab.step_profile import cached_profile, profiled_steps

        cfg = observed.engine_config
        # what "auto" became where it was recorded (a bundle from before that was kept: the CPU, the
        # lab's own)
        device = cfg.get("resolved_device") or (cfg.get("device") if cfg.get("device") != "auto" else "cpu")
        dtype = cfg.get("resolved_dtype") or (cfg.get("dtype") if cfg.get("dtype") != "auto" else None)
        try:
            engine = EngineConfig(model=cfg.get("model", "small"), dtype=dtype or "auto",
                                  device=device)
            dtype = dtype or ("float32" if device == "cpu" else "bfloat16")
        except (ConfigError, TypeError) as exc:
            self.note = f"the recording's engine cannot be profiled here: {exc}"
            return None
        steps = cached_profile(engine.model, dtype, device)
        if steps is None:
            if importlib.util.find_spec("torch") is None:
                self.note = "torch is not installed here: no profile of the bundled engine"
                return None
            if device.startswith("cuda") and not _cuda_here():
                self.note = f"recorded on {device}, which this machine does not have: no profile"
                return None
            steps, _, _ = profiled_steps(engine.model, dtype, device, self.progress)
        return fit_profile(steps)

    def _prior(self, observed):
        from stagelens.whatif.prior import node_prior, read_model_config

        if not self.model_config:
            self.note = "an engine read from outside: give --model-config for a prior past the recorded batches"
            return None
        shape = read_model_config(self.model_config)
        names = [g.name for f in observed.frames for g in f.gpus() if g.name]
        return node_prior(list(dict.fromkeys(names)), shape)


def _cuda_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
