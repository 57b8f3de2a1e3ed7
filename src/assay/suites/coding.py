"""Small coding suites: the ``tasks.jsonl`` seed file teams already keep.

Three task types: ``unit`` (code run against the task's tests in the sandbox), ``diff`` (a
unified diff compared with a golden one) and ``rubric`` (kept for blind human grading). Every
line is validated before any model call, with file:line:field errors. The file is read through
``suites/jsonl.py``, bounded in size and per line (``suites/limits.py``): a tasks file may come
from anyone, and one that cannot be a real suite is refused before it is parsed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.suites.errors import Problem, SuiteError
from assay.suites.jsonl import read_jsonl_objects

TASK_TYPES = ("unit", "diff", "rubric")
LANGUAGES = ("python", "javascript")
_PREFIX_LANGUAGE = {"py": "python", "js": "javascript"}
_PREFIX = re.compile(r"^(py|js)(?![a-z])", re.IGNORECASE)
_REQUIRED = {"unit": ("prompt", "tests"), "diff": ("prompt", "files", "golden"),
             "rubric": ("prompt", "rubric")}


@dataclass(frozen=True)
class CodingTask:
    id: str
    type: str
    language: str | None  # None only for rubric tasks that are not Python or JavaScript
    prompt: str
    line: int
    tests: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    golden: str | None = None
    rubric: str | None = None
    solution: str | None = None
    system: str | None = None


@dataclass(frozen=True)
class CodingSuite:
    path: Path
    name: str
    tasks: tuple[CodingTask, ...]
    sha256: str

    def by_id(self) -> dict[str, CodingTask]:
        return {t.id: t for t in self.tasks}


def _bad_file_path(path: str) -> str | None:
    if (not path or "\0" in path or "\\" in path or path.startswith("/")
            or any(part in ("", ".", "..") for part in path.split("/"))):
        return ("paths must be relative file paths inside the task directory (no empty, '.' "
                "or '..' parts, NUL or backslash)")
    return None


def infer_language(task_id: str, declared: Any) -> str | None:
    """Teams name tasks ``py-…`` and ``js-…``; an explicit ``language`` wins. The prefix must
    be a word of its own (``py-01``, ``js_7``), so ``json-roundtrip`` is not JavaScript."""
    if declared is not None:
        return declared
    m = _PREFIX.match(task_id)
    return _PREFIX_LANGUAGE[m.group(1).lower()] if m else None


def _check_task(path: Path, lineno: int, obj: dict[str, Any],
                problems: list[Problem]) -> CodingTask | None:
    before = len(problems)

    def bad(fld: str, msg: str) -> None:
        problems.append(Problem(path, lineno, fld, msg))

    tid = obj.get("id")
    if not isinstance(tid, str) or not tid.strip():
        bad("id", "missing" if tid is None else "must be a non-empty string")
        return None
    if "/" in tid or "\\" in tid or "\0" in tid or tid in (".", ".."):
        # ids name folders of execution records inside the run directory
        bad("id", f"{tid!r}: must not contain '/', '\\' or NUL, nor be '.' or '..'")
        return None
    ttype = obj.get("type")
    if ttype not in TASK_TYPES:
        bad("type", f"must be one of {', '.join(TASK_TYPES)}, got {ttype!r}")
        return None
    for key in _REQUIRED[ttype]:
        value = obj.get(key)
        if key == "files":
            if not isinstance(value, dict) or not value:
                bad(key, "must be a non-empty object of path -> file text")
            elif not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                bad(key, "every path and file text must be a string")
            else:
                for k in value:
                    why = _bad_file_path(k)
                    if why:
                        bad(key, f"{why}: {k!r}")
                names = set(value)
                for k in value:
                    parents = {"/".join(k.split("/")[:i]) for i in range(1, k.count("/") + 1)}
                    if parents & names:
                        bad(key, f"a parent folder is also listed as a file: {k!r}")
        elif not isinstance(value, str) or not value.strip():
            bad(key, "missing" if value is None else "must be a non-empty string")
    for key in ("solution", "system"):
        if key in obj and not isinstance(obj[key], str):
            bad(key, "must be a string")
    declared = obj.get("language")
    if declared is not None and declared not in LANGUAGES:
        bad("language", f"must be one of {', '.join(LANGUAGES)}, got {declared!r}")
    language = infer_language(tid, declared)
    if language is None and ttype != "rubric":
        bad("language", "missing: set \"language\" (python or javascript) or name the task "
            "py-… / js-…")
    if len(problems) > before:
        return None
    return CodingTask(id=tid, type=ttype, language=language, prompt=obj["prompt"], line=lineno,
                      tests=obj.get("tests"), files=dict(obj.get("files") or {}),
                      golden=obj.get("golden"), rubric=obj.get("rubric"),
                      solution=obj.get("solution"), system=obj.get("system"))


def load_coding_suite(path: Path) -> CodingSuite:
    path = Path(path)
    objects, problems = read_jsonl_objects(path)
    tasks: list[CodingTask] = []
    seen: dict[str, int] = {}
    for lineno, obj in objects:
        task = _check_task(path, lineno, obj, problems)
        if task is None:
            continue
        if task.id in seen:
            problems.append(Problem(path, lineno, "id", f"duplicate id {task.id!r} "
                                    f"(first on line {seen[task.id]})"))
            continue
        seen[task.id] = lineno
        tasks.append(task)
    if problems:
        raise SuiteError(problems)
    name = path.resolve().parent.name if path.name == "tasks.jsonl" else path.stem
    return CodingSuite(path=path, name=name, tasks=tuple(tasks),
                       sha256=hashlib.sha256(path.read_bytes()).hexdigest())
