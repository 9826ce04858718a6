"""A diagnosis that could not be judged is printed all the same (issue 45): `diagnose --json` gives its JSON,
verdict unknown, each stage and what could not be judged and why; the text gives the stages before the reason;
the reason is one line on stderr and the exit status 3, as a monitoring check's UNKNOWN."""

import json

from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.real_captures import Serving, capture


def test_an_outside_engine_that_cannot_be_judged_prints_its_json():
    # SGLang 0.5.1 as its issue pasted it: the queue gauge is cut off, so whether requests wait is not published
    served = Serving(capture("sglang_0.5_busy_qwen32b_excerpt.txt"))
    try:
        proc = stagelens("diagnose", "--engine", "sglang", "--engine-url", served.url, "--duration", "3", "--json")
    finally:
        served.server.close()
    line = assert_one_line_error(proc, "not judged", "scheduler")
    document = json.loads(proc.stdout)
    assert document["verdict"] == "unknown" and document["unavailable"] in line
    by_stage = {s["stage"]: s for s in document["stages"]}
    assert set(by_stage) == {"kv_cache", "scheduler", "cold_path"} and by_stage["scheduler"]["state"] == "unknown"
    assert any(e["state"] == "unknown" for e in by_stage["scheduler"]["evidence"])


def test_the_text_prints_the_stages_before_the_reason():
    served = Serving(capture("sglang_0.5_busy_qwen32b_excerpt.txt"))
    try:
        proc = stagelens("diagnose", "--engine", "sglang", "--engine-url", served.url, "--duration", "3")
    finally:
        served.server.close()
    assert_one_line_error(proc, "not judged")
    assert proc.stdout.startswith("verdict: unknown") and "[unknown] scheduler" in proc.stdout
