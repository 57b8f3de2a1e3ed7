"""Every run under some directories, in time order, with drift between comparable runs
(``assay history``): the object, and its one-file HTML page.

The object is plain JSON (``assay history --json`` prints it as is); how runs are grouped
into series and when a pair counts as drift is said in ``report/history_series.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from assay.report.history_words import (
    drift_rule,
    drift_text,
    headline_text,
    pct,
    series_caption,
    served_text,
    served_words,
)

if TYPE_CHECKING:
    from assay.report.history import HistoryRow
    from assay.report.history_series import Group, History, Series

PathLike = str | os.PathLike[str]


def build_history(roots: list[PathLike], *, threshold: float = 0.0) -> History:
    """The history of every run under ``roots``; a pair of consecutive runs is flagged when
    the paired 95% interval excludes zero by more than ``threshold``."""
    from assay.report.history_series import build_history as build

    return build([Path(r) for r in roots], threshold=threshold)


def write_history_html(path: PathLike, history: History) -> Path:
    """The history as one HTML page with a trend plot per group, written atomically."""
    from assay.report.history_html import write_history_html as write

    return write(Path(path), history)


__all__ = ["Group", "History", "HistoryRow", "Series", "build_history", "drift_rule",
           "drift_text", "headline_text", "pct", "series_caption", "served_text",
           "served_words", "write_history_html"]
