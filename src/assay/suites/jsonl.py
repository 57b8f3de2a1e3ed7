"""Reading hand-written JSONL input files with line-accurate errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from assay.suites.errors import Problem, SuiteError


def read_jsonl_objects(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[Problem]]:
    """Every non-blank line as ``(line_number, object)``, plus the problems found on the way.

    Not UTF-8 is reported with the first offending line rather than as a decode traceback.
    Blank lines are tolerated: editors add them at the end and they carry no meaning.
    """
    if not path.is_file():
        raise SuiteError.one(path, "file not found")
    data = path.read_bytes()
    problems: list[Problem] = []
    out: list[tuple[int, dict[str, Any]]] = []
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(path, lineno, None,
                                    f"not valid UTF-8 (byte {exc.start + 1} of the line); "
                                    "save the file as UTF-8"))
            continue
        if lineno == 1 and line.startswith("\ufeff"):
            line = line[1:]
        if not line.strip():
            continue
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
        out.append((lineno, obj))
    if not out and not problems:
        problems.append(Problem(path, None, None, "file is empty: no cases"))
    return out, problems
