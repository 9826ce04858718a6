"""`stagelens engines [--json]` run as a user runs it, over look-alike processes: exit 0, every
engine with its URL, process, GPUs and how it was found; the absent kubelet socket one line."""

from __future__ import annotations

import json

import pytest

from stagelens.commands.engines import render_text
from stagelens.discovery import Discovery
from tests.helpers.cli_run import stagelens
from tests.helpers.fake_engines import FakeEngines, free_port


@pytest.fixture
def fakes(tmp_path):
    engines = FakeEngines(tmp_path / "fakes")
    yield engines
    engines.stop_all()


def test_engines_json_lists_each_with_its_port_and_gpus(fakes, tmp_path):
    ports = [free_port(), free_port()]
    vllm = fakes.start("vllm", "--port", str(ports[0]), env={"CUDA_VISIBLE_DEVICES": "2,3"})
    sglang = fakes.start("sglang", "--port", str(ports[1]))
    absent = tmp_path / "kubelet.sock"
    proc = stagelens("engines", "--json", "--pod-resources-socket", str(absent))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    report = json.loads(proc.stdout)
    # other sessions may run engines on this machine: ours are looked up by pid
    ours = {e["pid"]: e for e in report["engines"] if e["pid"] in (vllm.pid, sglang.pid)}
    assert (ours[vllm.pid]["url"], ours[vllm.pid]["gpus"]) == (f"http://127.0.0.1:{ports[0]}", ["2", "3"])
    assert (ours[sglang.pid]["kind"], ours[sglang.pid]["url"]) == ("sglang", f"http://127.0.0.1:{ports[1]}")
    assert report["left_out"] == 0 and report["pods"] == []
    assert any(n.startswith(f"no kubelet pod-resources socket at {absent}") for n in report["notes"])


def test_engines_text_is_a_table_with_how_each_was_found(fakes, tmp_path):
    port = free_port()
    vllm = fakes.start("vllm", "serve", "some/model", "--port", str(port), env={"CUDA_VISIBLE_DEVICES": ""})
    proc = stagelens("engines", "--pod-resources-socket", str(tmp_path / "absent.sock"))
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["name", "kind", "url", "pid", "gpus", "how"]
    ours = next(r for r in rows if f" {vllm.pid} " in r)
    assert ours.split()[:5] == [f"vllm-{port}", "vllm", f"http://127.0.0.1:{port}", str(vllm.pid), "none"]
    assert f"listening on 0.0.0.0:{port}" in ours and "serve some/model" in ours


def test_nothing_found_is_one_clear_line_and_exit_0():
    report = Discovery(pod_resources_socket=None, processes=lambda: []).refresh()
    assert render_text(report) == "no vLLM or SGLang server found among 0 processes"
