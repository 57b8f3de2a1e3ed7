"""``assay grade``: blind human grading of rubric answers, in the terminal or through a CSV.

The command only picks the way in; the rules live in ``assay.grading.rubric`` and the terminal
drawing in ``assay.cli.rubric_ui``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import (
    app,
    fail,
    out,
)

ask_grader: Callable[[str], str] = input
"""Where a sitting reads the grader's replies: the keyboard. The seam a test replaces to drive
``assay grade`` through the real CLI without a terminal."""


@app.command()
def grade(
    run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR...")],
    grader: Annotated[str | None, typer.Option(help="Your name, recorded with every grade.")]
    = None,
    seed: Annotated[int | None, typer.Option(help="Shuffle seed (recorded).")] = None,
    regrade: Annotated[bool, typer.Option(help="Show answers that already have a grade.")]
    = False,
    export: Annotated[Path | None, typer.Option("--export", help="Write a blind CSV.")] = None,
    import_: Annotated[Path | None, typer.Option("--import", help="Read grades from a CSV.")]
    = None,
) -> None:
    """Blind human grading of rubric answers, one at a time or through a CSV."""
    from assay.api.grading import GradingError, export_csv, import_csv
    from assay.cli.rubric_ui import interactive_session

    who = grader or os.environ.get("USER") or "grader"
    try:
        if export and import_:
            raise GradingError("use --export or --import, not both")
        if export:
            summary = export_csv(run_dirs, export, seed=seed, regrade=regrade)
        elif import_:
            summary = import_csv(run_dirs, import_, grader=who)
        else:
            summary = interactive_session(run_dirs, grader=who, seed=seed, regrade=regrade,
                                          console=out, ask=ask_grader)
    except GradingError as exc:
        raise fail(str(exc)) from None
    out.print(", ".join(f"{k}: {v}" for k, v in summary.items()), highlight=False)
    if summary.get("revision"):
        _refresh_reports(run_dirs)


def _refresh_reports(run_dirs: list[Path]) -> None:
    """Rebuild the report of every graded run that has one, so report.json, report.md and
    report.html count the new round at once (a report is derived data; the grades are not)."""
    from assay import api
    from assay.api.records import has_run_report
    from assay.errors import AssayError

    for run_dir in dict.fromkeys(run_dirs):
        if not has_run_report(run_dir):
            continue
        try:
            rep = api.rebuild_report(run_dir)
        except AssayError as exc:
            out.print(f"{run_dir}: report not rebuilt ({exc}); run: assay report {run_dir}",
                      highlight=False)
            continue
        rub = rep.get("rubric") or {}
        if rub:
            out.print(f"{run_dir}: report rebuilt; rubric grades as of round {rub.get('round')}, "
                      f"{rub.get('ungraded')} of {rub.get('answers')} answers ungraded",
                      highlight=False)
