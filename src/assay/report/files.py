"""Writing report files next to the records they summarise, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_json, atomic_write_text
from assay.records.report import REPORT_JSON, check_report
from assay.report.spilled import has_spilled, json_chunks


def write_reports(run_dir: Path, report: dict[str, Any], markdown: str) -> None:
    """Reports are derived data, rebuilt at will, so they are replaced (atomically), unlike
    raw rows and grades. The report is checked against its model first (the one its
    ``schema`` names): other tools read ``report.json``, so a dict that drifted from the
    declared shape is refused here rather than written. A list spilled to disk
    (``report.spilled``) is checked and written one item at a time, to the same bytes."""
    path = run_dir / REPORT_JSON
    check_report(report, path)
    if not has_spilled(report):
        atomic_write_json(path, report)
    else:
        try:
            atomic_write_text(path, json_chunks(report, ensure_ascii=False))
        except UnicodeEncodeError:
            # A surrogate-escaped file name (not UTF-8) can only travel as an ASCII escape.
            atomic_write_text(path, json_chunks(report, ensure_ascii=True))
    atomic_write_text(run_dir / "report.md", markdown)
