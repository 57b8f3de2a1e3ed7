"""A bundle's self-test (``assay task check --mutants``): the old schedule against the new one.

    .venv/bin/python bench/task_check_speed.py [--task examples/agent-tasks/duration-parse-001]
                                               [--workers 2] [--skip-baseline]

Runs every check of one bundle twice in the same process, the baseline first: nop, three
oracle runs and every built-in mutant, ``--workers`` trials at once.

- **baseline** (``hang_budget="task"``, how ``task check`` ran before): the mutant that hangs
  takes a worker and sleeps out the task's whole ``verifier_wall_seconds`` in each of its two
  checks (60 s each for the examples).
- **measured** (today's default): the hanging mutant sleeps beside the workers under a limit of
  ``HANG_FACTOR`` times the trusted tree's own measured time, at least ``HANG_FLOOR_SECONDS``,
  and must still be rejected as the candidate's time-out.

Prints one row per schedule (wall seconds, trials, the hanging mutant's limit and verdict) and
whether every trial said the same in both; exit status 1 when they disagree or the new schedule
misses the 30 s target. About 2.5 minutes with the baseline on 2 cores, 30 s without it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from assay.runner.task_check import HangBudget, TaskReport, check_tasks
from assay.suites.bundle import load_bundle

ROOT = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 30.0


def _timed(task: Path, out: Path, workers: int, budget: HangBudget) -> tuple[float, TaskReport]:
    bundle = load_bundle(task)
    t0 = time.perf_counter()
    (report,) = check_tasks([bundle], out, mutants=True, workers=workers, hang_budget=budget)
    return time.perf_counter() - t0, report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", type=Path,
                    default=ROOT / "examples" / "agent-tasks" / "duration-parse-001")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    budgets: list[HangBudget] = ["measured"] if args.skip_baseline else ["task", "measured"]
    rows: list[tuple[str, float, TaskReport]] = []
    with tempfile.TemporaryDirectory(prefix="assay-bench-check-") as tmp:
        for budget in budgets:
            secs, rep = _timed(args.task, Path(tmp) / budget, args.workers, budget)
            rows.append((budget, secs, rep))
    print(f"task check --mutants on {args.task.name}, --workers {args.workers}")
    print(f"{'schedule':<10} {'wall s':>7} {'trials':>6}  {'hang limit':<22} hang verdict")
    for budget, secs, rep in rows:
        judged = rep.hang_judged.get("hang_at_import")
        limit = (f"{judged['limit_seconds']:g} s (trusted {judged['trusted_seconds']:.2f} s)"
                 if judged else "task's own")
        trials = 1 + rep.oracle_runs + len(rep.mutants)
        print(f"{budget:<10} {secs:>7.1f} {trials:>6}  {limit:<22} "
              f"{rep.mutants.get('hang_at_import', 'n/a')}")
    ok = rows[-1][1] <= TARGET_SECONDS and rows[-1][2].status == "ok"
    if len(rows) == 2:
        (_, old_s, old), (_, new_s, new) = rows
        same = (old.mutants == new.mutants and old.nop == new.nop
                and old.oracle_accepted == new.oracle_accepted)
        print(f"speed-up {old_s / new_s:.1f}x; every trial said the same in both: {same}")
        ok = ok and same
    print(f"target: measured schedule within {TARGET_SECONDS:g} s: "
          + ("met" if rows[-1][1] <= TARGET_SECONDS else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
