"""pass@k-style estimators and per-task bootstrap."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from fractions import Fraction
from math import comb

import numpy as np

from assay.stats.paired import (
    _as_finite_1d,
    _cluster_ratio_bootstrap,
    _validate_bootstrap_args,
)

__all__ = ["cluster_bootstrap_mean", "pass_at_k", "pass_hat_k"]


def _check_nck(name: str, n: int, c: int, k: int) -> tuple[int, int, int]:
    n = operator.index(n)
    c = operator.index(c)
    k = operator.index(k)
    if not 0 <= c <= n:
        raise ValueError(f"{name}: need 0 <= c <= n, got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"{name}: k must be >= 1, got {k}")
    if k > n:
        # With fewer than k samples the estimator is undefined; extrapolating
        # would report a number the data cannot support.
        raise ValueError(f"{name}: k={k} exceeds the number of samples n={n}")
    return n, c, k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` passed.

    pass@k is the probability that at least one of k samples passes. The
    estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021) is used rather
    than ``1 - (1 - c/n) ** k`` because the latter is biased low: plugging
    an estimated rate into a non-linear function does not give an unbiased
    estimate of the function.

    Computed as an exact fraction of integers and rounded once at the end.
    Chen et al.'s running product avoids overflow but still subtracts from 1
    in floating point, which loses all relative precision when pass@k is
    tiny; exact big-int arithmetic has neither problem and is cheap at the
    sample counts evals use.
    """
    n, c, k = _check_nck("pass_at_k", n, c, k)
    if n - c < k:
        # Every size-k subset contains a pass.
        return 1.0
    total = comb(n, k)
    return float(Fraction(total - comb(n - c, k), total))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass^k: the probability that k samples ALL pass.

    This is the reliability counterpart of pass@k (it asks "can I count on
    it every time", not "does it ever work"). ``C(c, k) / C(n, k)`` is the
    fraction of size-k subsets of the observed samples that are all passes,
    which is unbiased, whereas ``(c/n) ** k`` is biased high.

    Exact integer arithmetic for the same reason as ``pass_at_k``.
    """
    n, c, k = _check_nck("pass_hat_k", n, c, k)
    return float(Fraction(comb(c, k), comb(n, k)))


def cluster_bootstrap_mean(
    values: Sequence[float],
    *,
    n_boot: int = 10000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Mean of per-cluster values with a percentile-bootstrap interval.

    ``values`` holds one number per independent unit (e.g. each task's
    pass@k, already aggregated over that task's samples). Resampling those
    units, not the underlying samples, is what makes the interval reflect
    how much the result would move on a different draw of tasks, which is
    the uncertainty a reader of an eval cares about.

    Bootstrap rather than a normal interval because per-task values such as
    pass@k are bounded and often piled up at 0 and 1, where symmetric
    normal intervals misbehave. Deterministic for a given ``seed``.

    Returns ``(mean, lo, hi)``. A single value (or all values equal) gives
    ``(v, v, v)``: every resample is identical, so that is the exact
    bootstrap answer, not a placeholder. Empty input raises.
    """
    n_boot, level = _validate_bootstrap_args(n_boot, level)
    arr = _as_finite_1d(values, "values")
    n = arr.shape[0]
    if n == 0:
        raise ValueError("cluster_bootstrap_mean: no values")
    if np.all(arr == arr[0]):
        v = float(arr[0])
        return v, v, v
    mean = float(arr.sum() / n)
    lo, hi = _cluster_ratio_bootstrap(
        arr, np.ones(n, dtype=float), n_boot=n_boot, seed=seed, level=level
    )
    return mean, lo, hi
