"""The diagnosis's fix with its predicted effect beside it: what `diagnose --replay` shows under the
recommendations, from the same recording (agent/whatif). Never fails the diagnosis: a recording the
simulator cannot replay gives the reason instead of figures."""

from __future__ import annotations

from stagelens.catalogue import DECIDED_WAIT_P99
from stagelens.errors import CollectError, UserError
from stagelens.lab.fixes import as_flags
from stagelens.whatif.figures import alike
from stagelens.whatif.settings import TUNABLE, as_set_flags

SHOWN = ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "latency_p99_s", "throughput_tokens_per_s",
         "preemptions", DECIDED_WAIT_P99.key)
# the TUI's before/after rows (agent/tui/figures.py COMPARED) a prediction fills, by the names both
# give them
TUI_FIGURES = ("ttft_p50_s", "latency_p99_s", DECIDED_WAIT_P99.key)


def predicted_effect(observe, diagnosis) -> dict | None:
    """{"set": flags, "predicted": {figure: [before, after]}, "extrapolated": bool} for the
    diagnosis's fix on what `observe()` gives (agent.whatif.workload.Observed: a bundle, an
    agent's window), or {"unavailable": why}; None when the diagnosis recommends nothing the
    simulator can change."""
    from stagelens.lab.fixes import fix_flags
    from stagelens.whatif.predict_all import today_settings, what_if

    if diagnosis is None or diagnosis.verdict not in ("warn", "firing"):
        return None
    changes = {k: v for k, v in fix_flags(diagnosis).items() if k in TUNABLE}
    if not changes:
        return None
    try:
        observed = observe()
        result = what_if(observed, [changes], today_settings(observed))
    except (UserError, CollectError) as exc:
        return {"set": as_set_flags(changes), "unavailable": str(exc)}
    except Exception as exc:   # noqa: BLE001  the prediction is an aside: it never takes the verdict down
        return {"set": as_set_flags(changes),
                "unavailable": f"the simulation failed: {type(exc).__name__}: {exc}"}
    before, (_, after) = result.today.figures, result.candidates[0]
    never = before.get("requests_never_run") or 0
    if not before.get("requests_finished"):
        why = f"{never} of {len(observed.requests)} requests could never run" if never else "nothing finished"
        return {"set": as_set_flags(changes),
                "unavailable": f"no request finished in the simulation of today ({why})"}
    effect = {"set": as_set_flags(changes), "extrapolated": after.extrapolated,
              "predicted": {k: [before.get(k), after.figures.get(k)] for k in SHOWN}}
    if never:
        # left out of both: the figures are those of the others
        effect["requests_never_run"] = never
    return effect


def after_figures(effect: dict) -> dict:
    """The predicted figures after the fix, under the TUI's keys."""
    predicted = effect.get("predicted") or {}
    return {key: predicted[key][1] for key in TUI_FIGURES if key in predicted}


def short_effect(effect: dict) -> str:
    """P99 TTFT and throughput before -> after, for a notification."""
    if "unavailable" in effect:
        return "no prediction: " + effect["unavailable"]
    (b99, a99), (bt, at) = effect["predicted"]["ttft_p99_s"], effect["predicted"]["throughput_tokens_per_s"]
    if None in (b99, a99, bt, at):
        return "no prediction: too few requests finished"
    return (f"predicted P99 TTFT {b99 * 1000:.0f} -> {a99 * 1000:.0f} ms, throughput {bt:.1f} -> {at:.1f} tokens/s"
            + (" (extrapolated)" if effect.get("extrapolated") else "") + _never_run_note(effect)
            + _unchanged_note(effect))


def render_effect(effect: dict) -> str:
    flags = as_flags({k.replace("-", "_"): v for k, v in effect["set"].items()})
    if "unavailable" in effect:
        return f"predicted effect of {flags}: not available ({effect['unavailable']})"
    parts = []
    for key, (before, after) in effect["predicted"].items():
        if before is None or after is None:
            continue
        if key.endswith("_s") and not key.endswith("_per_s"):
            parts.append(f"{key.removesuffix('_s')} {before * 1000:.0f} -> {after * 1000:.0f} ms")
        else:
            parts.append(f"{key} {before:.3g} -> {after:.3g}")
    note = " (extrapolated past the steps recorded)" if effect.get("extrapolated") else ""
    note += _never_run_note(effect)
    return f"predicted effect of {flags} (stagelens whatif){note}: " + ", ".join(parts) + _unchanged_note(effect)


def _never_run_note(effect: dict) -> str:
    """Said when the simulation left requests out (agent/whatif/predict.py `can_run`): the
    figures are the others'."""
    never = effect.get("requests_never_run")
    if not never:
        return ""
    return f" ({never} of the recorded requests left out: {'it' if never == 1 else 'they'} could never run)"


def _unchanged_note(effect: dict) -> str:
    """Said when the fix leaves P99 TTFT where it is: it may still free memory, but not for
    latency's sake."""
    before, after = effect["predicted"]["ttft_p99_s"]
    return "; P99 TTFT unchanged at today's load" if alike(before, after) else ""
