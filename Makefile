# Everything bootstraps .venv from nothing and is idempotent.
# On a GPU node, override the torch requirement, e.g. `make demo TORCH_SPEC='torch>=2.3'`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e '.[engine,dev]'
	touch $@

demo: $(STAMP)
	@if [ -t 0 ]; then $(BIN)/stagelens tui --scenario hol-blocking; else $(BIN)/stagelens lab --scenario hol-blocking --fixed --duration 20; fi

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/engine.py --quick
	$(BIN)/python bench/hooks_overhead.py --quick
	$(BIN)/python bench/probes.py --quick
	$(BIN)/python bench/exporters.py --quick
	$(BIN)/python bench/tui.py --quick
	$(BIN)/python bench/detect.py --quick

clean:
	rm -rf $(VENV) .pytest_cache
