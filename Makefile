# The two commands that matter: `make demo` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup setup-test demo rehearsal test test-ray-full lint bench

setup:
	@bash scripts/bootstrap.sh

# The tests also need a browser (headless Chromium for the HTML reports) and Ray (assay[ray]:
# tests/test_ray_executor.py starts a two-node cluster on this machine); the demo needs neither.
setup-test:
	@ASSAY_BOOTSTRAP_BROWSER=1 bash scripts/bootstrap.sh
	@$(BIN)/python -c 'import ray' 2>/dev/null || $(BIN)/python -m pip install -q -e '.[dev,ray]'

demo: setup
	$(BIN)/assay run examples/triage --model builtin/baseline

# A whole A/B experiment with a real agent CLI (Qwen Code, installed once) and builtin/replay.
rehearsal: setup
	@bash scripts/agents/qwen.sh >/dev/null
	$(BIN)/assay exp run examples/experiments/rehearsal.yaml --out runs/rehearsal
	@# exit 4 (inconclusive) is the rehearsal's honest answer on four tasks; 1 (reject) fails
	@$(BIN)/assay exp verdict runs/rehearsal; code=$$?; [ $$code -eq 0 ] || [ $$code -eq 4 ]

test: setup-test
	$(BIN)/python -m pytest -q

# The full Ray cluster scenario (tests/test_ray_executor.py, marker ray_full): about two minutes.
# CI runs it as part of make test (.ci/run sets ASSAY_RAY_FULL=1).
test-ray-full: setup-test
	ASSAY_RAY_FULL=1 $(BIN)/python -m pytest -q -m ray_full tests/test_ray_executor.py

lint: setup
	$(BIN)/ruff check src tests bench

bench: setup
	$(BIN)/python bench/narrow_throughput.py
