"""What `kill -9` during `stagelens record` loses: seconds between the kill and the last frame on disk,
over kills at random points of the sampling interval, and how many kills left a torn last line.

    python bench/record_crash.py [--quick] [--json] [--interval S]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.bundle import read_bundle  # noqa: E402

STAGELENS = str(Path(sys.executable).parent / "stagelens")
LAB = ("--model", "tiny", "--device", "cpu", "--kv-cache-memory", "2MiB", "--max-model-len", "256", "--rate", "20")


def one_kill(out: Path, model_dir: str, interval: float, delay: float) -> tuple[float, bool]:
    """(seconds of frames lost, whether the kill tore the last line)."""
    proc = subprocess.Popen([STAGELENS, "record", "--out", str(out), *LAB, "--model-dir", model_dir,
                             "--duration", "600", "--interval", str(interval)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not out.exists() or out.read_bytes().count(b'{"kind": "frame"') < 3:   # the engine is serving
            if proc.poll() is not None:
                raise SystemExit(f"record exited with {proc.returncode} before its third frame")
            time.sleep(0.05)
        time.sleep(delay)
        killed = time.time()
    finally:
        proc.kill()             # SIGKILL: nothing of record's own runs after it
        proc.wait()
    bundle = read_bundle(str(out))
    return killed - bundle.frames[-1].time_unix, bundle.torn_tail is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--interval", type=float, default=1.0, help="record's sampling interval [1.0]")
    args = parser.parse_args()
    kills = 4 if args.quick else 12
    rng = random.Random(1)
    losses, torn = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(kills):
            # a delay of a few intervals plus a random phase: the kill lands anywhere in a tick
            loss, tore = one_kill(Path(tmp) / f"{i}.jsonl", tmp, args.interval, rng.uniform(1, 3) * args.interval)
            losses.append(loss)
            torn += tore
    emit({"interval_s": args.interval, "kills": kills, "loss_mean_s": statistics.fmean(losses),
          "loss_p50_s": statistics.median(losses), "loss_max_s": max(losses), "torn_last_lines": torn}, args.json)


if __name__ == "__main__":
    main()
