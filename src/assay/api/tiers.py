"""``exp plan --tier``: what each CI tier of an experiment can and cannot detect.

A smoke tier that passes says little unless the team knows how large a regression it would
have caught. For each tier this sizes the tier as declared (its tasks after its ``select``, its
repetitions) and asks the existing power simulation (:func:`plan_experiment`, the analysis
``exp compare`` makes) for the minimum detectable difference at 80% power. What the tier
cannot see is said beside it: smaller differences, and any change confined to the tasks it
leaves out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.api.experiments import PathLike, plan_experiment, plan_sequential
from assay.errors import InputError


def plan_tiers(experiment: PathLike, tiers: list[str], *, pilot: PathLike | None = None,
               arm: str | None = None, p_a: float | list[float] | None = None,
               seed: int = 0) -> dict[str, Any]:
    """One entry per tier (``all``: every tier the file declares, then the whole file); with
    a sequential bar, its operating characteristics under ``sequential``
    (:func:`plan_sequential`)."""
    from assay.suites.experiment import load_experiment

    path = Path(experiment)
    whole = load_experiment(path)
    declared = list(whole.spec.tiers or {})
    names: list[str | None] = []
    for t in tiers:
        names += [*declared, None] if t == "all" else [t]
    if not names:
        raise InputError(f"{path}: declares no tiers (tiers: {{smoke: {{select: …}}}})")
    total = len(whole.bundles)
    out = []
    for name in names:
        exp = whole if name is None else load_experiment(path, tier=name)
        n, k = len(exp.bundles), exp.spec.repetitions
        entry: dict[str, Any] = {"tier": name or "(whole file)", "tasks": n, "of_tasks": total,
                                 "reps": k, "task_ids": sorted(exp.bundles)}
        if n < 2:
            entry.update(mde=None, can="nothing: one task has no interval",
                         cannot="any difference")
        else:
            plan = plan_experiment(pilot, arm=arm, p_a=p_a, tasks=n, reps=k, seed=seed)
            mde = plan["mde"]
            entry["mde"] = mde
            entry["plan"] = {key: plan[key] for key in ("power", "alpha", "method", "seed")}
            if mde is None:
                entry["can"] = "no difference at 80% power (too few tasks)"
                entry["cannot"] = "any difference"
            else:
                entry["can"] = (f"a difference of {100 * mde:.1f} points or more, at 80% "
                                "power (α = 0.05; simulated as an improvement over the "
                                "baseline rates)")
                entry["cannot"] = f"changes smaller than {100 * mde:.1f} points"
        if n < total:
            entry["cannot"] += (f"; anything that happens only on the {total - n} task(s) "
                                "outside the tier")
        out.append(entry)
    seq = plan_sequential(path, pilot=pilot, arm=arm, p_a=p_a, seed=seed)
    return {"experiment": str(path), "tiers": out,
            **({"sequential": seq} if seq is not None else {})}
