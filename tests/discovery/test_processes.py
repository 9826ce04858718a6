"""Discovery over real processes that look like vLLM and SGLang servers (tests/helpers/fake_engines.py):
found with their ports and GPUs, a process tree as one engine, restarts and port moves followed, a kind
replaced on a port said, two on one URL merged, the agent itself refused, at most 64 listed."""

from __future__ import annotations

import pytest

from stagelens.discovery import Discovery
from stagelens.discovery.model import DiscoveryReport
from tests.helpers.fake_engines import FakeEngines, free_port


@pytest.fixture
def fakes(tmp_path):
    engines = FakeEngines(tmp_path / "fakes")
    yield engines
    engines.stop_all()


def discovery(fakes: FakeEngines, **kwargs) -> Discovery:
    """A discovery that looks only at this test's processes: engines other sessions run on this
    machine are not ours to count."""
    return Discovery(pod_resources_socket=None, processes=fakes.processes, **kwargs)


def by_pid(report: DiscoveryReport, pid: int):
    found = [e for e in report.engines if e.pid == pid]
    assert len(found) == 1, (pid, [e.to_dict() for e in report.engines], report.notes)
    return found[0]


def test_two_vllm_and_an_sglang_server_are_found_with_their_ports_and_gpus(fakes):
    ports = [free_port() for _ in range(3)]
    first = fakes.start("vllm", "--port", str(ports[0]), "--model", "m1", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    second = fakes.start("vllm", "--port", str(ports[1]), "--host", "127.0.0.1", "--model", "m2",
                         "--served-model-name", "chat", env={"CUDA_VISIBLE_DEVICES": "0"})
    sglang = fakes.start("sglang", "--port", str(ports[2]), "--model-path", "m3")
    report = discovery(fakes).refresh()
    assert len(report.engines) == 3 and report.left_out == 0
    a, b, c = by_pid(report, first.pid), by_pid(report, second.pid), by_pid(report, sglang.pid)
    assert (a.kind, a.url, a.gpus, a.name, a.model) == ("vllm", f"http://127.0.0.1:{ports[0]}", ["2", "3"],
                                                        f"vllm-{ports[0]}", "m1")
    assert f"listening on 0.0.0.0:{ports[0]}" in a.how and f"process {first.pid}:" in a.how
    assert (b.url, b.gpus, b.name, b.model) == (f"http://127.0.0.1:{ports[1]}", ["0"], "chat", "chat")
    assert (c.kind, c.url, c.gpus, c.model) == ("sglang", f"http://127.0.0.1:{ports[2]}", None, "m3")
    assert DiscoveryReport.from_dict(report.to_dict()) == report


def test_a_process_tree_is_one_engine_on_the_top_process_port(fakes):
    """vLLM forks its engine core and workers with its own command line, and they listen too (the
    distributed backend): one engine, the API server's port."""
    port = free_port()
    top = fakes.start("vllm", "--port", str(port), "--fork-listener")
    assert len(fakes.processes()) == 2
    engine = by_pid(discovery(fakes).refresh(), top.pid)
    assert engine.url == f"http://127.0.0.1:{port}" and "child" not in engine.how


def test_a_port_only_a_child_listens_on_is_read_from_the_child(fakes):
    port = free_port()
    top = fakes.start("vllm", "--port", str(port), "--listen-in-child")
    report = discovery(fakes).refresh()
    engine = by_pid(report, top.pid)
    assert engine.url == f"http://127.0.0.1:{port}" and "its child process" in engine.how
    assert len(report.engines) == 1


def test_without_a_socket_the_port_is_the_command_lines_and_says_so(fakes):
    port = free_port()
    quiet = fakes.start("sglang", "serve", "--port", str(port), "--no-listen")
    engine = by_pid(discovery(fakes).refresh(), quiet.pid)
    assert engine.url == f"http://127.0.0.1:{port}"
    assert f"--port {port} on its command line (not listening there yet)" in engine.how


def test_an_engine_restarted_on_another_port_is_followed_not_duplicated(fakes):
    found = discovery(fakes)
    old_port, new_port = free_port(), free_port()
    old = fakes.start("vllm", "--port", str(old_port), "--model", "m", env={"CUDA_VISIBLE_DEVICES": "1"})
    name = by_pid(found.refresh(), old.pid).name
    fakes.stop(old)
    new = fakes.start("vllm", "--port", str(new_port), "--model", "m", env={"CUDA_VISIBLE_DEVICES": "1"})
    report = found.refresh()
    assert len(report.engines) == 1
    engine = by_pid(report, new.pid)
    assert engine.name == name and engine.url == f"http://127.0.0.1:{new_port}"
    assert f"{name} restarted: process {old.pid} -> {new.pid}" in report.notes
    assert f"{name} moved: http://127.0.0.1:{old_port} -> http://127.0.0.1:{new_port}" in report.notes
    assert not any("is gone" in n for n in report.notes)
    assert found.refresh().notes == []      # said once


def test_another_kind_on_the_same_port_is_a_new_engine_and_the_old_one_gone(fakes):
    found = discovery(fakes)
    port = free_port()
    vllm = fakes.start("vllm", "--port", str(port), "--model", "m")
    before = by_pid(found.refresh(), vllm.pid)
    fakes.stop(vllm)
    sglang = fakes.start("sglang", "--port", str(port), "--model-path", "m")
    report = found.refresh()
    after = by_pid(report, sglang.pid)
    assert len(report.engines) == 1 and after.kind == "sglang" and after.name != before.name
    assert (f"{before.name} (vllm at {before.url}, process {vllm.pid}) is gone; a sglang engine "
            f"({after.name}) now serves {before.url}") in report.notes


def test_two_engines_on_one_url_are_listed_once_and_said(fakes):
    port = free_port()
    listening = fakes.start("vllm", "--port", str(port), "--model", "a")
    claimant = fakes.start("vllm", "--port", str(port), "--model", "b", "--no-listen")
    found = discovery(fakes)
    report = found.refresh()
    assert [e.pid for e in report.engines] == [listening.pid]
    assert any(n.startswith(f"2 engines on one URL http://127.0.0.1:{port}: process {listening.pid}")
               and f"process {claimant.pid} (vllm) merged" in n for n in report.notes), report.notes
    assert found.refresh().notes == []


def test_the_same_model_twice_is_two_engines_told_apart_by_port(fakes):
    ports = [free_port(), free_port()]
    one = fakes.start("vllm", "--port", str(ports[0]), "--served-model-name", "tiny")
    two = fakes.start("vllm", "--port", str(ports[1]), "--served-model-name", "tiny")
    found = discovery(fakes)
    report = found.refresh()
    names = {by_pid(report, one.pid).name, by_pid(report, two.pid).name}
    assert len(names) == 2 and "tiny" in names
    assert {e.name for e in found.refresh().engines} == names     # and the names hold


def test_the_agent_itself_is_never_an_engine(fakes):
    """A stagelens agent's port is refused as an engine's; the bundled engine's vLLM face it hosts
    is one."""
    agent_port, face_port = free_port(), free_port()
    agent = fakes.start("stagelens", "serve", "--listen", f"127.0.0.1:{agent_port}", "--engine", "lab",
                        "--vllm-face", f"127.0.0.1:{face_port}", "--port", str(agent_port),
                        "--also-listen", str(face_port))
    impostor = fakes.start("vllm", "--port", str(agent_port), "--no-listen")
    found = discovery(fakes)
    report = found.refresh()
    face = by_pid(report, agent.pid)
    assert (face.kind, face.url) == ("vllm", f"http://127.0.0.1:{face_port}")
    assert "the bundled engine's vLLM face" in face.how
    assert not any(e.pid == impostor.pid for e in report.engines)
    refusal = f"http://127.0.0.1:{agent_port} is the stagelens agent itself (process {agent.pid}), not an engine"
    assert f"{refusal}: process {impostor.pid} (vllm) left out" in report.notes
    assert found.agent_url(f"http://127.0.0.1:{agent_port}/") == refusal
    assert found.agent_url(face.url) is None


def test_70_candidates_list_64_and_say_6_left_out(fakes):
    for i in range(70):
        fakes.start("vllm", "--port", str(20000 + i), "--model", f"m{i}", "--no-listen", wait=False)
    for process in fakes.started:       # each up (reading stdout), a line per process
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    found = discovery(fakes)
    report = found.refresh()
    assert len(report.engines) == 64 and report.left_out == 6
    assert "6 more engine processes left out: at most 64 are listed" in report.notes
    again = found.refresh()
    assert {e.pid for e in again.engines} == {e.pid for e in report.engines}    # the same 64 stay


def test_nothing_found_is_a_clear_report():
    report = Discovery(pod_resources_socket=None, processes=lambda: []).refresh()
    assert report.engines == [] and report.left_out == 0 and report.scanned == 0
