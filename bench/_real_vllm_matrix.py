"""The configurations a real vLLM (the CPU build, tests/helpers/real_vllm.py) is diagnosed on from outside by
`bench/accuracy.py --through real-vllm`: healthy servers at several loads, where nothing may warn or fire, and
each fault an operator meets, with the root stage an expert names and the flag they would change.

vLLM's CPU blocks hold 128 tokens; `--num-gpu-blocks-override N` sets the cache at N of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.vocabulary import KV_CACHE, SCHEDULER


@dataclass(frozen=True)
class RealCase:
    name: str
    expected: str | None          # the root stage; None: no stage may warn or fire
    server: tuple[str, ...]       # vLLM's flags beside the helper's own
    load: str                     # "open" (Poisson, `rate` a second) or "closed" (`clients`, one after another)
    rate_or_clients: float
    prompt: int | tuple[int, int, float]   # tokens, or (short, long, share of long)
    output: int
    lever: str | None             # what the advice must name (the flag an expert changes)
    why: str


MATRIX: tuple[RealCase, ...] = (
    RealCase("healthy-r2", None, (), "open", 2.0, 32, 48, None, "a few short requests a second, nothing waits"),
    RealCase("healthy-r6", None, (), "open", 6.0, 32, 48, None, "more of the same, one 128-token block each"),
    RealCase("healthy-r3-long", None, (), "open", 3.0, 256, 128, None, "longer requests, several blocks each"),
    RealCase("healthy-mixed", None, (), "open", 3.0, (32, 768, 0.2), 64, None,
             "a fifth of prompts 768 tokens, chunked prefill (V1's default) keeps the others moving"),
    RealCase("healthy-closed2", None, (), "closed", 2, 64, 128, None, "two clients one after another"),
    RealCase("cap2-c8", SCHEDULER, ("--max-num-seqs", "2"), "closed", 8, 64, 256, "--max-num-seqs 4",
             "the batch held at 2 with 6 waiting and the KV cache empty"),
    RealCase("cap4-c16", SCHEDULER, ("--max-num-seqs", "4"), "closed", 16, 64, 128, "--max-num-seqs 8",
             "the batch held at 4 with 12 waiting"),
    RealCase("cap3-open", SCHEDULER, ("--max-num-seqs", "3"), "open", 8.0, 64, 96, "--max-num-seqs 6",
             "an open load past what 3 seats serve: the queue grows"),
    RealCase("budget-long", SCHEDULER, ("--max-num-batched-tokens", "64", "--max-num-seqs", "16"), "open", 4.0,
             (32, 1536, 0.25), 32, "--max-num-batched-tokens",
             "64 tokens a step and 1,536-token prompts: every short request waits behind a long prefill"),
    RealCase("kv12-c8", KV_CACHE, ("--num-gpu-blocks-override", "12", "--max-model-len", "1024"), "closed", 8,
             256, 256, "--num-gpu-blocks-override 12", "12 blocks for 8 requests of 4 blocks: preempted, recomputed"),
    RealCase("kv16-c12", KV_CACHE, ("--num-gpu-blocks-override", "16", "--max-model-len", "1024"), "closed", 12,
             128, 384, "--num-gpu-blocks-override 16", "16 blocks for 12 growing requests"),
    RealCase("kv24-open", KV_CACHE, ("--num-gpu-blocks-override", "24", "--max-model-len", "1024"), "open", 5.0,
             128, 512, "--num-gpu-blocks-override 24",
             "an open load of requests growing to 5 blocks each, 24 blocks: the queue waits for memory"),
)
# Not a case: `--kv-cache-memory-bytes` on the CPU build. Its worker sizes the cache from VLLM_CPU_KVCACHE_SPACE
# whatever that flag says (1 GiB, a million tokens here): the configuration first tried with it ran healthy, and
# read ok 3 times of 3, rightly.
CASES = {c.name: c for c in MATRIX}
QUICK = ("healthy-r6", "cap2-c8", "budget-long", "kv12-c8")
STANDING = ("cap2-c8", "kv12-c8")    # the standing faults the default diagnose is repeated on
