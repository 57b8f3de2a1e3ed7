"""Coverage and width of assay's interval for Δ beside the percentile bootstrap and the cluster t.

Usage (from the repository root):

    PYTHONPATH=src python bench/interval_coverage.py            # the full grid, 500 tables a cell
    PYTHONPATH=src python bench/interval_coverage.py --quick    # a reduced grid (seconds)
    PYTHONPATH=src python bench/interval_coverage.py --tasks 4 6 --tables 200 --markdown

The grid: tasks 4, 6, 10, 20, 40, 100; repetitions 1, 3, 5; baseline pass rates from Beta
distributions centred on 0.1, 0.5 and 0.9; a true Δ of -0.2, -0.1, 0 and +0.1; families of 1
(every task its own cluster) and of 5.

One simulated table:

- Families: with family size 1 every task is its own cluster. With size 5 the tasks are dealt
  round-robin into max(2, ceil(tasks / 5)) families (at least two: with one cluster assay gives
  no interval and says so, so there would be nothing to measure). A family's tasks share a
  difficulty: the family draws q ~ Beta(10m, 10(1-m)) and each of its tasks pA ~ Beta(20q,
  20(1-q)); without families each task draws pA ~ Beta(10m, 10(1-m)) directly (m: the centre).
- The candidate: pB = clip(pA + Δ + e, 0, 1), with e ~ Normal(0, 0.05²) shared by a family (or
  drawn per task without families): the change helps some families more than others.
- Trials: each arm runs each task ``reps`` times; passes ~ Binomial(reps, p).

**Truth** is the mean over the table's own tasks of their true differences, (1/N) Σ (pB,i -
pA,i), not the Δ of the grid: the estimand of a per-task paired comparison is how much better
B does on *these* tasks, and near 0 or 1 clipping moves it away from the nominal Δ (at a
baseline of 0.1 a Δ of -0.2 cannot be had). An interval "covers" when lo <= truth <= hi.

The three intervals, each at 95%: assay's (``stats.moderated.difference_interval``, what
``exp compare`` shows and ``exp verdict`` decides on, with the same prior and clusters), the plain
cluster t (Δ ± t_{G-1} SE, what assay used before) and the percentile bootstrap over clusters
(``--boot`` resamples, the same for every table of a cell). Widths are means over the cell's
tables; "zero" counts tables whose interval has zero width. Targets: coverage >= 0.93 in every
cell with at least 6 tasks, >= 0.90 with 4, and no zero width.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from assay.stats.moderated import difference_interval
from assay.stats.tdist import t_ppf

TASKS = (4, 6, 10, 20, 40, 100)
REPS = (1, 3, 5)
CENTRES = (0.1, 0.5, 0.9)
DELTAS = (-0.2, -0.1, 0.0, 0.1)
FAMILIES = (1, 5)
LEVEL = 0.95


@dataclass(frozen=True)
class Cell:
    tasks: int
    reps: int
    centre: float
    delta: float
    family: int


@dataclass(frozen=True)
class Tables:
    """``n`` simulated tables of one cell: per-task pass counts (tables, tasks) and the truth."""

    k_a: np.ndarray
    k_b: np.ndarray
    reps: int
    codes: np.ndarray
    truth: np.ndarray


def family_codes(tasks: int, family: int) -> np.ndarray:
    """Cluster of each task: itself, or round-robin into max(2, ceil(tasks / family))."""
    if family <= 1:
        return np.arange(tasks, dtype=np.intp)
    g = max(2, math.ceil(tasks / family))
    return np.arange(tasks, dtype=np.intp) % g


def simulate(cell: Cell, n: int, rng: np.random.Generator) -> Tables:
    """``n`` tables of ``cell`` (see the module docstring for the model)."""
    codes = family_codes(cell.tasks, cell.family)
    g = int(codes.max()) + 1
    m = cell.centre
    if cell.family <= 1:
        p_a = rng.beta(10 * m, 10 * (1 - m), size=(n, cell.tasks))
        e = rng.normal(0.0, 0.05, size=(n, cell.tasks))
    else:
        q = rng.beta(10 * m, 10 * (1 - m), size=(n, g))
        q = np.clip(q, 1e-6, 1 - 1e-6)[:, codes]
        p_a = rng.beta(20 * q, 20 * (1 - q))
        e = rng.normal(0.0, 0.05, size=(n, g))[:, codes]
    p_b = np.clip(p_a + cell.delta + e, 0.0, 1.0)
    k_a = rng.binomial(cell.reps, p_a)
    k_b = rng.binomial(cell.reps, p_b)
    return Tables(k_a=k_a, k_b=k_b, reps=cell.reps, codes=codes,
                  truth=(p_b - p_a).mean(axis=1))


def assay_interval(t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """assay's interval on every table: the code ``compare_arms`` runs."""
    w = np.ones(t.codes.shape[0])
    n = np.full(t.codes.shape[0], float(t.reps))
    _, lo, hi, _ = difference_interval(t.k_a / t.reps, n, t.k_b / t.reps, n, w, t.codes,
                                       level=LEVEL)
    return lo, hi


