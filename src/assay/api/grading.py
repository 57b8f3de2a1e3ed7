"""Grading again and grading by hand: new grade revisions beside the old ones.

A trial's frozen artifact is graded again by its task's verifier into ``grades/<revision>.json``
(:func:`regrade_trial`); a coding run's recorded answers by the coding graders into
``grades/<revision>.jsonl`` (:func:`regrade_run`); rubric answers by a person, blind, in a
sitting or through a CSV (``grading/rubric.py``). Nothing here replaces an older grade.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from assay.errors import GradingError
from assay.grading.rubric import GraderScreen, ShownAnswer, export_csv, grade_session, import_csv
from assay.grading.rubric.session import Ask

if TYPE_CHECKING:
    from assay.grading.answers.revisions import GradeSummary
    from assay.records.trial import Grade
    from assay.suites.bundle import Bundle

PathLike = str | os.PathLike[str]


def regrade_trial(trial_dir: PathLike, bundle: Bundle, revision: str) -> Grade:
    """Grade a trial's frozen artifact again with ``bundle``'s verifier into ``revision``
    (:class:`NeverOverwrite` when it exists, :class:`TrialRefused` when there is no frozen
    artifact); returns the new grade as written."""
    from assay.runner.trial import regrade

    return regrade(Path(trial_dir), bundle, revision)


def run_kind(run_dir: PathLike) -> str | None:
    """``narrow`` or ``coding``: the kind a run directory's manifest says."""
    from assay.records.manifest import read_manifest

    kind = read_manifest(Path(run_dir)).get("kind")
    return None if kind is None else str(kind)


def run_isolation(run_dir: PathLike) -> str:
    """The sandbox a coding run's answers were graded in (``bwrap`` or ``none``): a regrade
    uses the same one."""
    from assay.grading.answers.revisions import settings_of
    from assay.records.manifest import read_manifest

    return str(settings_of(read_manifest(Path(run_dir))).isolation)


def regrade_run(run_dir: PathLike, revision: str) -> GradeSummary:
    """Grade every recorded answer of a coding run into the new revision ``revision``."""
    from assay.grading.answers.revisions import regrade_run as regrade

    return regrade(Path(run_dir), revision)


__all__ = ["Ask", "GraderScreen", "GradingError", "ShownAnswer", "export_csv", "grade_session",
           "import_csv", "regrade_run", "regrade_trial", "run_isolation", "run_kind"]
