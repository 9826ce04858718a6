"""Turns a scheduled batch into model inputs, runs the forward pass per model, and samples."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from .allocator import BlockAllocator
from .attention import AttentionBatch, SequenceKV, describe_batch, describe_sequence
from .kv_cache import KVCache
from .model import rotary_tables
from .presets import ModelPreset
from .request import Request
from .residency import ModelResidency
from .sampler import sample


@dataclass
class ModelInputs:
    """One model's share of a step: flattened tokens and where each sequence's K/V live."""
    model: str
    requests: list[Request]
    num_new_tokens: list[int]
    input_ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    attention: AttentionBatch
    sample_rows: list[int]           # rows whose next token is sampled (the prompt is complete)
    sample_requests: list[Request]

    @property
    def host_to_device_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.input_ids, self.positions, self.slots))


class ModelRunner:
    def __init__(self, preset: ModelPreset, kv_cache: KVCache, allocator: BlockAllocator,
                 residency: ModelResidency, max_model_len: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.kv_cache, self.allocator, self.residency = kv_cache, allocator, residency
        self.device = device
        self.rotary = rotary_tables(preset.head_dim, max_model_len, preset.rope_theta, device, dtype)

    @staticmethod
    def groups(entries: list[tuple[Request, int]]) -> list[list[tuple[Request, int]]]:
        """A step's entries split by model: each group is one forward pass (and fails on its
        own)."""
        by_model: dict[str, list[tuple[Request, int]]] = defaultdict(list)
        for req, n in entries:
            by_model[req.model].append((req, n))
        return list(by_model.values())

    def prepare(self, group: list[tuple[Request, int]]) -> ModelInputs:
        """One model's group of (request, tokens to compute) -> its inputs on the device."""
        model = group[0][0].model
        bs = self.kv_cache.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seqs: list[SequenceKV] = []
        sample_rows: list[int] = []
        sample_requests: list[Request] = []
        for req, n in group:
            start = req.num_computed_tokens
            table = self.allocator.block_table(req.request_id)
            query_start = len(ids)
            ids.extend(req.token_ids(start, start + n))
            span = range(start, start + n)
            positions.extend(span)
            slots.extend(table[p // bs] * bs + p % bs for p in span)
            seqs.append(describe_sequence(query_start, n, start + n, table, bs))
            if start + n == req.num_tokens:
                sample_rows.append(query_start + n - 1)
                sample_requests.append(req)
        return ModelInputs(model, [r for r, _ in group], [n for _, n in group],
                           self._to_device(ids), self._to_device(positions), self._to_device(slots),
                           describe_batch(seqs, bs, self.device), sample_rows, sample_requests)

    def _to_device(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(self.device, non_blocking=True)

    def forward(self, inputs: ModelInputs) -> torch.Tensor:
        model = self.residency.get(inputs.model)
        hidden = model(inputs.input_ids, inputs.positions, self.rotary, self.kv_cache.pools,
                       inputs.slots, inputs.attention)
        if not inputs.sample_rows:
            return hidden.new_empty((0, model.preset.vocab_size))
        return model.logits(hidden[inputs.sample_rows])

    def sample(self, inputs: ModelInputs, logits: torch.Tensor) -> list[int | None]:
        return sample(logits, inputs.sample_requests) if inputs.sample_requests else []
