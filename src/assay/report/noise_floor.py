"""The noise floor of an experiment, measured: one arm run twice, interleaved (an A/A pair).

Two copies of the same arm differ only by what the setup adds on its own: a flaky task, a
cache one copy warmed, a shared machine, a model that answers differently at the same
settings. Their difference is therefore what any Δ of this suite carries as noise. This module
compares the copies with the same comparison as every other pair of arms (``abcompare``, so
the same interval method and clustering), and reads three figures off it:

- **the A/A difference and its interval**: if the interval excludes 0, two copies of one
  configuration differ more than chance allows: the setup itself is unstable, and no verdict
  on it can accept a change (``report/verdict.py``);
- **the share of tasks whose outcome flipped** between the copies (their per-task pass rates
  differ), a figure a reader can check in the per-task table;
- **the smallest difference this suite can detect**: the A/A interval's half-width is
  ``c·SE`` (``c`` the two-sided critical value at the interval's level), so a true difference
  is found with 80% power when it is at least ``(c + t₀.₈)·SE``, with ``G − 1`` degrees of
  freedom (``G`` the clusters compared). ``exp plan`` rescales it to other task counts
  (``scaled_mde``).

No figure is invented: an A/A pair that cannot be compared (no task graded in both copies, or
one cluster: no interval) reports why and leaves the figures unknown (``None``), which the
verdict treats as "not shown", never as stable.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from assay.errors import NotComparable
from assay.report.abcompare import build_comparison
from assay.report.outcomes import OutcomeSet
from assay.stats.tdist import t_ppf
from assay.suites.experiment import aa_arm

#: the power the smallest detectable difference is quoted at (as ``exp plan``)
POWER = 0.8


class NoiseFloorFigures(TypedDict, total=False):
    """The A/A figures of one arm against its interleaved copy (report.json's and
    ``exp compare``'s ``noise_floor``), keys in the order written. ``delta`` None: not measured
    (``why_unknown`` says why). ``exp plan`` adds what the floor implies for the plan asked."""

    arm: str
    copy: str
    delta: float | None
    ci: list[float] | None
    level: float
    method: str | None
    n_tasks: int
    n_clusters: int
    flipped: list[str]  # tasks whose pass rate differs between the copies
    flip_share: float | None
    mde: float | None  # smallest difference detectable at POWER on this many tasks
    power: float
    stable: bool | None  # the A/A interval includes 0; None: no interval
    why_unknown: str | None
    df: int | None
    se: float | None
    reps: int
    # added by ``exp plan``
    tasks_needed_simulated: int | None
    tasks_needed_measured: int | None
    mde_simulated: float | None
    mde_measured: float | None
    says: str


def noise_floor_arm(manifest: dict[str, Any] | None) -> str | None:
    """The arm a run measured its noise floor on (``noise_floor.arm`` as frozen), or None."""
    settings = ((manifest or {}).get("identity") or {}).get("settings") or {}
    nf = settings.get("noise_floor")
    return str(nf["arm"]) if isinstance(nf, dict) and nf.get("arm") else None


def _critical(level: float, df: int) -> float:
    return t_ppf(1.0 - (1.0 - level) / 2.0, df)


def detectable(half_width: float, df: int, level: float, power: float = POWER) -> float:
    """The smallest true difference found with ``power`` by an interval of this half-width."""
    return (1.0 + t_ppf(power, df) / _critical(level, df)) * half_width


def measure_noise_floor(data: OutcomeSet, arm: str, *, seed: int = 0,
                        level: float = 0.95) -> NoiseFloorFigures:
    """The A/A figures of ``arm`` against its copy in ``data`` (see the module docstring)."""
    copy = aa_arm(arm)
    out = NoiseFloorFigures(arm=arm, copy=copy, delta=None, ci=None, level=level, method=None,
                            n_tasks=0, n_clusters=0, flipped=[], flip_share=None, mde=None,
                            power=POWER, stable=None, why_unknown=None)
    if arm not in data.arms or copy not in data.arms:
        out["why_unknown"] = f"no trials of {arm!r} and its copy {copy!r} in this run"
        return out
    try:
        cmp = build_comparison(data, a=arm, b=copy, seed=seed, level=level)
    except NotComparable as exc:
        out["why_unknown"] = str(exc)
        return out
    rows = cmp["per_task"]
    flipped = [str(r["task"]) for r in rows if r["p_a"] != r["p_b"]]
    ci = cmp["ci"]
    out.update(NoiseFloorFigures(
        delta=cmp["delta"], ci=ci, method=cmp["method"], n_tasks=cmp["n_tasks"],
        n_clusters=cmp["n_clusters"], df=cmp["df"], se=cmp["se"], flipped=flipped,
        flip_share=len(flipped) / len(rows) if rows else None,
        reps=max((max(r["n_a"], r["n_b"]) for r in rows), default=0)))
    if ci is None:
        out["why_unknown"] = (f"no interval for the A/A difference ({cmp['n_clusters']} "
                              "cluster(s)): whether the setup is stable is not shown")
        return out
    out["stable"] = ci[0] <= 0.0 <= ci[1]
    half = (ci[1] - ci[0]) / 2.0
    if half > 0 and cmp["df"]:
        out["mde"] = min(1.0, detectable(half, int(cmp["df"]), level))
    else:
        out["why_unknown"] = ("the A/A interval has no width: the smallest detectable "
                              "difference is not measurable from it")
    return out


def scaled_mde(nf: NoiseFloorFigures, n_tasks: int) -> float | None:
    """The measured smallest detectable difference at ``n_tasks`` tasks: the standard error of
    a mean over tasks shrinks as 1/√N, so the A/A half-width measured on ``n`` tasks is
    rescaled by √(n / N) (with N − 1 degrees of freedom)."""
    ci, df = nf.get("ci"), nf.get("df")
    if nf.get("mde") is None or not ci or n_tasks < 2 or not nf.get("n_tasks") or not df:
        return None  # (a measured mde implies an interval with degrees of freedom)
    half = (ci[1] - ci[0]) / 2.0
    se = half / _critical(nf["level"], int(df))
    se_n = se * math.sqrt(nf["n_tasks"] / n_tasks)
    df = n_tasks - 1
    return min(1.0, (_critical(nf["level"], df) + t_ppf(POWER, df)) * se_n)


def tasks_for(nf: NoiseFloorFigures, delta: float, n_max: int = 5000) -> int | None:
    """The fewest tasks whose rescaled measured noise floor lets ``delta`` be detected."""
    if nf.get("mde") is None:
        return None
    n = 2
    while n <= n_max:
        mde = scaled_mde(nf, n)
        if mde is not None and mde <= abs(delta):
            return n
        n = n + 1 if n < 64 else int(n * 1.05) + 1
    return None


def noise_floor_markdown(nf: NoiseFloorFigures) -> list[str]:
    """The noise floor as it stands beside Δ: A/A difference, flips, what it implies."""
    def pts(x: float) -> str:
        return f"{100 * x:+.1f} pts"

    head = f"**Noise floor** (A/A: `{nf['arm']}` against its interleaved copy `{nf['copy']}`)"
    if nf["delta"] is None:
        return [f"{head}: not measured: {nf['why_unknown']}.", ""]
    ci = nf["ci"]
    ci_s = "no interval" if ci is None else (
        f"{int(nf['level'] * 100)}% interval [{pts(ci[0])}, {pts(ci[1])}]")
    flips = (f"{len(nf['flipped'])} of {nf['n_tasks']} task(s) flipped between the copies "
             f"({100 * (nf['flip_share'] or 0):.0f}%)")
    if nf["mde"] is not None:
        implied = (f"smallest difference this suite can detect at {int(POWER * 100)}% power "
                   f"≈ {100 * nf['mde']:.1f} pts")
    else:
        implied = f"smallest detectable difference unknown ({nf['why_unknown']})"
    state = {True: "the interval includes 0: the setup is stable at this size",
             False: "**the interval excludes 0: the setup itself is unstable** (two copies of "
                    "one configuration differ more than chance allows); no change can be "
                    "accepted on it",
             None: "whether the setup is stable is not shown"}[nf["stable"]]
    return [f"{head}: Δ A/A = **{pts(nf['delta'])}**, {ci_s}; {flips}; {implied}; {state}.",
            ""]


__all__ = ["POWER", "detectable", "measure_noise_floor", "noise_floor_arm",
           "noise_floor_markdown", "scaled_mde", "tasks_for"]
