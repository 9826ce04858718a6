"""Recommendations in the flags of the engine they are for.

explain.py recommends in the bundled engine's settings (its `flags`, which `lab --fixed` applies).
On an engine read from outside the same advice must name that engine's own flags: FLAGS maps each
setting to vLLM's and SGLang's spelling, or to None where the engine has no such knob, and
`for_engine` rewrites a recommendation's lead ("--max-num-seqs 12: ...") accordingly and drops the
bundled engine's settings.
"""

from __future__ import annotations

from collections.abc import Callable

from stagelens.diagnosis.model import Recommendation

Flag = Callable[[object], str] | None

FLAGS: dict[str, dict[str, Flag]] = {
    "vllm": {
        "enable_chunked_prefill": lambda on: "--enable-chunked-prefill" if on else "--no-enable-chunked-prefill",
        "max_num_batched_tokens": lambda n: f"--max-num-batched-tokens {n}",
        "long_prefill_token_threshold": lambda n: f"--long-prefill-token-threshold {n}",
        "max_num_seqs": lambda n: f"--max-num-seqs {n}",
        "block_size": lambda n: f"--block-size {n}",
        # vLLM orders by request priority, not length: give short requests the higher priority
        "policy": lambda _p: "--scheduling-policy priority (send short requests with a higher priority)",
        # the bundled engine's extra models are what LoRA adapters are to vLLM
        "num_preload_models": lambda _n: "--max-loras (every adapter served at once) --max-cpu-loras (the rest)",
        "max_resident_models": None,
        "allocator": None,          # vLLM's KV cache is always paged
    },
    "sglang": {
        "enable_chunked_prefill": None,
        "max_num_batched_tokens": lambda n: f"--chunked-prefill-size {n}",
        "long_prefill_token_threshold": None,
        "max_num_seqs": lambda n: f"--max-running-requests {n}",
        "block_size": lambda n: f"--page-size {n}",
        "policy": None,             # no shortest-first policy among SGLang's schedule policies
        "num_preload_models": lambda _n: "--max-loras-per-batch (every adapter served at once)",
        "max_resident_models": None,
        "allocator": None,          # SGLang's KV pool is paged (by token, or --page-size)
    },
}
# The bundled engine's flags named inside a recommendation's reasoning, in each engine's words
INLINE = {
    "vllm": {"--kv-cache-memory": "--gpu-memory-utilization", "--max-num-seqs": "--max-num-seqs"},
    "sglang": {"--kv-cache-memory": "--mem-fraction-static",
               "--max-num-seqs": "--max-running-requests"},
}
NO_KNOB = {
    "allocator": "KV slots in use far exceed what the running requests hold, although the cache is "
                 "paged: check what keeps blocks (a large --block-size, a KV connector, requests "
                 "holding their max_tokens)",
}


def for_engine(recommendations: list[Recommendation], engine: str | None,
               kv_lever: str | None = None) -> list[Recommendation]:
    """The recommendations as `engine` (vllm | sglang) takes them; the bundled engine's
    unchanged. `kv_lever`, the engine's flag that set its KV cache's size as it was set, is named
    wherever the advice is more KV memory: with the block count forced, a larger memory share
    changes nothing."""
    if engine is None or engine not in FLAGS:
        return recommendations
    flags_of = FLAGS[engine]
    out = []
    for rec in recommendations:
        text = _inline(rec.text, engine, kv_lever)
        if rec.flags and text.startswith("--") and ": " in text:
            lead, why = text.split(": ", 1)
            spelled = [flag(v) for k, v in rec.flags.items() if (flag := flags_of.get(k)) is not None]
            if spelled:
                text = f"{' '.join(dict.fromkeys(spelled))}: {why}"
            else:
                text = next((NO_KNOB[k] for k in rec.flags if k in NO_KNOB), None) or \
                    f"{engine} has no equivalent of {lead}: {why}"
        out.append(Recommendation(text))
    return out


def _inline(text: str, engine: str, kv_lever: str | None = None) -> str:
    lead, sep, why = text.partition(": ")
    theirs_of = dict(INLINE[engine])
    if kv_lever:
        theirs_of["--kv-cache-memory"] = f"raise {kv_lever}, which sets its size now"
    for ours, theirs in theirs_of.items():
        why = why.replace(ours, theirs)
    return lead + sep + why
