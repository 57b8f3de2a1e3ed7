"""Agreement figures against numbers worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest

from assay.stats.agreement import agreement


def table(cells: dict[tuple[str, str], int]) -> tuple[list[str], list[str]]:
    """(judge labels, human labels) from {(human, judge): count}."""
    judge: list[str] = []
    human: list[str] = []
    for (h, j), count in cells.items():
        human += [h] * count
        judge += [j] * count
    return judge, human


def test_two_by_two_kappa_and_its_standard_error_interval() -> None:
    # The usual textbook table, 50 items (rows: human, columns: judge):
    #            judge yes  judge no
    # human yes      20         5        (25)
    # human no       10        15        (25)
    #               (30)      (20)
    # p_o = 35/50 = 0.70;  p_e = 0.5*0.6 + 0.5*0.4 = 0.50;  kappa = (0.70-0.50)/0.50 = 0.40
    # SE = sqrt(0.7*0.3 / (50 * 0.5^2)) = sqrt(0.0168) = 0.129615
    # 95%: 0.40 +- 1.959964 * 0.129615 = 0.40 +- 0.254041 -> (0.145959, 0.654041)
    judge, human = table({("yes", "yes"): 20, ("yes", "no"): 5, ("no", "yes"): 10,
                          ("no", "no"): 15})
    a = agreement(judge, human, labels=["yes", "no"], method="se")
    assert a.n == 50 and a.exact == pytest.approx(0.70)
    assert a.kappa == pytest.approx(0.40)
    assert a.kappa_ci == pytest.approx((0.145959, 0.654041), abs=1e-6)
    assert a.method == "se (Cohen 1960)" and a.weights is None
    assert a.confusion == {"yes": {"yes": 20, "no": 5}, "no": {"yes": 10, "no": 15}}


def test_three_by_three_kappa_unweighted_and_linearly_weighted() -> None:
    # rows human 0/1/2, columns judge 0/1/2, 30 items:
    #   h0: 10  2  0   (12)
    #   h1:  1  8  3   (12)
    #   h2:  0  1  5   ( 6)
    #      (11)(11)(8)
    # p_o = 23/30;  p_e = (12*11 + 12*11 + 6*8)/900 = 312/900
    # kappa = (690 - 312) / (900 - 312) = 378/588 = 9/14 = 0.642857
    # linear weights 1, 1/2, 0: p_o_w = (23 + (2+1+3+1)/2)/30 = 26.5/30 = 795/900
    # p_e_w = [12*(11+5.5+0) + 12*(5.5+11+4) + 6*(0+5.5+8)]/900 = (198+246+81)/900 = 525/900
    # kappa_w = (795 - 525) / (900 - 525) = 270/375 = 0.72
    cells = {(0, 0): 10, (0, 1): 2, (1, 0): 1, (1, 1): 8, (1, 2): 3, (2, 1): 1, (2, 2): 5}
    human = [h for (h, _), c in cells.items() for _ in range(c)]
    judge = [j for (_, j), c in cells.items() for _ in range(c)]
    a = agreement(judge, human, labels=[0, 1, 2])
    assert a.exact == pytest.approx(23 / 30)
    assert a.kappa == pytest.approx(9 / 14)
    assert a.confusion["1"] == {"0": 1, "1": 8, "2": 3}
    lo, hi = a.kappa_ci
    assert lo < 9 / 14 < hi and -1 <= lo and hi <= 1
    assert a.method == "bootstrap (2000, seed 0)"
    assert agreement(judge, human, labels=[0, 1, 2]).kappa_ci == a.kappa_ci  # seeded
    assert agreement(judge, human, labels=[0, 1, 2], seed=1).kappa_ci != a.kappa_ci
    w = agreement(judge, human, labels=[0, 1, 2], weights="linear")
    assert w.kappa == pytest.approx(0.72) and w.weights == "linear"


def test_perfect_chance_and_undefined_agreement() -> None:
    same = agreement(["a", "b", "a", "b"], ["a", "b", "a", "b"])
    assert same.kappa == pytest.approx(1.0) and same.exact == 1.0
    # judge always "a", humans half and half: p_o = 0.5, p_e = 0.5*1 + 0.5*0 = 0.5 -> kappa 0
    chance = agreement(["a"] * 4, ["a", "b", "a", "b"])
    assert chance.kappa == pytest.approx(0.0) and chance.exact == 0.5
    # one label for everyone: p_e = 1, kappa undefined (unknown stays unknown, not 0 or 1)
    flat = agreement(["a"] * 3, ["a"] * 3)
    assert flat.kappa is None and flat.kappa_ci is None and flat.exact == 1.0
    empty = agreement([], [], labels=["a", "b"])
    assert empty.n == 0 and empty.exact is None and empty.kappa is None
    assert not math.isnan(agreement(["a", "b"], ["b", "a"]).kappa)


def test_mismatched_or_unknown_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="2 judge labels but 1"):
        agreement(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="not in the scale: c"):
        agreement(["a", "c"], ["a", "b"], labels=["a", "b"])
