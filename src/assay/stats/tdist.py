"""Student's t distribution: CDF and quantile, without scipy.

The A/B interval needs one t quantile with G - 1 degrees of freedom. numpy has
no t quantile and scipy is not a dependency, and adding a 40 MB package for
one number is a poor trade; the regularized incomplete beta function gives
the CDF to near double precision in a few dozen lines, and bisection on a
monotone CDF cannot fail to converge.
"""

from __future__ import annotations

import functools
import math

__all__ = ["t_cdf", "t_ppf"]

_EPS = 1e-15
_TINY = 1e-300
_MAX_ITER = 500


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta (modified Lentz).

    Converges fast for ``x < (a + 1) / (a + b + 2)``; the caller uses the
    symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)`` to stay in that region.
    """
    qab = a + b
    qap = a + 1.0
    qam = a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _TINY:
        d = _TINY
    d = 1.0 / d
    h = d
    for m in range(1, _MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        if abs(d) < _TINY:
            d = _TINY
        c = 1.0 + aa / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        if abs(d) < _TINY:
            d = _TINY
        c = 1.0 + aa / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)`` for ``a, b > 0``, ``0 <= x <= 1``."""
    if a <= 0 or b <= 0:
        raise ValueError(f"betainc: need a, b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: need 0 <= x <= 1, got {x}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_cf(a, b, x) / a
    return 1.0 - front * _beta_cf(b, a, 1.0 - x) / b


def _check_df(df: float) -> float:
    df = float(df)
    if not (df > 0 and math.isfinite(df)):
        raise ValueError(f"degrees of freedom must be a positive finite number, got {df!r}")
    return df


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    df = _check_df(df)
    if math.isnan(t):
        raise ValueError("t_cdf: t is NaN")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t: the ``t`` with ``t_cdf(t, df) == q``.

    Bisection rather than Newton because the CDF is monotone, so bisection
    is guaranteed to converge and needs no density; 200 halvings of the
    bracket reach the float resolution, and the cost (a few ms) is
    irrelevant next to a bootstrap.
    """
    df = _check_df(df)
    q = float(q)
    if not 0.0 < q < 1.0:
        raise ValueError(f"t_ppf: q must be in (0, 1), got {q!r}")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    return _upper_quantile(q, df)


@functools.lru_cache(maxsize=4096)
def _upper_quantile(q: float, df: float) -> float:
    """:func:`t_ppf` for ``q > 0.5``, remembered: the callers ask for the same few quantiles
    (0.975 with G - 1 degrees of freedom) over and over, a coverage simulation thousands of
    times, and each answer costs about fifty CDF evaluations. A pure function of two floats,
    so a remembered answer is the very same number."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            raise ArithmeticError(f"t_ppf: no quantile found for q={q}, df={df}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
