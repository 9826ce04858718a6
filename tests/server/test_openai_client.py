"""The official `openai` client against a real `stagelens serve --engine lab`: what benchmark clients made for
vLLM do (discover the model, complete, chat, stream, read the usage, meet errors, leave mid-stream) works
here, and a client that leaves frees its request."""

import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
import uvicorn

from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app
from tests.helpers.polling import wait_for
from tests.helpers.prometheus_support import free_port
from tests.helpers.serve_support import DGX, TINY_LAB, ServeProcess

MAX_MODEL_LEN = 2048
USER_HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
USER_HI_RENDERED = "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"     # the documented chat template
ABORT = {"reason": "abort"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    workdir = tmp_path_factory.mktemp("openai-client")
    proc = ServeProcess(workdir, *TINY_LAB, "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory", "16MiB",
                        "--model-dir", model_dir, "--interval", "0.2", name="openai-client")
    yield proc.wait_ready()
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def _words(text: str) -> list[str]:
    return text.split()


def test_models_list_is_openai_shaped_with_vllms_max_model_len(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["model-0"]
    assert models[0].object == "model" and models[0].owned_by == "stagelens"
    assert models[0].model_extra["max_model_len"] == MAX_MODEL_LEN
    assert client.models.retrieve("model-0").id == "model-0"


def test_health_answers_as_vllms_an_empty_200(server):
    """What guidellm asks before its first request (tests/bench/test_guidellm.py runs it)."""
    with urllib.request.urlopen(f"{server.url}/health", timeout=10) as response:
        assert response.status == 200 and response.read() == b""


@pytest.mark.parametrize("prompt, choices, prompt_tokens", [
    ("hello", 1, 5),
    (["ab", "cde"], 2, 5),
    ([1, 2, 3], 1, 3),
    ([[1, 2], [3, 4, 5], [6]], 3, 6),
])
def test_completions_take_every_prompt_form_openai_allows(client, prompt, choices, prompt_tokens):
    r = client.completions.create(model="model-0", prompt=prompt, max_tokens=4)
    assert r.object == "text_completion" and [c.index for c in r.choices] == list(range(choices))
    assert all(c.finish_reason == "length" and len(_words(c.text)) == 4 for c in r.choices)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (prompt_tokens, 4 * choices)


def test_completions_stop_and_seed(client):
    full = client.completions.create(model="model-0", prompt="stop here", max_tokens=12).choices[0].text
    stop = " " + _words(full)[4]
    cut = client.completions.create(model="model-0", prompt="stop here", max_tokens=12, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(stop)]
    sampled = [client.completions.create(model="model-0", prompt="dice", max_tokens=8, temperature=1.0,
                                         seed=1234).choices[0].text for _ in range(2)]
    assert sampled[0] == sampled[1]


def test_chat_answers_with_the_documented_template(client):
    r = client.chat.completions.create(model="model-0", messages=USER_HI, max_completion_tokens=5)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == "model-0" and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and len(_words(choice.message.content)) == 5
    assert choice.finish_reason == "length"
    assert r.usage.prompt_tokens == len(USER_HI_RENDERED.encode())
    assert (r.usage.completion_tokens, r.usage.total_tokens) == (5, r.usage.prompt_tokens + 5)
    older = client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=5)   # the older name
    assert older.choices[0].message.content == choice.message.content    # greedy by default
    parts = client.chat.completions.create(model="model-0", max_tokens=2, messages=[
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, {"role": "user", "content": "Hi"}])
    assert parts.usage.prompt_tokens == r.usage.prompt_tokens


def test_chat_streams_role_then_content_then_finish_then_usage(client):
    complete = client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=6)
    chunks = list(client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=6, stream=True,
                                                 stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    contents = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert len(contents) == 6 and "".join(contents) == complete.choices[0].message.content
    assert chunks[-2].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens == len(USER_HI_RENDERED.encode())
    without = list(client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=2, stream=True))
    assert without[-1].choices[0].finish_reason == "length" and without[-1].usage is None


