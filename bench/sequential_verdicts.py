"""Verdicts of a sequential bar beside the fixed design's, on the same simulated experiments.

Usage (from the repository root):

    PYTHONPATH=src python bench/sequential_verdicts.py             # the grid, 2000 tables a cell
    PYTHONPATH=src python bench/sequential_verdicts.py --quick     # 400 tables a cell (seconds)
    PYTHONPATH=src python bench/sequential_verdicts.py --spending obrien_fleming --markdown

The tables come from the generator of ``bench/interval_coverage.py`` (tasks with their own pass
rates drawn around a centre, families sharing difficulty and effect, repetitions 1 or 3). Each
design is sized the way a user sizes it: the planned task count is what ``exp plan`` says
detects the hoped improvement at 80% power (``stats.power.tasks_needed``, the baseline at the
cell's centre); designs outside 20 to 200 tasks are left out. The true Δ is −max_regression,
0, half the hoped improvement and the hoped improvement (max_regression is half the hoped).

Per table, the fixed design reads the bar once on every task at 95%; the sequential one reads
it at each look (every fifth of the plan by default) at the level the spending rule gives
(``stats.sequential.look_levels``) and stops at the first look whose verdict
(``stats.sequential.look_verdict``, the function the runner calls) is accept or reject. Both
use the interval ``exp compare`` shows (``stats.moderated.difference_interval``). Printed per
cell: P(accept), P(reject), P(inconclusive) for both, and the expected fraction of the planned
trials the sequential run needs.

Targets: at Δ = −max_regression, P(accept) no higher than the fixed design's beyond Monte Carlo
error (twice the paired standard error, printed); at the hoped improvement, P(accept) within
3 points of the fixed design's; at Δ = 0 and at the hoped improvement, the expected trials at
most 70% of the fixed design's.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
from interval_coverage import Cell, simulate

from assay.stats.power import tasks_needed
from assay.stats.sequential import ACCEPT, REJECT, look_levels, simulate_looks

CENTRES = (0.1, 0.5, 0.9)
REPS = (1, 3)
HOPED = (0.15, 0.25)
FAMILIES = (1, 5)
LEVEL = 0.95


@dataclass(frozen=True)
class Design:
    centre: float
    reps: int
    hoped: float
    family: int
    tasks: int

    @property
    def max_regression(self) -> float:
        return self.hoped / 2


def evaluate(design: Design, delta: float, looks: list[int], levels: list[float], n: int,
             seed: int) -> dict[str, np.ndarray]:
    """Decisions (fixed, sequential) and the fraction of trials run, per table: the tables of
    ``bench/interval_coverage.py`` read by ``stats.sequential.simulate_looks``, the rule the
    runner applies at its looks."""
    rng = np.random.default_rng(seed)
    t = simulate(Cell(design.tasks, design.reps, design.centre, delta, design.family), n, rng)
    fixed, seq, ran = simulate_looks(t.k_a, t.k_b, t.reps, t.codes, looks, levels,
                                     hoped=design.hoped, max_regression=design.max_regression,
                                     alpha=1 - LEVEL)
    return {"fixed": fixed, "seq": seq, "frac": ran / design.tasks}


def designs(args: argparse.Namespace) -> list[Design]:
    out = []
    for centre, reps, hoped, family in itertools.product(args.centres, args.reps, args.hoped,
                                                         args.families):
        if centre + hoped > 1.0:  # the hoped improvement is not there to be had
            continue
        tasks = tasks_needed(hoped, reps=reps, p_a=centre, n_sims=1000, seed=0, n_max=400)
        if tasks is None or not 20 <= tasks <= 200:
            continue
        out.append(Design(centre, reps, hoped, family, tasks))
    return out


def plan_looks(tasks: int, count: int) -> list[int]:
    step = max(4, math.ceil(tasks / count))
    return [*range(step, tasks, step), tasks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=2000, help="tables a cell (default 2000)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--looks", type=int, default=5, help="looks a design (default 5)")
    ap.add_argument("--spending", choices=("pocock", "obrien_fleming"), default="pocock")
    ap.add_argument("--centres", type=float, nargs="+", default=list(CENTRES))
    ap.add_argument("--reps", type=int, nargs="+", default=list(REPS))
    ap.add_argument("--hoped", type=float, nargs="+", default=list(HOPED))
    ap.add_argument("--families", type=int, nargs="+", default=list(FAMILIES))
    ap.add_argument("--quick", action="store_true", help="400 tables a cell")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    if args.quick:
        args.tables = min(args.tables, 400)
    started = time.monotonic()
    head = ("base", "reps", "hoped", "fam", "tasks", "looks", "Δ", "fixed A/R/I",
            "seq A/R/I", "seq trials", "A s.e.", "target")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(" ".join(f"{h:>{w}}" for h, w in zip(head, (4, 4, 5, 3, 5, 5, 6, 17, 17, 10, 6, 6),
                                                   strict=True)))
    missed: list[str] = []
    tally: dict[str, list[bool]] = {"false accept at -max_reg": [],
                                    "P(accept) at hoped within 3 pts": [],
                                    "trials <= 70% at 0": [], "trials <= 70% at hoped": []}
    fracs: dict[str, list[float]] = {"0": [], "hoped": []}
    cells = 0
    for di, design in enumerate(designs(args)):
        looks = plan_looks(design.tasks, args.looks)
        levels = look_levels(looks, design.tasks, alpha=1 - LEVEL, spending=args.spending)
        for name, delta in (("-max_reg", -design.max_regression), ("0", 0.0),
                            ("hoped/2", design.hoped / 2), ("hoped", design.hoped)):
            cells += 1
            r = evaluate(design, delta, looks, levels, args.tables, args.seed + 7 * di)
            fixed, seq, frac = r["fixed"], r["seq"], r["frac"]
            fa, fr = float((fixed == ACCEPT).mean()), float((fixed == REJECT).mean())
            sa, sr = float((seq == ACCEPT).mean()), float((seq == REJECT).mean())
            diff = (seq == ACCEPT).astype(float) - (fixed == ACCEPT).astype(float)
            se = max(float(diff.std(ddof=1)) / math.sqrt(args.tables), 1.0 / args.tables)
            ef = float(frac.mean())
            ok = True
            if name == "-max_reg":
                tally["false accept at -max_reg"].append(sa - fa <= 2 * se)
                ok = sa - fa <= 2 * se
            if name == "hoped":
                tally["P(accept) at hoped within 3 pts"].append(abs(sa - fa) <= 0.03)
                ok = abs(sa - fa) <= 0.03
            if name in ("0", "hoped"):
                fracs[name].append(ef)
                tally[f"trials <= 70% at {name}"].append(ef <= 0.70)
                ok = ok and ef <= 0.70
            row = (f"{design.centre:.1f}", str(design.reps), f"{design.hoped:.2f}",
                   str(design.family), str(design.tasks), str(len(looks)), name,
                   f"{fa:.3f}/{fr:.3f}/{1 - fa - fr:.3f}", f"{sa:.3f}/{sr:.3f}/{1 - sa - sr:.3f}",
                   f"{ef:.3f}", f"{se:.4f}", "ok" if ok else "MISS")
            if not ok:
                missed.append(f"{design} Δ={name}: fixed A {fa:.3f}, seq A {sa:.3f}, "
                              f"trials {ef:.3f}")
            if args.markdown:
                print("| " + " | ".join(row) + " |")
            else:
                print(" ".join(f"{c:>{w}}" for c, w in zip(
                    row, (4, 4, 5, 3, 5, 5, 6, 17, 17, 10, 6, 6), strict=True)))
            sys.stdout.flush()
    print()
    print(f"{cells} cells x {args.tables} tables, {args.spending} spending, {args.looks} looks "
          f"a design, in {time.monotonic() - started:.0f} s")
    for name, values in fracs.items():
        if values:
            print(f"expected trials at Δ = {name}: mean {np.mean(values):.3f}, worst "
                  f"{max(values):.3f} of the fixed design's")
    for what, hits in tally.items():
        print(f"{what}: {sum(hits)} of {len(hits)} designs at target")
    if missed:
        print(f"{len(missed)} cells off target:")
        for m in missed:
            print("  " + m)
    else:
        print("every cell at target")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
