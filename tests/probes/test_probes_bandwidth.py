"""The copy-bandwidth reference, measured small on CPU, cached per node and device with its date."""

from __future__ import annotations

import datetime as dt
import json
import socket

from stagelens.probes.bandwidth import cache_dir, get_reference_bandwidth, measure_copy_bandwidth

SMALL = 1 << 20  # 1 MiB: enough to time a copy, quick on any CPU


def test_measure_copy_bandwidth_is_positive():
    assert measure_copy_bandwidth("cpu", size_bytes=SMALL, runs=2) > 0


def test_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "stagelens"
    first = get_reference_bandwidth("cpu", size_bytes=SMALL, runs=2)
    assert first.cached is False and first.bytes_per_second > 0
    assert first.node == socket.gethostname() and first.device == "cpu" and first.size_bytes == SMALL

    path = tmp_path / "stagelens" / "bandwidth.json"
    data = json.loads(path.read_text())
    (key, entry), = data.items()
    assert key.startswith(socket.gethostname() + "/cpu")
    assert entry["bytes_per_second"] == first.bytes_per_second
    measured = dt.datetime.fromisoformat(entry["measured_at"])
    assert abs((dt.datetime.now(dt.UTC) - measured).total_seconds()) < 3600

    second = get_reference_bandwidth("cpu", size_bytes=SMALL, runs=2)
    assert second.cached is True
    assert second.bytes_per_second == first.bytes_per_second and second.measured_at == first.measured_at

    again = get_reference_bandwidth("cpu", size_bytes=SMALL, runs=1, refresh=True)
    assert again.cached is False


def test_a_damaged_cache_is_measured_again(tmp_path):
    path = tmp_path / "bw.json"
    path.write_text("{not json")
    ref = get_reference_bandwidth("cpu", size_bytes=SMALL, runs=1, cache_path=path)
    assert ref.cached is False and json.loads(path.read_text())
