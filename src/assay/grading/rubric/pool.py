"""The answers a rubric grader sees, and what keeps the grader blind to who wrote them.

A grade is only worth something if the grader could not favour a model: answers from every
given run are pooled, shuffled with a recorded seed (so the order can be reproduced, and runs
interleave instead of arriving in blocks) and shown under an opaque id. Only the extracted code
is shown, since the raw answer may say who wrote it, and any model name, run id or run path that
still appears in a shown text is redacted. Whatever shows the answers (a terminal, a CSV) gets
them from here already blinded, so no front end can leak what it never received.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import GradingError, RecordError
from assay.grading.rubric.revisions import latest_grades
from assay.records.io import scan_jsonl
from assay.records.manifest import read_manifest

SAMPLES = "samples.jsonl"
TASKS_SNAPSHOT = "suite/tasks.jsonl"
REDACTED = "[redacted]"
_MIN_REDACT_LEN = 4  # shorter names ("gpt") would blank out ordinary code


@dataclass(frozen=True)
class BlindAnswer:
    """One answer to grade. ``run_dir`` is for writing its grade back, never for showing."""

    answer_id: str
    run_dir: Path
    task_id: str
    sample: int
    prompt: str
    rubric: str
    language: str | None
    text: str


@dataclass(frozen=True)
class Run:
    """A coding run opened for grading, with the names that would unblind its answers."""

    run_dir: Path
    run_id: str
    secrets: tuple[str, ...]


def open_run(run_dir: Path) -> tuple[Run, dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The run, its rubric tasks by id and its sample rows; GradingError if not a coding run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GradingError(f"{run_dir}: no such run directory")
    try:
        manifest = read_manifest(run_dir)
    except RecordError as exc:
        if not (run_dir / "manifest.json").exists():
            raise GradingError(f"{run_dir}: no manifest.json: not an assay run directory") \
                from None
        raise GradingError(f"{run_dir}/manifest.json: unreadable ({exc})") from None
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    if kind != "coding":
        raise GradingError(f"{run_dir}: a {kind or 'narrow-task'} run, not a coding run: rubric "
                           "grading needs the run directory of a coding suite")
    tasks_path = run_dir / TASKS_SNAPSHOT
    if not tasks_path.is_file():
        raise GradingError(f"{tasks_path}: missing: this coding run has no suite snapshot")
    tasks: dict[str, dict[str, Any]] = {}
    for lineno, raw in enumerate(tasks_path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = loads_object(raw)
        except ValueError as exc:
            raise GradingError(f"{tasks_path}:{lineno}: {exc}") from None
        if isinstance(obj.get("id"), str):
            tasks[obj["id"]] = obj
    try:
        rows = scan_jsonl(run_dir / SAMPLES).rows
    except ValueError as exc:
        raise GradingError(str(exc)) from None
    model = manifest.get("model") or {}
    names = {str(manifest.get("run_id") or ""), str(run_dir), str(run_dir.resolve()),
             str(model.get("requested") or "")}
    if len(run_dir.name) >= 8:  # a short directory name would be an ordinary word
        names.add(run_dir.name)
    names.update(str(m) for m in model.get("served_models") or [] if m)
    names.update(str(r["served_model"]) for r in rows if r.get("served_model"))
    run = Run(run_dir=run_dir, run_id=str(manifest.get("run_id") or run_dir.name),
              secrets=tuple(sorted(n for n in names if len(n) >= _MIN_REDACT_LEN)))
    return run, tasks, rows


def loads_object(line: str) -> dict[str, Any]:
    """One JSON object, or a ValueError short enough to follow a file:line."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def _final_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The row that counts for each (task, sample): the last one without ``error``. A key with
    only infra-error rows has no answer yet."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if row.get("error") or "id" not in row or "sample" not in row:
            continue
        out[(str(row["id"]), int(row["sample"]))] = row
    return out


def _shown_text(row: dict[str, Any]) -> str:
    """The extracted code; the raw answer only when extraction found nothing."""
    code = row.get("code")
    if isinstance(code, str) and code.strip():
        return code
    raw = row.get("raw")
    return raw if isinstance(raw, str) else ""