def _cluster_means(t: Tables) -> tuple[np.ndarray, np.ndarray]:
    d = (t.k_b - t.k_a) / t.reps
    g = int(t.codes.max()) + 1
    onehot = np.zeros((t.codes.shape[0], g))
    onehot[np.arange(t.codes.shape[0]), t.codes] = 1.0
    return d @ onehot, onehot.sum(axis=0)


def cluster_t(t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """The plain cluster t with G - 1 df, unclipped (assay's interval before issue 21)."""
    s_g, w_g = _cluster_means(t)
    g = w_g.shape[0]
    total = w_g.sum()
    delta = s_g.sum(axis=1) / total
    resid = s_g - w_g * delta[:, None]
    se = np.sqrt(g / (g - 1) * (resid * resid).sum(axis=1) / total**2)
    half = t_ppf(0.5 + LEVEL / 2, g - 1) * se
    return delta - half, delta + half


def percentile_bootstrap(t: Tables, boot: int, rng: np.random.Generator
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap resampling clusters (ratio form), ``boot`` resamples a table."""
    s_g, w_g = _cluster_means(t)
    n, g = s_g.shape
    lo = np.empty(n)
    hi = np.empty(n)
    chunk = max(1, 4_000_000 // (boot * g))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        idx = rng.integers(0, g, size=(stop - start, boot, g), dtype=np.int32)
        rows = np.arange(stop - start)[:, None, None]
        stat = s_g[start:stop][rows, idx].sum(axis=2) / w_g[idx].sum(axis=2)
        q = np.quantile(stat, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=1)
        lo[start:stop], hi[start:stop] = q[0], q[1]
    return lo, hi


def measure(cell: Cell, n: int, boot: int, seed: int) -> dict[str, tuple[float, float, int]]:
    """Coverage, mean width and zero-width count of each interval over ``n`` tables."""
    rng = np.random.default_rng(seed)
    t = simulate(cell, n, rng)
    out = {}
    for name, (lo, hi) in (("assay", assay_interval(t)), ("t", cluster_t(t)),
                           ("boot", percentile_bootstrap(t, boot, rng))):
        covered = (lo <= t.truth + 1e-12) & (t.truth - 1e-12 <= hi)
        width = hi - lo
        out[name] = (float(covered.mean()), float(width.mean()), int((width <= 1e-12).sum()))
    return out


def mc_se(p: float, tables: int) -> float:
    """Standard error of a coverage estimated from ``tables`` tables when the truth is ``p``."""
    return math.sqrt(p * (1 - p) / tables)


def target(tasks: int) -> float:
    return 0.90 if tasks < 6 else 0.93


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=500, help="tables a cell (default 500)")
    ap.add_argument("--boot", type=int, default=400, help="bootstrap resamples (default 400)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--tasks", type=int, nargs="+", default=list(TASKS))
    ap.add_argument("--reps", type=int, nargs="+", default=list(REPS))
    ap.add_argument("--centres", type=float, nargs="+", default=list(CENTRES))
    ap.add_argument("--deltas", type=float, nargs="+", default=list(DELTAS))
    ap.add_argument("--families", type=int, nargs="+", default=list(FAMILIES))
    ap.add_argument("--quick", action="store_true",
                    help="reduced grid: tasks 4 6 20, reps 1 3, 200 tables a cell")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.reps, args.tables = [4, 6, 20], [1, 3], min(args.tables, 200)
    cells = [Cell(*c) for c in itertools.product(args.tasks, args.reps, args.centres,
                                                 args.deltas, args.families)]
    started = time.monotonic()
    if args.markdown:
        print("| tasks | reps | base | Δ | fam | assay cov | assay width | t cov | t width "
              "| t zero | boot cov | boot width | boot zero |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    else:
        print(f"{'tasks':>5} {'reps':>4} {'base':>4} {'Δ':>5} {'fam':>3} | "
              f"{'assay cov':>9} {'width':>5} {'zero':>4} | {'t cov':>5} {'width':>5} "
              f"{'zero':>4} | {'boot cov':>8} {'width':>5} {'zero':>4}")
    failing: list[tuple[Cell, float]] = []
    beyond_noise: list[tuple[Cell, float]] = []
    zero_assay = 0
    worst: dict[str, float] = {"assay": 1.0, "t": 1.0, "boot": 1.0}
    ratio: list[float] = []
    for i, cell in enumerate(cells):
        res = measure(cell, args.tables, args.boot, args.seed + i)
        a, t, b = res["assay"], res["t"], res["boot"]
        for k in worst:
            worst[k] = min(worst[k], res[k][0])
        zero_assay += a[2]
        if a[0] < target(cell.tasks):
            failing.append((cell, a[0]))
            if a[0] < target(cell.tasks) - 2 * mc_se(target(cell.tasks), args.tables):
                beyond_noise.append((cell, a[0]))
        if t[1] > 0:
            ratio.append(a[1] / t[1])
        if args.markdown:
            print(f"| {cell.tasks} | {cell.reps} | {cell.centre:.1f} | {cell.delta:+.1f} | "
                  f"{cell.family} | {a[0]:.3f} | {a[1]:.3f} | {t[0]:.3f} | {t[1]:.3f} | {t[2]} "
                  f"| {b[0]:.3f} | {b[1]:.3f} | {b[2]} |")
        else:
            flag = "  <- below target" if a[0] < target(cell.tasks) else ""
            print(f"{cell.tasks:>5} {cell.reps:>4} {cell.centre:>4.1f} {cell.delta:>+5.1f} "
                  f"{cell.family:>3} | {a[0]:>9.3f} {a[1]:>5.3f} {a[2]:>4} | {t[0]:>5.3f} "
                  f"{t[1]:>5.3f} {t[2]:>4} | {b[0]:>8.3f} {b[1]:>5.3f} {b[2]:>4}{flag}")
        sys.stdout.flush()
    print()
    print(f"{len(cells)} cells x {args.tables} tables in {time.monotonic() - started:.0f} s; "
          f"lowest coverage: assay {worst['assay']:.3f}, cluster t {worst['t']:.3f}, "
          f"percentile bootstrap {worst['boot']:.3f}; assay zero widths: {zero_assay}; "
          f"assay width / cluster t width: median {float(np.median(ratio)):.2f}")
    print(f"Monte Carlo standard error of one cell's coverage near 0.95: "
          f"{mc_se(0.95, args.tables):.3f}; a method at exactly 95% falls below 0.93 in about "
          "1.5% of cells by chance alone")
    if failing:
        print("cells below target (>= 0.93 from 6 tasks, >= 0.90 with 4):")
        for cell, cov in failing:
            print(f"  {cell}: {cov:.3f}")
    else:
        print("every cell at target")
    if beyond_noise:
        print("below target by more than 2 Monte Carlo standard errors:")
        for cell, cov in beyond_noise:
            print(f"  {cell}: {cov:.3f}")
    return 1 if beyond_noise or zero_assay else 0


if __name__ == "__main__":
    raise SystemExit(main())
