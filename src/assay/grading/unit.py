"""Unit tasks: the candidate's code followed by the task's tests, run in the sandbox.

Pass means exit code 0 within the time limit, nothing else: output that *says* "all tests
passed" counts for nothing. The candidate is untrusted, so it only ever runs through
:func:`assay.sandbox.run_sandboxed`, and a sandbox failure is an infra error, not a verdict.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from assay.sandbox import SANDBOX_WORKDIR, Limits, run_sandboxed
from assay.suites.coding import CodingTask

Isolation = Literal["bwrap", "none"]
INTERPRETER = {"python": ("python3", "main.py"), "javascript": ("node", "main.js")}


@dataclass(frozen=True)
class Verdict:
    passed: bool | None  # None: no verdict (rubric, or infra failure)
    reason: str
    detail: dict[str, Any]
    infra_error: str | None = None


def program_text(task: CodingTask, code: str) -> str:
    """Code, then tests. JavaScript tests go in a block of their own so that a candidate that
    also declares ``const assert`` does not fail on a redeclaration the task did not intend."""
    tests = task.tests or ""
    if task.language == "javascript":
        return f"{code}\n{{\n{tests}\n}}\n"
    return f"{code}\n{tests}\n"


def run_unit(task: CodingTask, code: str, *, limits: Limits, isolation: Isolation = "bwrap",
             record_dir: Path | None = None) -> Verdict:
    if task.language not in INTERPRETER:
        raise ValueError(f"task {task.id}: no interpreter for language {task.language!r}")
    interpreter, filename = INTERPRETER[task.language]
    with tempfile.TemporaryDirectory(prefix="assay-unit-") as tmp:
        work = Path(tmp)
        (work / filename).write_text(program_text(task, code), encoding="utf-8")
        target = f"{SANDBOX_WORKDIR}/{filename}" if isolation == "bwrap" else str(work / filename)
        result = run_sandboxed([interpreter, target], work, limits=limits, isolation=isolation,
                               record_dir=record_dir)
    record = result.to_record()
    if result.reason == "sandbox_error":
        return Verdict(None, "sandbox_error", record, infra_error=result.detail or "sandbox error")
    return Verdict(result.reason == "ok", result.reason, record)
