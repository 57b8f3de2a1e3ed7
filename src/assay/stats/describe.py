"""Descriptive statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["nearest_rank"]


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile: the ceil(q/100 * n)-th smallest value (1-based).

    Nearest rank rather than an interpolating definition because the answer
    is always one of the observed values: a reported p95 latency of 4.2 s
    means some run actually took 4.2 s, and the number does not change with
    the interpolation convention of whichever library computed it.

    ``q`` must be in (0, 100]; ``q == 100`` is the maximum. An empty input
    returns ``None`` rather than raising, because "no observations" is a
    normal state for a report column and the caller should render it as
    such rather than crash.

    The rank is computed from the decimal spelling of ``q`` in exact
    arithmetic, because in floats ``70 / 100 * 10`` is ``7.000000000000001``
    and the ceiling would pick the 8th value instead of the 7th.
    """
    qf = float(q)
    if not 0.0 < qf <= 100.0:
        raise ValueError(f"nearest_rank: q must be in (0, 100], got {q!r}")
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        return None
    if any(math.isnan(v) for v in ordered):
        raise ValueError("nearest_rank: values contain NaN, which has no rank")
    rank = math.ceil(Fraction(str(q)) * n / 100)
    rank = min(max(rank, 1), n)
    return ordered[rank - 1]
