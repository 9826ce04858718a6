#!/usr/bin/env bash
# The checks only a GPU node can run, in one go (under 8 minutes on one GPU), every figure written down:
#
#   bench/device_check.sh [--dry-run]          # OUT=DIR to choose the folder (default ./device-check-out)
#
# 1. the CUDA tests: paged attention against the float64 reference, both KV allocators, the hooks
#    timing attention with CUDA events (tests/engine/test_engine_attention.py, tests/engine/test_cuda_device.py)
# 2. bench/engine.py --quick and bench/hooks_overhead.py --quick with the engine on the CUDA device
# 3. `stagelens probe record` and `stagelens topo` against the real NVML (the snapshot is kept, and
#    replayed once to show it reads back)
#
# Under $OUT: summary.txt and summary.json (each step: ok, failed, timed out or skipped with why, and its
# seconds), env.txt, cuda-tests.log/.xml, bench-engine.json, bench-hooks-overhead.json, nvml-snapshot.json,
# topo.txt, topo.json, topo-replayed.json, and logs/ (each step's stderr).
#
# Without a CUDA device (or with --dry-run) it dry-runs: the GPU steps are skipped and say why, and what
# can run does: the CUDA tests are collected (so a renamed test shows), the bench scripts run on the CPU
# with --smoke (tiny sizes), NVML steps run if the driver is there, else `topo` replays the bundled DGX snapshot.
# A dry run exits 0 unless something that ran failed (a step the budget cut is not a failure there); a real
# run exits 1 when any step failed or timed out.
# DEVICE_CHECK_BUDGET_S (default 450) bounds the whole run: each step gets what is left, at most its cap.

set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-./device-check-out}"
BUDGET_S="${DEVICE_CHECK_BUDGET_S:-450}"
DRY_RUN=0
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "device_check.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY="$(command -v python3 || command -v python)"; fi
STAGELENS=("$(dirname "$PY")/stagelens")
[ -x "${STAGELENS[0]}" ] || STAGELENS=("$PY" -c "from stagelens.cli import main; main()")

mkdir -p "$OUT/logs" || exit 2
OUT="$(cd "$OUT" && pwd)"
: > "$OUT/summary.tsv"
MODEL_DIR="$(mktemp -d)"             # weight files: large, and not figures, so not under $OUT
trap 'rm -rf "$MODEL_DIR"' EXIT
START=$(date +%s)
FAILED=0

say() { printf '%s\n' "$*" >&2; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/summary.tsv"; say "[$2] $1${4:+: $4} (${3}s)"; }
skip() { record "$1" skipped 0 "$2"; }

# step NAME CAP_S STDOUT_FILE CMD...: runs CMD with at most CAP_S (and what is left of the budget)
step() {
    local name="$1" cap="$2" stdout="$3"; shift 3
    local left=$(( BUDGET_S - ($(date +%s) - START) ))
    if [ "$left" -lt 5 ]; then skip "$name" "the budget (DEVICE_CHECK_BUDGET_S=$BUDGET_S) is spent"; return; fi
    local cut=""
    if [ "$cap" -gt "$left" ]; then cap="$left"; cut=1; fi
    local t0 rc
    t0=$(date +%s)
    timeout --kill-after=10 "$cap" "$@" > "$stdout" 2> "$OUT/logs/$name.log"
    rc=$?
    local took=$(( $(date +%s) - t0 ))
    if [ "$rc" -eq 0 ]; then record "$name" ok "$took" ""
    elif { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ -n "$cut" ] && [ "$DRY_RUN" -eq 1 ]; then
        record "$name" cut "$took" "stopped after ${cap}s, what was left of DEVICE_CHECK_BUDGET_S=$BUDGET_S"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then FAILED=1; record "$name" "timed out" "$took" "after ${cap}s"
    else FAILED=1; record "$name" failed "$took" "exit $rc: $(tail -n 1 "$OUT/logs/$name.log")"; fi
}

# --- what this machine has ------------------------------------------------------------------------------
{
    echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "python: $PY"
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, \
'cuda', torch.version.cuda, 'available', torch.cuda.is_available()); \
[print('device', i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory >> 20, 'MiB') \
for i in range(torch.cuda.device_count())]" 2>&1
    if command -v nvidia-smi > /dev/null; then nvidia-smi 2>&1; else echo "nvidia-smi: not installed"; fi
} > "$OUT/env.txt"

if ! "$PY" -c "import torch, stagelens, stagelens.engine_hooks" 2> "$OUT/logs/python.log"; then
    record environment failed 0 "$PY cannot import torch and stagelens: $(tail -n 1 "$OUT/logs/python.log")"
    FAILED=1
    NO_GPU="the Python environment is broken"
    NO_NVML="the Python environment is broken"
else
    NO_GPU=""
    if [ "$DRY_RUN" -eq 1 ]; then NO_GPU="--dry-run was given"
    elif ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; then
        NO_GPU="no CUDA device: torch.cuda.is_available() is False (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
        DRY_RUN=1
    fi
    NO_NVML="$("$PY" -c "import pynvml
