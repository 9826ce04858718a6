"""Which command lines start an engine: each way vLLM and SGLang are started, stagelens itself, and
look-alikes that are not engines."""

from __future__ import annotations

import pytest

from stagelens.discovery.cmdline import Recognised, identity_words, recognise


@pytest.mark.parametrize("argv, expected", [
    (["/usr/bin/vllm", "serve", "meta/llama", "--port", "8001"], Recognised("vllm", 8001, model="meta/llama")),
    (["/venv/bin/python3", "/venv/bin/vllm", "serve", "m", "--port=9000", "--served-model-name", "a", "b"],
     Recognised("vllm", 9000, served_name="a", model="m")),
    (["python3.11", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--host", "0.0.0.0"],
     Recognised("vllm", host="0.0.0.0", model="m")),
    (["python", "-u", "-m", "vllm.entrypoints.cli.main", "serve", "m"], Recognised("vllm", model="m")),
    (["python3", "-m", "sglang.launch_server", "--model-path", "q", "--port", "30001"],
     Recognised("sglang", 30001, model="q")),
    (["sglang", "serve", "--model-path", "q"], Recognised("sglang", model="q")),
    (["VLLM::APIServer_0"], Recognised("vllm")),
    (["/venv/bin/stagelens", "serve", "--engine", "lab", "--vllm-face", "127.0.0.1:8100"],
     Recognised("stagelens", face="127.0.0.1:8100", listen="127.0.0.1:9481")),
    (["python", "-m", "stagelens.cli", "serve", "--engine", "vllm", "--engine-url", "http://127.0.0.1:8000"],
     Recognised("stagelens", listen="127.0.0.1:9481")),
])
def test_engines_and_the_agent_are_recognised(argv, expected):
    assert recognise(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["vllm"], ["vllm", "bench", "serve"], ["python", "-m", "vllm.entrypoints.cli.main", "bench"],
    ["python", "-c", "import vllm"], ["python", "train.py", "--port", "8000"], ["VLLM::EngineCore"],
    ["grep", "vllm serve"], ["python", "-m", "http.server", "8000"],
])
def test_what_is_not_an_engine_is_not_one(argv):
    assert recognise(argv) is None


def test_the_identity_leaves_out_where_it_listens():
    assert identity_words(["vllm", "serve", "m", "--port", "1", "--host=h", "--seed", "0"]) == "vllm serve m --seed 0"
