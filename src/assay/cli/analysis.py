"""``assay exp compare``, ``exp plan`` and ``exp verdict``: the decision, from trials on disk.

All three read through ``report.outcomes``, so an experiment run directory and an outcomes file
(another harness's results as JSONL) give the same statistics. ``verdict`` exits 0 / 1 / 4 for
accept / reject / inconclusive so a CI job can gate on it; bad input is 2 as everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import fail
from assay.cli.experiments import exp_app
from assay.errors import AssayError

Cluster = Annotated[str, typer.Option("--cluster", help="Resample by task (default), family, "
                                      "or any field of the outcomes rows (e.g. repo).")]


def _first_line(banner: str | None) -> None:
    """A reused holdout is said before anything else, as plain text (a terminal renderer
    could wrap or restyle it; a skimming reader and a CI log grep both read line one)."""
    if banner:
        typer.echo(banner)
        typer.echo("")


@exp_app.command("compare")
def exp_compare(
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="An experiment run "
                                           "directory, a Harbor job directory, or an outcomes "
                                           "JSONL file.")],
    a: Annotated[str | None, typer.Option("--a", help="Arm A, the baseline (default: the "
                                          "bar's, or the first of two arms).")] = None,
    b: Annotated[str | None, typer.Option("--b", help="Arm B, the candidate.")] = None,
    cluster: Cluster = "task",
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap methods.")] = 0,
    method: Annotated[str, typer.Option(help="wilson_mover (default: never zero width, "
                                        "inside ±100 points), moderated_t, cluster_t, "
                                        "bootstrap_studentized or bootstrap_percentile.")
                      ] = "wilson_mover",
    subgroup: Annotated[str | None, typer.Option(help="triggered or not_triggered: a "
                                                 "subgroup view, with a selection-bias "
                                                 "warning.")] = None,
    reward_threshold: Annotated[float | None, typer.Option(
        "--reward-threshold", help="Harbor job sources: a trial passes at a reward of at "
        "least this (default 1).")] = None,
    preference: Annotated[Path | None, typer.Option(
        "--preference", help="A `judge pairwise --out` directory of the same two arms: adds "
        "the judge's per-task preference, its interval, the position-bias rate and the "
        "judge's calibration.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Paired A/B comparison: per-task pass rates, Δ = mean of per-task differences (B − A),
    its interval by clusters, McNemar with one repetition, new failures, cost, latency and
    coverage."""
    from assay.api.experiments import compare_experiment

    try:
        cmp = compare_experiment(source, a=a, b=b, cluster=cluster, method=method, seed=seed,
                                 subgroup=subgroup, reward_threshold=reward_threshold,
                                 preference=preference)
    except AssayError as exc:
        raise fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(cmp, indent=2))
        return
    from rich.markdown import Markdown

    from assay.api.render import comparison_markdown, reused_banner
    from assay.cli.app import out

    _first_line(reused_banner(cmp.get("holdout")))
    lines = comparison_markdown(cmp)
    if cmp.get("noise_floor"):
        from assay.api.render import noise_floor_markdown

        lines[4:4] = noise_floor_markdown(cmp["noise_floor"])  # after the heading and Δ
    if "judge_preference" in cmp:
        from assay.api.render import preference_markdown

        lines += preference_markdown(cmp["judge_preference"])
    if cmp.get("sequential"):
        from assay.api.render import looks_markdown

        lines += ["", *looks_markdown(cmp["sequential"])]
    out.print(Markdown("\n".join(lines)))


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
    seed: Annotated[int, typer.Option(help="Seed of the simulation (the same seed, the same "
                                      "figures).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of the "
                                          "sentence.")] = False,
    tier: Annotated[list[str] | None, typer.Option(
        "--tier", help="With --experiment: what this tier (repeat it; 'all' for every tier and "
        "the whole file) can and cannot detect, sized as the file declares it.")] = None,
    experiment: Annotated[Path | None, typer.Option(
        "--experiment", metavar="EXPERIMENT.yaml", help="The file whose tiers: --tier "
        "sizes.")] = None,
) -> None:
    """Before spending: the minimum detectable effect at 80% power (α = 0.05) for N tasks ×
    K repetitions, or the N needed for --delta; by simulation of the compare analysis. With
    --tier: the same for each CI tier of --experiment; a sequential bar in --experiment adds
    P(accept), P(reject) and the expected tasks at Δ = 0, hoped, −max_regression, beside the
    fixed design's."""
    from assay.api.experiments import plan_experiment

    rates: list[float] | None = None
    if p_a is not None:
        try:
            rates = [float(x) for x in p_a.split(",") if x.strip()]
        except ValueError:
            raise fail(f"--p-a: not a rate or a comma-separated list of rates: {p_a!r}") from None
    if tier or experiment is not None:
        _plan_tiers(experiment, tier or ["all"], source, arm, rates, seed, as_json)
        return
    try:
        result = plan_experiment(source, arm=arm, p_a=rates, tasks=tasks, reps=reps,
                                 delta=delta, seed=seed)
    except AssayError as exc:
        raise fail(str(exc)) from None
    k = result["reps"]
    nf = result.get("noise_floor")
    if delta is not None:
        n = result["tasks_needed"]
        line = (f"to detect Δ = {100 * delta:+.1f} pts at 80% power with {k} repetition(s): "
                + (f"{n} tasks" if n is not None else "more than 5000 tasks"))
    else:
        mde = result["mde"]
        line = (f"{result['n_tasks']} tasks × {k} repetition(s): minimum detectable "
                "improvement at 80% power = " + (f"{100 * mde:+.1f} pts" if mde is not None
                                                   else "none (too few tasks for any effect "
                                                   "to show that often)"))
    if nf is not None:
        line += f" ({nf['says']})"
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(line)


