"""What a CI system reads from a run: JUnit XML, the GitHub step summary, the pass gate.

Files are written whole and atomically (``records/io.py``); the step summary is appended only
when ``GITHUB_STEP_SUMMARY`` is set. An ``OSError`` is left to the caller, who knows which
flag named the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from assay.report.ci_outputs import append_step_summary
from assay.report.ci_outputs_runs import Gate, append_run_step_summary, gate

PathLike = str | os.PathLike[str]


def write_experiment_junit(path: PathLike, report: dict[str, Any]) -> None:
    """An experiment report as JUnit XML: one test case per task and arm."""
    from assay.records.io import atomic_write_text
    from assay.report.ci_outputs import junit_xml

    atomic_write_text(Path(path), junit_xml(report))


def write_run_junit(path: PathLike, run_dir: PathLike, report: dict[str, Any]) -> None:
    """A narrow or coding run's report as JUnit XML: a test case per case or task."""
    from assay.records.io import atomic_write_text
    from assay.report.ci_outputs_runs import run_junit

    atomic_write_text(Path(path), run_junit(Path(run_dir), report))


__all__ = ["Gate", "append_run_step_summary", "append_step_summary", "gate",
           "write_experiment_junit", "write_run_junit"]
