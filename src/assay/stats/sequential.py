"""A sequential bar: at which level each look's interval is read, and what a look decides.

Why a spending function and not a fixed level at every look. Reading a 95% interval at every
look and stopping at the first that clears the bar gives the false accept (and the false
reject) several chances: with five looks a change that does nothing would clear a one-sided
2.5% bound about 7% of the time. Lan and DeMets' α-spending keeps the whole run's error at the
fixed design's α: a function α(t) of the information fraction t (here the share of the planned
tasks a look has seen) says how much of α may have been spent by t, and each look's boundary
c_k is the one at which the chance of first crossing at look k, under no effect, is
α(t_k) − α(t_{k−1}). The looks' statistics are correlated (each look contains the earlier
ones), so the boundaries are found by numerical integration of a Brownian motion observed at
the looks (Armitage, McPherson and Rowe's recursion on a grid), not by splitting α into
independent pieces, which would be conservative and waste trials.

Two spending functions (``spending`` in ``bar.sequential``):

- ``obrien_fleming``: α(t) = 2 − 2Φ(z_{1−α/2} / √t). Spends almost nothing early (an early
  look stops only on an overwhelming difference) and keeps the last look's level near the fixed
  design's: the choice when the full run is affordable and stopping early is a bonus.
- ``pocock``: α(t) = α · ln(1 + (e − 1) t). Spends evenly: early looks stop more often, the
  last look's interval is wider than the fixed design's. The choice when trials are the
  expensive part (the bench, docs/statistics.md, shows it stops at about two thirds of the
  trials on average where O'Brien–Fleming needs three quarters or more).

A look's level is 1 − 2(1 − Φ(c_k)): the interval of ``exp compare`` (``wilson_mover``) is read
at that level. The last look always spends what is left (its boundary makes the total exactly
α). The normal theory is the approximation; ``bench/sequential_verdicts.py`` measures the
real error rates of the real interval by simulation.

What a look decides (:func:`look_verdict`): today's rules at the look's level — reject when the
interval's upper bound is below ``hoped_improvement``, accept when the lower bound is above
``−max_regression`` and Δ reaches ``hoped_improvement`` — with one addition at every look but
the last: an early accept also needs the interval to exclude 0. Δ reaching the hoped value is a
point estimate, not an interval, so the spending cannot protect it: without the addition each
look would toss that coin again, and a change that does nothing would be accepted five times
as often as in the fixed design (the bench measured 5% against 0.4%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal

import numpy as np

__all__ = ["CONTINUE", "DECIDED", "Spending", "look_levels", "look_verdict",
           "operating_characteristics", "simulate_looks", "spent"]

Spending = Literal["obrien_fleming", "pocock"]
#: look_verdict's codes
CONTINUE, ACCEPT, REJECT, INCONCLUSIVE = 0, 1, 2, 3
DECIDED = {ACCEPT: "accept", REJECT: "reject", INCONCLUSIVE: "inconclusive",
           CONTINUE: "continue"}
_N = NormalDist()
_GRID = 1201  # points of the integration grid over W(t) in [-10, 10]


def spent(t: float, alpha: float, spending: Spending) -> float:
    """α(t): the error that may have been spent by information fraction ``t``."""
    if t <= 0.0:
        return 0.0
    if t >= 1.0:
        return alpha
    if spending == "obrien_fleming":
        return 2.0 - 2.0 * _N.cdf(_N.inv_cdf(1.0 - alpha / 2.0) / math.sqrt(t))
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"unknown spending function {spending!r}")


def _phi(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _crossing(c: float, t: float, prev: float, density: np.ndarray | None, w: np.ndarray,
              h: float) -> float:
    """P(the path is still open at ``prev`` and |W(t)| ≥ c√t): the chance of first crossing
    boundary ``c`` at the look at ``t``."""
    if density is None:  # the first look: W(t)/√t is standard normal
        return 2.0 * (1.0 - _N.cdf(c))
    sd = math.sqrt(t - prev)
    b = c * math.sqrt(t)
    p = (1.0 - _phi((b - w) / sd)) + _phi((-b - w) / sd)
    return float((density * p).sum() * h)


def boundaries(fractions: Sequence[float], alpha: float, spending: Spending) -> list[float]:
    """Two-sided z boundaries c_k of looks at the information ``fractions`` (increasing, the
    last 1): P(first |Z_k| ≥ c_k at look k | no effect) = α(t_k) − α(t_{k−1})."""
    ts = [float(t) for t in fractions]
    if not ts or any(b <= a for a, b in zip(ts, ts[1:], strict=False)) or ts[0] <= 0 \
            or ts[-1] != 1.0:
        raise ValueError(f"look fractions must increase to 1, got {ts}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    w = np.linspace(-10.0, 10.0, _GRID)
    h = float(w[1] - w[0])
    out: list[float] = []
    density: np.ndarray | None = None  # sub-density of W(t_{k-1}) on the paths still open
    used, prev = 0.0, 0.0
    for t in ts:
        target = max(spent(t, alpha, spending) - used, 1e-15)
        if density is None:
            here = np.exp(-w**2 / (2 * t)) / math.sqrt(2 * math.pi * t)
        else:
            dt = t - prev
            kernel = np.exp(-(w[:, None] - w[None, :]) ** 2 / (2 * dt)) / math.sqrt(
                2 * math.pi * dt)
            here = (kernel * density[None, :]).sum(axis=1) * h
        lo, hi = 0.0, 12.0
        for _ in range(50):  # bisection: the crossing probability falls as c grows
            mid = 0.5 * (lo + hi)
            if _crossing(mid, t, prev, density, w, h) > target:
                lo = mid
            else:
                hi = mid
        out.append(hi)
        used += _crossing(hi, t, prev, density, w, h)
        density = np.where(np.abs(w) < hi * math.sqrt(t), here, 0.0)
        prev = t
    return out


def look_levels(looks: Sequence[int], planned: int, *, alpha: float = 0.05,
                spending: Spending) -> list[float]:
    """The two-sided level of each look's interval: looks are task counts, the last of them
    ``planned`` (the whole plan), and the information fraction of a look is its share of
    the planned tasks."""
    if not looks or looks[-1] != planned:
        raise ValueError(f"the last look must be the whole plan ({planned} tasks), got "
                         f"{list(looks)}")
    if len(looks) == 1:
        return [1.0 - alpha]
    cs = boundaries([k / planned for k in looks], alpha, spending)
    return [1.0 - 2.0 * (1.0 - _N.cdf(c)) for c in cs]


def look_verdict(delta: np.ndarray | float, lo: np.ndarray | float, hi: np.ndarray | float,
                 *, hoped: float, max_regression: float, last: bool) -> np.ndarray:
    """What a look decides from its Δ and its interval at the look's level (vectorised):
    ``REJECT`` when the upper bound is below ``hoped``; ``ACCEPT`` when the lower bound is above
    ``-max_regression`` and Δ reaches ``hoped`` (and, before the last look, the lower bound is
    above 0); else ``CONTINUE``, or ``INCONCLUSIVE`` at the last look. Hard requirements
    (integrity, new failures, cost) are the caller's: any of them failing is a reject at any
    look."""
    d, lo_, hi_ = (np.asarray(x, dtype=float) for x in (delta, lo, hi))
    accept = (lo_ > -max_regression) & (d >= hoped)
    if not last:
        accept &= lo_ > 0.0
    reject = hi_ < hoped
    rest = INCONCLUSIVE if last else CONTINUE
    return np.where(reject, REJECT, np.where(accept, ACCEPT, rest))


def _interval(k_a: np.ndarray, k_b: np.ndarray, reps: int, codes: np.ndarray, m: int,
              level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Δ and the interval of ``exp compare`` over the first ``m`` tasks of every table; NaN
    where the first tasks make one cluster (no interval: such a look cannot decide)."""
    from assay.stats.moderated import difference_interval

    c = np.asarray(codes[:m], dtype=np.intp)
    if int(c.max()) == int(c.min()):
        nan = np.full(k_a.shape[0], np.nan)
        return nan, nan, nan
    _, c = np.unique(c, return_inverse=True)
    n = np.full(m, float(reps))
    d, lo, hi, _ = difference_interval(k_a[:, :m] / reps, n, k_b[:, :m] / reps, n,
                                       np.ones(m), c, level=level)
    return d, lo, hi


