"""Reading hand-written JSONL input files with line-accurate errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.suites.errors import Problem, SuiteError


def iter_jsonl_objects(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every non-blank line as ``(line_number, object)``, read one line at a time so a large
    suite is never held twice; problems are appended to ``problems`` as they are found.

    Not UTF-8 is reported with the offending line rather than as a decode traceback. Blank
    lines are tolerated: editors add them at the end and they carry no meaning.
    """
    if not path.is_file():
        raise SuiteError.one(path, "file not found")
    seen_any = False
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                problems.append(Problem(path, lineno, None,
                                        f"not valid UTF-8 (byte {exc.start + 1} of the line); "
                                        "save the file as UTF-8"))
                continue
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            seen_any = True
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(Problem(path, lineno, None, f"invalid JSON: {exc.msg} "
                                        f"(column {exc.colno})"))
                continue
            if not isinstance(obj, dict):
                problems.append(Problem(path, lineno, None,
                                        f"expected a JSON object, got {type(obj).__name__}"))
                continue
            yield lineno, obj
    if not seen_any and not problems:
        problems.append(Problem(path, None, None, "file is empty: no cases"))


def read_jsonl_objects(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[Problem]]:
    """All objects at once, for small files (coding tasks)."""
    problems: list[Problem] = []
    objects = list(iter_jsonl_objects(path, problems))
    return objects, problems
