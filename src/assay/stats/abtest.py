"""Paired A/B comparison of two arms over the same tasks: Δ, its interval, McNemar, new failures.

Per task first, then aggregate: each task's pass rate per arm over its
repetitions, the difference per task, and a weighted mean of those
differences. A task run more often does not count more, because the
question is "how does B do on tasks like these", not "on trials like these".

Uncertainty is by clusters (tasks by default, families or repos when tasks
are correlated), because tasks from one family share difficulty and a fix
that helps one often helps its siblings; treating them as independent makes
the interval too narrow (the simulation test shows by how much).

The default interval (``wilson_mover``, ``stats.moderated.difference_interval``)
combines the two arms' clustered Wilson intervals with a correlation set by the
cluster t's variance pooled with a prior worth two clusters: four tasks that
all pass in both arms give a wide interval, not a zero-width one, three tasks
fixed out of three give a lower bound above zero, and it never leaves
[-1, 1]. ``moderated_t`` is the same variance in a symmetric t interval; the
plain cluster t and the two bootstraps stay available for comparison (also
clipped to [-1, 1]); a zero-width result from one of them is flagged in
``notes``.

This module is over the usual size because the three interval methods share
one aggregation and must stay consistent with it; splitting them would
split the definition of Δ across files.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from assay.errors import NotComparable
from assay.stats.intervals import _check_level
from assay.stats.moderated import (
    Floats,
    Ints,
    difference_interval,
    difference_prior_var,
    moderated_t_interval,
)
from assay.stats.paired import _cluster_ratio_bootstrap, mcnemar_exact
from assay.stats.tdist import t_ppf

__all__ = [
    "ABResult",
    "LeftOut",
    "McNemar",
    "TaskRow",
    "cluster_bootstrap_interval",
    "cluster_t_interval",
    "compare_arms",
]

Method = Literal["wilson_mover", "moderated_t", "cluster_t", "bootstrap_percentile",
                 "bootstrap_studentized"]
METHODS: tuple[str, ...] = ("wilson_mover", "moderated_t", "cluster_t", "bootstrap_percentile",
                            "bootstrap_studentized")


@dataclass(frozen=True)
class TaskRow:
    """One task's figures: the row of the per-task table shown beside the interval."""

    task: Hashable
    cluster: Hashable
    weight: float
    n_a: int
    passed_a: int
    p_a: float
    n_b: int
    passed_b: int
    p_b: float
    diff: float


@dataclass(frozen=True)
class LeftOut:
    """A planned task that could not enter Δ, and which arms lacked a graded trial."""

    task: Hashable
    cluster: Hashable
    missing_arms: tuple[str, ...]


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar on task pairs (only with one graded repetition per task and arm).

    ``b``: tasks A passed and B failed; ``c``: tasks A failed and B passed.
    """

    b: int
    c: int
    p_value: float


@dataclass(frozen=True)
class ABResult:
    """Everything ``compare_arms`` found; ``to_dict`` gives plain JSON-ready values.

    ``ci`` is ``None`` when no interval exists (fewer than two clusters): an
    interval from one cluster would be invented, not estimated. ``se`` is the
    moderated standard error for ``wilson_mover`` and ``moderated_t`` and the
    cluster-robust one otherwise, ``df`` is G - 1, so a reader can check the interval against
    Δ ± t·SE (before clipping to [-1, 1]);
    ``seed`` and ``n_boot`` are set only for the bootstrap methods.
    """

    delta: float
    ci: tuple[float, float] | None
    method: str
    level: float
    df: int | None
    se: float | None
    n_tasks: int
    n_clusters: int
    n_planned: int
    coverage: float
    per_task: list[TaskRow]
    left_out: list[LeftOut]
    new_failures: dict[Hashable, list[Hashable]]
    mcnemar: McNemar | None
    seed: int | None = None
    n_boot: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci"] = None if self.ci is None else [self.ci[0], self.ci[1]]
        out["new_failures"] = {str(k): list(v) for k, v in self.new_failures.items()}
        for row in out["left_out"]:
            row["missing_arms"] = list(row["missing_arms"])
        return out


# ---------------------------------------------------------------------------
# Interval methods over cluster-level figures
# ---------------------------------------------------------------------------


def _cluster_figures(
    diffs: np.ndarray, weights: np.ndarray, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster g: total weight W_g and weighted difference sum S_g = W_g * D_g."""
    w_g = np.bincount(codes, weights=weights)
    s_g = np.bincount(codes, weights=weights * diffs)
    return s_g, w_g