def _plan_tiers(experiment: Path | None, tiers: list[str], pilot: Path | None,
                arm: str | None, rates: list[float] | None, seed: int, as_json: bool) -> None:
    from assay.api.tiers import plan_tiers

    if experiment is None:
        raise fail("--tier: name the experiment file whose tiers to size (--experiment FILE)")
    if pilot is None and rates is None:
        raise fail("--tier: give a pilot (run directory or outcomes file) or assumed rates "
                   "(--p-a RATE)")
    try:
        result = plan_tiers(experiment, tiers, pilot=pilot, arm=arm, p_a=rates, seed=seed)
    except AssayError as exc:
        raise fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    for t in result["tiers"]:
        typer.echo(f"tier {t['tier']}: {t['tasks']} of {t['of_tasks']} tasks × {t['reps']} "
                   f"repetition(s); can detect {t['can']}; cannot detect {t['cannot']}")
    seq = result.get("sequential")
    if seq is not None:
        typer.echo(f"sequential bar: {seq['spending']} spending, looks at "
                   f"{', '.join(map(str, seq['looks']))} of {seq['tasks']} tasks × "
                   f"{seq['reps']} repetition(s) ({seq['n_sims']} simulated runs a row)")
        typer.echo(f"{'Δ':>29} | {'fixed P(accept)':>15} {'P(reject)':>9} {'tasks':>6} | "
                   f"{'seq P(accept)':>13} {'P(reject)':>9} {'E[tasks]':>8}")
        for r in seq["rows"]:
            f, s = r["fixed"], r["sequential"]
            name = f"{r['delta_name']} ({100 * r['delta']:+.1f} pts)"
            typer.echo(f"{name:>29} | "
                       f"{f['accept']:>15.3f} {f['reject']:>9.3f} {f['tasks']:>6} | "
                       f"{s['accept']:>13.3f} {s['reject']:>9.3f} {s['expected_tasks']:>8.1f}")


@exp_app.command("verdict")
def exp_verdict(
    run_dir: Annotated[Path, typer.Argument(metavar="DIR", help="An experiment run "
                                            "directory whose file has a bar:.")],
    as_json: Annotated[bool, typer.Option("--json", help="The verdict, the bar and the "
                                          "comparison's figures as one JSON object.")] = False,
) -> None:
    """Accept / reject / inconclusive from the bar frozen before the run. Exit 0 accept,
    1 reject, 4 inconclusive, 2 bad input (no bar, not a run directory)."""
    from assay.api.experiments import verdict
    from assay.api.render import reused_banner, verdict_markdown

    try:
        rep = verdict(run_dir)
    except AssayError as exc:
        raise fail(str(exc)) from None
    v = rep["verdict"]
    from assay.cli.experiments import _ci_outputs

    _ci_outputs(rep, None)
    banner = reused_banner(rep.get("holdout"))
    if as_json:
        typer.echo(json.dumps({**({"holdout_reused": banner} if banner else {}),
                               "verdict": v, "bar": rep["bar"], "comparison": {
            k: rep["comparison"][k] for k in ("a", "b", "delta", "ci", "method", "n_tasks",
                                              "n_clusters", "coverage")},
                               **({"noise_floor": rep["noise_floor"]}
                                  if rep.get("noise_floor") else {}),
                               **({"sequential": rep["sequential"]}
                                  if rep.get("sequential") else {})}, indent=2))
    else:
        from rich.markdown import Markdown

        from assay.cli.app import out

        _first_line(banner)
        lines = verdict_markdown(rep)
        if rep.get("sequential"):  # the looks: where the run stopped, and at which level
            from assay.api.render import looks_markdown

            lines += looks_markdown(rep["sequential"])
        out.print(Markdown("\n".join(lines)))
    raise typer.Exit(v["exit_code"])

