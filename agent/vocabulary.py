"""The words every surface shares, written once: the stages and their order, the states, what each
wait reason and time component is charged to, each stage's alert and a verdict's exit status.

The engine names its reasons (engine_hooks/records/: waits, timeline, attribution);
charging them to a stage is the diagnosis's judgement, made here.
"""

from __future__ import annotations

from stagelens.engine_hooks.records import attribution, waits
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL, QUEUED, STEP_BOUNDARY
from stagelens.errors import EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARNING

KV_CACHE, SCHEDULER, COLD_PATH = "kv_cache", "scheduler", "cold_path"
# the order of the chain: memory feeds queueing, loads add stalls
STAGES = (KV_CACHE, SCHEDULER, COLD_PATH)
STAGE_NAMES = {KV_CACHE: "KV cache", SCHEDULER: "scheduler", COLD_PATH: "cold path"}
STATES = ("unknown", "ok", "warn", "firing")   # in order of severity; a verdict is one of them too
# A verdict as a monitoring check's exit status (the Nagios/Icinga/Sensu convention, agent.errors).
EXIT_CODES = {"ok": EXIT_OK, "warn": EXIT_WARNING, "firing": EXIT_CRITICAL, "unknown": EXIT_UNKNOWN}

# The stage a request's waiting time is charged to; None: no stage's fault (iteration-level
# scheduling).
WAIT_STAGE: dict[str, str | None] = {
    waits.NO_FREE_BLOCKS: KV_CACHE, waits.PREEMPTED: KV_CACHE,
    waits.TOKEN_BUDGET: SCHEDULER, waits.MAX_NUM_SEQS: SCHEDULER, BEHIND_LONG_PREFILL: SCHEDULER,
    waits.MODEL_LOADING: COLD_PATH,
    # the engine did not say why it waited: charged to no stage rather than guessed
    QUEUED: None,
    STEP_BOUNDARY: None,
}
# ... and every component of a request's time (engine_hooks.records.attribution); None: the
# request's own compute.
COMPONENT_STAGE: dict[str, str | None] = {
    **WAIT_STAGE, attribution.RECOMPUTE: KV_CACHE, attribution.LOAD_SLOWDOWN: COLD_PATH,
    attribution.COMPUTE: None,
}
COMPONENT_NAMES = {**{k: k.replace("_", " ") for k in COMPONENT_STAGE},
                   waits.MODEL_LOADING: "model loads",
                   QUEUED: "queued (why, the engine does not say)",
                   attribution.RECOMPUTE: "recomputed prefill",
                   attribution.LOAD_SLOWDOWN: "steps slowed by loads"}

# The alert of each stage; its runbook is named after it (agent.runbook_files.stage_runbook)
STAGE_ALERTS = {KV_CACHE: "KVCacheStageFiring", SCHEDULER: "SchedulerStageFiring",
                COLD_PATH: "ColdPathStageFiring"}


def stage_of(component: str) -> str | None:
    """The stage a component is charged to; an unknown one (a newer engine's) is charged to none."""
    return COMPONENT_STAGE.get(component)


def exit_code(verdict: str | None) -> int:
    """A verdict's exit status; anything that is no verdict is UNKNOWN, never a status a verdict
    could mean."""
    return EXIT_CODES.get(verdict, EXIT_UNKNOWN)
