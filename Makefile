# The two commands that matter: `make demo` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench

setup:
	@bash scripts/bootstrap.sh

demo: setup
	$(BIN)/assay run examples/triage --model builtin/baseline

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check src tests bench

bench: setup
	$(BIN)/python bench/narrow_throughput.py
