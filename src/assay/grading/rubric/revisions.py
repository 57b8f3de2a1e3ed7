"""Rubric grades on disk: append-only revisions that never replace an older verdict.

A grade is a person's verdict, so a later look at the same answer must sit beside the earlier
one, not over it: the earlier grader may have been right, and a report must be able to say who
changed what. Every interactive session and every CSV import therefore writes a new revision,
named so that two never collide, in the run the answer came from::

    RUN_DIR/grades/rubric/<UTC-stamp>-<grader>.jsonl      one row per grade, append-only
    RUN_DIR/grades/rubric/<UTC-stamp>-<grader>.meta.json  who, when, seed, source (written once)

A revision is a *grading round*. Reading picks the newest grade of each answer
(:func:`latest_grades`), or the grades as they stood after an older round (:func:`grades_as_of`,
what ``--rubric-round`` selects). Nothing here knows how an answer was shown, which keeps the
blinding (``rubric_pool``) and the CSV round trip (``rubric_csv``) free to change without
touching what a grade on disk means.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assay.errors import GradingError, NeverOverwrite
from assay.records.io import TORN_SUFFIX, JsonlAppender, scan_jsonl, write_new_text
from assay.records.manifest import utc_now

GRADES_DIR = "grades/rubric"
REVISION_SCHEMA = "assay.rubric.revision/1"
SCORES = (0, 1, 2, 3)


def stamp(millis: bool = True) -> str:
    """A UTC time that sorts as text, so revision names sort in the order they were made."""
    now = dt.datetime.now(dt.UTC)
    if millis:
        return now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z"
    return now.strftime("%Y%m%dT%H%M%SZ")


def safe_grader(grader: str) -> str:
    """The grader's name as it may appear in a file name (the recorded name stays as given)."""
    if not grader or not grader.strip():
        raise GradingError("a grader name is needed (--grader NAME)")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", grader.strip()).strip("._")
    return safe[:40] or "grader"


def new_revision_name(run_dirs: Sequence[Path], grader: str) -> str:
    """``<UTC-stamp>-<grader>``, with a counter when that name is already taken in any run."""
    base = f"{stamp()}-{safe_grader(grader)}"
    name, n = base, 1
    while any((Path(d) / GRADES_DIR / f"{name}{ext}").exists()
              for d in run_dirs for ext in (".jsonl", ".meta.json")):
        n += 1
        name = f"{base}-{n}"
    return name


def dumps(data: Any) -> str:
    """Indented JSON for the small files a person may open (meta, export maps)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class RevisionWriter:
    """One revision across runs: each run's files are created on its first grade, so a run
    receives only the grades of its own answers and an empty session leaves nothing behind."""

    def __init__(self, name: str, meta: dict[str, Any], per_run: dict[Path, dict[str, Any]]):
        self.name = name
        self.meta = meta
        self.per_run = per_run
        self._open: dict[Path, JsonlAppender] = {}

    def append(self, run_dir: Path, row: dict[str, Any]) -> None:
        """Save one grade at once (fsync'd), so a crash right after loses nothing typed."""
        appender = self._open.get(run_dir)
        if appender is None:
            directory = run_dir / GRADES_DIR
            meta = {**self.meta, **self.per_run.get(run_dir, {})}
            try:
                write_new_text(directory / f"{self.name}.meta.json", dumps(meta))
            except NeverOverwrite:
                raise GradingError(f"grade revision {self.name} already exists; "
                                   "start the session again") from None
            appender = self._open[run_dir] = JsonlAppender(directory / f"{self.name}.jsonl",
                                                           sync_every=1)
        appender.append(row)

    @property
    def written(self) -> bool:
        return bool(self._open)

    def close(self) -> None:
        for appender in self._open.values():
            appender.close()


def grade_row(*, task_id: str, sample: int, answer_id: str, score: int, note: str,
              grader: str, revision: str, seed: int | None, source: str, answer_sha256: str,
              graded_at: str | None = None, **extra: Any) -> dict[str, Any]:
    """One grade as stored; ``answer_sha256`` ties it to the exact text the grader saw."""
    return {"id": task_id, "sample": sample, "score": score, "note": note,
            "grader": grader, "graded_at": graded_at or utc_now(), "revision": revision,
            "seed": seed, "answer_id": answer_id, "source": source,
            "answer_sha256": answer_sha256, **extra}


#: the lowest 0-3 score that counts as a pass where one is needed (JUnit, per-task counts):
#: 2 is "acceptable with minor issues" on the 0-3 scale a grader is shown
PASS_SCORE = 2


def rubric_rounds(run_dir: Path) -> list[dict[str, Any]]:
    """Every grading round (revision) of the run, oldest first: name, grader, source
    (``interactive`` or ``csv``), when it started and how many rows it holds. Names start with
    a UTC stamp, so name order is the order the rounds were made."""
    directory = Path(run_dir) / GRADES_DIR
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        if path.name.endswith(TORN_SUFFIX):  # a cut-off row kept aside, not a round
            continue
        name = path.name[: -len(".jsonl")]
        meta: dict[str, Any] = {}
        meta_path = directory / f"{name}.meta.json"
        if meta_path.is_file():
            try:
                loaded = json.loads(meta_path.read_text(encoding="utf-8"))
                meta = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                meta = {}
        out.append({"name": name, "grader": meta.get("grader"), "source": meta.get("source"),
                    "started_at": meta.get("started_at") or meta.get("imported_at"),
                    "rows": len(scan_jsonl(path).rows)})
    return out


def grades_as_of(run_dir: Path, round_name: str | None = None
                 ) -> tuple[str | None, dict[tuple[str, int], dict[str, Any]]]:
    """The grades as they stood after round ``round_name`` (default: the latest round): for
    each answer, its newest grade in that round or an earlier one, so a later round that
    graded only some answers leaves the others' grades standing. Returns the round the figures
    are as of (null when there is none) and (task id, sample) -> grade row. A round the run
    does not have is an error naming the ones it has."""
    rounds = [r["name"] for r in rubric_rounds(run_dir)]
    if round_name is None:
        cutoff = rounds[-1] if rounds else None
    elif round_name in rounds:
        cutoff = round_name
    else:
        have = ", ".join(rounds[-10:]) or "none (nothing graded yet)"
        raise GradingError(f"{Path(run_dir) / GRADES_DIR}: no grading round {round_name!r}; "
                           f"the run has: {have}")
    if cutoff is None:
        return None, {}
    return cutoff, _newest(Path(run_dir) / GRADES_DIR, [r for r in rounds if r <= cutoff])


def latest_grades(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(task id, sample) -> the newest grade row of that answer across all revisions of the run
    (newest by ``graded_at``, then by revision name, then by position in the file). Older
    revisions stay on disk untouched; rows without a valid 0-3 score are ignored."""
    return grades_as_of(run_dir)[1]


def _newest(directory: Path, names: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    best: dict[tuple[str, int], tuple[tuple[str, str, int], dict[str, Any]]] = {}
    for revision in names:
        for index, row in enumerate(scan_jsonl(directory / f"{revision}.jsonl").rows):
            score = row.get("score")
            if type(score) is not int or score not in SCORES:
                continue
            try:
                key = (str(row["id"]), int(row["sample"]))
            except (KeyError, TypeError, ValueError):
                continue
            order = (str(row.get("graded_at") or ""), str(row.get("revision") or revision),
                     index)
            if key not in best or order >= best[key][0]:
                best[key] = (order, {**row, "revision": revision})  # the round it is in
    return {key: row for key, (_, row) in best.items()}
