"""Commands over experiments (``assay exp ...``): many trials of several arms, resumable.

``exp status`` only ever reads ``state.sqlite`` (WAL lets it read while a runner writes, and a
crashed run's file reads the same), so it is safe to run at any moment, from anywhere. Its
output is written line by line rather than through rich: a run of 100,000 trials lists tens of
thousands of lines, and ``--json`` streams one trial at a time so memory stays flat.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from assay.cli.app import app, fail
from assay.errors import RecordError

exp_app = typer.Typer(no_args_is_help=True, help="Experiments: every task x arm x repetition, "
                      "resumable after a crash.")
app.add_typer(exp_app, name="exp")


@exp_app.command("status")
def exp_status(
    run_dir: Annotated[Path, typer.Argument(metavar="DIR", help="The experiment's --out "
                                            "directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object listing every "
                                          "trial.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="A line for every trial, done ones "
                                           "too.")] = False,
) -> None:
    """Counts by state and failure code, then a line per trial not yet done. Read-only: works
    while the run is in progress and after a crash."""
    from assay.runner.state import StateDB

    try:
        db = StateDB.open_readonly(run_dir)
    except RecordError as exc:
        raise fail(str(exc)) from None
    with db:
        if as_json:
            _write_json(db, sys.stdout)
        else:
            _write_text(db, sys.stdout, show_all=show_all)


def _counts_json(db: Any) -> dict[str, Any]:
    c = db.counts()
    return {"planned": c.planned, "trials": c.trials, "failure_codes": c.failures,
            "attempts": c.attempts}


def _write_json(db: Any, fh: TextIO) -> None:
    head = {"experiment": db.meta.get("name"), "counts": _counts_json(db)}
    fh.write(json.dumps(head)[:-1] + ', "trials": [')
    dumps = json.JSONEncoder(separators=(", ", ": ")).encode
    sep = "\n"
    for t in db.trials():
        fh.write(sep + dumps({
            "task": t.key.task, "arm": t.key.arm, "rep": t.key.rep, "state": t.state,
            "attempts": [{"attempt": a.label, "state": a.state, "reason": a.reason}
                         for a in t.attempts],
            "accepted": t.accepted, "failure_code": t.failure_code}))
        sep = ",\n"
    fh.write("\n]}\n")


def _line(counts: dict[str, int]) -> str:
    return " · ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) \
        or "none"


def _write_text(db: Any, fh: TextIO, *, show_all: bool) -> None:
    c = db.counts()
    name = db.meta.get("name") or "(unnamed)"
    left = c.planned - sum(c.trials.get(s, 0) for s in ("done", "infra_error"))
    fh.write(f"experiment {name}: {c.planned} trials planned, {left} not done\n"
             f"trials:   {_line(c.trials)}\n"
             f"failures: {_line(c.failures)}\n"
             f"attempts: {_line(c.attempts)}\n")
    rows = db.trials(unfinished_only=not show_all)
    first = True
    for t in rows:
        if first:
            fh.write("\ntask\tarm\trep\tstate\tattempts\n")
            first = False
        attempts = ", ".join(f"{a.label} {a.state}" + (f" ({a.reason})" if a.reason else "")
                             for a in t.attempts) or "-"
        extra = ""
        if t.state == "done":
            extra = "\taccepted" if t.accepted else f"\t{t.failure_code or 'rejected'}"
        elif t.failure_code:
            extra = f"\t{t.failure_code}"
        fh.write(f"{t.key.task}\t{t.key.arm}\t{t.key.rep}\t{t.state}\t{attempts}{extra}\n")
