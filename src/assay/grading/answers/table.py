"""Who decides a coding answer: one grader per task type, in one table.

A grader takes the task and the code extracted from an answer and returns a :class:`Verdict`;
it never sees the model, the run or the row, so the same grader serves a run as its answers
arrive, a re-grade of old answers (``assay regrade``) and ``assay suite check``. Rubric answers
are decided by people (``grading/rubric.py``): their grader only says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from assay.grading.answers.diff import grade_diff
from assay.grading.answers.extract import extract_code
from assay.grading.answers.unit import Isolation, Verdict, run_unit
from assay.sandbox import Limits
from assay.suites.coding import CodingTask


class SandboxSettings(Protocol):
    """What a grader needs to know about where candidate code runs (``CodingParams`` and
    :class:`ExecSettings` both are)."""

    @property
    def isolation(self) -> Isolation: ...

    @property
    def exec_concurrency(self) -> int: ...

    def limits(self) -> Limits: ...


@dataclass(frozen=True)
class ExecSettings:
    """Sandbox settings of a grade revision, recorded in its meta."""

    isolation: Isolation = "bwrap"
    exec_timeout_s: float = 30.0
    memory_mib: int = 1024
    pids: int = 256
    exec_concurrency: int = max(1, os.cpu_count() or 1)

    def limits(self) -> Limits:
        # CPU time is capped at the wall limit: a busy loop cannot outlive its budget even if
        # the watchdog is starved.
        return Limits(wall_seconds=self.exec_timeout_s, memory_mib=self.memory_mib,
                      pids=self.pids, cpu_seconds=max(1, int(self.exec_timeout_s + 0.999)))

    def to_record(self) -> dict[str, Any]:
        return {"isolation": self.isolation, "wall_seconds": self.exec_timeout_s,
                "memory_mib": self.memory_mib, "pids": self.pids}


Grader = Callable[[CodingTask, str, SandboxSettings, Path | None], Verdict]


def _unit(task: CodingTask, code: str, settings: SandboxSettings,
          record_dir: Path | None) -> Verdict:
    return run_unit(task, code, limits=settings.limits(), isolation=settings.isolation,
                    record_dir=record_dir)


def _diff(task: CodingTask, code: str, settings: SandboxSettings,
          record_dir: Path | None) -> Verdict:
    return grade_diff(task, code, limits=settings.limits(), isolation=settings.isolation)


def _human(task: CodingTask, code: str, settings: SandboxSettings,
           record_dir: Path | None) -> Verdict:
    return Verdict(None, "needs_human_grade", {})


#: task type -> grader
GRADERS: dict[str, Grader] = {"unit": _unit, "diff": _diff, "rubric": _human}

#: task type -> what decides it, as recorded in a grade revision's meta
GRADER_NAMES: dict[str, str] = {
    "unit": "grading.unit: code + tests in the sandbox, pass = exit 0 after the last test",
    "diff": "grading.diff: normalised text, else identical files after git apply",
    "rubric": "human (grading.rubric): no automatic verdict",
}


def extract(task: CodingTask, answer: str | None) -> str:
    """The code (or diff) a grader gets from an answer."""
    return extract_code(answer, "diff" if task.type == "diff" else task.language)


def grade_code(task: CodingTask, code: str, settings: SandboxSettings,
               record_dir: Path | None = None) -> Verdict:
    grader = GRADERS.get(task.type)
    if grader is None:
        raise ValueError(f"task {task.id}: no grader for type {task.type!r}")
    return grader(task, code, settings, record_dir)


def grade_answer(task: CodingTask, answer: str | None, settings: SandboxSettings,
                 record_dir: Path | None = None) -> tuple[str, Verdict]:
    """The code extracted from an answer and its verdict."""
    code = extract(task, answer)
    return code, grade_code(task, code, settings, record_dir)
