"""A decoder-only transformer: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP.

It reads and writes K/V only through the paged pools handed to `forward`, so one set of weights
serves any batch of prefill chunks and decodes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionBatch, paged_attention, write_kv
from .presets import ModelPreset


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rotary_tables(head_dim: int, max_positions: int, theta: float, device, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
    return angles.cos().to(device, dtype), angles.sin().to(device, dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim]; cos/sin: [tokens, head_dim/2] (rotate-half convention)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class Attention(nn.Module):
    def __init__(self, p: ModelPreset) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = p.num_heads, p.num_kv_heads, p.head_dim
        self.qkv_proj = nn.Linear(p.hidden_size, (p.num_heads + 2 * p.num_kv_heads) * p.head_dim,
                                  bias=False)
        self.o_proj = nn.Linear(p.num_heads * p.head_dim, p.hidden_size, bias=False)

    def forward(self, x, cos, sin, k_pool, v_pool, slots, batch: AttentionBatch):
        q, k, v = self.qkv_proj(x).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim,
             self.kv_heads * self.head_dim], dim=-1)
        q = apply_rotary(q.view(-1, self.heads, self.head_dim), cos, sin)
        k = apply_rotary(k.view(-1, self.kv_heads, self.head_dim), cos, sin)
        write_kv(k_pool, v_pool, slots, k, v.view(-1, self.kv_heads, self.head_dim))
        o = paged_attention(q, k_pool, v_pool, batch)
        return self.o_proj(o.flatten(1))


class MLP(nn.Module):
    def __init__(self, p: ModelPreset) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(p.hidden_size, 2 * p.intermediate_size, bias=False)
        self.down_proj = nn.Linear(p.intermediate_size, p.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, p: ModelPreset) -> None:
        super().__init__()
        self.input_norm = RMSNorm(p.hidden_size, p.rms_eps)
        self.attn = Attention(p)
        self.post_attn_norm = RMSNorm(p.hidden_size, p.rms_eps)
        self.mlp = MLP(p)

    def forward(self, x, cos, sin, k_pool, v_pool, slots, batch):
        x = x + self.attn(self.input_norm(x), cos, sin, k_pool, v_pool, slots, batch)
        return x + self.mlp(self.post_attn_norm(x))


class Transformer(nn.Module):
    def __init__(self, p: ModelPreset) -> None:
        super().__init__()
        self.preset = p
        self.embed = nn.Embedding(p.vocab_size, p.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(p) for _ in range(p.num_layers))
        self.norm = RMSNorm(p.hidden_size, p.rms_eps)
        self.lm_head = nn.Linear(p.hidden_size, p.vocab_size, bias=False)

    @torch.inference_mode()
    def forward(self, input_ids, positions, rotary, kv_pools, slots, batch: AttentionBatch):
        """Hidden states [tokens, hidden] for a flattened batch; K/V of these tokens land in
        `kv_pools`."""
        cos, sin = rotary[0][positions], rotary[1][positions]
        x = self.embed(input_ids)
        for layer, (k_pool, v_pool) in zip(self.layers, kv_pools, strict=True):
            x = layer(x, cos, sin, k_pool, v_pool, slots, batch)
        return self.norm(x)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


def init_weights(model: Transformer, seed: int) -> None:
    """Deterministic weights from a seed, independent of the global RNG."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                fan_in = param.shape[-1]
                param.copy_(torch.randn(param.shape, generator=gen) / fan_in ** 0.5)
