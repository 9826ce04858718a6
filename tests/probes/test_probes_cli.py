"""`stagelens topo` and `stagelens probe record` through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stagelens.cli import cli
from stagelens.commands.probe import probe
from stagelens.commands.topo import topo
from stagelens.errors import CollectError, UserError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
STAGELENS = Path(sys.executable).parent / "stagelens"

# Only our two commands: registering every command would import the engine (torch) for nothing.
cli.add_command(topo)
cli.add_command(probe)


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", ["dgx_a100.json", "a100x4_nvlink.json", "pcie_4gpu_2numa.json",
                                  "gpu_lost.json", "not_supported.json", "pcie_below_max.json"])
def test_probe_record_against_a_snapshot_replays_to_the_same_topo_json(tmp_path, name):
    source = str(FIXTURES / name)
    out = tmp_path / "recorded.json"
    CliRunner().invoke(cli, ["--nvml-snapshot", source, "probe", "record", "--ticks", "3", "--out", str(out)],
                       catch_exceptions=False)
    recorded = json.loads(out.read_text())
    assert recorded["format"] == "stagelens-nvml/1"
    original = invoke("--nvml-snapshot", source, "topo", "--json")
    replayed = invoke("--nvml-snapshot", str(out), "topo", "--json")
    assert json.loads(replayed) == json.loads(original)
    assert replayed == original


def test_recorded_series_are_the_ticks_that_were_read(tmp_path):
    out = tmp_path / "rec.json"
    invoke("--nvml-snapshot", str(FIXTURES / "pcie_saturated.json"), "probe", "record", "--ticks", "5",
           "--interval", "0", "--out", str(out))
    dev = json.loads(out.read_text())["devices"][0]
    assert dev["series"]["pcie_rx_kBps"] == [3_000_000, 16_000_000, 28_500_000, 31_000_000, 31_000_000]
    assert dev["series"]["pcie_replay_counter"] == [10, 10, 13, 20, 20]


def test_record_to_stdout_is_a_loadable_snapshot():
    text = invoke("--nvml-snapshot", str(FIXTURES / "pcie_2gpu_phb.json"), "probe", "record", "--ticks", "1")
    snap = json.loads(text)
    assert [d["pci_bus_id"] for d in snap["devices"]] == ["00000000:17:00.0", "00000000:65:00.0"]
    assert snap["pcie_common_ancestor"] == {"0-1": "HOSTBRIDGE"}


def test_topo_text():
    text = invoke("--nvml-snapshot", str(FIXTURES / "dgx_a100.json"), "topo")
    assert text.splitlines()[1].split()[:3] == ["GPU0", "X", "NV12"]
    assert "Legend:" in text and "NVSwitch x12" in text


def run(*args: str) -> subprocess.CompletedProcess:
    fallback = [sys.executable, "-c", "from stagelens.cli import main; main()"]
    command = [str(STAGELENS)] if STAGELENS.exists() else fallback
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_topo_on_this_machine():
    result = run("topo", "--json")
    if result.returncode == 0:  # a node with a driver
        assert set(json.loads(result.stdout)) == {"gpus", "matrix", "cpu_affinity", "numa_affinity", "links"}
        return
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("stagelens: error: no NVIDIA driver found")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_no_driver_snapshot_is_a_collect_error():
    for args in (["topo"], ["probe", "record"]):
        with pytest.raises(CollectError, match="no NVIDIA driver found") as err:
            CliRunner().invoke(cli, ["--nvml-snapshot", str(FIXTURES / "no_driver.json"), *args],
                               catch_exceptions=False)
        assert err.value.exit_code == 3


def test_a_malformed_snapshot_is_a_user_error(tmp_path):
    bad = tmp_path / "wrong.json"
    bad.write_text('{"format": "stagelens-nvml/0", "devices": []}')
    with pytest.raises(UserError, match="wrong.json: format: expected") as err:
        CliRunner().invoke(cli, ["--nvml-snapshot", str(bad), "topo", "--json"], catch_exceptions=False)
    assert err.value.exit_code == 3


def test_a_malformed_snapshot_exits_3_naming_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "stagelens-nvml/1",\n "devices": [\n')
    result = run("--nvml-snapshot", str(bad), "topo")
    assert result.returncode == 3
    assert f"{bad}:3" in result.stderr and "not valid JSON" in result.stderr
    assert "Traceback" not in result.stderr
