"""``assay suite check``: are the tasks themselves sound, before any model is blamed?

Every unit and diff task's reference ``solution`` must pass and an empty answer must fail, both
through the very sandbox and grader a model's answer goes through. A task whose solution fails,
or whose tests an empty answer passes, measures nothing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from assay.errors import SandboxFailed
from assay.grading.answers.diff import apply_diff
from assay.grading.answers.table import SandboxSettings, grade_answer
from assay.grading.answers.unit import Verdict
from assay.suites.coding import CodingSuite, CodingTask


@dataclass(frozen=True)
class TaskCheck:
    task: CodingTask
    solution: Verdict | None  # None: no solution given
    empty: Verdict | None  # None: not checkable (rubric)
    golden_problem: str | None = None  # diff tasks: why the golden diff does not apply

    @property
    def problems(self) -> list[str]:
        out: list[str] = []
        if self.task.type == "rubric":
            return out
        if self.golden_problem:
            out.append(f"golden diff does not apply to files: {self.golden_problem}")
        if self.solution is None:
            out.append("no reference solution")
        elif self.solution.infra_error:
            out.append(f"could not check the solution: {self.solution.infra_error}")
        elif not self.solution.passed:
            out.append(f"reference solution fails ({self.solution.reason})")
        if self.empty is not None:
            if self.empty.infra_error:
                out.append(f"could not check an empty answer: {self.empty.infra_error}")
            elif self.empty.passed:
                out.append(f"an empty answer passes ({self.empty.reason})")
        return out

    @property
    def status(self) -> str:
        if self.task.type == "rubric":
            return "human-graded"
        return "broken" if self.problems else "ok"

    def to_record(self) -> dict[str, Any]:
        def v(x: Verdict | None) -> dict[str, Any] | None:
            return None if x is None else {"passed": x.passed, "reason": x.reason}

        return {"id": self.task.id, "type": self.task.type, "status": self.status,
                "solution": v(self.solution), "empty": v(self.empty),
                "problems": self.problems}


def check_task(task: CodingTask, params: SandboxSettings) -> TaskCheck:
    if task.type == "rubric":
        return TaskCheck(task, None, None)
    solution = grade_answer(task, task.solution, params)[1] if task.solution else None
    empty = grade_answer(task, "", params)[1]
    golden_problem = None
    if task.type == "diff":
        # A solution equal to the golden passes as "identical" without applying anything, so
        # the golden itself must be shown to apply.
        try:
            tree, why = apply_diff(task.files, task.golden or "", limits=params.limits(),
                                   isolation=params.isolation)
            golden_problem = None if tree is not None else why
        except SandboxFailed as exc:
            golden_problem = f"could not be checked: {exc}"
    return TaskCheck(task, solution, empty, golden_problem)


def check_suite(suite: CodingSuite, params: SandboxSettings) -> list[TaskCheck]:
    with ThreadPoolExecutor(max_workers=params.exec_concurrency) as pool:
        return list(pool.map(lambda t: check_task(t, params), suite.tasks))
