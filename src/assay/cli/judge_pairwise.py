"""``assay judge pairwise``: which of two arms a pinned judge prefers, task by task.

A command of the ``assay judge`` group that ``cli/judge.py`` declares; it lives apart because
it reads experiment runs, which the rest of the group never does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import fail
from assay.cli.judge import judge_app
from assay.errors import AssayError


@judge_app.command("pairwise")
def judge_pairwise(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="An experiment run directory "
                                          "(both arms, with --a and --b), or side A's run.")],
    run_b: Annotated[Path | None, typer.Argument(metavar="[RUN_B]", help="Side B's run "
                                                 "directory, when the arms ran apart.")] = None,
    judge: Annotated[Path, typer.Option("--judge", help="The judge.yaml.")] = Path("judge.yaml"),
    a: Annotated[str | None, typer.Option("--a", help="Arm A (of RUN_A): the baseline.")]
    = None,
    b: Annotated[str | None, typer.Option("--b", help="Arm B (of RUN_B, or of RUN_A): the "
                                          "candidate.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where the plan, the judgements "
                                             "and pairwise.json go (default: RUN_A/pairwise-"
                                             "<a>-<b>); the same --out resumes.")] = None,
    show: Annotated[str, typer.Option("--show", help="What each candidate is shown as, comma-"
                                      "separated: diff, files, trajectory, answer.")]
    = "diff,trajectory",
    seed: Annotated[int, typer.Option(help="Seed of the opaque ids.")] = 0,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Pairs judged at once.")]
    = 2,
    cluster: Annotated[str, typer.Option(help="task (default) or family: the clusters of the "
                                         "preference's interval.")] = "task",
    as_json: Annotated[bool, typer.Option("--json", help="The summary as one JSON object.")]
    = False,
) -> None:
    """Each pair (task, repetition) shown under opaque ids and judged in both orders; a verdict
    that changes with the order is a tie and counts toward the position-bias rate. Prints the
    per-task preference of B over A with its interval."""
    from assay.api.pairwise import judge_pairwise as run

    parts = tuple(p.strip() for p in show.split(",") if p.strip())
    target = out or (run_a / f"pairwise-{a or 'a'}-{b or 'b'}")
    try:
        summary = run(run_a, run_b, judge=judge, out=target, a=a, b=b, show=parts, seed=seed,
                      jobs=jobs, cluster=cluster)
    except AssayError as exc:
        raise fail(str(exc), exc.exit_code) from None
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    from rich.markdown import Markdown

    from assay.api.render import preference_markdown
    from assay.cli.app import out as console

    section = {**summary, "skipped": len(summary.get("skipped") or []),
               "judge": {**summary["judge"], "model": summary["judge"]["pin"].get("model")}}
    console.print(Markdown("\n".join(preference_markdown(section))))
    typer.echo(f"written: {target}")
