"""Reading hand-written JSONL input files with line-accurate errors.

Bounded like every input (``suites/limits.py``): the file's size is checked before the first
line is read, each line is read with a bound (a single 2 GB line would otherwise be held whole
before ``json.loads`` even starts), and collecting problems stops after
:data:`MAX_PROBLEMS` (a binary file fed as cases has a problem on every line).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.suites.errors import Problem, SuiteError
from assay.suites.limits import JSONL_FILE_MAX_BYTES, JSONL_LINE_MAX_BYTES, describe_bytes
from assay.suites.textfile import too_large

#: Problems collected before reading stops (the message shows the first 20 anyway).
MAX_PROBLEMS = 1000


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
        size = os.fstat(fh.fileno()).st_size
        if size > JSONL_FILE_MAX_BYTES:
            raise too_large(path, "the file", size, JSONL_FILE_MAX_BYTES)
        lineno = offset = 0
        while raw := fh.readline(JSONL_LINE_MAX_BYTES + 1):
            lineno += 1
            start, offset = offset, offset + len(raw)
            if len(problems) >= MAX_PROBLEMS:
                problems.append(Problem(path, lineno, None, f"stopped reading after "
                                        f"{MAX_PROBLEMS} problems"))
                return
            if len(raw) > JSONL_LINE_MAX_BYTES:
                problems.append(Problem(path, lineno, None, "line longer than the "
                                        f"{describe_bytes(JSONL_LINE_MAX_BYTES)} limit for one "
                                        "line: refused"))
                return
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                problems.append(Problem(path, lineno, None,
                                        f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at byte "
                                        f"offset {start + exc.start} (byte {exc.start + 1} of "
                                        "the line); save the file as UTF-8"))
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
            except (ValueError, RecursionError) as exc:  # a 5000-digit number, deep nesting
                why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                problems.append(Problem(path, lineno, None, f"invalid JSON: {why}"))
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
