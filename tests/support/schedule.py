"""Where each test runs under ``make test`` (pytest-xdist), placed by measurement.

xdist's ``--dist loadfile`` sends each file whole to one worker, so a module fixture (the Ray
cluster's head, a browser, a task check whose trials serve many tests) is built once; and it
queues the files by their *number* of tests, so a file of one ten-minute test starts last and
sets the end of the run. Two changes, both here:

- **Units.** A file in :data:`SPREAD` (its tests share no costly module fixture: a session
  fixture shared under a file lock is fine) is split into one unit per test, so its long tests
  run beside each other on several workers. Every other file stays one unit.
- **Order.** Units start longest first, by the wall seconds measured for their tests
  (``tests/durations.json``; a test not in it counts :data:`UNMEASURED_SECONDS`). Longest
  first keeps the last unit to finish short, whatever the number of workers.

``--dist loadgroup`` would do the first part with marks, but with pytest 9.2 and xdist 3.8 it
sends grouped tests to several workers (xdist renames ``item._nodeid``, which pytest 9 no
longer reads), so the units are made here from node ids alone, which both sides agree on.

Measuring again (after adding slow tests): ``make test-durations`` runs the suite with
``ASSAY_TEST_CPU_LOG`` set and rewrites ``tests/durations.json`` from the log (tests of 2 s or
more; the rest count as unmeasured).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
#: what a test missing from durations.json counts (most tests take well under a second)
UNMEASURED_SECONDS = 0.3
#: the tests measured at this or more go into durations.json
MEASURED_FROM_SECONDS = 2.0
#: a worker that still holds this many seconds of tests is topped up with the shortest unit
TOP_UP_SECONDS = 10.0

#: Files whose tests are independent units: no module fixture that costs more than a test.
#: (Two tests of test_harbor_import.py check the same imported task, and each builds its image
#: then, in its worker's cache: a minute of CPU more, but side by side instead of one after the
#: other.)
SPREAD = frozenset(f"tests/{name}.py" for name in (
    "test_agent_mini_swe_agent", "test_agent_qwen", "test_agent_sessions", "test_arm_config",
    "test_docs_commands", "test_env_build", "test_env_run", "test_examples",
    "test_examples_check", "test_exp_compare", "test_experiment_run", "test_fork_experiment",
    "test_harbor_images", "test_harbor_import", "test_noise_floor", "test_narrow_report",
    "test_build_egress", "test_env_oci", "test_env_registry", "test_run_evidence",
    "test_verifier_canaries", "test_workspace_freeze", "test_abstats", "test_gateway_fairness",
))


def scope_of(nodeid: str) -> str:
    """The unit a test is sent in: itself for a file in :data:`SPREAD`, else its file."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in SPREAD else path


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The measured wall seconds by node id (empty when the file is missing)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in data.items()}


def unit_seconds(nodeids: Iterable[str], durations: Mapping[str, float]) -> dict[str, float]:
    """Each unit's expected wall seconds: the sum of its tests'."""
    out: dict[str, float] = {}
    for nodeid in nodeids:
        scope = scope_of(nodeid)
        out[scope] = out.get(scope, 0.0) + durations.get(nodeid, UNMEASURED_SECONDS)
    return out


def write_durations(log: Path, path: Path = DURATIONS) -> int:
    """Rewrite ``durations.json`` from an ``ASSAY_TEST_CPU_LOG`` file (one JSON line a test);
    returns how many tests it lists."""
    walls: dict[str, float] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        walls[row["test"]] = max(walls.get(row["test"], 0.0), float(row["wall"]))
    kept = {k: round(v, 1) for k, v in sorted(walls.items()) if v >= MEASURED_FROM_SECONDS}
    path.write_text(json.dumps(kept, indent=0) + "\n", encoding="utf-8")
    return len(kept)


class MeasuredScheduling(LoadFileScheduling):
    """``--dist loadfile`` with the units of :func:`scope_of`. The order is the collection's
    (``conftest.pytest_collection_modifyitems`` sorts the tests longest unit first on every
    worker, so all collect the same order), not xdist's count of tests per unit.

    One change to how a worker is topped up: xdist sends a worker its next unit as soon as two
    or fewer of its tests are left (a worker starts a test only once it knows the next one), so
    a unit sent behind a one-minute test waits that minute while other workers may run dry.
    When the tests a worker still holds are expected to take :data:`TOP_UP_SECONDS` or more, it
    gets the *shortest* unit left instead of the longest (seen in the quiet pass: Codex's whole
    file, 27 s, queued behind Qwen Code's 64 s budget test while three workers finished)."""

    def __init__(self, config, log=None):  # type: ignore[no-untyped-def]
        config.option.loadscopereorder = False
        super().__init__(config, log)
        self.seconds = load_durations()

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _reschedule(self, node):  # type: ignore[no-untyped-def]
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        held = [nodeid for unit in self.assigned_work.get(node, {}).values()
                for nodeid, done in unit.items() if not done]
        if len(held) > 2:
            return
        ahead = sum(self.seconds.get(nodeid, UNMEASURED_SECONDS) for nodeid in held)
        if ahead >= TOP_UP_SECONDS:
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        self._assign_work_unit(node)


if __name__ == "__main__":
    import sys

    print(f"{write_durations(Path(sys.argv[1]))} tests in {DURATIONS}")
