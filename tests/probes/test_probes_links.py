"""Link findings and rates, with the expected figures computed by hand from the fixtures' series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagelens.probes.gpu import decode_throttle_reasons
from stagelens.probes.links import pcie_bandwidth_bytes
from stagelens.probes.nvml_snapshot import SnapshotBackend
from stagelens.probes.sample import NodeProbe

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def samples(name: str, n: int, **kw) -> list[dict]:
    probe = NodeProbe(SnapshotBackend.from_file(str(FIXTURES / name)), host=False, **kw)
    return [probe.sample().to_dict() for _ in range(n)]


def test_pcie_bandwidth_per_generation_and_width():
    assert pcie_bandwidth_bytes(4, 16) == pytest.approx(1.969 * 16 * 1e9)
    assert pcie_bandwidth_bytes(5, 16) == pytest.approx(3.938 * 16 * 1e9)
    assert pcie_bandwidth_bytes(1, 1) == pytest.approx(0.25e9)
    assert pcie_bandwidth_bytes(6, 4) == pytest.approx(7.563 * 4 * 1e9)
    assert pcie_bandwidth_bytes(None, 16) is None and pcie_bandwidth_bytes(4, 0) is None


def test_a_saturating_pcie_link():
    series = fixture("pcie_saturated.json")["devices"][0]["series"]
    link_bytes = 1.969 * 16 * 1e9  # Gen4 x16, per direction
    got = [s["gpus"][0]["pcie"] for s in samples("pcie_saturated.json", 5)]
    for tick, pcie in enumerate(got):
        k = min(tick, 3)
        assert pcie["bandwidth_bytes_per_second"] == pytest.approx(link_bytes)
        assert pcie["rx_bytes_per_second"] == series["pcie_rx_kBps"][k] * 1000
        assert pcie["tx_bytes_per_second"] == series["pcie_tx_kBps"][k] * 1000
        assert pcie["rx_util_ratio"] == pytest.approx(series["pcie_rx_kBps"][k] * 1000 / link_bytes)
        assert pcie["tx_util_ratio"] == pytest.approx(series["pcie_tx_kBps"][k] * 1000 / link_bytes)
    assert [round(p["rx_util_ratio"], 4) for p in got] == [0.0952, 0.5079, 0.9046, 0.984, 0.984]
    # replay counter [10, 10, 13, 20]: increments between samples
    assert [p["replay_counter"] for p in got] == [10, 10, 13, 20, 20]
    assert [p["replay_increments"] for p in got] == [None, 0, 3, 7, 0]
    assert any("replay counter rose by 3" in f for f in got[2]["findings"])
    assert got[1]["findings"] == [] and got[1]["below_max"] is False


def test_links_below_their_maximum_are_findings():
    gpus = samples("pcie_below_max.json", 1)[0]["gpus"]
    gen3, x8, ok = (g["pcie"] for g in gpus)
    assert gen3["below_max"] is True and gen3["bandwidth_bytes_per_second"] == pytest.approx(0.985 * 16e9)
    assert len(gen3["findings"]) == 1
    assert "GPU0 PCIe link runs at Gen3, below its maximum Gen4" in gen3["findings"][0]
    assert "15.8 of 31.5 GB/s" in gen3["findings"][0]
    assert x8["below_max"] is True and x8["bandwidth_bytes_per_second"] == pytest.approx(1.969 * 8e9)
    assert "x8, narrower than its maximum x16" in x8["findings"][0]
    assert ok["below_max"] is False and ok["findings"] == []


def test_nvlink_rates_from_counter_deltas_dgx_a100():
    dev = fixture("dgx_a100.json")["devices"][3]
    interval = 1.0
    got = samples("dgx_a100.json", 3, nvlink_errors_every=1)
    first = got[0]["gpus"][3]["nvlinks"]
    assert len(first) == 12 and all(link["tx_bytes_per_second"] is None for link in first)  # no delta yet
    for tick in (1, 2):
        for link in got[tick]["gpus"][3]["nvlinks"]:
            tx = dev["series"]["nvlink_tx_kib"][str(link["link"])]
            rx = dev["series"]["nvlink_rx_kib"][str(link["link"])]
            want_tx = (tx[tick] - tx[tick - 1]) * 1024 / interval
            want_rx = (rx[tick] - rx[tick - 1]) * 1024 / interval
            assert link["tx_bytes_per_second"] == pytest.approx(want_tx)
            assert link["rx_bytes_per_second"] == pytest.approx(want_rx)
            assert link["tx_util_ratio"] == pytest.approx(want_tx / 25e9)  # NVLink 3: 25 GB/s per direction
            assert link["remote"] == "switch" and link["remote_gpu"] is None and link["version"] == 3
    # link 5 crc_flit [0, 0, 2]
    link5 = got[2]["gpus"][3]["nvlinks"][5]
    assert link5["errors"]["crc_flit"] == 2 and link5["error_increments"]["crc_flit"] == 2
    assert got[1]["gpus"][3]["nvlinks"][5]["error_increments"] == {
        "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}


def test_nvlink_rates_use_the_snapshot_interval_and_name_the_peer():
    dev = fixture("a100x4_nvlink.json")["devices"][1]
    got = samples("a100x4_nvlink.json", 3)
    for link in got[1]["gpus"][1]["nvlinks"]:
        tx = dev["series"]["nvlink_tx_kib"][str(link["link"])]
        assert link["tx_bytes_per_second"] == pytest.approx((tx[1] - tx[0]) * 1024 / 0.5)
    assert all(link["tx_bytes_per_second"] == 0 for link in got[2]["gpus"][1]["nvlinks"])  # series held
    peers = [link["remote_gpu"] for link in got[0]["gpus"][1]["nvlinks"]]
    assert peers == [0] * 4 + [2] * 4 + [3] * 4


def test_not_supported_values_are_absent_not_errors():
    got = samples("not_supported.json", 2)
    gpu = got[1]["gpus"][0]
    link0, link1 = gpu["nvlinks"]
    assert link0["tx_bytes_per_second"] == pytest.approx((4096 - 0) * 1024 / 2.0)
    assert link0["rx_bytes_per_second"] == pytest.approx((1024 - 0) * 1024 / 2.0)
    assert link1["tx_bytes_per_second"] is None and link1["rx_bytes_per_second"] is None
    assert link0["errors"] == {} and link1["errors"] == {}
    assert gpu["pcie"]["replay_counter"] is None and gpu["pcie"]["replay_increments"] is None
    assert gpu["power_watts"] is None and gpu["temperature_celsius"] is None
    assert "nvmlDeviceGetPcieReplayCounter" in gpu["unsupported"]
    assert gpu["errors"] == {"nvmlDeviceGetTemperature": "NoPermission"}
    assert all(c["success"] for c in got[1]["collectors"])


def test_gpu_state_of_a_tick():
    got = samples("dgx_a100.json", 2)
    gpu = got[1]["gpus"][3]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB" and gpu["pci_bus_id"] == "00000000:4E:00.0"
    assert gpu["utilization_gpu_ratio"] == pytest.approx((65 + 3) / 100)
    assert gpu["utilization_memory_ratio"] == pytest.approx((40 + 3) / 100)
    assert gpu["memory_used_bytes"] == 63_000_000_000 and gpu["memory_total_bytes"] == 85899345920
    assert (gpu["clock_sm_mhz"], gpu["clock_mem_mhz"]) == (1410, 1593)
    assert got[0]["gpus"][3]["throttle_reasons"] == [] and gpu["throttle_reasons"] == ["sw_power_cap"]
    assert gpu["power_watts"] == pytest.approx(253.0) and gpu["temperature_celsius"] == 58


def test_throttle_reason_decoding():
    assert decode_throttle_reasons(0) == []
    assert decode_throttle_reasons(0x1 | 0x8 | 0x40) == ["gpu_idle", "hw_slowdown", "hw_thermal_slowdown"]
    assert decode_throttle_reasons(0x4 | 0x10000) == ["sw_power_cap", "other_0x10000"]


def test_nvlink_error_counters_are_read_every_nth_tick_and_stand_in_between():
    got = samples("dgx_a100.json", 4, nvlink_errors_every=2)
    link5 = [s["gpus"][0]["nvlinks"][5] for s in got]
    assert link5[0]["errors"]["crc_flit"] == 0 and link5[0]["error_increments"] == {}
    assert link5[1]["errors"]["crc_flit"] == 0 and link5[1]["error_increments"] == {}  # not read: last values
    assert link5[2]["errors"]["crc_flit"] == 2 and link5[2]["error_increments"]["crc_flit"] == 2
    assert link5[3]["errors"]["crc_flit"] == 2 and link5[3]["error_increments"] == {}
