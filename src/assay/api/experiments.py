"""Deciding from an experiment: compare two arms, plan the next run, apply the bar.

The CLI's ``exp compare``, ``exp plan`` and ``exp verdict`` are these functions plus printing;
a notebook or a CI script gets the same objects (plain dicts, JSON-ready) and the same
``InputError`` when the input is wrong.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

if TYPE_CHECKING:
    from assay.report.noise_floor import NoiseFloorFigures

PathLike = str | os.PathLike[str]


def _pair(data: Any, a: str | None, b: str | None) -> tuple[str, str]:
    from assay.report.abcompare import default_arms
    from assay.report.experiment import frozen_bar

    if a and b:
        return _two(data, a, b)
    bar = frozen_bar(data.source, data.manifest) if data.manifest else None
    pair = default_arms(data, bar)
    if pair is None:
        raise InputError(f"{data.source}: {len(data.arms)} arms ({', '.join(data.arms)}): "
                         "name them with a= and b= (--a ARM --b ARM)")
    return _two(data, a or pair[0], b or pair[1])


def _two(data: Any, a: str, b: str) -> tuple[str, str]:
    """A comparison is of two different arms: ``--a mini --b mini`` is a typo (its Δ would be
    zero by construction), refused like any other bad option."""
    if a == b:
        raise InputError(f"{data.source}: --a and --b both name arm {a!r}: a comparison needs "
                         "two different arms")
    return a, b


def compare_experiment(source: PathLike, *, a: str | None = None, b: str | None = None,
                       cluster: str = "task", method: str = "wilson_mover", seed: int = 0,
                       subgroup: str | None = None,
                       reward_threshold: float | None = None,
                       preference: PathLike | None = None) -> dict[str, Any]:
    """The paired comparison of arm ``b`` against arm ``a`` (see ``report/abcompare.py``);
    ``source`` is an experiment run directory, a Harbor job directory (a pass is a reward of
    at least ``reward_threshold``, default 1) or an outcomes JSONL file. ``preference``: a
    ``judge pairwise --out`` directory of the same two arms; its summary is added under
    ``judge_preference`` (every other key is unchanged); without it, a run's own ``pairwise/``
