"""Greedy and temperature sampling. Temperature draws are seeded per (request, position), so a
request's output does not depend on batching, chunking or preemption."""

from __future__ import annotations

import zlib

import torch

from .request import Request


def sample(logits: torch.Tensor, requests: list[Request]) -> list[int]:
    """logits: [len(requests), vocab] float32 -> one token id per request."""
    tokens = logits.argmax(dim=-1).tolist()
    for row, req in enumerate(requests):
        temperature = req.params.temperature
        if temperature > 0:
            seed = req.params.seed if req.params.seed is not None else zlib.crc32(req.request_id.encode())
            gen = torch.Generator(device=logits.device).manual_seed(seed * 1_000_003 + req.num_tokens)
            probs = torch.softmax(logits[row] / temperature, dim=-1)
            tokens[row] = int(torch.multinomial(probs, 1, generator=gen))
    return tokens
