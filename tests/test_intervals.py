"""Small-sample intervals (stats.moderated): the edge cases, a reduced coverage grid, and the
large-sample behaviour the old cluster t had.

The full coverage grid (tasks 4 to 100, 1 to 5 repetitions, baselines near 0.1, 0.5 and 0.9,
Δ -0.2 to +0.1, families of 1 and 5, 500 tables a cell) is the bench:

    PYTHONPATH=src python bench/interval_coverage.py

Its table is in docs/statistics.md. Here it runs on a reduced grid (the small, lopsided cells
where the old interval failed), 200 tables a cell, with a fixed seed.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from assay.stats import clustered_wilson, compare_arms, paired_diff_interval
from assay.stats.moderated import difference_interval
from assay.stats.tdist import t_ppf

BENCH = Path(__file__).resolve().parents[1] / "bench" / "interval_coverage.py"


def _bench():
    spec = importlib.util.spec_from_file_location("interval_coverage", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("interval_coverage", mod)
    spec.loader.exec_module(mod)
    return mod


def _trials(a: dict[str, list[bool]], b: dict[str, list[bool]]) -> list:
    out = [(t, "A", r, p) for t, ps in a.items() for r, p in enumerate(ps)]
    return out + [(t, "B", r, p) for t, ps in b.items() for r, p in enumerate(ps)]


def _width(ci: tuple[float, float] | None) -> float:
    assert ci is not None
    return ci[1] - ci[0]


# --- edge cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("reps", [1, 3])
@pytest.mark.parametrize("outcome", [True, False])
def test_all_pass_or_all_fail_in_both_arms_is_wide_not_zero(outcome: bool, reps: int) -> None:
    table = {f"t{i}": [outcome] * reps for i in range(4)}
    res = compare_arms(_trials(table, table), a="A", b="B")
    assert res.delta == 0.0 and res.ci is not None
    lo, hi = res.ci
    # Four tasks at a bound: the exact 4 of 4 (or 0 of 4) bound .025^(1/4) on each side,
    # independent: ±(1 - .3976354), [-.60, +.60].
    assert lo == pytest.approx(-0.6023646, abs=1e-6) and hi == pytest.approx(-lo)
    # More tasks narrow it; it never reaches zero width.
    many = {f"t{i}": [outcome] * reps for i in range(40)}
    res40 = compare_arms(_trials(many, many), a="A", b="B")
    assert 0.0 < _width(res40.ci) < _width(res.ci) and res40.ci[0] < 0.0 < res40.ci[1]


def test_every_task_fixed_is_bounded_at_one_and_rules_out_a_regression_from_three() -> None:
    # 3 of 3 against 0 of 3: however the tasks' rates lie, seeing this when B is 5 points
    # worse has probability at most (.475 · .475)³ = .012 < .025, so a 95% interval must end
    # above -5 points; with 2 tasks it is (.475²)² = .051, so it must not. The upper bound is
    # 1, not 1 + something.
    def fixed(n: int) -> tuple[float, float]:
        a = {f"t{i}": [False] for i in range(n)}
        b = {f"t{i}": [True] for i in range(n)}
        res = compare_arms(_trials(a, b), a="A", b="B")
        assert res.delta == 1.0 and res.ci is not None and res.ci[1] == 1.0
        return res.ci
    assert -0.05 < fixed(3)[0] < 0.05
    assert fixed(2)[0] < -0.05
    assert fixed(10)[0] > 0.5


def test_one_task_and_one_cluster_give_no_difference_interval() -> None:
    one = compare_arms(_trials({"t": [True, False]}, {"t": [True, True]}), a="A", b="B")
    assert one.ci is None and one.n_clusters == 1 and any("one cluster" in n for n in one.notes)
    table_a = {f"t{i}": [i % 2 == 0] for i in range(6)}
    table_b = {f"t{i}": [True] for i in range(6)}
    fam = compare_arms(_trials(table_a, table_b), a="A", b="B",
                       clusters=dict.fromkeys(table_a, "F"))
    assert fam.ci is None and fam.n_clusters == 1
    # A rate from one task is still a rate: 1 of 1 is the exact [.025, 1], not [1, 1].
    rate, lo, hi, n_eff = clustered_wilson([1.0], [1])
    assert (rate, hi, n_eff) == (1.0, 1.0, 1.0) and lo == pytest.approx(0.025)
    # Repeats of one task are one cluster: n_eff stays 1 however many samples agree.
    assert clustered_wilson([1.0], [20])[1] == pytest.approx(lo)
    # The paired interval with one cluster knows nothing about another draw: the whole range.
    assert paired_diff_interval([0, 1, 1], [1, 1, 1], ["c", "c", "c"])[1:] == (-1.0, 1.0)


def test_equal_differences_are_not_a_known_difference() -> None:
    # Every task: A 0 of 2, B 1 of 2: each difference is +.5 exactly, the spread is 0.
    a = {f"t{i}": [False, False] for i in range(6)}
    b = {f"t{i}": [True, False] for i in range(6)}
    res = compare_arms(_trials(a, b), a="A", b="B")
    assert res.delta == 0.5 and res.ci[0] < 0.5 < res.ci[1]
    assert _width(res.ci) > 0.2 and -1.0 <= res.ci[0] and res.ci[1] <= 1.0
    plain = compare_arms(_trials(a, b), a="A", b="B", method="cluster_t")
    assert _width(plain.ci) == 0.0 and any("zero-width" in n for n in plain.notes)


def test_mixed_repetitions() -> None:
    # A ran each task once, B three times (and one task twice): rates over what each ran.
    a = {"t0": [True], "t1": [False], "t2": [True], "t3": [True], "t4": [False]}
    b = {"t0": [True, True, True], "t1": [True, False, True], "t2": [True, True],
         "t3": [True, True, False], "t4": [False, False, True]}
    res = compare_arms(_trials(a, b), a="A", b="B")
    assert [(r.n_a, r.n_b) for r in res.per_task] == [(1, 3), (1, 3), (1, 2), (1, 3), (1, 3)]
    assert res.delta == pytest.approx((0 + 2 / 3 + 0 - 1 / 3 + 1 / 3) / 5)
    lo, hi = res.ci
    assert -1.0 <= lo < res.delta < hi <= 1.0 and res.mcnemar is None
    # The same rates with more repetitions behind them are known better: narrower.
    a3 = {t: ps * 3 for t, ps in a.items()}
    b3 = {t: ps * 3 for t, ps in b.items()}
    assert _width(compare_arms(_trials(a3, b3), a="A", b="B").ci) < hi - lo


def test_never_zero_width_and_always_inside_the_range_on_small_lopsided_tables() -> None:
    rng = np.random.default_rng(21)
    for tasks, reps, p in itertools.product((2, 3, 4, 6), (1, 2, 5), (0.02, 0.5, 0.98)):
        n = np.full(tasks, float(reps))
        k_a = rng.binomial(reps, p, size=(300, tasks))
        k_b = rng.binomial(reps, p, size=(300, tasks))
        for codes in (np.arange(tasks), np.arange(tasks) % 2):
            delta, lo, hi, se = difference_interval(k_a / reps, n, k_b / reps, n,
                                                    np.ones(tasks), codes)
            assert np.all(hi - lo > 1e-3), (tasks, reps, p)
            assert np.all((-1.0 <= lo) & (lo <= delta) & (delta <= hi) & (hi <= 1.0))
            assert np.all(se > 0)


def test_rates_clustered_by_case_repeats_are_not_new_evidence() -> None:
    # 75 cases, 72 right: one answer each, or the same answers five times.
    once = clustered_wilson([1.0] * 72 + [0.0] * 3, [1] * 75)
    five = clustered_wilson([1.0] * 72 + [0.0] * 3, [5] * 75)
    # Once: n_eff = 75, the textbook Wilson. Five times: still 75 cases, times the
    # degrees-of-freedom factor (z / t_74)² = .967 of a spread measured on 75 clusters.
    assert once[3] == pytest.approx(75.0)
    assert five[3] == pytest.approx(75.0 * (1.959964 / t_ppf(0.975, 74)) ** 2, rel=1e-5)
    assert five[1] == pytest.approx(once[1], abs=0.003) and five[1] <= once[1]
    # Repeats that disagree inside a case while every case has the same rate: no spread
    # between cases, so the trials count (375, times the factor), and the interval narrows.
    mixed = clustered_wilson([0.8] * 75, [5] * 75)
    assert mixed[3] == pytest.approx(375 * (1.959964 / t_ppf(0.975, 74)) ** 2, rel=1e-5)
    single = clustered_wilson([0.8] * 75, [1] * 75)
    assert mixed[2] - mixed[1] < single[2] - single[1]


# --- coverage ------------------------------------------------------------------------------


def test_reduced_coverage_grid_meets_the_targets_and_the_old_interval_did_not() -> None:
    bench = _bench()
    cells = [bench.Cell(*c) for c in itertools.product((4, 6, 10), (1, 3), (0.1, 0.9),
                                                         (-0.2, 0.0), (1, 5))]
    t_zero = 0
    worst_t = 1.0
    for i, cell in enumerate(cells):
        res = bench.measure(cell, 200, 200, 2026 + i)
        cov, width, zero = res["assay"]
        assert zero == 0 and 0.0 < width <= 2.0, cell
        assert cov >= bench.target(cell.tasks), (cell, cov)
        t_zero += res["t"][2]
        worst_t = min(worst_t, res["t"][0])
    # The plain cluster t collapsed in these cells (the zero widths) and undercovered.
    assert t_zero > 500 and worst_t < 0.6


def test_forty_tasks_in_eight_correlated_families_keep_the_large_sample_behaviour() -> None:
    # The population estimand: p_A,i = .5 ± .05, p_B,i = p_A,i + .05 + v_f with a family
    # effect v_f ~ U(-.35, .35) shared by five tasks, five repetitions. 2000 experiments: the
    # coverage SE is ~.5 points. The interval must cover >= 92% and be at most 1.3 times as
    # wide as the t interval on family means (the old default, right at this size).
    rng = np.random.default_rng(20261202)
    sims, fams, per, reps, true_delta = 2000, 8, 5, 5, 0.05
    codes = np.repeat(np.arange(fams), per)
    v = rng.uniform(-0.35, 0.35, size=(sims, fams))[:, codes]
    p_a = 0.5 + rng.uniform(-0.05, 0.05, size=(sims, fams * per))
    p_b = p_a + true_delta + v
    ra = rng.binomial(reps, p_a) / reps
    rb = rng.binomial(reps, p_b) / reps
    n = np.full(fams * per, float(reps))
    delta, lo, hi, _ = difference_interval(ra, n, rb, n, np.ones(fams * per), codes)
    coverage = float(((lo <= true_delta) & (true_delta <= hi)).mean())
    d_g = (rb - ra).reshape(sims, fams, per).mean(axis=2)
    half_t = t_ppf(0.975, fams - 1) * d_g.std(axis=1, ddof=1) / np.sqrt(fams)
    ratio = float((hi - lo).mean() / (2 * half_t).mean())
    print(f"coverage {coverage:.3f}, width / t on family means {ratio:.3f}")
    assert coverage >= 0.92 and ratio <= 1.3


def test_the_old_t_interval_name_never_collapses_unless_asked_for_the_plain_t() -> None:
    from assay.stats.abtest import cluster_t_interval

    # Four equal differences: the plain t is [0, 0]; under its old name, without trial
    # counts, the moderated t with the largest prior (one trial per arm at ½): SE² = 2 · (4 ·
    # .5 / 16) / 5 = .05, half 3.1824463 · .2236068 = .7116166.
    delta, lo, hi, se, df = cluster_t_interval([0.0] * 4, [1.0] * 4, [0, 1, 2, 3])
    assert (delta, df) == (0.0, 3) and (lo, hi) == pytest.approx((-0.7116166, 0.7116166))
    assert cluster_t_interval([0.0] * 4, [1.0] * 4, [0, 1, 2, 3], plain=True)[1:3] == (0.0, 0.0)
    # Clipped to [-1, 1] where the plain one is not.
    assert cluster_t_interval([1.0, 1.0, 0.0], [1.0] * 3, [0, 1, 2])[2] == 1.0
