"""How the experiment runner scales: 24 trials of an agent that sleeps 2 s, then fixes the bug.

    .venv/bin/python bench/runner_scaling.py [--trials 24] [--jobs 1,2,4,8] [--sleep 2]
                                             [--tests unittest,pytest]

Each row runs a fresh experiment (one tiny bundle, one arm, ``--trials`` repetitions) through
the real runner, sandbox and verifier. Printed per row: the wall time next to the ideal
(trials x sleep / j), a floor no schedule can beat (the ideal, or the machine's busy CPU
seconds spread over its cores, whichever is larger), the CPU seconds per trial (the whole
machine's, from /proc/stat: sandboxes run in cgroups of their own, out of reach of this
process's rusage; other work on the machine counts too, so read them on a quiet one), and the
runner's own overhead per trial: everything an attempt took except the agent's sleep and the
verifier's test commands (the stages' seconds from each trial.json, less the sleep and less
every check's wall_seconds from its grade). Targets: overhead under 0.5 s per trial; -j 8
within 1.5x of ideal.

The task comes in two variants that differ only in the verifier's two test commands (the
hidden tests and the repo's own, unittest-style files either runner runs):

- ``unittest`` (every -j, and the one the targets are judged on): ``python3 -m unittest``,
  about 0.09 CPU-s a run in the sandbox. Its checks are decided by exit code and unittest's
  summary (no structured report: not tamper-evident; the verifier learns that on the trusted
  tree once per process).
- ``pytest`` (at the largest -j, for reference): the tamper-evident pytest checks, about
  0.32 CPU-s a session, two per trial. On two cores their CPU alone puts the floor near 1.5x
  of the ideal at -j 8, and the first wave's sleep cannot overlap any verification, so no
  scheduler meets the 1.5x target with them; the row shows how close this one comes.

An attempt frees its -j slot once its artifact is frozen and verifies behind a gate of one slot
per usable core (``runner/slots.py``), so verification overlaps the next agents' sleep instead
of -j verifiers fighting over the cores at once; the table shows the verify slots and how long
artifacts waited for one (not overhead: the gate, recorded apart in trial.json). Exit 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from assay.runner.experiment import run_experiment
from assay.runner.slots import usable_cores
from assay.suites.bundle import set_fixture_digest, tree_digest

TARGET_OVERHEAD_S = 0.5
TARGET_J8_RATIO = 1.5

_SRC = "def add(a, b):\n    return a - b\n"
# unittest style, so either runner runs them (--tests)
_TEST = ("import unittest\n\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
_REG = ("import unittest\n\nfrom calc import add\n\n\nclass TestCalc(unittest.TestCase):\n"
        "    def test_callable(self):\n        self.assertTrue(callable(add))\n")
#: the verifier's two test commands (behavior: the hidden tests; regression: the repo's own)
_COMMANDS = {
    "pytest": ("PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider $ASSAY_TESTS",
               "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests"),
    "unittest": ("PYTHONPATH=src python3 -m unittest discover -q -s $ASSAY_TESTS",
                 "PYTHONPATH=src python3 -m unittest discover -q -s tests"),
}
_TASK = """id: calc-bench
revision: 1
instruction: instruction.md
initial_state:
  repository: repo
  fixture_digest: null
  environment: {requires: [python3]}
resources: {cpu_cores: 1, memory_limit_mib: 512, pids: 64}
budget: {agent_wall_seconds: 60, verifier_wall_seconds: 60}
acceptance:
  verifier_revision: v1
  required: [behavior, regression, integrity]
  behavior: {command: "BEHAVIOR"}
  regression: {command: "REGRESSION"}
  protected_paths: ["tests/**"]
  allowed_paths: ["src/**"]
"""


def _bundle(root: Path, tests: str) -> Path:
    (root / "repo" / "src" / "calc").mkdir(parents=True)
    (root / "repo" / "tests").mkdir()
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "repo" / "src" / "calc" / "__init__.py").write_text(_SRC)
    (root / "repo" / "tests" / "test_calc.py").write_text(_REG)
    (root / "tests" / "test_fix.py").write_text(_TEST)
    (root / "solution" / "solve.patch").write_text(
        "--- a/src/calc/__init__.py\n+++ b/src/calc/__init__.py\n@@ -1,2 +1,2 @@\n"
        " def add(a, b):\n-    return a - b\n+    return a + b\n")
    (root / "instruction.md").write_text("Make add return the sum.\n")
    behavior, regression = _COMMANDS[tests]
    (root / "task.yaml").write_text(_TASK.replace("BEHAVIOR", behavior)
                                    .replace("REGRESSION", regression))
    set_fixture_digest(root, tree_digest(root / "repo"))
    return root


def _overhead(out: Path, sleep: float) -> tuple[list[float], list[float]]:
    """Per trial: the runner's own seconds, and how long its artifact waited for a verify slot
    (not overhead: the gate keeping verifiers to the cores, apart from the stage times)."""
    per_trial, queued = [], []
    for trial in out.glob("trials/*/*/*/a*/trial.json"):
        rec = json.loads(trial.read_text())
        total = sum(s.get("seconds") or 0 for s in rec["stages"])
        queued += [s.get("queued_seconds") or 0 for s in rec["stages"] if s["name"] == "verify"]
        grade = json.loads((trial.parent / "grades" / "v1.json").read_text())
        checks = sum((grade["details"].get(n) or {}).get("wall_seconds") or 0
                     for n in ("behavior", "regression"))
        per_trial.append(total - sleep - checks)
    return per_trial, queued


def _busy_cpu_seconds() -> float:
    """CPU seconds the whole machine spent busy (user, nice, system) since boot: sandboxes
    run in their own cgroups, so this process's rusage would miss them."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:4]
    return sum(int(x) for x in fields) / os.sysconf("SC_CLK_TCK")


