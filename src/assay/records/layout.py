"""The run directory's layout: file names, the run stamp, and which row stands for a key.

Writers (the runner, the graders) and readers (reports, comparisons, re-grading) agree on a run
directory through this module alone, so a reader never has to import the code that wrote it.

::

    RUN_DIR/manifest.json              what was asked, before the first call
    RUN_DIR/raw_predictions.jsonl      narrow runs: one row per case and repeat
    RUN_DIR/suite/cases.jsonl          narrow runs: the exact cases file run, for the report
    RUN_DIR/samples.jsonl              coding runs: one answer per task and sample
    RUN_DIR/suite/tasks.jsonl          coding runs: the exact tasks file, for re-grading
    RUN_DIR/exec/<task>/<sample>/      coding runs: full logs of each sandboxed execution
    RUN_DIR/grades/<revision>.jsonl    coding runs: one automatic grade per answer, append-only
    RUN_DIR/grades/<revision>.meta.json   who graded, with what, when (written once)
    RUN_DIR/grades/rubric/             human rubric grades (``grading/rubric.py``)
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

#: a row as read (a dict) or reduced (``report.narrow.SlimRow``)
R = TypeVar("R", bound=Mapping[str, Any])

MANIFEST = "manifest.json"
RAW_PREDICTIONS = "raw_predictions.jsonl"
SAMPLES = "samples.jsonl"
SUITE_SNAPSHOT = "suite/tasks.jsonl"
#: a narrow run's copy of the cases it ran: the report shows the inputs of wrong answers from it
CASES_SNAPSHOT = "suite/cases.jsonl"
EXEC_DIR = "exec"
GRADES_DIR = "grades"
GRADE_SUFFIX = ".jsonl"
GRADE_META_SUFFIX = ".meta.json"
#: the revision a coding run grades its own answers into
RUN_GRADE_REVISION = "v1"

_REVISION = re.compile(r"[A-Za-z0-9._-]+")


def interrupted_start(run_dir: Path, own: Iterable[str] = ()) -> bool:
    """Whether ``run_dir`` (which has no manifest) holds nothing but what a start killed before
    its manifest was written leaves: the manifest's half-written temporary file and the files
    in ``own``, which a start writes again before its manifest. Those temporary files are
    removed; anything else means the folder is someone else's, and is never touched."""
    left = list(run_dir.iterdir())
    temps = [p for p in left if p.name.startswith(f".{MANIFEST}.") and p.name.endswith(".tmp")]
    if any(p not in temps and p.name not in own for p in left):
        return False
    for p in temps:
        p.unlink(missing_ok=True)
    return True


def run_stamp(now: dt.datetime | None = None) -> str:
    """``20261201T094052Z``: the UTC second a run started, as used in default directory names
    (sortable, path-safe, no colons)."""
    when = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return when.strftime("%Y%m%dT%H%M%SZ")


def exec_dir(run_dir: Path, task_id: str, sample: int) -> Path:
    return run_dir / EXEC_DIR / task_id / str(sample)


def valid_revision(name: str) -> bool:
    """A revision name is a file name stem: letters, digits, ``.``, ``_`` and ``-`` only."""
    return bool(_REVISION.fullmatch(name)) and name not in (".", "..")


def grade_rows_path(run_dir: Path, revision: str) -> Path:
    return run_dir / GRADES_DIR / f"{revision}{GRADE_SUFFIX}"


def grade_meta_path(run_dir: Path, revision: str) -> Path:
    return run_dir / GRADES_DIR / f"{revision}{GRADE_META_SUFFIX}"


def grade_revisions(run_dir: Path) -> list[str]:
    """Automatic grade revisions of a run: every ``grades/<name>.meta.json`` (the meta is
    written first, so a revision without one does not exist yet)."""
    root = run_dir / GRADES_DIR
    if not root.is_dir():
        return []
    return sorted(p.name[: -len(GRADE_META_SUFFIX)] for p in root.glob(f"*{GRADE_META_SUFFIX}")
                  if p.is_file())


def is_answered(row: dict[str, Any]) -> bool:
    """A row without ``error`` is an answer; one with ``error`` is history (asked again)."""
    return not row.get("error")


def standing_rows(rows: Iterable[R], key: Callable[[R], Any]) -> dict[Any, R]:
    """The row that stands for each key: the last answered one; an infra-error row only when no
    answer ever arrived. Older rows stay on disk as the run's history."""
    out: dict[Any, R] = {}
    for row in rows:
        k = key(row)
        prev = out.get(k)
        if prev is None or not row.get("error") or prev.get("error"):
            out[k] = row
    return out


def narrow_key(row: Mapping[str, Any]) -> tuple[str, int]:
    return row["id"], int(row["repeat"])


def sample_key(row: dict[str, Any]) -> tuple[str, int]:
    return row["id"], int(row["sample"])