try:
    pynvml.nvmlInit(); pynvml.nvmlShutdown()
except Exception as exc:
    print(f'no NVML: {type(exc).__name__}: {exc}')" 2>&1)"
fi

# --- 1. the CUDA tests --------------------------------------------------------------------------------------
CUDA_TESTS=(tests/engine/test_engine_attention.py::test_paged_attention_on_cuda tests/engine/test_cuda_device.py)
if [ -z "$NO_GPU" ]; then
    step cuda-tests 240 "$OUT/cuda-tests.log" "$PY" -m pytest -p no:cacheprovider -rs -q \
        --junitxml="$OUT/cuda-tests.xml" "${CUDA_TESTS[@]}"
    if grep -q "skipped" "$OUT/cuda-tests.log"; then FAILED=1; record cuda-tests-skipped failed 0 \
        "a CUDA test skipped on a CUDA machine (cuda-tests.log)"; fi
else
    skip cuda-tests "$NO_GPU"
    [ "$NO_GPU" = "the Python environment is broken" ] || \
        step cuda-tests-collect 60 "$OUT/cuda-tests.log" "$PY" -m pytest -p no:cacheprovider -q --collect-only \
            "${CUDA_TESTS[@]}"
fi

# --- 2. the benches on the device ---------------------------------------------------------------------------
# Each script's own --quick run with the engine (and the attention benchmark's tensors) on the CUDA device,
# timed until the device is done; without one, --smoke on the CPU: tiny sizes, that the scripts run.
if [ -z "$NO_GPU" ]; then
    step bench-engine 180 "$OUT/bench-engine.json" "$PY" bench/engine.py --quick --json --device cuda \
        --model-dir "$MODEL_DIR"
    step bench-hooks-overhead 120 "$OUT/bench-hooks-overhead.json" "$PY" bench/hooks_overhead.py --quick --json \
        --device cuda --model-dir "$MODEL_DIR"
else
    skip bench-engine "$NO_GPU"
    skip bench-hooks-overhead "$NO_GPU"
    if [ "$NO_GPU" != "the Python environment is broken" ]; then
        step bench-engine-cpu-smoke 60 "$OUT/bench-engine-cpu-smoke.json" "$PY" bench/engine.py --smoke --json \
            --device cpu --model-dir "$MODEL_DIR"
        step bench-hooks-overhead-cpu-smoke 60 "$OUT/bench-hooks-overhead-cpu-smoke.json" "$PY" \
            bench/hooks_overhead.py --smoke --json --device cpu --model-dir "$MODEL_DIR"
    fi
fi

# --- 3. NVML: the snapshot and the topology ---------------------------------------------------------------
if [ -z "$NO_NVML" ]; then
    step probe-record 60 "$OUT/probe-record.log" "${STAGELENS[@]}" probe record --ticks 3 --interval 0.5 \
        --out "$OUT/nvml-snapshot.json"
    step topo 30 "$OUT/topo.txt" "${STAGELENS[@]}" topo
    step topo-json 30 "$OUT/topo.json" "${STAGELENS[@]}" topo --json
    if [ -s "$OUT/nvml-snapshot.json" ]; then
        step topo-replayed 30 "$OUT/topo-replayed.json" "${STAGELENS[@]}" --nvml-snapshot "$OUT/nvml-snapshot.json" \
            topo --json
    else skip topo-replayed "no snapshot was recorded"; fi
else
    skip probe-record "$NO_NVML"
    skip topo "$NO_NVML"
    if [ "$NO_NVML" != "the Python environment is broken" ]; then
        step topo-bundled-snapshot 30 "$OUT/topo-bundled-snapshot.txt" "${STAGELENS[@]}" \
            --nvml-snapshot tests/fixtures/nvml/dgx_a100.json topo
    fi
fi

# --- the summary ----------------------------------------------------------------------------------------------
"$PY" - "$OUT" "$DRY_RUN" "$BUDGET_S" "$(( $(date +%s) - START ))" <<'PY' 2>> "$OUT/logs/summary.log" || true
import json, sys
out, dry, budget, took = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
steps = [dict(zip(("step", "status", "seconds", "detail"), line.rstrip("\n").split("\t", 3)))
         for line in open(f"{out}/summary.tsv") if line.strip()]
for s in steps:
    s["seconds"] = int(s["seconds"])
with open(f"{out}/summary.json", "w") as f:
    json.dump({"dry_run": dry, "budget_s": budget, "seconds": took, "steps": steps}, f, indent=2)
with open(f"{out}/summary.txt", "w") as f:
    f.write(f"device check{' (dry run)' if dry else ''}: {took}s of {budget}s\n")
    for s in steps:
        f.write(f"{s['status']:<10} {s['step']:<32} {s['seconds']:>4}s  {s['detail']}\n")
PY
rm -f "$OUT/summary.tsv"
cat "$OUT/summary.txt" 2> /dev/null >&2
say "figures and logs: $OUT"
exit "$FAILED"
