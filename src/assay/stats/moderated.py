"""Small-sample intervals that never collapse: a moderated cluster t for Δ, a clustered Wilson
for a rate.

Why not the plain cluster t. With a handful of tasks and pass rates near 0 or 1 the per-task
differences are often all equal (every task passed in both arms), and the sample variance of
equal numbers is zero: the plain t gives a zero-width interval, and a verdict decided on it
says a regression is ruled out on four tasks. A plain bootstrap has the same defect (every
resample of equal numbers is equal) and also undercovers with few clusters. The interval must
also stay inside [-1, 1], which a symmetric t with a large standard error does not.

The moderated t. Δ is the weighted mean of per-task differences (unchanged), and its variance
is a weighted average of two estimates:

- the cluster-robust (CR1) variance of Δ from the clusters' spread, which is what the plain t
  uses and what makes the interval honest about tasks correlated within families; and
- a *prior* variance: what Δ's variance would be if both arms passed every task half the time,
  Σ wᵢ² (¼/n_A,i + ¼/n_B,i) / (Σ wᵢ)² (n: the task's graded trials in that arm). ½ is where a
  binomial rate varies most, so the prior never understates the noise of a pass/fail trial.

    SE² = (ν · V_prior + (G - 1) · V_CR1) / (ν + G - 1),   interval Δ ± t_{G-1} · SE,

clipped to [-1, 1], with ν = 2. This is the posterior-mean variance of a normal model with a
scaled inverse-χ² prior worth ν clusters, the construction behind "moderated" t statistics.
With one trial per task and arm it is Agresti and Min's adjustment for paired proportions
(half a pseudo-pair in each discordant cell) carried over to rates, weights and clusters. The
prior weighs two clusters against G - 1: with 4 tasks it decides most of the width (every
task passing in both arms gives about ±0.5, not ±0), with 40 tasks it moves the width by a
few per cent. The t quantile keeps G - 1 degrees of freedom (the prior is not counted as
data), which keeps the interval conservative with two or three clusters.

Why this and not the alternatives, by the coverage bench (bench/interval_coverage.py, table
in docs/statistics.md; 4 to 100 tasks, 1 to 5 repetitions, rates near 0, ½ and 1, with and
without families): the plain cluster t and the percentile bootstrap give zero-width intervals
in up to a third of small tables and cover 25-70% there. A prior at the arms' own (adjusted)
rates instead of ½ is too weak when one arm never passes: 20 tasks at a baseline of 0.1 and a
true Δ of -0.1 covered 86%. Score intervals for paired proportions (Newcombe, Tango) are for
one pass/fail pair per task and know nothing of families or repetitions; a MOVER combination
of two clustered Wilson intervals collapses when both arms give identical per-task rates
(correlation 1), and adding it to the moderated t bought about one coverage point in the
rare-event cells for 5-10% more width everywhere.

A rate (per-arm pass rate, narrow accuracy, coding pass@1) gets a Wilson interval on the
clustered effective sample size n_eff = p(1 - p) / V_CR0 (Kish's design effect): repeats of the
same answers add no spread between clusters and no evidence, so five identical repeats give
exactly the interval of one; with p at 0 or 1 (no spread to measure) n_eff is the effective
number of clusters. Wilson never has zero width and stays in [0, 1].

Everything here is vectorised over leading axes so the coverage bench measures this very code.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from statistics import NormalDist

import numpy as np

from assay.stats.intervals import _check_level
from assay.stats.tdist import t_ppf

__all__ = [
    "PRIOR_WEIGHT",
    "difference_prior_var",
    "cluster_codes",
    "clustered_wilson",
    "moderated_t",
    "moderated_t_interval",
]

#: ν, the prior's worth in clusters (see the module docstring).
PRIOR_WEIGHT = 2.0


def cluster_codes(labels: Sequence[Hashable]) -> np.ndarray:
    """Integer codes 0..G-1 in order of first appearance (any hashable label, even unsortable)."""
    seen: dict[Hashable, int] = {}
    return np.fromiter((seen.setdefault(x, len(seen)) for x in labels), dtype=np.intp,
                       count=len(labels))


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2.0)


def _onehot(codes: np.ndarray) -> np.ndarray:
    g = int(codes.max()) + 1 if codes.size else 0
    m = np.zeros((codes.shape[0], g), dtype=float)
    m[np.arange(codes.shape[0]), codes] = 1.0
    return m


def difference_prior_var(n_a: np.ndarray | float, n_b: np.ndarray | float) -> np.ndarray:
    """Per-task prior variance of pB,i - pA,i: both arms at ½ (the largest a binomial rate's
    variance can be), over the task's ``n_a`` and ``n_b`` graded trials."""
    return 0.25 / np.asarray(n_a, dtype=float) + 0.25 / np.asarray(n_b, dtype=float)


