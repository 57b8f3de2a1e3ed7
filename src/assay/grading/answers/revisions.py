"""Grading a coding run's recorded answers into a grade revision, never over an older one.

A run grades its answers into revision ``v1`` as they arrive (and, on resume, whatever was left
ungraded or whose grader failed); ``assay regrade RUN_DIR --verifier-revision NEW`` grades the
same recorded answers again, with today's graders, into ``grades/NEW.jsonl`` beside the old
revisions, which stay as they are. Everything a grade needs comes from the run directory: the
answer rows, the copy of the tasks file and the sandbox settings in the manifest.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import NeverOverwrite, RecordError
from assay.grading.answers.table import (
    GRADER_NAMES,
    ExecSettings,
    SandboxSettings,
    extract,
    grade_code,
)
from assay.records.coding import (
    CodingManifest,
    GradeMeta,
    GradeRow,
    read_grades,
    read_meta,
    read_samples,
)
from assay.records.io import JsonlAppender, write_new_text
from assay.records.layout import (
    GRADES_DIR,
    RUN_GRADE_REVISION,
    SUITE_SNAPSHOT,
    exec_dir,
    grade_meta_path,
    grade_rows_path,
    valid_revision,
)
from assay.records.manifest import read_run_manifest, tool_identity, utc_now
from assay.suites.coding import CodingTask, load_coding_suite


def settings_of(manifest: dict[str, Any]) -> ExecSettings:
    """The sandbox settings a run was graded under (its comparable settings pin them)."""
    c = manifest["comparable"]
    limits = manifest.get("limits") or {}
    return ExecSettings(isolation=c["isolation"], exec_timeout_s=c["exec_timeout_s"],
                        memory_mib=c["memory_mib"], pids=c["pids"],
                        exec_concurrency=int(limits.get("exec_concurrency") or 1))


def run_tasks(run_dir: Path) -> tuple[dict[str, CodingTask], str]:
    """The tasks as they were run (the run's own copy of the tasks file) and its sha256."""
    suite = load_coding_suite(run_dir / SUITE_SNAPSHOT)
    return {t.id: t for t in suite.tasks}, suite.sha256


class Revision:
    """Appends grade rows to one revision; the meta is written (once) before the first row."""

    def __init__(self, run_dir: Path, name: str, *, source: str, settings: SandboxSettings,
                 tasks_sha256: str, create_only: bool) -> None:
        if not valid_revision(name):
            raise ValueError(f"revision name {name!r}: letters, digits, '.', '_' and '-' only")
        self.run_dir, self.name = run_dir, name
        meta_path = grade_meta_path(run_dir, name)
        if meta_path.exists():
            if create_only:
                raise NeverOverwrite(f"{meta_path}: grade revision {name!r} exists and is never "
                                     "overwritten; choose a new --verifier-revision")
            read_meta(run_dir, name)  # refuse one written by a newer assay
        else:
            isolation = settings.isolation
            limits = settings.limits()
            meta = GradeMeta(revision=name, source=source, created_at=utc_now(),
                             assay=tool_identity(), graders=dict(GRADER_NAMES),
                             sandbox={"isolation": isolation,
                                      "wall_seconds": limits.wall_seconds,
                                      "memory_mib": limits.memory_mib, "pids": limits.pids},
                             tasks_sha256=tasks_sha256, row_schema=GradeRow.schema_id())
            write_new_text(meta_path, json.dumps(meta.to_json(), indent=2) + "\n")
        self.settings = settings
        self._rows = JsonlAppender(grade_rows_path(run_dir, name))

    def record_dir(self, task_id: str, sample: int) -> Path:
        """Where an execution's full logs go: the run's own revision keeps the historic
        ``exec/<task>/<sample>``; a re-grade writes beside its rows, never over them."""
        if self.name == RUN_GRADE_REVISION:
            return exec_dir(self.run_dir, task_id, sample)
        return self.run_dir / GRADES_DIR / f"{self.name}.exec" / task_id / str(sample)

    def grade(self, task: CodingTask, answer: dict[str, Any]) -> dict[str, Any]:
        """Grade one recorded answer and append the grade; blocking (it runs the sandbox), so
        callers run it in a thread. The code is extracted again from the answer text, so a
        fixed extractor counts on re-grade; the grade says so when it differs from the
        ``code`` recorded with the answer."""
        sample = int(answer["sample"])
        code = extract(task, answer.get("raw"))
        verdict = grade_code(task, code, self.settings, self.record_dir(task.id, sample))
        row = GradeRow(id=task.id, sample=sample, type=task.type, passed=verdict.passed,
                       reason=verdict.reason, exec=verdict.detail or None,
                       error=verdict.infra_error, graded_at=utc_now(),
                       code=None if code == answer.get("code") else code).to_json()
        self._rows.append(row)
        return row

    def close(self) -> None:
        self._rows.close()


@dataclass
class GradeSummary:
    revision: str
    graded: int
    grader_errors: int
    already_graded: int


def grade_pending(revision: Revision, tasks: dict[str, CodingTask],
                  answers: dict[tuple[str, int], dict[str, Any]],
                  done: dict[tuple[str, int], dict[str, Any]]) -> GradeSummary:
    """Grade every answered sample that has no standing verdict in ``revision`` yet, with at
    most ``exec_concurrency`` sandboxes at once."""
    missing = sorted({r["id"] for r in answers.values() if r["id"] not in tasks})
    if missing:
        raise RecordError(f"{revision.run_dir / SUITE_SNAPSHOT}: answers for tasks not in the "
                          f"tasks file: {', '.join(missing[:5])}")
    todo = [(tasks[k[0]], row) for k, row in sorted(answers.items())
            if not row.get("error") and (k not in done or done[k].get("error"))]
    with ThreadPoolExecutor(max_workers=max(1, revision.settings.exec_concurrency)) as pool:
        rows = list(pool.map(lambda item: revision.grade(*item), todo))
    errors = sum(1 for r in rows if r.get("error"))
    return GradeSummary(revision.name, len(rows), errors, len(answers) - len(todo))


def regrade_run(run_dir: Path, name: str, settings: SandboxSettings | None = None
                ) -> GradeSummary:
    """Grade every recorded answer of a coding run into the new revision ``name``."""
    manifest = read_run_manifest(run_dir, CodingManifest)
    tasks, sha = run_tasks(run_dir)
    if sha != manifest["suite"]["tasks_sha256"]:
        raise RecordError(f"{run_dir / SUITE_SNAPSHOT}: not the tasks file the run answered "
                          "(sha256 differs from the manifest's)")
    answers = read_samples(run_dir, manifest)
    revision = Revision(run_dir, name, source="regrade", settings=settings or settings_of(manifest),
                        tasks_sha256=sha, create_only=True)
    try:
        return grade_pending(revision, tasks, answers, {})
    finally:
        revision.close()


async def grade_remaining(revision: Revision, run_dir: Path, manifest: dict[str, Any],
                          tasks: dict[str, CodingTask]) -> GradeSummary:
    """The run's own sweep: answers recorded but not (successfully) graded in its revision,
    left by an interrupted session or a sandbox that failed."""
    answers = read_samples(run_dir, manifest)
    done = read_grades(run_dir, revision.name)
    return await asyncio.to_thread(grade_pending, revision, tasks, answers, done)
