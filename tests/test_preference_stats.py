"""The judge's pairwise preference, worked out by hand on a tiny table.

    task  rep  A first (ab)  B first (ba)  pair verdict       score
    t1    0    b             b             b                  +1
    t1    1    b             a             tie (flipped)       0
    t2    0    a             a             a                  -1
    t2    1    invalid       b             counts for nothing
    t3    0    tie           tie           tie                 0
    t3    1    b             tie           tie (flipped)       0

Per task: t1 (1 - 0) / 2 = .5, t2 -1 / 1 = -1, t3 0 / 2 = 0. Preference = -.5 / 3 = -.1666667.
Deviations .6666667 -.8333333 .1666667, squares sum 1.1666667, cluster-robust SE² = 3/2 ·
1.1666667 / 9 = .1944444. The prior (stats.moderated): ½ a pair, so t1 .25, t2 .5, t3 .25,
V_prior = 1 / 9; moderated SE² = (2 · 1/9 + 2 · .1944444) / (2 + 2) = .1527778, SE =
.3908680, t(2, .975) = 4.3026527, half-width 1.6817694, clipped to [-1, 1]. Position bias: 2
flipped of 5 counted pairs = .4, Wilson 95% [.117622, .769276].

By family (F1: t1, t2; F2: t3): D_F1 = (.5 - 1) / 2 = -.25 (weight 2), D_F2 = 0 (weight 1).
Δ = -.5 / 3; residuals W_g(D_g - Δ): 2 · (-.0833333) = -.1666667, 1 · .1666667; squares sum
.0555556; CR1 SE² = 2/1 · .0555556 / 9 = .0123457; V_prior = 1/9 as before; SE² = (2/9 +
1 · .0123457) / 3 = .0781893, SE = .2796235; t(1, .975) = 12.7062047: clipped to [-1, 1].
"""

from __future__ import annotations

import pytest

from assay.stats.preference import PairOutcome, combine_orders, preference

TABLE = [PairOutcome("t1", 0, "b", "b"), PairOutcome("t1", 1, "b", "a"),
         PairOutcome("t2", 0, "a", "a"), PairOutcome("t2", 1, None, "b"),
         PairOutcome("t3", 0, "tie", "tie"), PairOutcome("t3", 1, "b", "tie")]


def test_orders_combine_into_one_verdict() -> None:
    assert combine_orders("a", "a") == ("a", False)
    assert combine_orders("tie", "tie") == ("tie", False)
    assert combine_orders("a", "b") == ("tie", True)
    assert combine_orders("b", "tie") == ("tie", True)
    assert combine_orders(None, "b") == (None, False)
    assert combine_orders("a", None) == (None, False)


def test_hand_computed_preference_interval_and_position_bias() -> None:
    res = preference(TABLE)
    rows = {r.task: r for r in res.per_task}
    assert (rows["t1"].preference, rows["t2"].preference, rows["t3"].preference) == (.5, -1, 0)
    assert rows["t1"].flipped == 1 and rows["t3"].flipped == 1 and rows["t2"].invalid == 1
    assert res.preference == pytest.approx(-0.1666667, abs=1e-6)
    assert res.se == pytest.approx(0.3908680, abs=1e-6)
    assert res.df == 2
    assert res.ci == (-1.0, 1.0)  # -.1666667 ± 1.6817694, clipped
    assert (res.pairs, res.b_wins, res.a_wins, res.ties, res.flipped, res.invalid_pairs) == (
        5, 1, 1, 3, 2, 1)
    bias = res.position_bias
    assert bias["rate"] == pytest.approx(0.4)
    assert bias["ci"] == pytest.approx([0.117622, 0.769276], abs=1e-5)
    assert any("invalid" in n for n in res.notes)


def test_interval_is_the_moderated_t_on_per_task_figures() -> None:
    # t1..t4 all +1/+1 except t4 (0): per task 1 1 1 0, mean .75, deviations .25 .25 .25 -.75,
    # squares .75, CR1 SE² = 4/3 · .75 / 16 = .0625; prior ½ a pair: V_prior = 4 · .5 / 16 =
    # .125; SE² = (2 · .125 + 3 · .0625) / 5 = .0875, SE = .2958040, t(3) 3.1824463, half
    # .9413812: [-.1913812, 1.6913812] -> [-.1913812, 1].
    table = [PairOutcome(t, 0, "b", "b") for t in ("t1", "t2", "t3")]
    table.append(PairOutcome("t4", 0, "tie", "tie"))
    res = preference(table)
    assert res.preference == pytest.approx(0.75)
    assert res.se == pytest.approx(0.2958040, abs=1e-6)
    assert res.ci[0] == pytest.approx(-0.1913812, abs=1e-6) and res.ci[1] == 1.0
    assert res.position_bias["rate"] == 0.0


def test_a_judge_that_always_prefers_the_first_shown_has_no_zero_width_preference() -> None:
    # Four tasks, one pair each, every pair flipped with the order: four ties. The preference
    # is 0, but four pairs cannot show it is exactly 0: SE² = 2 · (4 · .5 / 16) / 5 = .05,
    # half 3.1824463 · .2236068 = .7116166.
    table = [PairOutcome(t, 0, "a", "b") for t in ("t1", "t2", "t3", "t4")]
    res = preference(table)
    assert res.preference == 0.0 and res.flipped == 4
    assert res.ci == pytest.approx((-0.7116166, 0.7116166), abs=1e-6)
    assert res.position_bias["rate"] == 1.0


def test_clusters_by_family() -> None:
    res = preference(TABLE, clusters={"t1": "F1", "t2": "F1", "t3": "F2"})
    assert res.n_clusters == 2 and res.df == 1
    assert res.preference == pytest.approx(-0.1666667, abs=1e-6)
    assert res.se == pytest.approx(0.2796235, abs=1e-6)
    assert res.ci == (-1.0, 1.0)


def test_one_task_has_no_interval_and_no_valid_pair_no_preference() -> None:
    one = preference([PairOutcome("t1", 0, "b", "b")])
    assert one.preference == 1.0 and one.ci is None
    assert any("one cluster" in n for n in one.notes)
    none = preference([PairOutcome("t1", 0, None, "a")])
    assert none.preference is None and none.position_bias["rate"] is None
    assert none.invalid_pairs == 1
    with pytest.raises(ValueError, match="duplicate"):
        preference([PairOutcome("t1", 0, "a", "a"), PairOutcome("t1", 0, "b", "b")])
