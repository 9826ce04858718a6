"""`stagelens whatif` end to end on a bundle recorded by a short lab run (tiny model, CPU): the JSON document,
today's prediction beside what was measured, candidates, and bad input as one line with exit 3."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STAGELENS = [str(Path(sys.executable).parent / "stagelens")]
OLD_BUNDLE = Path(__file__).parents[1] / "fixtures" / "bundles" / "healthy.jsonl"   # recorded before steps were


def _run(args, model_dir, timeout=120):
    env = dict(os.environ, XDG_CACHE_HOME=str(Path(model_dir).parent))
    return subprocess.run(STAGELENS + args, capture_output=True, text=True, timeout=timeout, env=env)


def _record_lab(path, model_dir, *flags) -> dict:
    """A short lab run of the tiny model recorded to `path`; its `lab --json`."""
    proc = _run(["lab", "--json", "--model", "tiny", "--max-model-len", "256", *flags, "--model-dir", model_dir,
                 "--record", str(path)], model_dir)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def bundle(model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("whatif") / "lab.jsonl"
    return path, _record_lab(path, model_dir, "--duration", "3", "--rate", "12", "--prompt-len", "uniform:8:120",
                             "--output-len", "uniform:4:16", "--max-num-seqs", "8", "--seed", "3")


def test_whatif_json_has_the_fit_today_and_candidates(bundle, model_dir):
    path, lab = bundle
    # a long-prefill threshold past every prompt (at most 120 tokens) chunks nothing: today's schedule again
    proc = _run(["whatif", "--replay", str(path), "--json", "--set", "max-num-seqs=1",
                 "--set", "long-prefill-token-threshold=200"], model_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) >= {"fit", "today", "candidates"}
    assert doc["fit"]["steps"] > 10 and all(v >= 0 for v in doc["fit"]["coefficients"].values())
    today = doc["today"]
    assert today["measured"]["requests_finished"] == lab["requests_finished"] == doc["requests"]
    assert today["predicted"]["requests_finished"] == lab["requests_finished"]
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "latency_p99_s", "throughput_tokens_per_s"):
        assert today["predicted"][key] > 0 and key in today["relative_error"]
    # what was measured from the bundle is what lab measured of the same requests
    assert today["measured"]["ttft_p99_s"] == pytest.approx(lab["ttft_p99_s"], rel=1e-6)
    assert set(today["predicted"]["stages"]) == {"kv_cache", "scheduler", "cold_path"}
    candidate, inert = doc["candidates"]
    assert candidate["set"] == {"max-num-seqs": 1}
    # one request at a time: the others queue behind it
    assert candidate["predicted"]["ttft_p99_s"] > today["predicted"]["ttft_p99_s"]
    assert not candidate["alike_today"] and inert["alike_today"]


def test_whatif_text_shows_the_error_beside_the_measurement(bundle, model_dir):
    path, _ = bundle
    proc = _run(["whatif", "--replay", str(path), "--set", "enable-chunked-prefill=false,max-num-batched-tokens=256",
                 "--set", "policy=short-first"], model_dir)
    assert proc.returncode == 0, proc.stderr
    assert "today measured" in proc.stdout
    assert "candidate 1: --no-enable-chunked-prefill --max-num-batched-tokens 256" in proc.stdout
    assert "candidate 2: --policy short-first" in proc.stdout
    assert "ttft_p99_s" in proc.stdout


@pytest.mark.parametrize("args, words", [
    (["--set", "max-num-seqs=0"], "--set max-num-seqs: must be a whole number in [1, 1024]"),
    (["--set", "warp-speed=9"], "warp-speed"),
    (["--set", "enable-chunked-prefill=maybe"], "true or false"),
    # without chunked prefill a step's budget must hold a whole prompt of max_model_len
    (["--set", "enable-chunked-prefill=false,max-num-batched-tokens=128"], "--max-num-batched-tokens"),
])
def test_bad_flags_are_one_line_and_exit_3(bundle, model_dir, args, words):
    path, _ = bundle
    proc = _run(["whatif", "--replay", str(path), *args], model_dir)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagelens: error:") and words in lines[0], proc.stderr


def test_a_bundle_without_steps_is_fitted_on_its_request_intervals(model_dir):
    proc = _run(["whatif", "--replay", str(OLD_BUNDLE), "--json", "--today", "max-num-seqs=8"], model_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fit"]["on"] == "request intervals"
    # the settings the snapshot published, with --today on top
    assert doc["today"]["settings"]["max_model_len"] == 2048 and doc["today"]["settings"]["max_num_seqs"] == 8
    assert doc["today"]["predicted"]["requests_finished"] == doc["today"]["measured"]["requests_finished"]


def test_a_bundle_with_neither_steps_nor_intervals_says_how_to_record_one(model_dir, tmp_path):
    lines = []
    for line in OLD_BUNDLE.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "timeline":
            record["timeline"]["chunks"] = []
        lines.append(json.dumps(record))
    stripped = tmp_path / "no-intervals.jsonl"
    stripped.write_text("\n".join(lines) + "\n")
    proc = _run(["whatif", "--replay", str(stripped)], model_dir)
    assert proc.returncode == 3
    assert "record it again" in proc.stderr and "Traceback" not in proc.stderr


def test_diagnose_replay_shows_the_fixs_predicted_effect(model_dir):
    bundle = OLD_BUNDLE.parent / "hol-blocking.jsonl"
    proc = _run(["diagnose", "--replay", str(bundle), "--json"], model_dir)
    assert proc.returncode == 2, proc.stderr          # the verdict's status, as before
    fix = json.loads(proc.stdout)["fix"]
    assert fix["set"]["enable-chunked-prefill"] is True
    before, after = fix["predicted"]["ttft_p99_s"]
    assert before > 0 and after > 0
    text = _run(["diagnose", "--replay", str(bundle)], model_dir).stdout
    assert "predicted effect of --" in text and "ttft_p99" in text


def test_a_step_record_with_a_bad_figure_is_one_line(bundle, model_dir, tmp_path):
    path, _ = bundle
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('{"kind": "steps"'))
    record = json.loads(lines[at])
    record["steps"][0]["prefill_tokens"] = "many"
    lines[at] = json.dumps(record)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n")
    proc = _run(["whatif", "--replay", str(broken)], model_dir)
    assert proc.returncode == 3
    assert f"broken.jsonl:{at + 1}: bad steps: steps[0].prefill_tokens" in proc.stderr, proc.stderr


def test_search_finds_the_configurations_meeting_the_slo_and_plots_the_front(bundle, model_dir, tmp_path):
    path, _ = bundle
    png = tmp_path / "front.png"
    proc = _run(["whatif", "--replay", str(path), "--json", "--search", "--slo", "ttft_p99=10,tpot_p99=1",
                 "--plot", str(png)], model_dir)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["search"]
    assert found["evaluated"] == 50 and found["slo"] == {"ttft_p99": 10.0, "tpot_p99": 1.0}
    meeting = [c["predicted"] for c in found["meeting"]]
    assert meeting and all(p["ttft_p99_s"] <= 10 and p["tpot_p99_s"] <= 1 for p in meeting)
    throughputs = [p["throughput_tokens_per_s"] for p in meeting]
    assert throughputs == sorted(throughputs, reverse=True)
    front = [(c["predicted"]["ttft_p99_s"], c["predicted"]["throughput_tokens_per_s"]) for c in found["pareto"]]
    assert all(a[0] <= b[0] and a[1] < b[1] for a, b in zip(front, front[1:], strict=False))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_whatif_runs_without_torch(bundle, model_dir):
    """The simulator is its own module with no torch in it: whatif on a recording never imports it, the search
    past the recorded batches included, once the engine's step profile is cached (only measuring it runs the
    engine)."""
    path, _ = bundle
    args = ["whatif", "--replay", str(path), "--set", "max-num-seqs=2", "--search", "--json"]
    assert _run(args, model_dir).returncode == 0      # the profile measured and cached, if it was not
    script = ("import sys; from stagelens.cli import _register, cli; _register(); "
              f"cli.main({args!r}, standalone_mode=False); assert 'torch' not in sys.modules, 'torch was imported'")
    env = dict(os.environ, XDG_CACHE_HOME=str(Path(model_dir).parent))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def small_batch(model_dir, tmp_path_factory):
    """Two requests at a time against many more arriving: a standing queue, batches never past 2. Two seats of
    ~48-token outputs serve ~45 requests a second at the tiny model's ~1 ms step: 120 a second queue on a machine
    twice as fast, or beside a busy co-runner."""
    path = tmp_path_factory.mktemp("whatif") / "batch-of-2.jsonl"
    _record_lab(path, model_dir, "--duration", "2", "--rate", "120", "--prompt-len", "uniform:8:64",
                "--output-len", "uniform:32:64", "--max-num-seqs", "2", "--seed", "5")
    return path


@pytest.mark.slow
def test_a_batch_past_the_recorded_ones_is_priced_by_the_engines_profile(small_batch, model_dir):
    proc = _run(["whatif", "--replay", str(small_batch), "--json", "--set", "max-num-seqs=32"], model_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    beyond = doc["fit"]["beyond"]
    assert beyond and "profile" in beyond["describe"][0] and beyond["scale"] > 0
    candidate = doc["candidates"][0]["predicted"]
    assert candidate["outside_fitted_range"]["extrapolated"] and "range" not in candidate   # measured: no range
    # the queue that batches of 2 held is gone with 32 seats
    assert candidate["ttft_p99_s"] < doc["today"]["predicted"]["ttft_p99_s"] / 3
    text = _run(["whatif", "--replay", str(small_batch), "--set", "max-num-seqs=32"], model_dir).stdout
    assert "priced by the measured profile" in text and "fitted on batches up to 2 decoding sequences" in text
    assert "%" not in text.split("(error:")[0].split("median error")[-1].split(";", 1)[1]


def test_an_outside_engine_past_its_batches_is_priced_by_the_prior_with_a_range(model_dir, tmp_path):
    """Spans only (no steps), A100s in the frames and the model's config: the roofline prior, and a range."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
                                  "num_key_value_heads": 2, "intermediate_size": 1536, "vocab_size": 8192}))
    proc = _run(["whatif", "--replay", str(OLD_BUNDLE), "--json", "--today", "max-num-seqs=2", "--scale-rate", "20",
                 "--set", "max-num-seqs=64", "--model-config", str(config)], model_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert any("A100" in line and "assumed" in line for line in doc["fit"]["beyond"]["describe"])
    candidate = doc["candidates"][0]["predicted"]
    assert candidate["outside_fitted_range"]["extrapolated"]
    low, high = candidate["range"]["ttft_p99_s"]
    assert low < high and low <= candidate["ttft_p99_s"] <= high
    assert "range" not in doc["today"]["predicted"]      # inside the recorded batches: nothing assumed


def test_a_model_config_that_cannot_be_read_is_one_line(model_dir, tmp_path):
    proc = _run(["whatif", "--replay", str(OLD_BUNDLE), "--model-config", str(tmp_path / "absent.json")], model_dir)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "absent.json" in proc.stderr


def test_plot_without_matplotlib_is_one_line_and_exit_3(monkeypatch, capsys, tmp_path):
    from stagelens.cli import run

    # what an install without the bench extra sees, whatever of matplotlib an earlier test imported
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    code = run(["whatif", "--replay", str(tmp_path / "none.jsonl"), "--search", "--plot", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert code == 3
    expected = "stagelens: error: --plot: matplotlib is not installed (pip install 'stagelens[bench]')"
    assert err.splitlines() == [expected]


@pytest.mark.slow
def test_search_sweeps_the_batch_and_finds_the_kv_wall(model_dir, tmp_path):
    """A KV cache of ~5 requests, recorded at batches of 2 under a standing queue (150 a second against the ~45
    two seats serve, on any machine): raising the batch admits more than the cache holds, and the simulated
    engine preempts from that batch on, as the real one does."""
    path = tmp_path / "tight.jsonl"
    _record_lab(path, model_dir, "--duration", "2", "--rate", "150", "--prompt-len", "uniform:32:96",
                "--output-len", "uniform:32:64", "--max-num-seqs", "2", "--kv-cache-memory", "160KiB", "--seed", "2")
    proc = _run(["whatif", "--replay", str(path), "--json", "--search", "--slo", "ttft_p99=600"], model_dir)
    assert proc.returncode == 0, proc.stderr
    sweep = json.loads(proc.stdout)["search"]["max_num_seqs_sweep"]
    points = {p["max_num_seqs"]: p for p in sweep["points"]}
    wall = sweep["kv_wall_at"]
    assert wall is not None and wall > 2
    assert all(p["preemptions"] == 0 for n, p in points.items() if n < wall)
    assert all(p["preemptions"] > 0 for n, p in points.items() if n >= wall)
    assert sweep["largest_meeting_slo"] == max(points)
    text = _run(["whatif", "--replay", str(path), "--search"], model_dir).stdout
    assert "the KV cache runs out" in text


# --- recordings that lie: one line, exit 3 (issue 39) ------------------------------------------------------
def _one_line(proc, *words):
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagelens: error:") and "internal error" not in lines[0], lines
    assert all(w in lines[0] for w in words), lines[0]


def _rewritten(path, out, kind: str, change) -> Path:
    """The bundle at `path` with `change` applied to the first record of `kind`, written to `out`."""
    lines, done = [], False
    for line in Path(path).read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == kind and not done:
            change(record[kind] if kind != "steps" else record)
            done = True
        lines.append(json.dumps(record))
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("kind, change, words", [
    # once a ZeroDivisionError, a TypeError, chunked prefill simulated as on
    ("engine_config", lambda c: c.update(kv_bytes_per_token=0), "bad engine_config: kv_bytes_per_token: must be"),
    ("engine_config", lambda c: c.update(kv_bytes_per_token="512"), "bad engine_config: kv_bytes_per_token: must be"),
    ("engine_config", lambda c: c.update(enable_chunked_prefill="no"), "bad engine_config: enable_chunked_prefill"),
    # once fitted as it came: "median error 0%"
    ("steps", lambda r: r["steps"][0].update(end=r["steps"][0]["start"] - 1), "bad steps: steps[0]: ends ("),
])
def test_a_bundle_whose_engine_records_lie_is_one_line(bundle, model_dir, tmp_path, kind, change, words):
    path, _ = bundle
    lying = _rewritten(path, tmp_path / "lying.jsonl", kind, change)
    _one_line(_run(["whatif", "--replay", str(lying)], model_dir), str(lying), words)


def _agent(window, frames):
    """A loopback server answering as `stagelens serve` does what `whatif --connect` asks for."""
    from tests.helpers.hostile_servers import ScriptedServer, answer

    bodies = {"/api/v1/whatif/window": json.dumps(window), "/api/v1/frames": json.dumps(frames)}

    def script(server, conn):
        path = server.read_head(conn).split(b" ")[1].decode().split("?")[0]
        answer(conn, bodies.get(path, "{}"), "200 OK" if path in bodies else "404 Not Found",
               {"Content-Type": "application/json"})
    return ScriptedServer(script)


def _window_of(path) -> tuple[dict, list]:
    from stagelens.bundle import read_bundle

    b = read_bundle(str(path))
    return ({"timelines": b.timelines, "engine_config": b.engine_config, "steps": b.steps, "loads": b.loads},
            [f.to_dict() for f in b.frames])


def test_whatif_connect_replays_an_agents_window(bundle, model_dir):
    path, lab = bundle
    window, frames = _window_of(path)
    with _agent(window, frames) as agent:
        proc = _run(["whatif", "--connect", agent.url, "--json"], model_dir)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["source"] == f"{agent.url}/api/v1/whatif/window" and doc["fit"]["on"] == "steps"
    assert doc["today"]["predicted"]["requests_finished"] == lab["requests_finished"]


@pytest.mark.parametrize("change, words", [
    (lambda w: w.update(steps="abc"), "steps: must be a list, got 'abc'"),
    (lambda w: w["steps"][0].pop("kv_tokens_cached"), "steps[0].kv_tokens_cached: missing"),
    (lambda w: w["steps"][0].update(start=float("nan")), "steps[0].start: must be a finite number"),
    (lambda w: w.update(loads=[{"model": {"name": "m"}, "start": 1, "end": 2, "seconds": 1, "ok": True}]),
     "loads[0].model: must be a string"),
    (lambda w: w["timelines"][0].update(arrival=10**400), "timelines[0]: arrival: must be a finite number"),
    (lambda w: w["engine_config"].update(kv_bytes_per_token=0), "engine_config: kv_bytes_per_token: must be"),
])
def test_whatif_connect_refuses_a_window_that_lies_in_one_line(bundle, model_dir, change, words):
    """Once a TypeError, KeyError, LinAlgError, ZeroDivisionError or an unhashable type: the bundle's checks."""
    path, _ = bundle
    window, frames = _window_of(path)
    change(window)
    with _agent(window, frames) as agent:
        proc = _run(["whatif", "--connect", agent.url], model_dir)
    _one_line(proc, f"{agent.url}/api/v1/whatif/window: {words}")


def test_todays_max_model_len_is_taken_and_the_requests_it_cuts_are_said(model_dir):
    """`--today max-model-len=N` was refused; the longest request of this recording holds 305 tokens."""
    proc = _run(["whatif", "--replay", str(OLD_BUNDLE), "--json", "--today", "max-model-len=300"], model_dir)
    assert proc.returncode == 0, proc.stderr
    today = json.loads(proc.stdout)["today"]
    assert today["settings"]["max_model_len"] == 300
    predicted = today["predicted"]
    assert predicted["requests_cut_at_max_model_len"] >= 1 and predicted["requests_never_run"] == 0
    text = _run(["whatif", "--replay", str(OLD_BUNDLE), "--today", "max-model-len=300"], model_dir).stdout
    assert f"{predicted['requests_cut_at_max_model_len']} of " in text and "cut at max_model_len (300 tokens)" in text


def test_diagnose_replay_leaves_out_a_request_no_engine_runs_and_says_so(model_dir, tmp_path):
    """A prompt past max_model_len and past every block of the KV cache: simulated, it stalled the queue and the
    fix's effect read "throughput 0 -> 49.7" as if today's engine served nothing."""
    def lengthen(t):
        t["prompt_tokens"] = 100_000
    lying = _rewritten(OLD_BUNDLE.parent / "hol-blocking.jsonl", tmp_path / "hol.jsonl", "timeline", lengthen)
    proc = _run(["diagnose", "--replay", str(lying), "--json"], model_dir)
    assert proc.returncode == 2, proc.stderr
    fix = json.loads(proc.stdout)["fix"]
    before, after = fix["predicted"]["throughput_tokens_per_s"]
    assert before > 0 and after > 0 and fix["requests_never_run"] == 1
    text = _run(["diagnose", "--replay", str(lying)], model_dir).stdout
    assert "1 of the recorded requests left out: it could never run" in text


def test_whatif_connect_names_the_window_without_the_urls_password(bundle, model_dir):
    path, _ = bundle
    window, frames = _window_of(path)
    window["steps"] = "abc"
    with _agent(window, frames) as agent:
        url = agent.url.replace("http://", "http://ops:s3cret@")
        proc = _run(["whatif", "--connect", url], model_dir)
    _one_line(proc, "http://***@127.0.0.1:", "/api/v1/whatif/window: steps: must be a list")
    assert "s3cret" not in proc.stderr
