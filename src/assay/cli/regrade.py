"""``assay regrade``: a new grade revision from recorded answers, beside the old ones.

Two kinds of directory hold recorded answers: a trial directory (a frozen artifact, graded by
the task's verifier) and a coding run directory (answers in ``samples.jsonl``, graded by the
coding graders into ``grades/<revision>.jsonl``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import (
    _require_sandbox,
    app,
    err,
    fail,
)
from assay.cli.tasks import _load_bundles, _print_grade
from assay.errors import (
    EXIT_INFRA,
    NeverOverwrite,
)


@app.command()
def regrade(
    trial_dir: Annotated[Path, typer.Argument(metavar="DIR", help="A trial directory, or a "
                                              "coding run directory.")],
    verifier_revision: Annotated[str, typer.Option(help="Name of the new grade revision.")],
    task_dir: Annotated[Path | None, typer.Option("--task", help="The bundle, if it moved.")]
    = None,
) -> None:
    """Grade the same recorded answers again into a new revision beside the old grades:
    grades/<NEW>.json for a trial, grades/<NEW>.jsonl for a coding run."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", verifier_revision):
        raise fail("--verifier-revision: letters, digits, '.', '_' and '-' only")
    if not (trial_dir / "trial.json").is_file() and (trial_dir / "manifest.json").is_file():
        _regrade_coding_run(trial_dir, verifier_revision)
        return

    from assay.api.grading import regrade_trial
    from assay.api.records import read_trial
    from assay.errors import TrialRefused

    if not (trial_dir / "trial.json").is_file():
        raise fail(f"{trial_dir}: no trial.json: not a trial directory")
    record = read_trial(trial_dir)
    [bundle] = _load_bundles([task_dir or Path(record.task.path)])[:1]
    _require_sandbox("bwrap")
    try:
        grade = regrade_trial(trial_dir, bundle, verifier_revision)
    except (NeverOverwrite, TrialRefused) as exc:
        raise fail(str(exc)) from None
    _print_grade(grade)
    if grade.validity.status != "valid":
        raise typer.Exit(EXIT_INFRA)


def _regrade_coding_run(run_dir: Path, revision: str) -> None:
    """Grade every recorded answer of a coding run into ``revision``, then rebuild the reports
    from it (the newest revision)."""
    from assay import api
    from assay.api.grading import regrade_run, run_isolation, run_kind
    from assay.cli.runs import _print_report

    kind = run_kind(run_dir)
    if kind != "coding":
        raise fail(f"{run_dir}: a {kind!r} run; regrade works on trial "
                   "directories and coding runs")
    _require_sandbox(run_isolation(run_dir))
    try:
        summary = regrade_run(run_dir, revision)
    except NeverOverwrite as exc:
        raise fail(str(exc)) from None
    err.print(f"graded {summary.graded} answers into revision {revision} "
              f"({summary.grader_errors} grader errors); older revisions are untouched",
              highlight=False)
    _print_report(api.rebuild_report(run_dir, grade_revision=revision))
    if summary.grader_errors:
        raise typer.Exit(EXIT_INFRA)
