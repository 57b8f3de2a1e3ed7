"""Which kind of suite a path names, decided from the path alone.

One rule for every entry point (``assay run``, ``assay serve``, ``assay suite check`` and
``assay.run``), so a path never means a coding suite to one of them and a narrow one to another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

SuiteKind = Literal["narrow", "coding"]


def suite_kind(path: Path) -> tuple[SuiteKind, Path]:
    """A file (a coding ``tasks.jsonl``), or a folder holding ``tasks.jsonl`` and no
    ``data/cases.jsonl``, is a coding suite; anything else is a narrow-task suite folder. The
    path returned is what the loader of that kind takes."""
    path = Path(path)
    if path.is_file():
        return "coding", path
    if (path / "tasks.jsonl").is_file() and not (path / "data" / "cases.jsonl").exists():
        return "coding", path / "tasks.jsonl"
    return "narrow", path


__all__ = ["SuiteKind", "suite_kind"]
