"""``assay regrade``: a new grade revision from recorded answers, beside the old ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import (
    _require_sandbox,
    app,
    fail,
)
from assay.cli.tasks import _load_bundles, _print_grade
from assay.errors import (
    EXIT_INFRA,
    NeverOverwrite,
)


@app.command()
def regrade(
    trial_dir: Annotated[Path, typer.Argument(metavar="TRIAL_DIR")],
    verifier_revision: Annotated[str, typer.Option(help="Name of the new grade revision.")],
    task_dir: Annotated[Path | None, typer.Option("--task", help="The bundle, if it moved.")]
    = None,
) -> None:
    """Grade the same frozen artifact again, into grades/<NEW>.json beside the old grades."""
    import re

    from assay.runner.trial import TrialRefused, read_trial
    from assay.runner.trial import regrade as do_regrade

    if not (trial_dir / "trial.json").is_file():
        raise fail(f"{trial_dir}: no trial.json: not a trial directory")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", verifier_revision):
        raise fail("--verifier-revision: letters, digits, '.', '_' and '-' only")
    record = read_trial(trial_dir)
    [bundle] = _load_bundles([task_dir or Path(record["task"]["path"])])[:1]
    _require_sandbox("bwrap")
    try:
        grade = do_regrade(trial_dir, bundle, verifier_revision)
    except (NeverOverwrite, TrialRefused) as exc:
        raise fail(str(exc)) from None
    _print_grade(grade)
    if grade["validity"]["status"] != "valid":
        raise typer.Exit(EXIT_INFRA)
