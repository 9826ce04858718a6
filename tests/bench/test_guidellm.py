"""guidellm, a load generator teams already point at vLLM, drives a real `stagelens serve --engine lab` as it
would vLLM: it checks `/health`, discovers nothing it is not told, streams chat completions with
`stream_options.include_usage`, sizes synthetic prompts with a tokenizer (the lab's byte tokenizer from
deploy/loadgen/lab_tokenizer.py), and reads the usage back. Offline: synthetic data, a local tokenizer.

Then the agent's side: every request guidellm measured is one the agent traced, under the same id, with the
token counts guidellm was told, and the scheduler counted them all.

guidellm lives in its own venv (`make loadgen`, which `make test` builds): it pins click below stagelens's.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from tests.helpers.polling import wait_for
from tests.helpers.serve_support import TINY_LAB, ServeProcess

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOADGEN_BIN = pathlib.Path(os.environ.get("STAGELENS_LOADGEN_BIN", ROOT / ".venv-loadgen" / "bin"))
REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS = 16, 32, 8
FINISHED = "stagelens_scheduler_finished_requests_total"


def loadgen_bin() -> pathlib.Path:
    if not (LOADGEN_BIN / "guidellm").exists():
        if os.environ.get("CI"):
            pytest.fail(f"guidellm is missing under CI: `make test` builds {LOADGEN_BIN.parent} (make loadgen)")
        pytest.skip(f"guidellm is not installed in {LOADGEN_BIN.parent}: run `make loadgen`")
    return LOADGEN_BIN


def rendered_chat(body: dict) -> str:
    """The lab's documented chat template over the messages guidellm sent (text parts joined by newlines)."""
    text = ""
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            content = "\n".join(part["text"] for part in content)
        text += f"<|{message['role']}|>\n{content}\n"
    return text + "<|assistant|>\n"


def test_guidellm_streams_chat_against_the_lab_and_the_agent_traces_each_request(tmp_path, model_dir):
    bin_dir = loadgen_bin()
    tokenizer = tmp_path / "lab-tokenizer"
    made = subprocess.run([bin_dir / "python", ROOT / "deploy" / "loadgen" / "lab_tokenizer.py", tokenizer],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr

    server = ServeProcess(tmp_path, *TINY_LAB, "--model-dir", model_dir, "--interval", "0.2",
                          "--otel-exporter", "none", name="guidellm").wait_ready()
    try:
        out = tmp_path / "guidellm.json"
        offline = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
                   "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"}
        run = subprocess.run([
            bin_dir / "guidellm", "run",
            "--backend", f"kind=openai_http,target={server.url},model=model-0",
            "--profile", "kind=constant,rate=8",
            "--constraint", f"kind=max_requests,count={REQUESTS}",
            "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
            "--tokenizer", f"kind=hf_auto,model={tokenizer}",
            "--seed", "kind=static,value=7",
            "--output", f"kind=json,path={out}",
            "--disable-progress"], capture_output=True, text=True, timeout=300, env=offline, cwd=tmp_path)
        assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])

        benchmark = json.loads(out.read_text())["benchmarks"][0]
        totals = benchmark["metrics"]["request_totals"]
        assert totals == {"successful": REQUESTS, "errored": 0, "incomplete": 0, "total": REQUESTS}
        measured = benchmark["requests"]["successful"]
        assert len(measured) == REQUESTS

        wait_for(lambda: (server.metric(FINISHED) or 0) >= REQUESTS, timeout=30, every=0.2,
                 what=f"{FINISHED} counting guidellm's {REQUESTS} requests")
        status, traced = server.request("GET", f"/api/v1/requests/slowest?n={2 * REQUESTS}")
        assert status == 200
        by_id = {r["request_id"]: r for r in traced}
        for request in measured:
            body = json.loads(request["request_args"])["body"]
            assert body["stream"] is True and body["stream_options"]["include_usage"] is True
            prompt_bytes = len(rendered_chat(body).encode("utf-8"))
            # guidellm's token counts are the usage the lab streamed back: the template's bytes, the tokens asked
            assert request["input_metrics"]["text_tokens"] == prompt_bytes
            assert request["output_metrics"]["text_tokens"] == OUTPUT_TOKENS
            agent = by_id[request["response_id"]]          # the agent traced the same request, by the same id
            assert agent["prompt_tokens"] == prompt_bytes and agent["output_tokens"] == OUTPUT_TOKENS
            assert agent["finish_reason"] == "length" and agent["waits"], agent
    finally:
        server.stop()
