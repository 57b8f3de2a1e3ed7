"""Writing report files next to the records they summarise, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_json, atomic_write_text


def write_reports(run_dir: Path, report: dict[str, Any], markdown: str) -> None:
    """Reports are derived data, rebuilt at will, so they are replaced (atomically), unlike
    raw rows and grades."""
    atomic_write_json(run_dir / "report.json", report)
    atomic_write_text(run_dir / "report.md", markdown)