def moderated_t(
    diffs: np.ndarray, weights: np.ndarray, codes: np.ndarray, prior_var: np.ndarray, *,
    level: float = 0.95, nu: float = PRIOR_WEIGHT, bounds: tuple[float, float] = (-1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised core: ``diffs`` and ``prior_var`` are (..., tasks), ``weights`` and ``codes``
    (tasks,). Returns ``(delta, lo, hi, se)`` each of shape (...). Needs two clusters or more.
    """
    level = _check_level(level)
    d = np.asarray(diffs, dtype=float)
    w = np.asarray(weights, dtype=float)
    c = np.asarray(codes, dtype=np.intp)
    onehot = _onehot(c)
    g = onehot.shape[1]
    if g < 2:
        raise ValueError(f"moderated_t: need at least 2 clusters, got {g}")
    total = float(w.sum())
    delta = (d * w).sum(axis=-1) / total
    s_g = (d * w) @ onehot
    w_g = w @ onehot
    resid = s_g - w_g * delta[..., None]
    v_cr = g / (g - 1) * (resid * resid).sum(axis=-1) / (total * total)
    v_prior = (np.asarray(prior_var, dtype=float) * w * w).sum(axis=-1) / (total * total)
    se = np.sqrt((nu * v_prior + (g - 1) * v_cr) / (nu + g - 1))
    half = t_ppf(0.5 + level / 2.0, g - 1) * se
    lo = np.clip(delta - half, bounds[0], bounds[1])
    hi = np.clip(delta + half, bounds[0], bounds[1])
    return delta, lo, hi, se


def moderated_t_interval(
    diffs: Sequence[float], weights: Sequence[float], codes: Sequence[int],
    prior_var: Sequence[float], *, level: float = 0.95, nu: float = PRIOR_WEIGHT,
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> tuple[float, float, float, float, int]:
    """One interval: ``(delta, lo, hi, se, df)`` (see the module docstring)."""
    c = np.asarray(codes, dtype=np.intp)
    delta, lo, hi, se = moderated_t(np.asarray(diffs, dtype=float), np.asarray(weights, float),
                                    c, np.asarray(prior_var, dtype=float), level=level, nu=nu,
                                    bounds=bounds)
    g = int(c.max()) + 1
    return float(delta), float(lo), float(hi), float(se), g - 1


def clustered_wilson(
    rates: Sequence[float], trials: Sequence[int], codes: Sequence[int] | None = None,
    weights: Sequence[float] | None = None, *, level: float = 0.95,
) -> tuple[float, float, float, float]:
    """Weighted mean of per-unit rates with a Wilson interval on the clustered effective sample
    size. ``rates[i]`` is unit i's pass rate over its ``trials[i]`` graded trials; ``codes``
    its cluster (default: every unit its own). Returns ``(rate, lo, hi, n_eff)``.

    n_eff = p(1-p) / V_CR0 (V_CR0: the cluster-robust variance of the weighted mean, without
    the small-sample factor, so one trial per unit gives exactly n and the textbook Wilson),
    at most the number of trials; when p is 0 or 1, or every cluster has the same rate, there
    is no spread to measure and n_eff is the effective number of clusters (Σ W_g)² / Σ W_g²
    when p is 0 or 1, the number of trials otherwise.
    """
    level = _check_level(level)
    r = np.asarray(rates, dtype=float)
    n = np.asarray(trials, dtype=float)
    if r.ndim != 1 or r.size == 0 or r.shape != n.shape:
        raise ValueError("clustered_wilson: need one rate and one trial count per unit")
    if not np.all((r >= 0.0) & (r <= 1.0)) or not np.all(n >= 1):
        raise ValueError("clustered_wilson: rates must lie in [0, 1] and trials be >= 1")
    w = np.ones_like(r) if weights is None else np.asarray(weights, dtype=float)
    c = np.arange(r.size) if codes is None else np.asarray(codes, dtype=np.intp)
    onehot = _onehot(c)
    total = float(w.sum())
    p = float((r * w).sum() / total)
    w_g = w @ onehot
    resid = (r * w) @ onehot - w_g * p
    v = float((resid * resid).sum()) / (total * total)
    n_trials = float(n.sum())
    kish = float(w_g.sum() ** 2 / (w_g * w_g).sum())
    pq = p * (1.0 - p)
    if pq <= 1e-15:
        n_eff = kish
    elif v <= 1e-15:
        n_eff = n_trials
    else:
        n_eff = min(pq / v, n_trials)
    n_eff = max(n_eff, 1.0)
    z = _z(level)
    z2 = z * z
    denom = 1.0 + z2 / n_eff
    center = (p + z2 / (2.0 * n_eff)) / denom
    half = (z / denom) * math.sqrt(pq / n_eff + z2 / (4.0 * n_eff * n_eff))
    lo = max(0.0, center - half)
    hi = min(1.0, center + half)
    return p, lo, hi, n_eff
