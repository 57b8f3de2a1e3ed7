# The two commands that matter: `make demo` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup setup-test demo test lint bench

setup:
	@bash scripts/bootstrap.sh

# The tests also need a browser (headless Chromium for the HTML reports); the demo does not.
setup-test:
	@ASSAY_BOOTSTRAP_BROWSER=1 bash scripts/bootstrap.sh

demo: setup
	$(BIN)/assay run examples/triage --model builtin/baseline

test: setup-test
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check src tests bench

bench: setup
	$(BIN)/python bench/narrow_throughput.py