def test_chat_stop_ends_the_answer_streamed_or_not(client):
    full = client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=12).choices[0].message.content
    stop = " " + _words(full)[3]
    r = client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=12, stop=stop)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == full[:full.index(stop)]
    chunks = list(client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=12, stop=[stop],
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_an_unknown_model_is_not_found(client):
    calls = [lambda: client.models.retrieve("gpt-9"),
             lambda: client.completions.create(model="gpt-9", prompt="hi", max_tokens=1),
             lambda: client.chat.completions.create(model="gpt-9", messages=USER_HI, max_tokens=1)]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as exc:
            call()
        assert exc.value.status_code == 404 and exc.value.code == "model_not_found" and "gpt-9" in exc.value.message


@pytest.mark.parametrize("route, kwargs, param", [
    ("chat", {"n": 2}, "n"),
    ("chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),   # FastAPI's 422, as a 400
    ("chat", {"temperature": -1}, "temperature"),
    ("chat", {"messages": []}, "messages"),
    ("chat", {"logprobs": True}, "logprobs"),
    ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages.0.content.0"),
    ("chat", {"messages": [{"role": "user", "content": "x" * MAX_MODEL_LEN}]}, "messages"),
    ("completions", {"n": 2}, "n"),
    ("completions", {"prompt": [99999]}, "prompt"),
    ("completions", {"prompt": []}, "prompt"),
    ("completions", {"max_tokens": 0}, "max_tokens"),
])
def test_a_bad_request_is_a_bad_request_error_that_names_the_field(client, route, kwargs, param):
    if route == "chat":
        call = client.chat.completions.create
        kwargs = {"model": "model-0", "messages": USER_HI, "max_tokens": 2, **kwargs}
    else:
        call = client.completions.create
        kwargs = {"model": "model-0", "prompt": "hi", "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as exc:
        call(**kwargs)
    assert exc.value.status_code == 400 and exc.value.param == param
    assert exc.value.type == "invalid_request_error" and exc.value.message


def _idle(server) -> bool:
    return (server.metric("stagelens_scheduler_running_requests") == 0
            and server.metric("stagelens_scheduler_waiting_requests") == 0
            and server.metric("stagelens_kv_cache_used_blocks") == 0)


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_a_client_that_leaves_mid_stream_frees_its_request(server, client, route):
    before = server.metric("stagelens_engine_requests_ended_total", **ABORT) or 0
    if route == "chat":
        stream = client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=MAX_MODEL_LEN - 100,
                                                stream=True)
        text = lambda chunk: chunk.choices[0].delta.content   # noqa: E731
    else:
        stream = client.completions.create(model="model-0", prompt="hi", max_tokens=MAX_MODEL_LEN - 100, stream=True)
        text = lambda chunk: chunk.choices[0].text   # noqa: E731
    for chunk in stream:
        if text(chunk):
            break                          # the first token arrived: the request runs
    wait_for(lambda: server.metric("stagelens_scheduler_running_requests") == 1, what="the request to run")
    stream.close()
    wait_for(lambda: (server.metric("stagelens_engine_requests_ended_total", **ABORT) or 0) >= before + 1,
             what="the abandoned request to be aborted")
    wait_for(lambda: _idle(server), what="the running and waiting queues to empty and the KV blocks to return")
    assert client.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=2).choices[0].finish_reason \
        == "length"


@pytest.fixture(scope="module")
def dead_url(tmp_path_factory):
    """An in-process server whose lab engine's loop broke after it started."""
    runtime = AgentRuntime(interval=0.2, nvml_snapshot=str(DGX), lab=LabSettings(
        {"model": "tiny", "max_model_len": 256, "kv_cache_memory": "2MiB", "device": "cpu",
         "model_dir": str(tmp_path_factory.mktemp("models"))}, None))
    runtime.start()
    engine = runtime.lab.engine

    def broken():
        raise MemoryError("injected: the engine loop breaks")
    engine.scheduler.has_work = broken
    engine.abort("wake-up")
    wait_for(lambda: engine.failure is not None, timeout=10, what="the engine to die")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    runtime.stop()


def test_an_engine_that_is_down_answers_503_at_once(dead_url):
    with openai.OpenAI(base_url=f"{dead_url}/v1", api_key="x", max_retries=0, timeout=10) as c:
        for call in (lambda: c.models.list(),
                     lambda: c.completions.create(model="model-0", prompt="hi", max_tokens=2),
                     lambda: c.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=2),
                     lambda: c.chat.completions.create(model="model-0", messages=USER_HI, max_tokens=2, stream=True)):
            started = time.monotonic()
            with pytest.raises(openai.InternalServerError) as exc:
                call()
            assert exc.value.status_code == 503 and "MemoryError" in exc.value.message
            assert time.monotonic() - started < 5
    with pytest.raises(urllib.error.HTTPError) as health:
        urllib.request.urlopen(f"{dead_url}/health", timeout=10)
    assert health.value.code == 503 and b"MemoryError" in health.value.read()
