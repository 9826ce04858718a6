"""What `stagelens diagnose --replay` holds of a bundle: a bundle of an 8-GPU node's frames (the DGX A100 snapshot,
~55 KB of JSON a frame, with a busy engine's snapshot) written to a scratch file, replayed in a child process; its
size, the child's peak RSS and their ratio. A replay streams its frames, so the peak is the diagnosis window's, not
the file's (7,348 frames, 401 MB: 960 MB held every frame; streamed, 45 MB).

    python bench/replay_memory.py [--frames N] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

DGX = ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json"


def dgx_frame() -> dict:
    """One frame of the DGX snapshot with a busy engine's snapshot, as JSON."""
    from stagelens.engine_hooks.records.snapshot import EngineSnapshot
    from stagelens.runtime import AgentRuntime
    from tests.helpers.frame_builders import engine_snapshot

    runtime = AgentRuntime(nvml_snapshot=str(DGX), history=2)
    runtime.sampler.tick()
    frame = runtime.frames(None)[-1].to_dict()
    frame["engine"] = EngineSnapshot.from_dict(engine_snapshot()).to_dict()
    return frame


def write_bundle(path: Path, frames: int) -> None:
    frame = dgx_frame()
    with open(path, "w") as f:
        f.write(json.dumps({"format": "stagelens-bundle/1", "created_unix": 0, "source": "bench"}) + "\n")
        for i in range(frames):
            frame.update(time_unix=1_800_000_000.0 + i, time_monotonic=float(i))
            f.write(json.dumps({"kind": "frame", "frame": frame}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=7348, help="frames in the bundle (7,348: ~401 MB)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "replay.jsonl"
        write_bundle(path, args.frames)
        size = path.stat().st_size
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "stagelens.cli", "diagnose", "--replay", str(path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.monotonic() - started
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"diagnose --replay exited {done.returncode}: {done.stderr.strip()[-300:]}")
    # Linux: kilobytes
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    emit({"frames": args.frames, "bundle_mb": size / 1e6, "peak_rss_mb": peak / 1e6,
          "peak_over_bundle": peak / size, "seconds": seconds}, args.json)


if __name__ == "__main__":
    main()
