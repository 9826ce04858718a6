"""Greedy and temperature sampling. Temperature draws are seeded per (request, position), so a
request's output does not depend on batching, chunking or preemption.

Sampling cannot produce NaN: temperatures below `GREEDY_BELOW` are greedy (as vLLM does), scaling
happens in float32 after subtracting the row's maximum, and a row whose logits are not all finite
gets no token (None): that request fails, the rest of the batch goes on.
"""

from __future__ import annotations

import zlib

import torch

from .request import Request

GREEDY_BELOW = 1e-5
_SEED_SPACE = 2**64            # torch.Generator.manual_seed takes seeds modulo this
NON_FINITE_LOGITS = "the model produced non-finite logits (NaN or infinity) for this request"


def sample(logits: torch.Tensor, requests: list[Request]) -> list[int | None]:
    """logits: [len(requests), vocab] -> one token id per request, None where the logits are not
    finite."""
    logits = logits.float()
    finite = torch.isfinite(logits).all(dim=-1).tolist()
    greedy = logits.argmax(dim=-1).tolist()
    tokens: list[int | None] = []
    for row, req in enumerate(requests):
        if not finite[row]:
            tokens.append(None)
        elif req.params.temperature < GREEDY_BELOW:
            tokens.append(greedy[row])
        else:
            tokens.append(_draw(logits[row], req))
    return tokens


def _draw(row: torch.Tensor, req: Request) -> int:
    seed = req.params.seed if req.params.seed is not None else zlib.crc32(req.request_id.encode())
    gen = torch.Generator(device=row.device).manual_seed((seed * 1_000_003 + req.num_tokens) % _SEED_SPACE)
    # <= 0 everywhere, 0 at the max: softmax is safe
    scaled = (row - row.max()) / req.params.temperature
    return int(torch.multinomial(torch.softmax(scaled, dim=-1), 1, generator=gen))
