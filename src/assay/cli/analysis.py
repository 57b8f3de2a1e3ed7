"""``assay exp compare``, ``exp plan`` and ``exp verdict``: the decision, from trials on disk.

All three read through ``report.outcomes``, so an experiment run directory and an outcomes file
(another harness's results as JSONL) give the same statistics. ``verdict`` exits 0 / 1 / 4 for
accept / reject / inconclusive so a CI job can gate on it; bad input is 2 as everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli.app import fail
from assay.cli.experiments import exp_app
from assay.errors import AssayError, InputError

Cluster = Annotated[str, typer.Option("--cluster", help="Resample by task (default), family, "
                                      "or any field of the outcomes rows (e.g. repo).")]


def _load(source: Path) -> Any:
    from assay.report.outcomes import load_outcomes

    try:
        return load_outcomes(source)
    except AssayError as exc:
        raise fail(str(exc)) from None


def _arms(data: Any, a: str | None, b: str | None) -> tuple[str, str]:
    from assay.report.abcompare import default_arms
    from assay.report.experiment import frozen_bar

    if a and b:
        return a, b
    bar = frozen_bar(data.source, data.manifest) if data.manifest else None
    pair = default_arms(data, bar)
    if pair is None:
        raise fail(f"{data.source}: {len(data.arms)} arms ({', '.join(data.arms)}): name them "
                   "with --a ARM --b ARM")
    return a or pair[0], b or pair[1]


@exp_app.command("compare")
def exp_compare(
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="An experiment run "
                                           "directory, or an outcomes JSONL file.")],
    a: Annotated[str | None, typer.Option("--a", help="Arm A, the baseline (default: the "
                                          "bar's, or the first of two arms).")] = None,
    b: Annotated[str | None, typer.Option("--b", help="Arm B, the candidate.")] = None,
    cluster: Cluster = "task",
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap methods.")] = 0,
    method: Annotated[str, typer.Option(help="cluster_t (default), bootstrap_studentized or "
                                        "bootstrap_percentile.")] = "cluster_t",
    subgroup: Annotated[str | None, typer.Option(help="triggered or not_triggered: a "
                                                 "subgroup view, with a selection-bias "
                                                 "warning.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Paired A/B comparison: per-task pass rates, Δ = mean of per-task differences (B − A),
    its interval by clusters, McNemar with one repetition, new failures, cost, latency and
    coverage."""
    from assay.report.abcompare import build_comparison

    data = _load(source)
    arm_a, arm_b = _arms(data, a, b)
    try:
        cmp = build_comparison(data, a=arm_a, b=arm_b, cluster=cluster, method=method,
                               seed=seed, subgroup=subgroup)
    except AssayError as exc:
        raise fail(str(exc)) from None
    _shown(data)
    if as_json:
        typer.echo(json.dumps(cmp, indent=2))
        return
    from rich.markdown import Markdown

    from assay.cli.app import out
    from assay.report.experiment import comparison_markdown

    out.print(Markdown("\n".join(comparison_markdown(cmp))))


