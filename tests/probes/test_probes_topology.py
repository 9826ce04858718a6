"""Topology matrices from snapshot fixtures, compared cell by cell with matrices written out here."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagelens.probes.device import DeviceInfo, NvlinkInfo
from stagelens.probes.nvml_snapshot import SnapshotBackend
from stagelens.probes.topology import build_matrix, render_topology_text, topology_json

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"


def topo(name: str) -> dict:
    return topology_json(SnapshotBackend.from_file(str(FIXTURES / name)))


def assert_matrix(actual: list[list[str]], expected: list[list[str]]) -> None:
    assert len(actual) == len(expected)
    for i, (row, want) in enumerate(zip(actual, expected, strict=True)):
        for j, (cell, w) in enumerate(zip(row, want, strict=True)):
            assert cell == w, f"cell GPU{i}-GPU{j}: {cell} != {w}"


def test_dgx_a100_is_nv12_everywhere_with_its_cpu_and_numa_affinity():
    t = topo("dgx_a100.json")
    assert t["gpus"] == [f"GPU{i}" for i in range(8)]
    n = "NV12"
    assert_matrix(t["matrix"], [
        ["X", n, n, n, n, n, n, n],
        [n, "X", n, n, n, n, n, n],
        [n, n, "X", n, n, n, n, n],
        [n, n, n, "X", n, n, n, n],
        [n, n, n, n, "X", n, n, n],
        [n, n, n, n, n, "X", n, n],
        [n, n, n, n, n, n, "X", n],
        [n, n, n, n, n, n, n, "X"],
    ])
    assert t["numa_affinity"] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t["cpu_affinity"] == [
        "48-63,176-191", "48-63,176-191", "16-31,144-159", "16-31,144-159",
        "112-127,240-255", "112-127,240-255", "80-95,208-223", "80-95,208-223",
    ]
    assert set(t) == {"gpus", "matrix", "cpu_affinity", "numa_affinity", "links"}


def test_four_a100_with_direct_links_are_nv4_between_each_pair():
    t = topo("a100x4_nvlink.json")
    assert_matrix(t["matrix"], [
        ["X", "NV4", "NV4", "NV4"],
        ["NV4", "X", "NV4", "NV4"],
        ["NV4", "NV4", "X", "NV4"],
        ["NV4", "NV4", "NV4", "X"],
    ])
    assert t["numa_affinity"] == [0, 0, 1, 1]


def test_two_gpu_pcie_box_through_the_host_bridge_is_phb():
    t = topo("pcie_2gpu_phb.json")
    assert_matrix(t["matrix"], [["X", "PHB"], ["PHB", "X"]])
    assert t["cpu_affinity"] == ["0-31", "0-31"]


def test_four_gpus_over_two_numa_nodes():
    t = topo("pcie_4gpu_2numa.json")
    assert_matrix(t["matrix"], [
        ["X", "PIX", "NODE", "SYS"],
        ["PIX", "X", "NODE", "SYS"],
        ["NODE", "NODE", "X", "SYS"],
        ["SYS", "SYS", "SYS", "X"],
    ])
    assert t["numa_affinity"] == [0, 0, 0, 1]
    assert t["cpu_affinity"] == ["0-15,32-47", "0-15,32-47", "0-15,32-47", "16-31,48-63"]


def test_a_lost_gpu_keeps_its_place_and_the_others_go_on():
    t = topo("gpu_lost.json")
    assert_matrix(t["matrix"], [
        ["X", "PIX", "N/A", "SYS"],
        ["PIX", "X", "N/A", "SYS"],
        ["N/A", "N/A", "X", "N/A"],
        ["SYS", "SYS", "N/A", "X"],
    ])
    assert t["numa_affinity"] == [0, 0, None, 1]
    assert [row["gpu"] for row in t["links"]] == ["GPU0", "GPU1", "GPU3"]


def test_not_supported_numa_is_absent_and_direct_links_still_count():
    t = topo("not_supported.json")
    assert_matrix(t["matrix"], [["X", "NV2"], ["NV2", "X"]])
    assert t["numa_affinity"] == [None, None]


def _dev(i: int, bus: str, links: list[tuple[bool, str]] = ()) -> DeviceInfo:
    return DeviceInfo(index=i, pci_bus_id=f"00000000:{bus}:00.0",
                      nvlinks=[NvlinkInfo(n, active, 3, remote) for n, (active, remote) in enumerate(links)])


def test_matrix_rule_pcie_levels_and_link_counting():
    devs = [_dev(0, "01"), _dev(1, "02"), _dev(2, "03"), _dev(3, "04"), _dev(4, "05")]
    ancestors = {(0, 1): "INTERNAL", (0, 2): "SINGLE", (0, 3): "MULTIPLE", (0, 4): "HOSTBRIDGE",
                 (1, 2): "NODE", (1, 3): "SYSTEM"}  # others missing: NVML would not say
    m = build_matrix(devs, ancestors)
    assert m[0] == ["X", "PIX", "PIX", "PXB", "PHB"]
    assert [m[1][2], m[1][3], m[2][1], m[3][1]] == ["NODE", "SYS", "NODE", "SYS"]
    assert m[2][4] == "N/A"


def test_matrix_rule_switch_links_take_the_smaller_count_and_direct_links_win():
    switch = (True, "switch")
    a = _dev(0, "07", [switch] * 12)
    b = _dev(1, "0F", [switch] * 10 + [(False, "switch")] * 2)  # two links down
    c = _dev(2, "47", [(True, "0000:4E:00.0")] * 2 + [(False, "0000:4E:00.0")])  # 4-digit domain spelling
    d = _dev(3, "4E", [switch] * 6)
    m = build_matrix([a, b, c, d], {(0, 2): "SYSTEM", (1, 2): "SYSTEM"})
    assert m[0][1] == m[1][0] == "NV10"
    assert m[2][3] == m[3][2] == "NV2"  # counted from either end, inactive links excluded
    assert m[0][2] == "SYS"  # c has no switch links: the PCIe level decides
    assert m[0][3] == "NV6"


def test_link_table_lists_pcie_and_nvlinks_with_findings():
    t = topo("pcie_below_max.json")
    pcie = [row for row in t["links"] if row["type"] == "PCIe"]
    assert [(r["gen"], r["gen_max"], r["width"], r["width_max"]) for r in pcie] == [
        (3, 4, 16, 16), (4, 4, 8, 16), (4, 4, 16, 16)]
    assert pcie[0]["bandwidth_GBps"] == pytest.approx(0.985 * 16)
    assert pcie[1]["bandwidth_GBps"] == pytest.approx(1.969 * 8)
    assert "Gen3" in pcie[0]["finding"] and "Gen4" in pcie[0]["finding"]
    assert "x8" in pcie[1]["finding"] and "x16" in pcie[1]["finding"]
    assert pcie[2]["finding"] is None
    nv = [row for row in topo("a100x4_nvlink.json")["links"] if row["type"] == "NVLink"]
    assert len(nv) == 48
    assert {r["remote_gpu"] for r in nv if r["gpu"] == "GPU0"} == {"GPU1", "GPU2", "GPU3"}


def test_text_rendering_looks_like_nvidia_smi_topo_m():
    text = render_topology_text(topo("pcie_4gpu_2numa.json"))
    lines = text.splitlines()
    assert lines[0].split() == ["GPU0", "GPU1", "GPU2", "GPU3", "CPU", "Affinity", "NUMA", "Affinity"]
    assert lines[1].split() == ["GPU0", "X", "PIX", "NODE", "SYS", "0-15,32-47", "0"]
    assert lines[4].split() == ["GPU3", "SYS", "SYS", "SYS", "X", "16-31,48-63", "1"]
    assert "Legend:" in text
    for code in ("X     the GPU itself", "SYS ", "NODE", "PHB ", "PXB ", "PIX ", "NV#"):
        assert code in text
    below = render_topology_text(topo("pcie_below_max.json"))
    assert "Findings:" in below and "GPU1 PCIe link is x8" in below