(the experiment's ``pairwise:`` check) is used when it judged these two arms."""
    from assay.report.abcompare import build_comparison, preference_section
    from assay.report.sources import load_outcomes

    data = load_outcomes(Path(source), reward_threshold=reward_threshold)
    arm_a, arm_b = _pair(data, a, b)
    out = build_comparison(data, a=arm_a, b=arm_b, cluster=cluster, method=method, seed=seed,
                           subgroup=subgroup)
    if data.kind == "run":  # what the two arms ran under, from the run's ledgers and events
        from assay.report.conditions import run_conditions

        out["conditions"] = run_conditions(Path(source), [arm_a, arm_b])
    if preference is not None:
        from assay.api.pairwise import read_preference

        out["judge_preference"] = preference_section(read_preference(preference),
                                                     source=data.source, a=arm_a, b=arm_b)
    elif data.kind == "run":  # the experiment's own pairwise check, when it judged these arms
        from assay.report.experiment import judge_preference

        found = judge_preference(Path(data.source), arm_a, arm_b)
        if found is not None:
            out["judge_preference"] = found
    if data.kind == "run":  # a comparison on a reused holdout says so (report/holdout.py)
        from assay.report.holdout import holdout_summary
        from assay.report.noise_floor import measure_noise_floor, noise_floor_arm

        out["holdout"] = holdout_summary(Path(data.source))
        nf_arm = noise_floor_arm(data.manifest)
        if nf_arm is not None and subgroup is None:  # the setup's own noise, beside Δ
            out["noise_floor"] = measure_noise_floor(data, nf_arm, seed=seed)
        from assay.report.sequential import compare_arms_rows, sequential_section

        looks = sequential_section(Path(data.source), data.manifest or {},
                                   compare_arms_rows(out))
        if looks is not None:  # a sequential bar's looks (report/sequential.py)
            out["sequential"] = looks
    record_results_shown(data, command="exp compare")
    return out


def plan_experiment(pilot: PathLike | None = None, *, arm: str | None = None,
                    p_a: float | list[float] | None = None, tasks: int | None = None,
                    reps: int | None = None, delta: float | None = None,
                    seed: int = 0) -> dict[str, Any]:
    """The minimum detectable effect at 80% power for ``tasks`` × ``reps``, or with ``delta``
    the tasks needed; baseline rates from a pilot's arm ``arm`` or assumed (``p_a``)."""
    from assay.stats.power import minimum_detectable_effect, tasks_needed

    info = None
    noise: NoiseFloorFigures | None = None
    if pilot is not None:
        rates, info = _pilot_rates(Path(pilot), arm)
        noise = _pilot_noise_floor(Path(pilot), seed)
    elif p_a is not None:
        rates = [float(p_a)] if isinstance(p_a, int | float) else [float(x) for x in p_a]
        if not rates or not all(0.0 <= r <= 1.0 for r in rates):
            raise InputError("p_a: rates lie in [0, 1]")
    else:
        raise InputError("give a pilot (run directory or outcomes file) or assumed rates "
                         "(--p-a RATE)")
    k = reps or (info["reps"] if info else 1)
    if k < 1:
        raise InputError("reps: at least 1")
    out: dict[str, Any] = {"power": 0.8, "alpha": 0.05,
                           "method": "wilson_mover (tasks as clusters, the interval exp "
                                     "compare shows), by simulation", "seed": seed, "reps": k,
                           "baseline_rates": rates if len(rates) <= 50 else None,
                           "n_baseline_rates": len(rates), "pilot": info}
    if delta is not None:
        if delta == 0 or not -1 < delta < 1:
            raise InputError("delta: an effect in (-1, 1), not 0")
        needed = tasks_needed(delta, reps=k, p_a=rates, seed=seed)
        if noise is not None:
            from assay.report.noise_floor import tasks_for

            measured = tasks_for(noise, delta)
            noise["tasks_needed_simulated"] = needed
            noise["tasks_needed_measured"] = measured
            if noise["mde"] is None:
                noise["says"] = f"measured noise floor not usable: {noise['why_unknown']}"
            else:
                needed = None if needed is None or measured is None else max(needed, measured)
                noise["says"] = ("the measured noise floor asks for "
                                 + (f"{measured} tasks" if measured else "more than 5000 tasks")
                                 + f", the simulation for {_n(noise['tasks_needed_simulated'])}:"
                                 " the larger is used")
            out["noise_floor"] = noise
        out.update(delta=delta, tasks_needed=needed)
        return out
    n = tasks or (info["tasks"] if info else None)
    if n is None:
        raise InputError("tasks: the number of tasks is needed without a pilot (--tasks N)")
    if n < 2:
        raise InputError("tasks: a comparison needs at least 2 tasks")
    mde = minimum_detectable_effect(n_tasks=n, reps=k, p_a=rates, seed=seed)
    if noise is not None:  # a measured floor beats an assumed Bernoulli model when it is higher
        from assay.report.noise_floor import scaled_mde

        measured_mde = scaled_mde(noise, n)
        noise["mde_simulated"], noise["mde_measured"] = mde, measured_mde
        if measured_mde is None:
            noise["says"] = f"measured noise floor not usable: {noise['why_unknown']}"
        else:
            if mde is not None:
                mde = max(mde, measured_mde)
            noise["says"] = (f"measured noise floor (A/A on {noise['n_tasks']} tasks): "
                             f"{100 * measured_mde:.1f} pts at {n} tasks; "
                             + ("the simulation finds no effect detectable at this size"
                                if noise["mde_simulated"] is None
                                else f"simulation: {100 * noise['mde_simulated']:.1f} pts; "
                                     "the larger is used"))
        out["noise_floor"] = noise
    out.update(n_tasks=n, mde=mde)
    return out


def plan_sequential(experiment: PathLike, *, pilot: PathLike | None = None,
                    arm: str | None = None, p_a: float | list[float] | None = None,
                    seed: int = 0, n_sims: int = 2000) -> dict[str, Any] | None:
    """A sequential bar's operating characteristics (``stats.sequential``): at Δ = 0, the
    hoped improvement and −max_regression, P(accept), P(reject) and the expected tasks run,
    beside the fixed design's; ``None`` when the file's bar has no ``sequential`` block."""
    from assay.stats.sequential import operating_characteristics
    from assay.suites.experiment import load_experiment, sequential_looks

    exp = load_experiment(Path(experiment))
    bar = exp.spec.bar
    if bar is None or bar.sequential is None:
        return None
    if pilot is not None:
        rates, _ = _pilot_rates(Path(pilot), arm)
    elif p_a is not None:
        rates = [float(p_a)] if isinstance(p_a, int | float) else [float(x) for x in p_a]
    else:
        raise InputError("give a pilot (run directory or outcomes file) or assumed rates "
                         "(--p-a RATE)")
    tasks = len(exp.bundles)
    if tasks < 2:
        raise InputError(f"{experiment}: {tasks} task: a comparison needs at least 2")
    looks = sequential_looks(bar.sequential, tasks)
    rows = operating_characteristics(rates, tasks=tasks, reps=exp.spec.repetitions,
                                     looks=looks, spending=bar.sequential.spending,
                                     hoped=bar.hoped_improvement,
                                     max_regression=bar.max_regression, n_sims=n_sims,
                                     seed=seed)
    return {"tasks": tasks, "reps": exp.spec.repetitions, "looks": looks,
            "spending": bar.sequential.spending, "n_sims": n_sims, "seed": seed,
            "method": "simulated: baseline rates drawn from the given ones, the candidate's "
                      "clipped to [0, 1], tasks as clusters; the runner's look rule",
            "rows": rows}


def _n(x: int | None) -> str:
    return "more than 5000 tasks" if x is None else f"{x} tasks"


def _pilot_noise_floor(source: Path, seed: int) -> NoiseFloorFigures | None:
    """A pilot run's measured noise floor (its A/A pair), when it ran one."""
    from assay.report.noise_floor import measure_noise_floor, noise_floor_arm
    from assay.report.sources import load_outcomes

    data = load_outcomes(source)
    arm = noise_floor_arm(data.manifest) if data.kind == "run" else None
    return None if arm is None else measure_noise_floor(data, arm, seed=seed)


def _pilot_rates(source: Path, arm: str | None) -> tuple[list[float], dict[str, Any]]:
    from assay.report.sources import load_outcomes

    data = load_outcomes(source)
    base = arm or data.arms[0]
    if base not in data.arms:
        raise InputError(f"{source}: no arm {base!r} (arms: {', '.join(data.arms)})")
    cells: dict[str, list[int]] = {}
    for t in data.arm_trials(base):
        if t.outcome.passed is not None:
            c = cells.setdefault(t.outcome.task, [0, 0])
            c[0] += 1
            c[1] += int(t.outcome.passed)
    if not cells:
        raise InputError(f"{source}: arm {base!r} has no graded trial to plan from")
    return ([k / n for n, k in cells.values()],
            {"source": str(source), "arm": base, "tasks": len(cells),
             "reps": max(n for n, _ in cells.values())})


def verdict(run_dir: PathLike) -> dict[str, Any]:
    """The experiment report of ``run_dir`` with its verdict (``report["verdict"]``: decision,
    reasons, checks, exit code), refused when there is no bar or the bar was edited."""
    from assay.report.experiment import build_experiment_report
    from assay.report.sources import load_outcomes

    run = Path(run_dir)
    data = load_outcomes(run)
    if data.kind != "run":
        raise InputError(f"{run}: a verdict needs an experiment run directory (its bar was "
                         "frozen before the run); an outcomes file has no bar")
    _bar_matches_state(run, data.manifest)
    rep = build_experiment_report(run, data=data)
    if rep["bar"] is None:
        raise InputError(f"{run}: the experiment file had no bar: nothing to decide against "
                         "(a bar must be written before the first trial; run again into a new "
                         "--out)")
    if rep["verdict"] is None:
        raise InputError(f"{run}: no verdict: " + "; ".join(rep["notes"]))
    record_results_shown(data, command="exp verdict")
    return rep


def _bar_matches_state(run_dir: Path, manifest: dict[str, Any] | None) -> None:
    """The manifest is a file anyone can edit; the state database froze the same identity
    before the first trial, so the bar read for a verdict must agree with it."""
    from assay.runner.state import DB_FILE, StateDB

    if manifest is None or not (run_dir / DB_FILE).is_file():
        return
    with StateDB.open_readonly(run_dir) as db:
        frozen = json.loads(db.meta.get("identity", "{}")).get("settings", {}).get("bar")
    now = manifest.get("identity", {}).get("settings", {}).get("bar")
    if frozen != now:
        raise InputError(f"{run_dir}: the bar in manifest.json differs from the one frozen in "
                         f"{DB_FILE} before the first trial; refusing to decide against an "
                         "edited bar")


def experiment_report(source: PathLike, *, out: PathLike | None = None,
                      command: str = "exp report",
                      progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write the experiment report (report.json, report.md, report.html, outcomes.jsonl) of
    ``source`` into ``out`` (default: the run directory) and return it. ``source`` is a run
    directory or a Harbor job directory, which is never written into (``out`` is then
    required). Results of a run with holdout tasks are noted as shown, by ``command``.
    ``progress`` is told each step as it starts (a large run's trial pages, one by one)."""
    from assay.report.experiment import write_experiment_report
    from assay.report.sources import load_outcomes

    data = load_outcomes(Path(source))
    if data.kind != "run" and out is None:
        raise InputError("not an assay run directory: say where the report goes with --out DIR")
    rep = write_experiment_report(Path(source), data=data,
                                  out=None if out is None else Path(out), progress=progress)
    record_results_shown(data, command=command)  # before anything reaches the screen
    return rep


def record_results_shown(data: Any, *, command: str) -> None:
    """Results of a run were shown: a run with holdout tasks notes it in the holdout ledger
    (``runner/holdout.py``); other sources have no ledger."""
    from assay.runner.holdout import record_shown

    if data.kind == "run":
        record_shown(data.source, command=command)


__all__ = ["compare_experiment", "experiment_report", "plan_experiment", "record_results_shown",
           "verdict"]