def _cluster_se(s_g: np.ndarray, w_g: np.ndarray) -> tuple[float, float]:
    """Point estimate and cluster-robust standard error (see ``cluster_t_interval``)."""
    g = s_g.shape[0]
    total = float(w_g.sum())
    delta = float(s_g.sum() / total)
    resid = s_g - w_g * delta  # W_g * (D_g - Δ)
    var = g / (g - 1) * float(np.dot(resid, resid)) / (total * total)
    return delta, math.sqrt(max(var, 0.0))


def cluster_t_interval(
    diffs: Floats,
    weights: Floats,
    codes: Ints,
    *,
    level: float = 0.95,
    plain: bool = False,
) -> tuple[float, float, float, float, int]:
    """t interval on cluster-level differences with G - 1 degrees of freedom.

    Unless ``plain``, this is the moderated t of ``stats.moderated`` with the prior of one
    trial per arm and task at ½ (¼ + ¼ a task: the largest, since the trial counts are not
    known here), clipped to [-1, 1]: a caller that has only the per-task differences still
    never gets a zero width. A caller that has the per-task rates and trial counts should use
    ``stats.moderated.difference_interval`` (``compare_arms``' default). ``plain=True`` is the
    textbook interval described below (``--method cluster_t``), unclipped.

    Exactly: task i has difference d_i = p_B,i - p_A,i and weight w_i; cluster
    g has weight W_g = Σ_{i∈g} w_i and weighted mean difference
    D_g = Σ_{i∈g} w_i d_i / W_g. The estimate is the W_g-weighted mean over
    clusters, Δ = Σ_g W_g D_g / Σ_g W_g, which is the same number as the
    task-weighted mean Σ w_i d_i / Σ w_i (clustering changes the
    uncertainty, never the estimate). Its standard error is the
    cluster-robust (CR1) one for a weighted mean,

        SE² = G / (G - 1) · Σ_g W_g² (D_g - Δ)² / (Σ_g W_g)²,

    which for equal cluster weights is s²/G with s² the sample variance of
    the D_g, i.e. the textbook one-sample t on cluster means. The interval
    is Δ ± t_{G-1, (1+level)/2} · SE.

    Why a t with G - 1 degrees of freedom and not a bootstrap percentile:
    with ten or so clusters the percentile bootstrap ignores the
    uncertainty in the spread itself and undercovers; the t quantile pays
    for it. Returns ``(delta, lo, hi, se, df)``; needs G >= 2.
    """
    level = _check_level(level)
    d = np.asarray(diffs, dtype=float)
    w = np.asarray(weights, dtype=float)
    c = np.asarray(codes, dtype=np.intp)
    s_g, w_g = _cluster_figures(d, w, c)
    g = s_g.shape[0]
    if g < 2:
        raise ValueError(f"cluster_t_interval: need at least 2 clusters, got {g}")
    if not plain:
        return moderated_t_interval(d, w, c, np.full(d.shape[0], 0.5), level=level)
    delta, se = _cluster_se(s_g, w_g)
    half = t_ppf(0.5 + level / 2.0, g - 1) * se
    return delta, delta - half, delta + half, se, g - 1


