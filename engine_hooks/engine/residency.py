"""Which models are resident on the device, and the loader thread that brings cold ones in.

Resident models keep serving while a load runs: the loader reads the weight file into host
memory and copies it to the device on its own thread (the cold path); the engine only swaps the
finished model in.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch

from .model import Transformer
from .presets import ModelPreset
from .weights import ensure_weights_file, load_model

log = logging.getLogger(__name__)


class ModelResidency:
    def __init__(self, preset: ModelPreset, names: list[str], seeds: list[int], model_dir: Path,
                 device: torch.device, dtype: torch.dtype, capacity: int | None,
                 in_use: Callable[[], set[str]], on_loaded: Callable[[str], None]) -> None:
        self.preset, self.device, self.dtype = preset, device, dtype
        self.paths = {n: ensure_weights_file(model_dir, preset, s) for n, s in zip(names, seeds, strict=True)}
        self.capacity = capacity or len(names)
        self._in_use, self._on_loaded = in_use, on_loaded
        self._resident: OrderedDict[str, Transformer] = OrderedDict()   # least recently used first
        self._loading: set[str] = set()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.load_errors: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return list(self.paths)

    def preload(self, count: int) -> None:
        for name in self.names[:count]:
            self._install(name, self.load(name, cold=False)[0])

    def is_resident(self, name: str) -> bool:
        return name in self._resident

    def resident_names(self) -> list[str]:
        return list(self._resident)

    def loading_names(self) -> list[str]:
        return sorted(self._loading)

    def get(self, name: str) -> Transformer:
        with self._lock:
            self._resident.move_to_end(name)
            return self._resident[name]

    def request_load(self, name: str) -> None:
        with self._lock:
            if name in self._resident or name in self._loading:
                return
            self._loading.add(name)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loader_loop, name="stagelens-loader",
                                            daemon=True)
            self._thread.start()
        self._queue.put(name)

    def load(self, name: str, cold: bool = True) -> tuple[Transformer, int]:
        """Read `name`'s weight file and place it on the device. The loader thread's seam."""
        return load_model(self.paths[name], self.preset, self.device, self.dtype, cold=cold)

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _loader_loop(self) -> None:
        while (name := self._queue.get()) is not None:
            try:
                model, _ = self.load(name)
            # a broken file must not kill the loader: report and keep serving others
            except Exception as exc:
                log.error("loading model %s failed: %s", name, exc)
                self.load_errors[name] = str(exc)
                with self._lock:
                    self._loading.discard(name)
                continue
            self._install(name, model)
            self._on_loaded(name)

    def _install(self, name: str, model: Transformer) -> None:
        with self._lock:
            busy = self._in_use()
            while len(self._resident) >= self.capacity:
                victim = next((n for n in self._resident if n not in busy), None)
                if victim is None:
                    break   # every resident model is serving: run over capacity rather than stall
                del self._resident[victim]
            self._resident[name] = model
            self._loading.discard(name)