def _one(root: Path, tests: str, j: int, trials: int, sleep: float) -> dict[str, Any]:
    exp = root / f"exp-{tests}-{j}.yaml"
    exp.write_text(f"name: scaling-{tests}-{j}\ntasks: [tasks-{tests}]\nrepetitions: {trials}\n"
                   f"concurrency: {j}\narms:\n  fixer:\n    agent: \"command:sleep "
                   f"{sleep:g}; sed -i 's/a - b/a + b/' src/calc/__init__.py\"\n")
    out = root / f"run-{tests}-{j}"
    cpu0, t0 = _busy_cpu_seconds(), time.perf_counter()
    res = run_experiment(exp, out)
    wall, cpu = time.perf_counter() - t0, _busy_cpu_seconds() - cpu0
    accepted = sum(1 for g in out.glob("trials/*/*/*/a*/grades/v1.json")
                   if json.loads(g.read_text())["accepted"])
    over, queued = _overhead(out, sleep)
    session = json.loads((out / "manifest.json").read_text())["sessions"][-1]
    ideal = trials * sleep / j
    # no schedule beats the sleep (ideal) nor the busy CPU spread over every core
    floor = max(ideal, cpu / usable_cores())
    return {"tests": tests, "j": j, "wall": wall, "ideal": ideal, "floor": floor,
            "cpu_per_trial": cpu / trials, "over_med": statistics.median(over),
            "over_max": max(over), "queued_med": statistics.median(queued),
            "verify_jobs": session["verify_jobs"], "accepted": accepted, "status": res.status}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--jobs", default="1,2,4,8")
    ap.add_argument("--sleep", type=float, default=2.0)
    ap.add_argument("--tests", default="unittest,pytest",
                    help="the verifier's test runners, each a variant of the task "
                         "(default both: unittest at every -j, pytest at the largest)")
    args = ap.parse_args(argv)
    variants = args.tests.split(",")
    jobs = [int(x) for x in args.jobs.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="assay-bench-runner-") as tmp:
        root = Path(tmp)
        for tests in variants:
            _bundle(root / f"tasks-{tests}" / "calc", tests)
            # the first variant at every -j; the others (the pytest reference) at the largest
            for j in (jobs if tests == variants[0] else jobs[-1:]):
                rows.append(_one(root, tests, j, args.trials, args.sleep))
    print(f"{args.trials} trials, agent sleeps {args.sleep:g} s, {usable_cores()} usable cores; "
          "floor = max(ideal, machine busy CPU-s / cores)\n")
    print(f"{'tests':>8} {'-j':>3} {'wall s':>7} {'ideal s':>8} {'ratio':>6} {'floor s':>8} "
          f"{'CPU-s/trial':>12} {'overhead/trial s (median, max)':>31} {'verify slots':>13} "
          f"{'queued s (median)':>18} {'accepted':>9}")
    ok = True
    for r in rows:
        print(f"{r['tests']:>8} {r['j']:>3} {r['wall']:>7.1f} {r['ideal']:>8.1f} "
              f"{r['wall'] / r['ideal']:>6.2f} {r['floor']:>8.1f} {r['cpu_per_trial']:>12.3f} "
              f"{r['over_med']:>20.3f} {r['over_max']:>10.3f} {r['verify_jobs']:>13} "
              f"{r['queued_med']:>18.3f} {r['accepted']:>5}/{args.trials} {r['status']}")
        ok &= r["over_med"] < TARGET_OVERHEAD_S and r["accepted"] == args.trials
        if r["j"] == 8 and r["tests"] == variants[0]:
            ok &= r["wall"] / r["ideal"] < TARGET_J8_RATIO
    print(("PASS" if ok else "FAIL") + f": overhead per trial < {TARGET_OVERHEAD_S} s (median), "
          f"-j 8 within {TARGET_J8_RATIO}x of ideal ({variants[0]} tests), every trial accepted")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