def cluster_bootstrap_interval(
    diffs: Floats,
    weights: Floats,
    codes: Ints,
    *,
    studentized: bool = False,
    n_boot: int = 4000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Paired cluster bootstrap for Δ: resample clusters, each with all its tasks.

    Each task's A/B pair stays together because the resampled unit is the
    task's difference d_i, never an arm's rate on its own. A resample draws
    G clusters with replacement and computes Δ* = Σ W_g D_g / Σ W_g over the
    drawn clusters (the ratio form, so unequal cluster weights estimate the
    same quantity as Δ).

    Percentile: the (α/2, 1-α/2) quantiles of Δ*. Studentized (bootstrap-t):
    each resample also gets its cluster-robust SE* (the formula in
    ``cluster_t_interval``) and t* = (Δ* - Δ) / SE*; the interval is
    [Δ - q_{1-α/2}(t*) · SE, Δ - q_{α/2}(t*) · SE]. A resample whose drawn
    clusters all have the same D_g has SE* = 0: if Δ* = Δ it carries no
    information on the pivot and is dropped, otherwise t* is ±inf, which
    is its honest value and can make the interval unbounded with very few
    clusters. Seeded with ``numpy.random.default_rng(seed)``. Returns
    ``(delta, lo, hi)``.
    """
    level = _check_level(level)
    n_boot = operator.index(n_boot)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    d = np.asarray(diffs, dtype=float)
    w = np.asarray(weights, dtype=float)
    c = np.asarray(codes, dtype=np.intp)
    s_g, w_g = _cluster_figures(d, w, c)
    g = s_g.shape[0]
    if g < 2:
        raise ValueError(f"cluster_bootstrap_interval: need at least 2 clusters, got {g}")
    delta, se = _cluster_se(s_g, w_g)
    if se == 0.0:
        return delta, delta, delta
    if not studentized:
        lo, hi = _cluster_ratio_bootstrap(s_g, w_g, n_boot=n_boot, seed=seed, level=level)
        return delta, lo, hi
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, g, size=(n_boot, g))
    sb = s_g[idx]
    wb = w_g[idx]
    tot = wb.sum(axis=1)
    db = sb.sum(axis=1) / tot
    resid = sb - wb * db[:, None]
    se_b = np.sqrt(g / (g - 1) * np.einsum("ij,ij->i", resid, resid) / (tot * tot))
    num = db - delta
    # Resamples of one repeated D_g value: SE* is zero up to rounding.
    zero = se_b <= 1e-12 * max(1.0, abs(delta))
    same = zero & (np.abs(num) <= 1e-12 * max(1.0, abs(delta)))
    keep = ~same
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = np.where(zero, np.sign(num) * np.inf, num / np.where(zero, 1.0, se_b))
    t_star = t_star[keep]
    if t_star.size == 0:
        return delta, delta, delta
    alpha = 1.0 - level
    q_lo, q_hi = np.quantile(t_star, [alpha / 2.0, 1.0 - alpha / 2.0], method="inverted_cdf")
    return delta, float(delta - q_hi * se), float(delta - q_lo * se)


# ---------------------------------------------------------------------------
# From trials to the result
# ---------------------------------------------------------------------------


def _is_new_failure(p_a: float, p_b: float) -> bool:
    """A task newly broken by B: A passed it at least once, B never did.

    "At least once" rather than "every time" so a flaky task A sometimes
    solves still counts when B has lost it completely; "B never" so a task
    B merely solves less often is a rate change (it is in Δ and the per-task
    table), not a break. With one repetition this is "A passed, B failed".
    """
    return p_a > 0.0 and p_b == 0.0


#: A task's key (the caller's: a task id string, a tuple, ...); one type across an argument list,
#: so a ``dict[str, str]`` of clusters is accepted (Mapping's key type is invariant).
TaskKey = TypeVar("TaskKey", bound=Hashable)


def compare_arms(
    outcomes: Iterable[tuple[TaskKey, str, int, bool | None]],
    *,
    a: str,
    b: str,
    clusters: Mapping[TaskKey, Hashable] | None = None,
    weights: Mapping[TaskKey, float] | None = None,
    tasks: Sequence[TaskKey] | None = None,
    method: Method = "wilson_mover",
    level: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
) -> ABResult:
    """Compare arm ``b`` against arm ``a`` on the tasks both were graded on.

    ``outcomes`` holds ``(task, arm, rep, passed)``; ``passed is None`` is an
    ungraded trial (infra error) and counts for nothing. Trials of other arms
    are ignored. ``clusters`` maps a task to its family or repo (a task
    missing from it is its own cluster; ``None`` makes every task its own).
    ``weights`` maps a task to a weight fixed before the run (default equal);
    every compared task needs one. ``tasks`` is the plan: tasks in it with
    no graded trial at all are left out and listed too, and it is the
    denominator of ``coverage``; by default the plan is every task seen.

    Δ = Σ w_i (p_B,i - p_A,i) / Σ w_i over tasks with a graded trial in both
    arms. Tasks lacking one are in ``left_out``, never silently dropped:
    ``coverage`` = compared tasks / planned tasks says how much of the plan
    the estimate rests on.

    ``mcnemar`` is filled only when every compared task has exactly one
    graded trial per arm (the test is on pass/fail pairs, not rates).
    ``new_failures`` groups tasks by cluster (see ``_is_new_failure``) and
    is reported whatever the sign of Δ.
    """
    level = _check_level(level)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if a == b:
        raise ValueError(f"compare_arms: arms a and b are the same ({a!r})")

    counts: dict[TaskKey, dict[str, list[int]]] = {}
    seen: set[tuple[TaskKey, str, int]] = set()
    order: list[TaskKey] = []
    for task, arm, rep, passed in outcomes:
        if task not in counts:
            counts[task] = {a: [0, 0], b: [0, 0]}
            order.append(task)
        if arm not in (a, b):
            continue
        key = (task, arm, rep)
        if key in seen:
            raise ValueError(f"compare_arms: duplicate trial {key!r}")
        seen.add(key)
        if passed is None:
            continue
        cell = counts[task][arm]
        cell[0] += 1
        cell[1] += int(bool(passed))

    plan = list(tasks) if tasks is not None else order
    if len(set(plan)) != len(plan):
        raise ValueError("compare_arms: the task plan lists a task twice")
    unplanned = [t for t in order if t not in set(plan)]
    if unplanned:
        raise ValueError(f"compare_arms: outcomes for tasks not in the plan: {unplanned[:5]!r}")

    def cluster_of(task: TaskKey) -> Hashable:
        if clusters is None:
            return task
        return clusters.get(task, task)

    rows: list[TaskRow] = []
    left_out: list[LeftOut] = []
    for task in plan:
        arms = counts.get(task, {a: [0, 0], b: [0, 0]})
        (n_a, k_a), (n_b, k_b) = arms[a], arms[b]
        missing = tuple(arm for arm, n in ((a, n_a), (b, n_b)) if n == 0)
        if missing:
            left_out.append(LeftOut(task=task, cluster=cluster_of(task), missing_arms=missing))
            continue
        if weights is None:
            wt = 1.0
        else:
            if task not in weights:
                raise ValueError(f"compare_arms: no weight for task {task!r}")
            wt = float(weights[task])
            if not (math.isfinite(wt) and wt > 0):
                raise ValueError(f"compare_arms: weight for {task!r} must be > 0, got {wt!r}")
        p_a, p_b = k_a / n_a, k_b / n_b
        rows.append(
            TaskRow(
                task=task,
                cluster=cluster_of(task),
                weight=wt,
                n_a=n_a,
                passed_a=k_a,
                p_a=p_a,
                n_b=n_b,
                passed_b=k_b,
                p_b=p_b,
                diff=p_b - p_a,
            )
        )

    if not rows:
        raise NotComparable(
            f"no task has a graded trial in both arm {a!r} and arm {b!r} "
            f"({len(left_out)} planned task(s) left out)"
        )

    codes_by_label: dict[Hashable, int] = {}
    codes = np.array(
        [codes_by_label.setdefault(r.cluster, len(codes_by_label)) for r in rows], dtype=np.intp
    )
    diffs = np.array([r.diff for r in rows], dtype=float)
    w = np.array([r.weight for r in rows], dtype=float)
    n_clusters = len(codes_by_label)
    delta = float(np.dot(w, diffs) / w.sum())

    ci: tuple[float, float] | None = None
    se: float | None = None
    df: int | None = None
    notes: list[str] = []
    if n_clusters < 2:
        notes.append("one cluster: no interval can be estimated")
    else:
        s_g, w_g = _cluster_figures(diffs, w, codes)
        _, se = _cluster_se(s_g, w_g)
        df = n_clusters - 1
        sizes_a = np.array([r.n_a for r in rows], dtype=float)
        sizes_b = np.array([r.n_b for r in rows], dtype=float)
        if method == "wilson_mover":
            _, lo_a, hi_a, se_a = difference_interval(
                np.array([r.p_a for r in rows]), sizes_a, np.array([r.p_b for r in rows]),
                sizes_b, w, codes, level=level)
            lo, hi, se = float(lo_a), float(hi_a), float(se_a)
        elif method == "moderated_t":
            prior = difference_prior_var(sizes_a, sizes_b)
            _, lo, hi, se, df = moderated_t_interval(diffs, w, codes, prior, level=level)
        elif method == "cluster_t":
            _, lo, hi, se, df = cluster_t_interval(diffs, w, codes, level=level, plain=True)
        else:
            _, lo, hi = cluster_bootstrap_interval(
                diffs,
                w,
                codes,
                studentized=method == "bootstrap_studentized",
                n_boot=n_boot,
                seed=seed,
                level=level,
            )
        ci = (max(-1.0, lo), min(1.0, hi))  # a difference of two rates lies in [-1, 1]
        if ci[1] - ci[0] <= 0.0:
            notes.append(f"{method}: zero-width interval (every cluster has the same "
                         "difference); the default moderated_t does not collapse")

    mcnemar: McNemar | None = None
    if all(r.n_a == 1 and r.n_b == 1 for r in rows):
        bb = sum(1 for r in rows if r.passed_a == 1 and r.passed_b == 0)
        cc = sum(1 for r in rows if r.passed_a == 0 and r.passed_b == 1)
        mcnemar = McNemar(b=bb, c=cc, p_value=mcnemar_exact(bb, cc))

    new_failures: dict[Hashable, list[Hashable]] = {}
    for r in rows:
        if _is_new_failure(r.p_a, r.p_b):
            new_failures.setdefault(r.cluster, []).append(r.task)

    bootstrap = method.startswith("bootstrap")
    return ABResult(
        delta=delta,
        ci=ci,
        method=method,
        level=level,
        df=df,
        se=se,
        n_tasks=len(rows),
        n_clusters=n_clusters,
        n_planned=len(plan),
        coverage=len(rows) / len(plan),
        per_task=rows,
        left_out=left_out,
        new_failures=new_failures,
        mcnemar=mcnemar,
        seed=seed if bootstrap else None,
        n_boot=n_boot if bootstrap else None,
        notes=notes,
    )
