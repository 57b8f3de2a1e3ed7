# The two commands that matter: `make demo` and `make test` (see README.md).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup setup-test demo rehearsal test test-full test-durations test-ray-full lint lint-checks bench

setup:
	@bash scripts/bootstrap.sh

# The tests also need a browser (headless Chromium for the HTML reports), Ray (assay[ray]:
# tests/test_ray_executor.py starts a two-node cluster on this machine) and Inspect
# (assay[inspect]: tests/test_inspect_log.py reads the log it writes back); the demo needs none.
setup-test:
	@ASSAY_BOOTSTRAP_BROWSER=1 ASSAY_BOOTSTRAP_EXTRAS=dev,ray,inspect bash scripts/bootstrap.sh
	@$(BIN)/python -c 'import ray, xdist, pytest_timeout, mypy, atif, inspect_ai' 2>/dev/null || \
	  $(BIN)/python -m pip install -q -e '.[dev,ray,inspect]'

demo: setup
	$(BIN)/assay run examples/triage --model builtin/baseline

# A whole A/B experiment with a real agent CLI (Qwen Code, installed once) and builtin/replay.
rehearsal: setup
	@bash scripts/agents/qwen.sh >/dev/null
	$(BIN)/assay exp run examples/experiments/rehearsal.yaml --out runs/rehearsal
	@# exit 4 (inconclusive) is the rehearsal's honest answer on four tasks; 1 (reject) fails
	@$(BIN)/assay exp verdict runs/rehearsal; code=$$?; [ $$code -eq 0 ] || [ $$code -eq 4 ]

# Eight workers on two cores: many tests wait (real budgets, kills, a Ray cluster, a browser),
# and eight keep both cores busy through the first pass (sampled from /proc/stat; the disk stays
# under 15% busy). Units and their order: tests/support/schedule.py. Serial: `make test
# TEST_WORKERS=0`. tests/README.md has the figures.
TEST_WORKERS ?= 8

# The tests marked quiet (real agent CLIs held to wall budgets, races between two time limits)
# run in a second pass with this many workers, after the others: under eight workers' load a
# CLI that needs ten seconds alone can need more than ninety (seen in CI). Four: the pass's
# three long tests (40-60 s each, waiting on a CLI's own limit) run side by side and the rest
# beside them; with three every worker was busy to the end (about 100 s), while the machine
# stayed a third idle.
QUIET_WORKERS ?= 4

# Both passes run even when the first fails, so one run shows every failure. $(1): variables
# for the environment of both (the full forms). Before them one collection in one process
# writes the compiled test modules (assertions rewritten) and assay's own to __pycache__
# (tests/conftest.py says why), so the workers of both passes read them instead of each compiling
# all of them at once: about 30 s of start-up on two cores. The same collection names the files
# that hold quiet tests, and the quiet pass's workers import only those (each import of the
# whole suite costs a worker 2.5 s of CPU). A collection error shows in the passes (an empty
# list makes the quiet pass collect everything).
define run_tests
	@quiet=$$($(1) $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider -m quiet \
	          2>/dev/null | sed -n 's/::.*//p' | sort -u); \
	code=0; \
	$(1) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not quiet" || code=$$?; \
	$(1) $(BIN)/python -m pytest -q -n $(QUIET_WORKERS) --dist loadfile -m quiet $$quiet \
	  || code=$$?; \
	exit $$code
endef

# mypy runs as one of the tests (tests/test_type_check.py), beside the others.
test: setup-test
	$(BIN)/ruff check src tests bench
	$(call run_tests,)

# Every slow scenario in its full form (make test runs their reduced forms; tests/README.md lists
# them): the Ray cluster scenario and the image builds that fail, several minutes more; the
# shared test images are built afresh instead of taken from earlier sessions
# (tests/support/images.py).
test-full: setup-test
	$(BIN)/ruff check src tests bench
	$(call run_tests,ASSAY_RAY_FULL=1 ASSAY_ENV_BUILD_FULL=1 ASSAY_SEQUENTIAL_FULL=1 \
	  ASSAY_GATEWAY_FLOOD_FULL=1 ASSAY_DISK_FULL=1 ASSAY_GUIDE_FULL=1 ASSAY_TEST_IMAGE_CACHE=session)

# Measure every test's wall seconds again and rewrite tests/durations.json, which orders the
# units of make test longest first (tests/support/schedule.py).
test-durations: setup-test
	rm -f .test-durations.jsonl
	$(call run_tests,ASSAY_TEST_CPU_LOG=$(CURDIR)/.test-durations.jsonl)
	cd tests && ../$(BIN)/python -m support.schedule ../.test-durations.jsonl

# The full Ray cluster scenario alone (tests/test_ray_executor.py, marker ray_full): two minutes.
test-ray-full: setup-test
	ASSAY_RAY_FULL=1 $(BIN)/python -m pytest -q -m ray_full tests/test_ray_executor.py

# ruff, then mypy on src/assay (its settings: [tool.mypy] in pyproject.toml); make test runs
# both (mypy as tests/test_type_check.py)
lint: setup lint-checks

lint-checks:
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m mypy

bench: setup
	$(BIN)/python bench/narrow_throughput.py
