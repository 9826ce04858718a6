"""Which serving engine a command line starts, read from its words alone (no process is touched):
vLLM (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`, `vllm.entrypoints.cli.main
serve`), SGLang (`python -m sglang.launch_server`, `sglang serve`), or stagelens itself (the
agent, which is never an engine, though `serve --engine lab --vllm-face H:P` hosts one)."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_PORT = {"vllm": 8000, "sglang": 30000}
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
SGLANG_MODULES = ("sglang.launch_server",)
CLI_MODULES = {"vllm.entrypoints.cli.main": "vllm", "sglang.cli.main": "sglang"}
# vLLM names its processes after their role (setproctitle): an API server a parent starts
VLLM_TITLES = ("VLLM::APIServer",)
SUMMARY_WORDS = 8


@dataclass(frozen=True)
class Recognised:
    """What a command line says: the engine kind (vllm, sglang) or `stagelens`, its flags' port and
    host (None when not given), served name and model; `face` is the bundled engine's vLLM face
    (HOST:PORT) for `stagelens serve --engine lab --vllm-face`, `listen` the agent's own."""

    kind: str
    port: int | None = None
    host: str | None = None
    served_name: str | None = None
    model: str | None = None
    face: str | None = None
    listen: str | None = None


def recognise(argv: list[str]) -> Recognised | None:
    """The engine (or stagelens) `argv` starts, None for anything else."""
    if not argv:
        return None
    if argv[0].startswith(VLLM_TITLES):
        return Recognised("vllm")
    kind, rest = _program(argv)
    if kind == "stagelens":
        return _stagelens(rest)
    if kind is None:
        return None
    model = _flag(rest, "--model-path") or _flag(rest, "--model")
    if rest and rest[0] == "serve":
        rest = rest[1:]
        if rest and not rest[0].startswith("-"):
            model = model or rest[0]
    return Recognised(kind, port=_port(_flag(rest, "--port")), host=_flag(rest, "--host"),
                      served_name=_flag(rest, "--served-model-name"), model=model)


def _program(argv: list[str]) -> tuple[str | None, list[str]]:
    """The program and the words after it: `python -m MODULE ...`, `python /path/bin/vllm ...`
    (a console script run by its interpreter) or `vllm ...` itself."""
    words = list(argv)
    if _is_python(words[0]):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            words = words[1:]       # interpreter flags: -u, -O, -X ... (their values are rare here)
        if words and words[0] == "-m" and len(words) > 1:
            module, rest = words[1], words[2:]
            if module in VLLM_MODULES:
                return "vllm", rest
            if module in SGLANG_MODULES:
                return "sglang", rest
            if module in CLI_MODULES and rest and rest[0] == "serve":
                return CLI_MODULES[module], rest
            if module in ("stagelens", "stagelens.cli"):
                return "stagelens", rest
            return None, []
        if not words:
            return None, []
    program = os.path.basename(words[0])
    rest = words[1:]
    if program in ("vllm", "sglang") and rest and rest[0] == "serve":
        return program, rest
    if program == "stagelens":
        return "stagelens", rest
    return None, []


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name.startswith("python") and name[6:].replace(".", "").isdigit() or name == "python"


def _stagelens(rest: list[str]) -> Recognised:
    """Any stagelens command is the agent; `serve --engine lab --vllm-face H:P` also hosts the
    bundled engine, which speaks vLLM's /metrics on the face."""
    command = next((w for w in rest if not w.startswith("-")), None)
    listen = _flag(rest, "--listen") if command == "serve" else None
    if command == "serve" and listen is None:
        listen = "127.0.0.1:9481"      # serve's default
    face = _flag(rest, "--vllm-face") if _flag(rest, "--engine") == "lab" else None
    return Recognised("stagelens", face=face, listen=listen)


def _flag(words: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` (the first one; vLLM's nargs flags give
    several, the first is the one clients use)."""
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words) and not words[i + 1].startswith("--"):
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _port(value: str | None) -> int | None:
    if value is None or not value.isdigit() or not 0 < int(value) < 65536:
        return None
    return int(value)


def summary(argv: list[str]) -> str:
    """The command line in a few words, the interpreter's path shortened to its name."""
    words = [os.path.basename(argv[0]), *argv[1:]] if argv else []
    text = " ".join(words[:SUMMARY_WORDS])
    return text + (" ..." if len(words) > SUMMARY_WORDS else "")


def identity_words(argv: list[str]) -> str:
    """The command line without the words that say where it listens (--port, --host and their
    values), so an engine restarted on another port reads as the same one."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in ("--port", "--host"):
            skip = True
            continue
        if word.startswith(("--port=", "--host=")):
            continue
        kept.append(word)
    return " ".join(kept)
