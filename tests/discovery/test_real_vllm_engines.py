"""`stagelens engines --json` on a node running two real vLLM servers (the CPU build in .venv-vllm):
both found, each with its process and the port it listens on, one engine per server although each
runs an engine core beside its API server."""

from __future__ import annotations

import json
import os
import threading

import pytest

from tests.helpers.cli_run import stagelens
from tests.helpers.real_vllm import RealVllm, make_tiny_model, vllm_missing

pytestmark = [pytest.mark.real_vllm, pytest.mark.slow]


def test_engines_json_finds_both_vllm_servers_with_their_ports(tmp_path):
    missing = vllm_missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"a real vLLM is missing under CI: {missing}")
        pytest.skip(missing)
    model = make_tiny_model(tmp_path / "tiny-llama")
    servers = [RealVllm(model, tmp_path / f"vllm-{i}.log") for i in range(2)]
    failures: list[BaseException] = []

    def start(server: RealVllm) -> None:
        try:
            server.start()
        except BaseException as exc:    # said below, after both are stopped
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]    # both start at once
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        proc = stagelens("engines", "--json", "--pod-resources-socket", str(tmp_path / "absent.sock"))
    finally:
        for server in servers:
            server.stop()
    assert proc.returncode == 0, proc.stderr
    engines = json.loads(proc.stdout)["engines"]
    for server in servers:
        assert server.process is not None
        [found] = [e for e in engines if e["pid"] == server.process.pid]
        assert (found["kind"], found["url"], found["model"]) == ("vllm", server.url, "tiny-llama")
        assert f"listening on 127.0.0.1:{server.port}" in found["how"]
    assert len({e["name"] for e in engines}) == len(engines)
    ours = {e["pid"] for e in engines} & {s.process.pid for s in servers if s.process}
    assert len(ours) == 2
