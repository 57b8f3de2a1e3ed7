"""Writing report files next to the records they summarise, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_json, atomic_write_text
from assay.records.report import REPORT_JSON, check_report


def write_reports(run_dir: Path, report: dict[str, Any], markdown: str) -> None:
    """Reports are derived data, rebuilt at will, so they are replaced (atomically), unlike
    raw rows and grades. The report is checked against its model first (the one its
    ``schema`` names): other tools read ``report.json``, so a dict that drifted from the
    declared shape is refused here rather than written."""
    path = run_dir / REPORT_JSON
    atomic_write_json(path, check_report(report, path))
    atomic_write_text(run_dir / "report.md", markdown)
