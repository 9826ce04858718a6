"""The bundled engine's step cost measured where a recording never went: its real forward, through
the same hooks as the lab, run over a grid of batch sizes, context lengths and prefill sizes (as
Vidur profiles a model's operators once and predicts from the table). The steps it took are kept, in
the bundle's step format (agent/bundle.py STEP_FIELDS), cached per model, dtype, device and torch
version: what-if fits them and scales the fit to the recording's own steps (agent/whatif/fit.py
`beyond`).
"""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path

from stagelens.bundle import STEP_FIELDS
from stagelens.errors import UserError

PROFILE_FORMAT = "stagelens-step-profile/1"
# (requests at once, prompt tokens): decode batches at short, middle and long contexts, then
# prefills alone; the grid spans batches to 128 and prompts to 2,048 tokens in ~20 s of prefill on a
# 2-core CPU (a cell is priced by its prompts: past ~18K prompt tokens a cell costs more than it
# teaches)
CELLS = ((1, 32), (4, 32), (16, 32), (48, 32), (128, 32), (1, 256), (4, 256), (16, 256), (48, 256),
         (1, 1024), (4, 1024), (12, 1024), (1, 16), (1, 128), (1, 512), (1, 2048))
OUTPUT_TOKENS = 6
# then a long prompt chunked at each budget, alone and beside 8 decoding requests
CHUNK_BUDGETS = (64, 512)
CHUNKED_PROMPT = 1536


def cache_path(model: str, dtype: str, device: str) -> Path:
    """Per model, dtype, device, torch version and machine: a cached profile is read without
    importing torch."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    machine = "".join(c if c.isalnum() or c in "-." else "_" for c in platform.node())[:40] or "host"
    name = f"{model}-{dtype}-{device.replace(':', '')}-torch{torch_version}-{machine}.json"
    return Path(base) / "stagelens" / "profiles" / name


def profiled_steps(model: str, dtype: str, device: str, progress=None) -> tuple[list[dict], Path, bool]:
    """(the profile's steps, where they are cached, whether they were measured now). A cache that
    cannot be read is measured again; one that cannot be written is only said."""
    path = cache_path(model, dtype, device)
    cached = _read(path)
    if cached is not None:
        return cached, path, False
    if progress:
        progress(f"profiling the bundled engine's step cost once ({model}, {dtype}, {device}); cached at {path}")
    steps = measure(model, dtype, device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": PROFILE_FORMAT, "steps": steps}))
        tmp.replace(path)
    except OSError as exc:
        if progress:
            progress(f"the step profile could not be cached at {path}: {exc.strerror or exc}")
    return steps, path, True


def cached_profile(model: str, dtype: str, device: str) -> list[dict] | None:
    """The profile's steps as cached (read without torch), or None."""
    return _read(cache_path(model, dtype, device))


def _read(path: Path) -> list[dict] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    steps = data.get("steps") if isinstance(data, dict) and data.get("format") == PROFILE_FORMAT else None
    if not isinstance(steps, list) or not steps:
        return None
    numbers = (int, float)
    if not all(isinstance(s, dict) and all(isinstance(s.get(k), numbers) for k in STEP_FIELDS) for s in steps):
        return None
    return steps


def measure(model: str, dtype: str, device: str) -> list[dict]:
    """Run the grid, then long prompts chunked under small budgets beside running decodes (a
    chunk over a long cached context reads its blocks back: the step a served engine under
    chunked prefill runs most), each on a fresh engine of this model, instrumented as the lab's."""
    longest = max(c for _, c in CELLS) + OUTPUT_TOKENS
    steps = _run_cells(model, dtype, device, 8192, longest,
                       [((b, c, OUTPUT_TOKENS),) for b, c in CELLS])
    for budget in CHUNK_BUDGETS:
        cells = [((decoding, 32, CHUNKED_PROMPT // budget + 2), (1, CHUNKED_PROMPT, 1)) for decoding in (0, 8)]
        steps += _run_cells(model, dtype, device, budget, CHUNKED_PROMPT + 64, cells)
    return steps


def _run_cells(model: str, dtype: str, device: str, budget: int, longest: int, cells) -> list[dict]:
    """Each cell: its groups of (requests, prompt tokens, output tokens) submitted in order, run
    until done."""
    from stagelens.engine_hooks.engine import EngineConfig, LLMEngine
    from stagelens.engine_hooks.engine.config import ConfigError
    from stagelens.engine_hooks.engine.request import SamplingParams
    from stagelens.engine_hooks.hooks.instrumentation import instrument, uninstrument

    held = max(sum(n * (prompt + output + 16) for n, prompt, output in cell) for cell in cells)
    try:
        probe = EngineConfig(model=model, dtype=dtype, device=device)
        engine = LLMEngine(EngineConfig(
            model=model, dtype=dtype, device=device,
            max_num_seqs=max(sum(n for n, _, _ in c) for c in cells), max_num_batched_tokens=budget,
            enable_chunked_prefill=True, max_model_len=longest,
            kv_cache_memory=probe.kv_bytes_per_token() * held * 5 // 4))
    except (ConfigError, RuntimeError) as exc:
        raise UserError(f"the step profile could not start the bundled engine: {exc}") from None
    recorder = instrument(engine)
    vocab = engine.config.preset.vocab_size
    try:
        for cell in cells:
            for n, prompt, output in cell:
                for i in range(n):
                    engine.submit([(i * 7 + j) % vocab for j in range(prompt)],
                                  SamplingParams(max_tokens=output))
            engine.run_until_idle(timeout=120)
        steps = recorder.recent_steps()
    finally:
        uninstrument(engine)
        engine.stop()
    return [{k: s[k] for k in STEP_FIELDS} for s in steps]