def sha256(text: str) -> str:
    """Ties a grade to the exact text graded, so a changed answer is never given an old grade."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Pool:
    """Every ungraded (or, with regrade, every) rubric answer of the given runs, unshuffled."""

    runs: tuple[Run, ...]
    answers: tuple[BlindAnswer, ...]
    hashes: dict[tuple[Path, str, int], str]  # answer text sha256 by (run_dir, task, sample)

    def redact(self, text: str) -> str:
        """``text`` with every name of every pooled run blanked: an answer from run A may name
        run B's model, so all names are redacted in every text, longest first."""
        names = sorted({n for r in self.runs for n in r.secrets}, key=len, reverse=True)
        for name in names:
            text = re.sub(re.escape(name), REDACTED, text, flags=re.IGNORECASE)
        return text

    def sha_of(self, answer: BlindAnswer) -> str:
        """The hash of the text as collected, before redaction (what the run holds)."""
        return self.hashes[(answer.run_dir, answer.task_id, answer.sample)]


def build_pool(run_dirs: Sequence[Path], *, regrade: bool) -> Pool:
    """Open every run once (a directory named twice counts once) and gather its answers."""
    if not run_dirs:
        raise GradingError("no run directory given")
    seen: set[Path] = set()
    runs: list[Run] = []
    found: list[tuple[Run, dict[str, Any], dict[str, Any]]] = []
    for given in run_dirs:
        run, tasks, rows = open_run(Path(given))
        key = run.run_dir.resolve()
        if key in seen:
            continue
        seen.add(key)
        runs.append(run)
        try:
            graded = set() if regrade else set(latest_grades(run.run_dir))
        except ValueError as exc:
            raise GradingError(str(exc)) from None
        for (tid, sample), row in _final_rows(rows).items():
            task = tasks.get(tid)
            kind = row.get("type") or (task or {}).get("type")
            if kind != "rubric":
                continue
            if task is None:
                raise GradingError(f"{run.run_dir / SAMPLES}: rubric answer for task {tid!r}, "
                                   f"which is not in {TASKS_SNAPSHOT}")
            if (tid, sample) in graded:
                continue
            found.append((run, task, row))
    # A deterministic order before any shuffle, so the same seed gives the same order whatever
    # order the run directories were named in.
    found.sort(key=lambda f: (f[0].run_id, str(f[0].run_dir.resolve()), str(f[2]["id"]),
                              int(f[2]["sample"])))
    ids: set[str] = set()
    answers: list[BlindAnswer] = []
    hashes: dict[tuple[Path, str, int], str] = {}
    for run, task, row in found:
        answer_id = secrets.token_hex(4)
        while answer_id in ids:
            answer_id = secrets.token_hex(4)
        ids.add(answer_id)
        language = row.get("language") or task.get("language")
        if language is None:
            from assay.suites.coding import infer_language

            language = infer_language(task["id"], None)
        text = _shown_text(row)
        tid, sample = str(row["id"]), int(row["sample"])
        hashes[(run.run_dir, tid, sample)] = sha256(text)
        answers.append(BlindAnswer(answer_id=answer_id, run_dir=run.run_dir, task_id=tid,
                                   sample=sample, prompt=str(task.get("prompt") or ""),
                                   rubric=str(task.get("rubric") or ""), language=language,
                                   text=text))
    return Pool(tuple(runs), tuple(answers), hashes)


def collect_answers(run_dirs: Sequence[Path], *, regrade: bool = False) -> list[BlindAnswer]:
    """The rubric answers of the given coding runs that have no grade yet (all of them with
    ``regrade``), in a deterministic unshuffled order, each under a fresh opaque id.

    The answer of a (task, sample) is its last sample row without ``error``; unit and diff rows
    are ignored. Raises :class:`GradingError` for a directory that is not a coding run."""
    return list(build_pool(run_dirs, regrade=regrade).answers)


def shuffle_answers(answers: Sequence[BlindAnswer], seed: int) -> list[BlindAnswer]:
    """``answers`` in the order a grader sees them for ``seed``: sorted deterministically, then
    shuffled, so runs are interleaved and the order can be reproduced from the recorded seed."""
    ordered = sorted(answers, key=lambda a: (str(a.run_dir.resolve()), a.task_id, a.sample))
    random.Random(seed).shuffle(ordered)
    return ordered


def fresh_seed() -> int:
    """A seed when none is given; it is recorded, so the order can still be reproduced."""
    return secrets.randbelow(2**31)
