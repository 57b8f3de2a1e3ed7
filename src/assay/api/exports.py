"""Exports into the formats the agent-evaluation ecosystem reads: an agent trial as an ATIF
trajectory (``report/atif.py``), a narrow or coding run as an Inspect eval log
(``report/inspect_log.py``, the ``assay[inspect]`` extra). Both are views built from the
records on disk; the records stay the source of truth."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from assay.errors import InputError, RecordError

PathLike = str | os.PathLike[str]

#: The export formats ``trial export`` and ``exp export`` take.
TRAJECTORY_FORMATS = ("atif",)


def _check_format(fmt: str) -> None:
    if fmt not in TRAJECTORY_FORMATS:
        raise InputError(f"--format {fmt}: the formats are {', '.join(TRAJECTORY_FORMATS)}")


def trial_trajectory(trial_dir: PathLike, fmt: str = "atif") -> dict[str, Any]:
    """One trial (an attempt folder, or its trial folder for the last attempt) as an ATIF
    document, built afresh from its records (a regrade's newest verdict included)."""
    from assay.report.atif import build_trajectory

    _check_format(fmt)
    path = Path(trial_dir)
    try:
        return build_trajectory(path).as_json()
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None


def run_attempt_dirs(run_dir: Path) -> list[Path]:
    """Every attempt folder of an experiment run that holds a ``trial.json``, in path order."""
    if not (run_dir / "trials").is_dir():
        raise InputError(f"{run_dir}: not an experiment run (no trials/ folder)")
    return sorted(p.parent for p in run_dir.glob("trials/*/*/*/a*/trial.json"))


def export_run_trajectories(run_dir: PathLike, out_dir: PathLike,
                            fmt: str = "atif") -> list[Path]:
    """Every attempt of an experiment run as an ATIF document:
    ``OUT/<task>/<arm>/<rep>/a<N>.atif.json``, each written atomically. An attempt whose
    records cannot be read is an error naming its folder, after the others are written."""
    from assay.records.io import atomic_write_json
    from assay.report.atif import build_trajectory

    _check_format(fmt)
    run, out = Path(run_dir), Path(out_dir)
    written: list[Path] = []
    failed: list[str] = []
    for adir in run_attempt_dirs(run):
        rel = adir.relative_to(run / "trials")
        target = out / rel.parent / f"{rel.name}.atif.json"
        try:
            doc = build_trajectory(adir).as_json()
        except (RecordError, OSError, ValueError) as exc:
            failed.append(f"{adir}: {exc}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target, doc)
        written.append(target)
    if failed:
        raise RecordError(f"{len(failed)} attempt(s) not exported: " + "; ".join(failed[:5]))
    return written


def write_inspect_log(run_dir: PathLike, target: PathLike,
                      grade_revision: str | None = None) -> dict[str, Any]:
    """A narrow or coding run as an Inspect eval log at ``target`` (``.eval`` or ``.json``),
    through Inspect's own log API (the ``assay[inspect]`` extra; an InputError names it when
    it is missing). Returns the samples written and the headline metric."""
    from assay.report.inspect_log import write_inspect_log as write

    run = Path(run_dir)
    if not (run / "manifest.json").is_file():
        raise InputError(f"{run}: not a run directory (no manifest.json)")
    return write(run, Path(target), grade_revision)
