"""Tests for assay.stats against hand-computed values.

Every expected number below is derived by hand in the adjacent comment, not
by calling the code under test, so a regression cannot agree with itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from assay.stats import (
    cluster_bootstrap_mean,
    mcnemar_exact,
    nearest_rank,
    paired_bootstrap_diff,
    paired_diff_interval,
    pass_at_k,
    pass_hat_k,
    wilson,
)

Z95 = 1.959963984540054  # Phi^-1(0.975)

# --------------------------------------------------------------------------
# wilson
# --------------------------------------------------------------------------


def test_wilson_8_of_10():
    # p = 0.8, n = 10, z^2 = 3.841459
    # denom  = 1 + z^2/n              = 1.3841459
    # center = (p + z^2/(2n)) / denom = (0.8 + 0.1920729) / 1.3841459 = 0.716740
    # half   = z/denom * sqrt(p(1-p)/n + z^2/(4n^2))
    #        = 1.416010 * sqrt(0.016 + 0.0096036) = 1.416010 * 0.160011 = 0.226578
    # -> (0.716740 - 0.226578, 0.716740 + 0.226578) = (0.490162, 0.943318)
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.490162, abs=1e-5)
    assert hi == pytest.approx(0.943318, abs=1e-5)


def test_wilson_zero_and_all_successes():
    # 0/n: lo = 0, hi = z^2/(n + z^2) = 3.841459 / 13.841459 = 0.277533
    assert wilson(0, 10) == (0.0, pytest.approx(0.277533, abs=1e-5))
    # n/n: lo = n/(n + z^2) = 10 / 13.841459 = 0.722467, hi = 1
    assert wilson(10, 10) == (pytest.approx(0.722467, abs=1e-5), 1.0)


def test_wilson_other_level():
    # 90%: z = 1.644854, z^2 = 2.705543; 5/10 -> p = 0.5, center = 0.5 exactly
    # half = z/(1 + 0.2705543) * sqrt(0.025 + 2.705543/400)
    #      = 1.294595 * sqrt(0.0317639) = 1.294595 * 0.178224 = 0.230728
    lo, hi = wilson(5, 10, level=0.90)
    assert lo == pytest.approx(0.5 - 0.230728, abs=1e-5)
    assert hi == pytest.approx(0.5 + 0.230728, abs=1e-5)


def test_wilson_narrows_with_n_and_stays_in_unit_interval():
    w10 = wilson(8, 10)
    w1000 = wilson(800, 1000)
    assert w1000[1] - w1000[0] < w10[1] - w10[0]
    for s in (0, 1, 499, 999, 1000):
        lo, hi = wilson(s, 1000)
        assert 0.0 <= lo <= s / 1000 <= hi <= 1.0


@pytest.mark.parametrize(
    "successes,n,level",
    [(0, 0, 0.95), (11, 10, 0.95), (-1, 10, 0.95), (1, -1, 0.95), (5, 10, 95), (5, 10, 0.0)],
)
def test_wilson_rejects_bad_input(successes, n, level):
    with pytest.raises(ValueError):
        wilson(successes, n, level)


# --------------------------------------------------------------------------
# nearest_rank
# --------------------------------------------------------------------------


def test_nearest_rank_textbook_example():
    # values 15, 20, 35, 40, 50 (n = 5), rank = ceil(q/100 * 5)
    v = [50, 15, 40, 20, 35]  # deliberately unsorted
    assert nearest_rank(v, 5) == 15  # ceil(0.25) = 1
    assert nearest_rank(v, 30) == 20  # ceil(1.5)  = 2
    assert nearest_rank(v, 40) == 20  # ceil(2.0)  = 2
    assert nearest_rank(v, 50) == 35  # ceil(2.5)  = 3
    assert nearest_rank(v, 100) == 50  # ceil(5)    = 5 -> max


def test_nearest_rank_float_pitfall():
    # 70/100 * 10 = 7 exactly -> 7th value; naive floats give 7.000000000000001 -> 8th.
    assert nearest_rank(list(range(1, 11)), 70) == 7
    # 0.1 * 10 = 1 -> 1st value; 29/100 * 100 = 29 -> 29th value
    assert nearest_rank(list(range(1, 11)), 10) == 1
    assert nearest_rank(list(range(1, 101)), 29) == 29
    # 99.9/100 * 1000 = 999 -> 999th value
    assert nearest_rank(list(range(1, 1001)), 99.9) == 999


def test_nearest_rank_empty_and_single():
    assert nearest_rank([], 50) is None
    assert nearest_rank([3.5], 1) == 3.5
    assert nearest_rank([3.5], 100) == 3.5


@pytest.mark.parametrize("q", [0, -5, 100.5, float("nan")])
def test_nearest_rank_rejects_bad_q(q):
    with pytest.raises(ValueError):
        nearest_rank([1.0, 2.0], q)


# --------------------------------------------------------------------------
# mcnemar_exact
# --------------------------------------------------------------------------


def test_mcnemar_hand_values():
    # b=1, c=6: n = 7, P(X <= 1) = (C(7,0) + C(7,1)) / 2^7 = (1 + 7)/128
    #   p = 2 * 8/128 = 0.125
    assert mcnemar_exact(1, 6) == pytest.approx(0.125, rel=1e-15)
    # b=0, c=5: p = 2 * 1/32 = 0.0625
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625, rel=1e-15)
    # b=0, c=10: p = 2 * 1/1024 = 0.001953125
    assert mcnemar_exact(0, 10) == pytest.approx(0.001953125, rel=1e-15)
    # b=2, c=8: n = 10, P(X <= 2) = (1 + 10 + 45)/1024 = 56/1024, p = 112/1024 = 0.109375
    assert mcnemar_exact(2, 8) == pytest.approx(0.109375, rel=1e-15)


def test_mcnemar_edge_cases():
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pairs: no evidence
    # b=0, c=1: 2 * P(X <= 0) = 2 * 1/2 = 1
    assert mcnemar_exact(0, 1) == 1.0
    # b=c=3: 2 * P(X <= 3) with n=6 = 2 * 42/64 > 1 -> capped at 1
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(1, 6) == mcnemar_exact(6, 1)  # symmetric
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_mcnemar_large_counts_do_not_underflow():
    # n = 2100: 0.5**2100 underflows to 0.0 in floats. Cross-check against an
    # independent log-space sum: p = 2 * sum_{i<=1000} exp(log C(2100, i) - 2100 log 2).
    b, c = 1000, 1100
    n = b + c
    log_terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
        for i in range(b + 1)
    ]
    m = max(log_terms)
    expected = 2 * math.exp(m) * sum(math.exp(t - m) for t in log_terms)
    p = mcnemar_exact(b, c)
    assert 0.0 < p < 0.05  # normal approx: z = 100/sqrt(2100) = 2.18 -> p ~ 0.029
    assert p == pytest.approx(expected, rel=1e-9)
    assert mcnemar_exact(5000, 5000) == 1.0


# --------------------------------------------------------------------------
# pass_at_k / pass_hat_k
# --------------------------------------------------------------------------


def test_pass_at_k_hand_values():
    # 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7, rel=1e-15)
    # k = 1 reduces to c/n: 1 - C(7,1)/C(10,1) = 1 - 7/10 = 0.3
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3, rel=1e-15)
    # 1 - C(8,3)/C(10,3) = 1 - 56/120 = 64/120 = 0.5333...
    assert pass_at_k(10, 2, 3) == pytest.approx(64 / 120, rel=1e-15)


def test_pass_at_k_edges():
    assert pass_at_k(10, 0, 5) == 0.0  # no passes ever
    assert pass_at_k(10, 10, 5) == 1.0  # all pass
    assert pass_at_k(5, 4, 2) == 1.0  # n - c = 1 < k = 2: every pair has a pass
    assert pass_at_k(5, 2, 5) == 1.0  # k = n and c > 0
    # Tiny value keeps full relative precision: 1 - C(9999,1)/C(10000,1) = 1/10000
    assert pass_at_k(10000, 1, 1) == pytest.approx(1e-4, rel=1e-15)
    # Large n: 1 - C(190,10)/C(200,10) computed in exact integers must be in (0, 1)
    assert 0.0 < pass_at_k(200, 10, 10) < 1.0


def test_pass_hat_k_hand_values():
    # C(3,2)/C(5,2) = 3/10 = 0.3
    assert pass_hat_k(5, 3, 2) == pytest.approx(0.3, rel=1e-15)
    # k=1 -> c/n = 4/10
    assert pass_hat_k(10, 4, 1) == pytest.approx(0.4, rel=1e-15)
    # C(4,3)/C(10,3) = 4/120 = 1/30
    assert pass_hat_k(10, 4, 3) == pytest.approx(1 / 30, rel=1e-15)
    assert pass_hat_k(10, 2, 3) == 0.0  # fewer passes than k
    assert pass_hat_k(10, 10, 10) == 1.0


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
@pytest.mark.parametrize("n,c,k", [(3, 1, 4), (5, 6, 1), (5, -1, 1), (5, 2, 0), (0, 0, 1)])
def test_pass_k_rejects_bad_input(fn, n, c, k):
    with pytest.raises(ValueError):
        fn(n, c, k)


# --------------------------------------------------------------------------
# paired_bootstrap_diff
# --------------------------------------------------------------------------


def _paired_data(n=300, seed=7):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n).astype(float)
    b = np.where(rng.random(n) < 0.8, a, 1 - a)  # 80% of items agree
    return a, b


def test_paired_point_estimate_by_hand():
    # mean(b) - mean(a) = 3/4 - 2/4 = 0.25
    a = [0, 0, 1, 1]
    b = [1, 1, 1, 0]
    diff, lo, hi = paired_bootstrap_diff(a, b, n_boot=2000)
    assert diff == pytest.approx(0.25, rel=1e-15)
    assert lo <= diff <= hi


def test_paired_deterministic_and_seed_free():
    # The interval is analytic now (stats.moderated): the old bootstrap's seed changes nothing.
    a, b = _paired_data()
    r1 = paired_bootstrap_diff(a, b, seed=123)
    assert r1 == paired_bootstrap_diff(a, b, seed=124) == paired_diff_interval(a, b)


def test_paired_interval_contains_point_estimate():
    a, b = _paired_data()
    for clusters in (None, [i // 3 for i in range(len(a))]):
        diff, lo, hi = paired_bootstrap_diff(a, b, clusters)
        assert lo < diff < hi


def test_paired_identical_configs_never_zero_width():
    a, _ = _paired_data()
    diff, lo, hi = paired_bootstrap_diff(a, a.copy())
    # 300 equal pairs: no discordance seen, but 300 pairs cannot rule out a difference of a
    # point or two; the prior (two clusters' worth of pairs at ½) says how much.
    assert diff == 0.0 and lo == -hi and 0.005 < hi < 0.03
    # The same answers repeated five times per case, clustered by case: the same interval.
    rep = np.repeat(a, 5)
    cases = np.repeat(np.arange(a.size), 5)
    assert paired_bootstrap_diff(rep, rep, cases) == pytest.approx((0.0, lo, hi))
    # Four pairs, all passing: the exact 4 of 4 bound .025^(1/4) = .398 on each side (the
    # arms sit at 1, so their widths add as if independent), never zero.
    d4, lo4, hi4 = paired_diff_interval([1, 1, 1, 1], [1, 1, 1, 1])
    assert d4 == 0.0 and lo4 == pytest.approx(-0.6023646, abs=1e-6) and hi4 == -lo4
    # One cluster: nothing is known about another draw of cases.
    assert paired_diff_interval([1, 0, 1], [1, 1, 1], ["c", "c", "c"]) == (1 / 3, -1.0, 1.0)


def test_clustering_widens_interval_for_correlated_items():
    # 40 tasks x 10 samples. a is always 0; b is 1 on every sample of the first
    # 20 tasks and 0 on the rest, so samples inside a task are perfectly
    # correlated: really 40 independent observations, not 400.
    # diff = 200/400 = 0.5. Bootstrap SE over items ~ sqrt(.25/400) = 0.025,
    # over tasks ~ sqrt(.25/40) = 0.079: the clustered interval should be ~sqrt(10)
    # = 3.2x wider.
    n_tasks, per = 40, 10
    a = np.zeros(n_tasks * per)
    b = np.repeat((np.arange(n_tasks) < 20).astype(float), per)
    tasks = [f"task-{i // per}" for i in range(n_tasks * per)]
    d0, lo0, hi0 = paired_bootstrap_diff(a, b)
    d1, lo1, hi1 = paired_bootstrap_diff(a, b, tasks)
    assert d0 == d1 == pytest.approx(0.5)
    assert (hi1 - lo1) > 2.5 * (hi0 - lo0)
    # Clustered 95% half-width ~ 1.96 * 0.079 = 0.155
    assert (hi1 - lo1) / 2 == pytest.approx(0.155, abs=0.03)


def test_unequal_clusters_use_ratio_estimator():
    # Cluster "x": 1 item, d = 1. Cluster "y": 3 items, d = 0.
    # Point estimate is the item mean: 1/4 = 0.25 (not the mean of cluster means, 0.5).
    a = [0, 0, 0, 0]
    b = [1, 0, 0, 0]
    diff, lo, hi = paired_bootstrap_diff(a, b, ["x", "y", "y", "y"], n_boot=4000)
    assert diff == pytest.approx(0.25)
    assert -1.0 < lo < 0.0 < diff < hi <= 1.0


def test_scores_outside_the_unit_range_get_the_moderated_t_on_their_range():
    # Scores 0..2: span 2. Cluster "x": 1 item, d = 2; "y": 3 items, d = 0. Δ = 0.5.
    # Weights 1 and 3: CR1 = 2 * ((1 * 1.5)² + (3 * .5)²) / 16 = 9/16; prior one pair at the
    # middle of the range per cluster, .5 * 2² = 2: V_prior = (1 + 9) * 2 / 16 = 5/4;
    # SE² = (2 * 5/4 + 9/16) / 3 = 49/48. At 95% t_1 reaches past ±2: clipped there.
    a = [0, 0, 0, 0]
    b = [2, 0, 0, 0]
    assert paired_diff_interval(a, b, ["x", "y", "y", "y"]) == (0.5, -2.0, 2.0)
    # At 50% t_{1, .75} = 1: 0.5 ± sqrt(49/48).
    _, lo50, hi50 = paired_diff_interval(a, b, ["x", "y", "y", "y"], level=0.5)
    half = (49 / 48) ** 0.5
    assert lo50 == pytest.approx(0.5 - half) and hi50 == pytest.approx(0.5 + half)


def test_paired_cluster_labels_any_hashable():
    a, b = _paired_data(n=6)
    # Mixed, unsortable label types must work and only grouping matters.
    r1 = paired_bootstrap_diff(a, b, [1, 1, "t", "t", (2, 3), (2, 3)])
    r2 = paired_bootstrap_diff(a, b, ["p", "p", "q", "q", "r", "r"])
    assert r1 == r2


def test_paired_rejects_bad_input():
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1.0, 0.0], [1.0])
    with pytest.raises(ValueError):
        paired_bootstrap_diff([], [])
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1.0, 0.0], [0.0, 1.0], clusters=["a"])
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1.0, float("nan")], [0.0, 1.0])
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1.0, 0.0], [0.0, 1.0], n_boot=0)
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1.0, 0.0], [0.0, 1.0], level=1.0)


# --------------------------------------------------------------------------
# cluster_bootstrap_mean
# --------------------------------------------------------------------------


def test_cluster_bootstrap_mean_hand_values():
    # mean(0.2, 0.4, 0.9) = 1.5/3 = 0.5
    m, lo, hi = cluster_bootstrap_mean([0.2, 0.4, 0.9])
    assert m == pytest.approx(0.5)
    assert 0.2 <= lo < m < hi <= 0.9
    # [0, 1]: resample means are 0 (p=1/4), 0.5 (p=1/2), 1 (p=1/4) -> 95% interval (0, 1)
    assert cluster_bootstrap_mean([0.0, 1.0], n_boot=4000) == (0.5, 0.0, 1.0)


def test_cluster_bootstrap_mean_edges():
    assert cluster_bootstrap_mean([0.7]) == (0.7, 0.7, 0.7)
    assert cluster_bootstrap_mean([0.1, 0.1, 0.1]) == (0.1, 0.1, 0.1)
    with pytest.raises(ValueError):
        cluster_bootstrap_mean([])
    with pytest.raises(ValueError):
        cluster_bootstrap_mean([0.1, float("inf")])


def test_cluster_bootstrap_mean_deterministic_and_contains_mean():
    vals = np.random.default_rng(3).random(50)
    r1 = cluster_bootstrap_mean(vals, seed=9)
    assert r1 == cluster_bootstrap_mean(vals, seed=9)
    assert r1[1:] != cluster_bootstrap_mean(vals, seed=10)[1:]
    m, lo, hi = r1
    assert lo < m < hi
    # mean of U(0,1) over 50 values: SE ~ sqrt(1/12/50) = 0.041, 95% width ~ 0.16
    assert hi - lo == pytest.approx(0.16, abs=0.04)


def test_every_name_of_stats_is_found_where_it_says_it_lives() -> None:
    """``assay.stats`` imports its names on first use from the module ``_WHERE`` gives: a name
    added to ``__all__`` but not there (or the other way round) would fail only when used."""
    import importlib

    import assay.stats as stats

    assert sorted(stats._WHERE) == sorted(stats.__all__)
    for name, module in stats._WHERE.items():
        assert getattr(stats, name) is getattr(importlib.import_module(module), name), name


def test_a_wilson_interval_loads_no_numpy() -> None:
    """``trial show`` and ``exp status`` read a Wilson interval (report/conditions.py); the
    package's other modules need numpy, which such a reader (an archived install run as another
    user) need not be able to load."""
    import subprocess
    import sys

    code = ("import sys\nfrom assay.stats.intervals import wilson\n"
            "import assay.report.trial_view\n"
            "print(wilson(1, 2) is not None, 'numpy' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False"], res.stdout
