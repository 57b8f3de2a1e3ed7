"""Power of the A/B comparison before spending: the smallest detectable effect, or the N needed.

By simulation rather than a formula because per-task pass rates are bounded,
often piled at 0 and 1, and measured over few repetitions; a normal
approximation would misstate power exactly where evals live. The simulated
analysis is the one ``compare_arms`` does with tasks as clusters (the
default): per-task differences, their mean, and the ``wilson_mover`` interval
of ``stats.moderated`` (the very function, vectorised over the simulated
experiments). "Detected" means the two-sided interval at ``1 - alpha``
excludes zero on the side of the effect.

Model: task i has A's rate p_A,i (an assumed constant, or drawn with
replacement from a pilot's per-task rates, so a pilot's spread of easy and
hard tasks carries over) and B's rate p_B,i = clip(p_A,i + δ, 0, 1); each
arm is run ``reps`` times per task. Common random numbers (one seed, the
same uniforms for every δ) make power a smooth, nearly monotone function of
δ so the bisection for the minimum detectable effect is stable.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from assay.stats.moderated import difference_interval

__all__ = ["minimum_detectable_effect", "simulated_power", "tasks_needed"]


def _base_rates(
    p_a: float | Sequence[float], n_tasks: int, n_sims: int, rng: np.random.Generator
) -> np.ndarray:
    """(n_sims, n_tasks) matrix of A's per-task rates."""
    rates = np.atleast_1d(np.asarray(p_a, dtype=float))
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError("p_a must be a rate or a non-empty list of per-task rates")
    if not np.all((rates >= 0.0) & (rates <= 1.0)):
        raise ValueError("p_a: rates must lie in [0, 1]")
    if rates.size == 1:
        return np.full((n_sims, n_tasks), float(rates[0]))
    return rng.choice(rates, size=(n_sims, n_tasks), replace=True)


def _check_design(n_tasks: int, reps: int, n_sims: int, alpha: float) -> tuple[int, int, int]:
    n_tasks = operator.index(n_tasks)
    reps = operator.index(reps)
    n_sims = operator.index(n_sims)
    if n_tasks < 2:
        raise ValueError(f"n_tasks must be >= 2 (a t interval needs two tasks), got {n_tasks}")
    if reps < 1 or n_sims < 1:
        raise ValueError(f"reps and n_sims must be >= 1, got reps={reps}, n_sims={n_sims}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return n_tasks, reps, n_sims


class _Draws:
    """The random numbers of one simulated design, reused for every δ."""

    def __init__(
        self, p_a: float | Sequence[float], n_tasks: int, reps: int, n_sims: int, seed: int
    ) -> None:
        rng = np.random.default_rng(seed)
        self.p_a = _base_rates(p_a, n_tasks, n_sims, rng)
        self.u_a = rng.random((n_sims, n_tasks, reps))
        self.u_b = rng.random((n_sims, n_tasks, reps))
        self.rate_a = (self.u_a < self.p_a[:, :, None]).mean(axis=2)

    def power(self, delta: float, alpha: float) -> float:
        n_tasks = self.p_a.shape[1]
        p_b = np.clip(self.p_a + delta, 0.0, 1.0)
        rate_b = (self.u_b < p_b[:, :, None]).mean(axis=2)
        reps = np.full(n_tasks, float(self.u_a.shape[2]))
        _, lo, hi, _ = difference_interval(self.rate_a, reps, rate_b, reps, np.ones(n_tasks),
                                           np.arange(n_tasks), level=1.0 - alpha)
        hit = (lo > 0.0) if delta >= 0 else (hi < 0.0)
        return float(hit.mean())


def simulated_power(
    delta: float,
    *,
    n_tasks: int,
    reps: int,
    p_a: float | Sequence[float],
    alpha: float = 0.05,
    n_sims: int = 4000,
    seed: int = 0,
) -> float:
    """Fraction of simulated experiments whose interval excludes 0 on δ's side."""
    n_tasks, reps, n_sims = _check_design(n_tasks, reps, n_sims, alpha)
    return _Draws(p_a, n_tasks, reps, n_sims, seed).power(float(delta), alpha)


def minimum_detectable_effect(
    *,
    n_tasks: int,
    reps: int,
    p_a: float | Sequence[float],
    power: float = 0.8,
    alpha: float = 0.05,
    n_sims: int = 4000,
    seed: int = 0,
    tol: float = 1e-3,
) -> float | None:
    """Smallest improvement δ (B - A, additive) detected with probability ``power``.

    Bisection on δ in (0, 1 - min p_A]; ``None`` when even the largest
    possible improvement is not detected that often (too few tasks for
    any effect to show), rather than a number that would look like a plan.
    """
    n_tasks, reps, n_sims = _check_design(n_tasks, reps, n_sims, alpha)
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    draws = _Draws(p_a, n_tasks, reps, n_sims, seed)
    hi = 1.0 - float(draws.p_a.min())
    if hi <= 0.0 or draws.power(hi, alpha) < power:
        return None
    lo = 0.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if draws.power(mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def tasks_needed(
    delta: float,
    *,
    reps: int,
    p_a: float | Sequence[float],
    power: float = 0.8,
    alpha: float = 0.05,
    n_sims: int = 2000,
    seed: int = 0,
    n_max: int = 5000,
) -> int | None:
    """Smallest number of tasks N whose simulated power for ``delta`` reaches ``power``.

    Doubling then bisection on N, each N simulated with the same seed.
    Power is only nearly monotone in N under simulation noise, so the
    answer is the smallest N found by the search, accurate to the noise of
    ``n_sims`` experiments. ``None`` when ``n_max`` tasks do not suffice.
    """
    delta = float(delta)
    if delta == 0.0:
        raise ValueError("tasks_needed: an effect of 0 cannot be detected")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")

    def ok(n: int) -> bool:
        return (
            simulated_power(
                delta, n_tasks=n, reps=reps, p_a=p_a, alpha=alpha, n_sims=n_sims, seed=seed
            )
            >= power
        )

    lo, hi = 1, 2
    while not ok(hi):
        lo = hi
        hi *= 2
        if hi > n_max:
            if ok(n_max):
                hi = n_max
                break
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