@exp_app.command("plan")
def exp_plan(
    source: Annotated[Path | None, typer.Argument(metavar="[PILOT]", help="A pilot: a run "
                                                  "directory or outcomes file.")] = None,
    arm: Annotated[str | None, typer.Option("--a", help="The pilot's baseline arm (default: "
                                            "the first).")] = None,
    p_a: Annotated[str | None, typer.Option("--p-a", help="Assumed baseline pass rate, or "
                                            "per-task rates comma-separated (no pilot).")]
    = None,
    tasks: Annotated[int | None, typer.Option("--tasks", min=2, help="N tasks (default: the "
                                              "pilot's).")] = None,
    reps: Annotated[int | None, typer.Option("--reps", min=1, help="K repetitions per task "
                                             "and arm (default: the pilot's, else 1).")]
    = None,
    delta: Annotated[float | None, typer.Option("--delta", help="An effect to detect: print "
                                                "the N tasks needed instead.")] = None,
    seed: int = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Before spending: the minimum detectable effect at 80% power (α = 0.05) for N tasks ×
    K repetitions, or the N needed for --delta; by simulation of the compare analysis."""
    from assay.stats.power import minimum_detectable_effect, tasks_needed

    rates: list[float]
    pilot = None
    if source is not None:
        data = _load(source)
        base = arm or data.arms[0]
        if base not in data.arms:
            raise fail(f"{source}: no arm {base!r} (arms: {', '.join(data.arms)})")
        cells: dict[str, list[int]] = {}
        for t in data.arm_trials(base):
            if t.outcome.passed is not None:
                c = cells.setdefault(t.outcome.task, [0, 0])
                c[0] += 1
                c[1] += int(t.outcome.passed)
        if not cells:
            raise fail(f"{source}: arm {base!r} has no graded trial to plan from")
        rates = [k / n for n, k in cells.values()]
        pilot = {"source": str(source), "arm": base, "tasks": len(cells),
                 "reps": max(n for n, _ in cells.values())}
    elif p_a is not None:
        try:
            rates = [float(x) for x in p_a.split(",") if x.strip()]
        except ValueError:
            raise fail(f"--p-a: not a rate or a comma-separated list of rates: {p_a!r}") from None
        if not rates or not all(0.0 <= r <= 1.0 for r in rates):
            raise fail("--p-a: rates lie in [0, 1]")
    else:
        raise fail("give a pilot (run directory or outcomes file) or --p-a RATE")
    k = reps or (pilot["reps"] if pilot else 1)
    result: dict[str, Any] = {"power": 0.8, "alpha": 0.05, "method": "cluster_t (tasks as "
                              "clusters, t with N-1 df), by simulation", "seed": seed,
                              "reps": k, "baseline_rates": rates if len(rates) <= 50 else None,
                              "n_baseline_rates": len(rates), "pilot": pilot}
    if delta is not None:
        if delta == 0 or not -1 < delta < 1:
            raise fail("--delta: an effect in (-1, 1), not 0")
        n = tasks_needed(delta, reps=k, p_a=rates, seed=seed)
        result.update(delta=delta, tasks_needed=n)
        line = (f"to detect Δ = {100 * delta:+.1f} pts at 80% power with {k} repetition(s): "
                + (f"{n} tasks" if n is not None else "more than 5000 tasks"))
    else:
        n_tasks = tasks or (pilot["tasks"] if pilot else None)
        if n_tasks is None:
            raise fail("--tasks N is needed without a pilot")
        if n_tasks < 2:
            raise fail("a comparison needs at least 2 tasks")
        mde = minimum_detectable_effect(n_tasks=n_tasks, reps=k, p_a=rates, seed=seed)
        result.update(n_tasks=n_tasks, mde=mde)
        line = (f"{n_tasks} tasks × {k} repetition(s): minimum detectable improvement at 80% "
                "power = " + (f"{100 * mde:+.1f} pts" if mde is not None else
                              "none (too few tasks for any effect to show that often)"))
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(line)


@exp_app.command("verdict")
def exp_verdict(
    run_dir: Annotated[Path, typer.Argument(metavar="DIR")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Accept / reject / inconclusive from the bar frozen before the run. Exit 0 accept,
    1 reject, 4 inconclusive, 2 bad input (no bar, not a run directory)."""
    from assay.report.experiment import build_experiment_report, verdict_markdown

    data = _load(run_dir)
    if data.kind != "run":
        raise fail(f"{run_dir}: a verdict needs an experiment run directory (its bar was "
                   "frozen before the run); an outcomes file has no bar")
    try:
        _bar_matches_state(run_dir, data.manifest)
        rep = build_experiment_report(run_dir, data=data)
    except AssayError as exc:
        raise fail(str(exc)) from None
    if rep["bar"] is None:
        raise fail(f"{run_dir}: the experiment file had no bar: nothing to decide against "
                   "(a bar must be written before the first trial, then run again into a new "
                   "--out)")
    if rep["verdict"] is None:
        raise fail(f"{run_dir}: no verdict: " + "; ".join(rep["notes"]))
    _shown(data)
    v = rep["verdict"]
    if as_json:
        typer.echo(json.dumps({"verdict": v, "bar": rep["bar"], "comparison": {
            k: rep["comparison"][k] for k in ("a", "b", "delta", "ci", "method", "n_tasks",
                                              "n_clusters", "coverage")}}, indent=2))
    else:
        from rich.markdown import Markdown

        from assay.cli.app import out

        out.print(Markdown("\n".join(verdict_markdown(rep))))
    raise typer.Exit(v["exit_code"])


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


def _shown(data: Any) -> None:
    """Results of a run with holdout tasks were shown: the holdout ledger says so."""
    if data.kind != "run":
        return
    try:
        from assay.runner.holdout import record_shown
    except ImportError:  # pragma: no cover - the holdout ledger lands with its own module
        return
    record_shown(data.source)
