"""The records a caller reads back from a run or trial directory, and the run directories
themselves.

Reading goes through the record models of ``assay.records`` (each file checked against its
schema, a wrong or missing file a :class:`RecordError` naming it). Run directories under an
``--out-root`` are claimed, never reused: a name taken is skipped, and a claimed directory that
stayed empty (the run was refused) is released. The record models are re-exported here
(:class:`TrialRecord`, :class:`Grade`, :class:`ExperimentManifest`, :class:`ExperimentReport`,
the reports and comparisons of model runs):
what the readers return, documented field by field in ``docs/records.md``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.records.experiment import ExperimentManifest, ExperimentReport
from assay.records.io import TornRowWarning
from assay.records.report import CodingComparison, CodingReport, NarrowComparison, NarrowReport
from assay.records.trial import Grade, TrialRecord

if TYPE_CHECKING:
    from assay.report.trial_view import TrialView

PathLike = str | os.PathLike[str]

def read_trial(trial_dir: PathLike) -> TrialRecord:
    """An attempt directory's ``trial.json`` as its model (``docs/records.md``)."""
    from assay.records.trial import read_trial as read

    return read(Path(trial_dir))


def read_grade(trial_dir: PathLike, revision: str) -> Grade:
    """An attempt's grade of ``revision`` (``grades/<revision>.json``) as its model."""
    from assay.records.trial import read_grade as read

    return read(Path(trial_dir), revision)


def trial_grade(trial_dir: PathLike) -> Grade | None:
    """The grade ``trial.json`` names (its ``grade.revision``), read from disk; None when the
    trial has none."""
    record = read_trial(trial_dir)
    return None if record.grade is None else read_grade(trial_dir, record.grade.revision)


def read_experiment_manifest(run_dir: PathLike) -> ExperimentManifest:
    """An experiment run's ``manifest.json`` as its model."""
    from assay.records.experiment import read_experiment_manifest as read

    return read(Path(run_dir))


def read_experiment_report(run_dir: PathLike) -> ExperimentReport:
    """An experiment run's ``report.json`` as its model."""
    from assay.records.experiment import read_experiment_report as read

    return read(Path(run_dir))


def has_run_report(run_dir: PathLike) -> bool:
    """Whether a narrow or coding run directory has a report (``report.json``) to rebuild."""
    from assay.records.report import REPORT_JSON

    return (Path(run_dir) / REPORT_JSON).is_file()


def trial_view(path: PathLike) -> TrialView:
    """One trial opened for reading (``assay trial show``): an attempt folder, or its trial
    folder (the last attempt); instruction, change, checks, steps, ledger and timings.
    ``FileNotFoundError`` when it is neither."""
    from assay.report.trial_view import load_trial_view

    return load_trial_view(Path(path))


def read_manifest(run_dir: PathLike) -> dict[str, Any]:
    """A narrow or coding run's ``manifest.json``, checked."""
    from assay.records.manifest import read_manifest as read

    return read(Path(run_dir))


def claim_run_dir(root: PathLike, suite: str, model: str) -> Path:
    """A new run directory under ``root`` named by suite, model and UTC time (never an
    existing one: ``records/run_dirs.py``)."""
    from assay.records.run_dirs import claim_run_dir as claim

    return claim(Path(root), suite, model)


def release_unused(path: PathLike) -> None:
    """Give back a claimed run directory that nothing was written into."""
    from assay.records.run_dirs import release_unused as release

    release(Path(path))


def write_json(path: PathLike, data: Any) -> None:
    """``data`` as a JSON file, written whole or not at all (``records/io.py``)."""
    from assay.records.io import atomic_write_json

    atomic_write_json(Path(path), data)


def run_stamp() -> str:
    """The UTC time as run directories are named by it."""
    from assay.records.layout import run_stamp as stamp

    return stamp()


__all__ = ["CodingComparison", "CodingReport", "ExperimentManifest", "ExperimentReport", "Grade",
           "NarrowComparison", "NarrowReport", "TornRowWarning", "TrialRecord",
           "claim_run_dir", "has_run_report", "read_experiment_manifest", "read_experiment_report",
           "read_grade", "read_manifest", "read_trial", "release_unused", "run_stamp",
           "trial_grade", "trial_view", "write_json"]
