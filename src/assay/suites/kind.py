"""Which kind of suite a path names, decided from the path alone.

One rule for every entry point (``assay run``, ``assay serve``, ``assay suite check`` and
``assay.run``), so a path never means a coding suite to one of them and a narrow one to another.
"""

from __future__ import annotations

import json
from pathlib import Path

from assay.records.statuses import SuiteKind
from assay.suites.errors import SuiteError

#: how much of a file is read to tell a narrow suite's cases from coding tasks
_HEAD_BYTES = 64 * 1024


def _narrow_suite_of(path: Path) -> Path | None:
    """The narrow suite folder a file belongs to (``data/cases.jsonl`` and the like), when it
    does: it sits in a ``data/`` folder beside the suite's ``prompts/`` or ``suite.yaml``, or
    its first row is a case (``input`` and ``expected``, no ``prompt``). Passing such a file
    used to be read as coding tasks, one "field 'type'" error per line."""
    folder = path.resolve().parent
    if folder.name == "data" and ((folder.parent / "prompts").is_dir()
                                  or (folder.parent / "suite.yaml").is_file()):
        return folder.parent
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    first = next((line for line in head.splitlines() if line.strip()), "")
    try:
        row = json.loads(first)
    except ValueError:
        return None
    if isinstance(row, dict) and "input" in row and "expected" in row and "prompt" not in row:
        return folder.parent if folder.name == "data" else folder
    return None


def suite_kind(path: Path) -> tuple[SuiteKind, Path]:
    """A file (a coding ``tasks.jsonl``), or a folder holding ``tasks.jsonl`` and no
    ``data/cases.jsonl``, is a coding suite; anything else is a narrow-task suite folder. The
    path returned is what the loader of that kind takes. A file of a narrow suite (its cases)
    is refused with one line naming the folder to pass instead."""
    path = Path(path)
    if path.is_file():
        suite = _narrow_suite_of(path)
        if suite is not None:
            shown = path.parent.parent if path.parent.name == "data" else suite
            raise SuiteError.one(path, f"a file of a narrow suite: pass the suite directory "
                                 f"({shown})")
        return "coding", path
    if (path / "tasks.jsonl").is_file() and not (path / "data" / "cases.jsonl").exists():
        return "coding", path / "tasks.jsonl"
    return "narrow", path


__all__ = ["SuiteKind", "suite_kind"]
