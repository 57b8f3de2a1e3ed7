"""How far a judge agrees with people: exact agreement, Cohen's kappa with an interval, confusion.

Exact agreement alone flatters a judge on a skewed set (a judge that always says "pass" agrees
90% with graders who passed 90%), so kappa, agreement beyond what the two label frequencies
give by chance, is reported beside it, with an interval because calibration sets are small.
The interval's method is named in the result: ``bootstrap`` (percentile, over items, seeded,
the default: honest for small sets and kept inside [-1, 1]) or ``se`` (Cohen's 1960
large-sample standard error, p_o(1-p_o) / (n (1-p_e)^2), with a normal quantile; clipped to
[-1, 1]). For ordinal scales a linearly or quadratically weighted kappa can be asked for; the
weights are named too. Kappa is ``None`` where it is undefined (both raters used one and the same
label for every item: chance agreement is 1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

Weights = Literal["linear", "quadratic"] | None


@dataclass(frozen=True)
class Agreement:
    """Judge against human on one set of items (one criterion)."""

    n: int
    exact: float | None
    kappa: float | None
    kappa_ci: tuple[float, float] | None
    method: str
    confidence: float
    weights: str | None
    labels: tuple[str, ...]
    confusion: dict[str, dict[str, int]]  # human label -> judge label -> count

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "exact": self.exact, "kappa": self.kappa,
                "kappa_ci": list(self.kappa_ci) if self.kappa_ci else None,
                "method": self.method, "confidence": self.confidence, "weights": self.weights,
                "labels": list(self.labels), "confusion": self.confusion}


def _order(values: set[Hashable]) -> list[Hashable]:
    return sorted(values, key=lambda v: (isinstance(v, str), v if not isinstance(v, str)
                                         else 0, str(v)))


def _weight_matrix(k: int, weights: Weights) -> list[list[float]]:
    if weights is None or k < 2:
        return [[1.0 if i == j else 0.0 for j in range(k)] for i in range(k)]
    power = 1 if weights == "linear" else 2
    return [[1.0 - (abs(i - j) / (k - 1)) ** power for j in range(k)] for i in range(k)]


def _kappa(pairs: Sequence[tuple[int, int]], k: int, w: list[list[float]]) -> float | None:
    n = len(pairs)
    if not n:
        return None
    rows = [0] * k
    cols = [0] * k
    observed = 0.0
    for h, j in pairs:
        rows[h] += 1
        cols[j] += 1
        observed += w[h][j]
    p_o = observed / n
    p_e = sum(w[i][j] * rows[i] * cols[j] for i in range(k) for j in range(k)) / (n * n)
    if math.isclose(p_e, 1.0):
        return None
    return (p_o - p_e) / (1 - p_e)


def agreement(judge: Sequence[Hashable], human: Sequence[Hashable], *,
              labels: Sequence[Hashable] | None = None, confidence: float = 0.95,
              seed: int = 0, method: Literal["bootstrap", "se"] = "bootstrap",
              weights: Weights = None, resamples: int = 2000) -> Agreement:
    """Agreement of paired labels (``judge[i]`` and ``human[i]`` grade the same item).
    ``labels`` fixes the order of the table (and of a weighted scale); by default the labels
    seen, numbers before text, sorted."""
    if len(judge) != len(human):
        raise ValueError(f"{len(judge)} judge labels but {len(human)} human labels")
    if method == "se" and weights is not None:
        raise ValueError("the 'se' interval is for unweighted kappa; use bootstrap")
    order = list(labels) if labels is not None else _order(set(judge) | set(human))
    index = {v: i for i, v in enumerate(order)}
    unknown = sorted({str(v) for v in (*judge, *human) if v not in index})
    if unknown:
        raise ValueError(f"labels not in the scale: {', '.join(unknown)}")
    k = len(order)
    pairs = [(index[h], index[j]) for j, h in zip(judge, human, strict=True)]
    n = len(pairs)
    names = tuple(str(v) for v in order)
    confusion = {a: {b: 0 for b in names} for a in names}
    for h, j in pairs:
        confusion[names[h]][names[j]] += 1
    exact = sum(1 for h, j in pairs if h == j) / n if n else None
    w = _weight_matrix(k, weights)
    kappa = _kappa(pairs, k, w)
    ci: tuple[float, float] | None = None
    if kappa is not None and n >= 2:
        if method == "se":
            ci = _se_interval(pairs, k, kappa, confidence)
        else:
            ci = _bootstrap_interval(pairs, k, w, confidence, seed, resamples)
    label = "se (Cohen 1960)" if method == "se" else f"bootstrap ({resamples}, seed {seed})"
    return Agreement(n=n, exact=exact, kappa=kappa, kappa_ci=ci, method=label,
                     confidence=confidence, weights=weights, labels=names, confusion=confusion)


def _se_interval(pairs: Sequence[tuple[int, int]], k: int, kappa: float,
                 confidence: float) -> tuple[float, float]:
    n = len(pairs)
    rows = [0] * k
    cols = [0] * k
    for h, j in pairs:
        rows[h] += 1
        cols[j] += 1
    p_o = sum(1 for h, j in pairs if h == j) / n
    p_e = sum(rows[i] * cols[i] for i in range(k)) / (n * n)
    se = math.sqrt(p_o * (1 - p_o) / (n * (1 - p_e) ** 2))
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return max(-1.0, kappa - z * se), min(1.0, kappa + z * se)


def _bootstrap_interval(pairs: Sequence[tuple[int, int]], k: int, w: list[list[float]],
                        confidence: float, seed: int, resamples: int
                        ) -> tuple[float, float] | None:
    """Percentile interval over items resampled with replacement; a resample where kappa is
    undefined (one label throughout) is left out rather than counted as any value."""
    rng = random.Random(seed)
    n = len(pairs)
    values = []
    for _ in range(resamples):
        got = _kappa(rng.choices(pairs, k=n), k, w)
        if got is not None:
            values.append(got)
    if not values:
        return None
    values.sort()
    alpha = (1 - confidence) / 2
    lo = values[max(0, math.floor(alpha * len(values)))]
    hi = values[min(len(values) - 1, math.ceil((1 - alpha) * len(values)) - 1)]
    return lo, hi
