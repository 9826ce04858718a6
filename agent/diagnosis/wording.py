"""What each signal says when it warns or fires, after its value and threshold: the SIGNALS table
(signals.py) names one of these per signal, explain.py puts `label value > threshold` before it.
Each reads the explanation's context (explain.py's `_Context`: the engine's settings and window
figures) and returns the rest of the sentence, "" when it has nothing to add."""

from __future__ import annotations

from stagelens.vocabulary import stage_of


def main_wait_reason(ctx) -> tuple[str, float] | None:
    """The reason most of the window's wait is charged to, and its share; None without a charged
    wait."""
    reasons = {k: v for k, v in (ctx.sched.wait_seconds_by_reason or {}).items() if stage_of(k) is not None}
    total = sum(reasons.values())
    if not total:
        return None
    reason = max(reasons, key=reasons.__getitem__)
    return reason, reasons[reason] / total


# --- KV cache -------------------------------------------------------------------------------------
def kv_fragmentation(e, ctx) -> str:
    cfg = ctx.cfg
    if cfg.allocator == "contiguous":
        used = f"requests use {ctx.mean_length:.0f} on average" if ctx.mean_length else "requests use far fewer"
        return f": the contiguous allocator reserves {cfg.max_model_len} slots per request and {used}"
    return f": blocks of {cfg.block_size} tokens leave their last slots empty"


def kv_access_efficiency(e, ctx) -> str:
    return (f": attention moves whole blocks of {ctx.cfg.block_size} tokens and pads decode "
            f"groups, so {1 - (e.value or 0):.0%} of the KV bytes it reads hold no useful token")


def effective_bandwidth(e, ctx) -> str:
    achieved = ctx.kv.read_bandwidth_bytes_per_s or 0
    return (f": attention reads KV at {achieved / 1e9:.2f} GB/s, {e.value:.0%} of what it reaches "
            f"on this device with the same bytes laid out ideally (whole blocks, consecutive, "
            f"unpadded)")


def bandwidth_swing(e, ctx) -> str:
    return ": achieved KV bandwidth swings from step to step although memory looks free"


def preempted_with_free_memory(e, ctx) -> str:
    return ": requests were preempted or refused while at least 10% of KV memory was free"


def kv_full_while_waiting(e, ctx) -> str:
    return ": the KV cache had no room for one more request while requests queued or were preempted"


def kv_wall(e, ctx) -> str:
    return ": the pool ran out of KV blocks while requests queued (a preemption comes only then)"


def cut_at_length(e, ctx) -> str:
    return (": those answers ended at max_tokens or --max-model-len, not on their own: raise the "
            "clients' max_tokens (or --max-model-len where prompts fill it); a cut answer is not "
            "a latency problem")


# --- scheduler ------------------------------------------------------------------------------------
def scheduler_wait(e, ctx) -> str:
    main = main_wait_reason(ctx)
    return f", mostly {main[0]} ({main[1]:.0%} of the wait)" if main else ""


def head_of_line_blocking(e, ctx) -> str:
    cfg = ctx.cfg
    mode = ("without chunked prefill" if not cfg.enable_chunked_prefill
            else f"with a {cfg.max_num_batched_tokens}-token budget")
    return f": short requests spend {e.value:.0%} of their wait behind long prefills ({mode})"


def compute_idle(e, ctx) -> str:
    return ": compute sits idle while requests are queued"


def token_budget_use(e, ctx) -> str:
    return f": steps fill {e.value:.0%} of the {ctx.cfg.max_num_batched_tokens}-token budget while requests wait"


def requests_failed(e, ctx) -> str:
    return (": clients gave up (abort) or the engine refused them; a queue slower than the "
            "clients' timeout shows first as aborts: read it with the wait above, and the engine's "
            "log for errors")


def spec_acceptance(e, ctx) -> str:
    return (": most draft tokens are computed and thrown away: lower --num-speculative-tokens "
            "(in --speculative-config) or use a draft model closer to the target, or turn "
            "speculation off at this batch size")


# --- cold path ------------------------------------------------------------------------------------
def step_time_inflation(e, ctx) -> str:
    during, without = ctx.cold.step_time_during_load_s, ctx.cold.step_time_without_load_s
    if during and without:
        return f": decode steps take {during * 1000:.0f} ms while a model loads against {without * 1000:.0f} ms without"
    return ""


def waiting_on_model(e, ctx) -> str:
    cold = ctx.cold
    return (f": {cold.loads_in_window if cold.loads_in_window is not None else '?'} model loads "
            f"({(cold.load_bytes_in_window or 0) / 1e6:.0f} MB) in the window kept on average "
            f"{e.value:.2f} requests waiting")


def pcie_backpressure(e, ctx) -> str:
    return f": a PCIe link runs at {e.value:.0%} of its bandwidth"


def threads_blocked(e, ctx) -> str:
    return ": engine threads block on I/O"
