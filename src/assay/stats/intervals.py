"""Confidence intervals for proportions."""

from __future__ import annotations

import math
import operator
from statistics import NormalDist

__all__ = ["wilson"]


def _check_level(level: float) -> float:
    """Reject confidence levels outside (0, 1).

    A level of 0 or 1 (or a percentage such as 95 passed by mistake) would
    silently produce a degenerate or infinite interval, which is worse than
    an error because it looks like a result.
    """
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return level


def _z(level: float) -> float:
    """Two-sided standard-normal critical value for ``level``.

    ``statistics.NormalDist`` is in the standard library and accurate to
    double precision, so there is no reason to pull in scipy for one
    quantile.
    """
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Wilson rather than the textbook normal (Wald) interval because eval pass
    rates are often near 0 or 1 and sample sizes are often small; there the
    Wald interval collapses to zero width (0/n gives [0, 0]) or spills
    outside [0, 1], while Wilson keeps sensible coverage and always stays in
    range.

    ``n == 0`` raises instead of returning [0, 1]: an interval for no data is
    something the caller must decide how to present, not something this
    function should invent.

    Returns ``(lo, hi)``.
    """
    successes = operator.index(successes)
    n = operator.index(n)
    level = _check_level(level)
    if n == 0:
        raise ValueError("wilson: n == 0, no interval exists for no data")
    if n < 0:
        raise ValueError(f"wilson: n must be >= 0, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson: need 0 <= successes <= n, got successes={successes}, n={n}")

    z = _z(level)
    z2 = z * z
    p = successes / n
    denom = 1.0 + z2 / n
    center = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    # At 0/n and n/n the bound is exactly 0 or 1 in real arithmetic; pin it
    # so float rounding never reports -1e-17 or 1.0000000000000002.
    lo = 0.0 if successes == 0 else max(0.0, center - half)
    hi = 1.0 if successes == n else min(1.0, center + half)
    return lo, hi
