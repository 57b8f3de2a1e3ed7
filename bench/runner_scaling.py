"""How the experiment runner scales: 24 trials of an agent that sleeps 2 s, then fixes the bug.

    .venv/bin/python bench/runner_scaling.py [--trials 24] [--jobs 1,2,4,8] [--sleep 2]

Each -j runs a fresh experiment (one tiny bundle, one arm, ``--trials`` repetitions) through the
real runner, sandbox and verifier. Printed per -j: the wall time next to the ideal
(trials x sleep / j), and the runner's own overhead per trial: everything an attempt took except
the agent's sleep and the verifier's test commands (the stages' seconds from each trial.json,
less the sleep and less every check's wall_seconds from its grade). Targets: overhead under
0.5 s per trial; -j 8 within 1.5x of ideal. On a 2-core machine the verifier's pytest runs
compete for the cores at high -j, so the ideal is optimistic there; the table says so.
Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from assay.runner.experiment import run_experiment
from assay.suites.bundle import set_fixture_digest, tree_digest

TARGET_OVERHEAD_S = 0.5
TARGET_J8_RATIO = 1.5

_SRC = "def add(a, b):\n    return a - b\n"
_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
_REG = "from calc import add\n\n\ndef test_callable():\n    assert callable(add)\n"
_TASK = """id: calc-bench
revision: 1
instruction: instruction.md
initial_state:
  repository: repo
  fixture_digest: null
  environment: {requires: [python3, pytest]}
resources: {cpu_cores: 1, memory_limit_mib: 512, pids: 64}
budget: {agent_wall_seconds: 60, verifier_wall_seconds: 60}
acceptance:
  verifier_revision: v1
  required: [behavior, regression, integrity]
  behavior: {command: "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider $ASSAY_TESTS"}
  regression: {command: "PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests"}
  protected_paths: ["tests/**"]
  allowed_paths: ["src/**"]
"""


def _bundle(root: Path) -> Path:
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
    (root / "task.yaml").write_text(_TASK)
    set_fixture_digest(root, tree_digest(root / "repo"))
    return root


def _overhead(out: Path, sleep: float) -> list[float]:
    per_trial = []
    for trial in out.glob("trials/*/*/*/a*/trial.json"):
        rec = json.loads(trial.read_text())
        total = sum(s.get("seconds") or 0 for s in rec["stages"])
        grade = json.loads((trial.parent / "grades" / "v1.json").read_text())
        checks = sum((grade["details"].get(n) or {}).get("wall_seconds") or 0
                     for n in ("behavior", "regression"))
        per_trial.append(total - sleep - checks)
    return per_trial


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--jobs", default="1,2,4,8")
    ap.add_argument("--sleep", type=float, default=2.0)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="assay-bench-runner-") as tmp:
        root = Path(tmp)
        _bundle(root / "tasks" / "calc")
        for j in (int(x) for x in args.jobs.split(",")):
            exp = root / f"exp-{j}.yaml"
            exp.write_text(f"name: scaling-{j}\ntasks: [tasks]\nrepetitions: {args.trials}\n"
                           f"concurrency: {j}\narms:\n  fixer:\n    agent: \"command:sleep "
                           f"{args.sleep:g}; sed -i 's/a - b/a + b/' src/calc/__init__.py\"\n")
            out = root / f"run-{j}"
            t0 = time.perf_counter()
            res = run_experiment(exp, out)
            wall = time.perf_counter() - t0
            accepted = sum(1 for _ in out.glob("trials/*/*/*/a*/grades/v1.json")
                           if json.loads(_.read_text())["accepted"])
            over = _overhead(out, args.sleep)
            ideal = args.trials * args.sleep / j
            rows.append((j, wall, ideal, statistics.median(over), max(over), accepted,
                         res.status))
    head = "overhead/trial s (median, max)"
    print(f"{'-j':>3} {'wall s':>8} {'ideal s':>8} {'ratio':>6} {head:>31} {'accepted':>9}")
    ok = True
    for j, wall, ideal, med, mx, acc, status in rows:
        print(f"{j:>3} {wall:>8.1f} {ideal:>8.1f} {wall / ideal:>6.2f} {med:>20.3f} {mx:>10.3f}"
              f" {acc:>5}/{args.trials} {status}")
        ok &= med < TARGET_OVERHEAD_S and acc == args.trials
        if j == 8:
            ok &= wall / ideal < TARGET_J8_RATIO
    print(("PASS" if ok else "FAIL") + f": overhead per trial < {TARGET_OVERHEAD_S} s (median), "
          f"-j 8 within {TARGET_J8_RATIO}x of ideal, every trial accepted")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
