"""Model sizes. `tiny` keeps tests fast, `small` is the CPU default, the larger ones are for
GPUs."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelPreset:
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset("tiny", vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, intermediate_size=128),
        ModelPreset("small", vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8,
                    num_kv_heads=2, intermediate_size=1536),
        ModelPreset("medium", vocab_size=32000, hidden_size=2048, num_layers=16, num_heads=16,
                    num_kv_heads=4, intermediate_size=5632),
        ModelPreset("large", vocab_size=32000, hidden_size=4096, num_layers=32, num_heads=32,
                    num_kv_heads=8, intermediate_size=11008),
    )
}
