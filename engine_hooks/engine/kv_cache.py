"""The KV cache: one K and one V pool per layer, [num_blocks, block_size, kv_heads, head_dim]."""

from __future__ import annotations

import torch

from .presets import ModelPreset


class KVCache:
    def __init__(self, preset: ModelPreset, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        shape = (num_blocks, block_size, preset.num_kv_heads, preset.head_dim)
        self.num_blocks, self.block_size = num_blocks, block_size
        self.pools = [(torch.zeros(shape, device=device, dtype=dtype),
                       torch.zeros(shape, device=device, dtype=dtype))
                      for _ in range(preset.num_layers)]
        element = torch.empty((), dtype=dtype).element_size()
        self.bytes_per_token = 2 * preset.num_layers * preset.num_kv_heads * preset.head_dim * element
        self.bytes_per_block = self.bytes_per_token * block_size

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_block * self.num_blocks
