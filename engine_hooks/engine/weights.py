"""Model weights: made once from a seed, saved to a file, and loaded back by really reading that
file."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import torch

from .model import Transformer, init_weights
from .presets import ModelPreset


def default_model_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stagelens" / "models"


def weights_path(model_dir: Path, preset: ModelPreset, seed: int) -> Path:
    return Path(model_dir) / f"{preset.name}-seed{seed}.pt"


def ensure_weights_file(model_dir: Path, preset: ModelPreset, seed: int) -> Path:
    """The weight file for (preset, seed), written atomically the first time it is needed."""
    path = weights_path(model_dir, preset, seed)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    model = Transformer(preset)
    init_weights(model, seed)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save(model.state_dict(), f)
    os.replace(tmp, path)
    return path


def load_model(path: Path, preset: ModelPreset, device: torch.device, dtype: torch.dtype,
               cold: bool = False) -> tuple[Transformer, int]:
    """Read the file into host memory, then move it to `device`. Returns the model and bytes read.

    `cold` first drops the file from the page cache, so the read comes from storage as after a
    fresh deploy.
    """
    with open(path, "rb") as f:
        if cold and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        data = f.read()     # storage -> host memory, the first leg of the cold path
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    # host memory -> device memory, the second leg: always a real copy into the model's own storage,
    # even when the "device" is this CPU (as a transfer to a GPU would be)
    resident = {name: t.to(device=device, dtype=dtype, copy=True) for name, t in state.items()}
    del state
    with torch.device("meta"):
        model = Transformer(preset)
    model.load_state_dict(resident, assign=True)
    return model.eval(), len(data)