def simulate_looks(k_a: np.ndarray, k_b: np.ndarray, reps: int, codes: np.ndarray,
                   looks: Sequence[int], levels: Sequence[float], *, hoped: float,
                   max_regression: float, alpha: float = 0.05
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulated tables (passes per task, (tables, tasks), tasks in run order) read both ways:
    the fixed design's verdict (every task at 1 − ``alpha``) and the sequential one's (each
    look at its level, stopping at the first that decides), by :func:`look_verdict` — the
    rule the runner applies. Returns (fixed codes, sequential codes, tasks run per table)."""
    tasks = k_a.shape[1]
    d, lo, hi = _interval(k_a, k_b, reps, codes, tasks, 1.0 - alpha)
    fixed = look_verdict(np.nan_to_num(d, nan=-9.0), np.nan_to_num(lo, nan=-9.0),
                         np.nan_to_num(hi, nan=9.0), hoped=hoped,
                         max_regression=max_regression, last=True)
    seq = np.full(k_a.shape[0], CONTINUE)
    ran = np.full(k_a.shape[0], float(tasks))
    for i, (m, level) in enumerate(zip(looks, levels, strict=True)):
        d, lo, hi = _interval(k_a, k_b, reps, codes, m, level)
        now = look_verdict(np.nan_to_num(d, nan=-9.0), np.nan_to_num(lo, nan=-9.0),
                           np.nan_to_num(hi, nan=9.0), hoped=hoped,
                           max_regression=max_regression, last=i == len(looks) - 1)
        fresh = (seq == CONTINUE) & (now != CONTINUE)
        seq = np.where(fresh, now, seq)
        ran = np.where(fresh, float(m), ran)
    return fixed, seq, ran


def operating_characteristics(p_a: float | Sequence[float], *, tasks: int, reps: int,
                              looks: Sequence[int], spending: Spending, hoped: float,
                              max_regression: float, n_sims: int = 2000, seed: int = 0
                              ) -> list[dict[str, object]]:
    """``exp plan`` for a sequential bar: at Δ = 0, the hoped improvement and −max_regression,
    P(accept), P(reject) and the expected tasks run, sequential beside fixed, by simulation
    (the power planner's model: each task's baseline rate drawn from ``p_a``, the candidate's
    clip(p_A + Δ, 0, 1), ``reps`` trials per arm; tasks as clusters)."""
    levels = look_levels(list(looks), tasks, spending=spending)
    rates = np.atleast_1d(np.asarray(p_a, dtype=float))
    codes = np.arange(tasks)
    out: list[dict[str, object]] = []
    for name, delta in (("0", 0.0), ("hoped_improvement", hoped),
                        ("-max_regression", -max_regression)):
        rng = np.random.default_rng(seed)  # the same draws for every Δ
        base = rng.choice(rates, size=(n_sims, tasks), replace=True)
        u_a = rng.random((n_sims, tasks, reps))
        u_b = rng.random((n_sims, tasks, reps))
        k_a = (u_a < base[:, :, None]).sum(axis=2)
        k_b = (u_b < np.clip(base + delta, 0.0, 1.0)[:, :, None]).sum(axis=2)
        fixed, seq, ran = simulate_looks(k_a, k_b, reps, codes, looks, levels, hoped=hoped,
                                         max_regression=max_regression)
        out.append({"delta_name": name, "delta": delta,
                    "fixed": {"accept": float((fixed == ACCEPT).mean()),
                              "reject": float((fixed == REJECT).mean()),
                              "tasks": tasks},
                    "sequential": {"accept": float((seq == ACCEPT).mean()),
                                   "reject": float((seq == REJECT).mean()),
                                   "expected_tasks": float(ran.mean())}})
    return out
