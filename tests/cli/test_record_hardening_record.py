"""`stagelens record` when the run does not end as planned: a full disk stops it with one line and a
readable bundle; SIGTERM and SIGINT stop it cleanly (exit 0); `kill -9` loses at most the last second."""

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.errors import EXIT_UNKNOWN

STAGELENS = str(Path(sys.executable).parent / "stagelens")
# The smallest lab that runs: the tiny model on the CPU, a KV cache of a few blocks.
LAB = ("--model", "tiny", "--device", "cpu", "--kv-cache-memory", "2MiB", "--max-model-len", "256")


def _record(out, model_dir, *args, duration=60, **popen):
    return subprocess.Popen([STAGELENS, "record", "--out", str(out), *LAB, "--model-dir", model_dir,
                             "--duration", str(duration), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _frames_on_disk(path) -> int:
    try:
        return path.read_bytes().count(b'{"kind": "frame"')
    except FileNotFoundError:
        return 0


def _wait_for_frames(proc, path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _frames_on_disk(path) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no {n} frames in {timeout} s"
        time.sleep(0.1)


def _replays(path) -> subprocess.CompletedProcess:
    proc = subprocess.run([STAGELENS, "diagnose", "--replay", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1, 2) and proc.stdout.startswith("verdict: "), proc.stderr
    return proc


def test_record_to_a_full_device_is_one_line(tmp_path, model_dir):
    proc = _record("/dev/full", model_dir, duration=2)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_UNKNOWN
    assert err == "stagelens: error: /dev/full: cannot write the bundle: No space left on device (0 frames written)\n"


@pytest.fixture(scope="module")
def weights_written(model_dir, tmp_path_factory):
    """The model directory with the tiny model's weights already in it."""
    proc = _record(tmp_path_factory.mktemp("warm") / "warm.jsonl", model_dir, duration=0.5)
    assert proc.wait(timeout=120) == 0, proc.communicate()
    return model_dir


def test_a_disk_that_fills_during_record_stops_the_run(tmp_path, weights_written):
    """A file size limit makes the disk full after a few frames: the first write that fails stops the run,
    and the bundle left behind replays (its torn last line said in one warning)."""
    out = tmp_path / "full.jsonl"
    limit = 16 * 1024

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))   # Python ignores SIGXFSZ: writes get EFBIG

    started = time.monotonic()
    # the limit is the process's: the weights must be on disk before, else writing them fails first
    proc = _record(out, weights_written, "--interval", "0.5", preexec_fn=small_disk)
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - started < 40         # stopped at the failure, not after --duration 60
    assert proc.returncode == EXIT_UNKNOWN
    written = int(err.rsplit("(", 1)[1].split()[0])
    assert err.splitlines()[-1] == (f"stagelens: error: {out}: cannot write the bundle: File too large "
                                    f"({written} frames written)"), err
    assert "Traceback" not in err and "listener" not in err
    assert written >= 1 and out.stat().st_size == limit
    bundle = read_bundle(str(out))
    assert len(bundle.frames) == written
    replay = _replays(out)
    if bundle.torn_tail:
        assert replay.stderr == f"stagelens: warning: {bundle.torn_tail}\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_record_cleanly(tmp_path, model_dir, sig):
    out = tmp_path / "stopped.jsonl"
    proc = _record(out, model_dir, "--interval", "0.5")
    _wait_for_frames(proc, out, 3)
    proc.send_signal(sig)
    sent = time.monotonic()
    stdout, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 20, "the in-flight requests drain quickly on the tiny model"
    assert proc.returncode == 0, stderr
    assert f"stagelens: {sig.name}: stopped early, the bundle is complete" in stderr and "Traceback" not in stderr
    bundle = read_bundle(str(out))
    assert bundle.torn_tail is None
    assert stdout.startswith(f"wrote {len(bundle.frames)} frames and {len(bundle.timelines)} request timelines to ")
    assert len(bundle.frames) >= 4         # those seen, and the last one taken after the stop
    assert _replays(out).stderr == ""


def test_kill_9_during_record_loses_at_most_the_last_second(tmp_path, model_dir):
    out = tmp_path / "killed.jsonl"
    proc = _record(out, model_dir, "--interval", "0.5")
    _wait_for_frames(proc, out, 4)
    time.sleep(1.3)                        # a kill at no particular point of the sampling interval
    killed_unix = time.time()
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    bundle = read_bundle(str(out))
    lost = killed_unix - bundle.frames[-1].time_unix
    assert 0 <= lost <= 1.0 + 0.5, f"lost {lost:.2f} s of frames"      # the promise, with slack for a busy CI
    _replays(out)
    # what the kill can leave: a last line cut short, said once; never an unreadable bundle
    assert json.loads(out.read_text().splitlines()[0])["format"] == "stagelens-bundle/1"
