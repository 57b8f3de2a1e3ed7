"""``assay trial export`` and ``assay exp export``: trials as ATIF trajectories
(``api.exports`` builds them; this module only parses and prints)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from assay.cli.app import fail, out
from assay.cli.experiments import exp_app
from assay.cli.tasks import trial_app
from assay.errors import EXIT_BAD_INPUT, AssayError

FORMAT_HELP = "The format written: atif (the Agent Trajectory Interchange Format, ATIF-v1.8)."


@trial_app.command("export")
def trial_export(
    trial_dir: Annotated[Path, typer.Argument(metavar="TRIAL", help="An attempt folder "
                                              "(trials/TASK/ARM/REP/aN) or its trial folder "
                                              "(the last attempt).")],
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "atif",
    output: Annotated[Path | None, typer.Option("--out", "-o", metavar="FILE",
                                                help="Write here instead of standard "
                                                     "output.")] = None,
) -> None:
    """One trial as an ATIF trajectory, built afresh from its records: its steps with tool
    calls and observations, per-step and total tokens and cost from the ledger, assay's ids
    and verdict in extra."""
    from assay.api.exports import trial_trajectory
    from assay.api.records import write_json

    if not trial_dir.is_dir():
        raise fail(f"{trial_dir}: not a directory (pass an attempt folder of a run, "
                   "trials/TASK/ARM/REP/aN)", EXIT_BAD_INPUT)
    try:
        doc = trial_trajectory(trial_dir, fmt)
    except AssayError as exc:
        raise fail(str(exc), exc.exit_code) from None
    if output is None:
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        write_json(output, doc)
        out.print(f"wrote {output}", highlight=False)


@exp_app.command("export")
def exp_export(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN", help="An experiment run directory.")],
    out_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Where the documents go: "
                                            "DIR/TASK/ARM/REP/aN.atif.json.")],
    fmt: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "atif",
) -> None:
    """Every attempt of an experiment run as an ATIF trajectory, one file each."""
    from assay.api.exports import export_run_trajectories

    if not run_dir.is_dir():
        raise fail(f"{run_dir}: not a directory (give an experiment run directory)",
                   EXIT_BAD_INPUT)
    try:
        written = export_run_trajectories(run_dir, out_dir, fmt)
    except AssayError as exc:
        raise fail(str(exc), exc.exit_code) from None
    out.print(f"{len(written)} trajectories ({fmt}) written under {out_dir}", highlight=False)
