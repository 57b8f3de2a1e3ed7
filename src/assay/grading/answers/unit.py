"""Unit tasks: the candidate's code followed by the task's tests, run in the sandbox.

Pass means exit code 0 within the time limit after the last test ran (see ``program_text``);
output that *says* "all tests passed" counts for nothing. The candidate is untrusted, so it only
ever runs through :func:`assay.sandbox.run_sandboxed`, and a sandbox failure is an infra error,
not a verdict.
"""

from __future__ import annotations

import secrets
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


def program_text(task: CodingTask, code: str, marker: str) -> str:
    """Code, then tests, then a line printing ``marker``. The candidate runs first, in the same
    process, so it could exit 0 before any test runs (``sys.exit(0)``, ``process.exit(0)``, an
    exit hook): a pass needs the marker, which only code after the last test prints and which
    the candidate cannot know in advance. JavaScript tests go in a block of their own so that a
    candidate that also declares ``const assert`` does not fail on a redeclaration."""
    tests = task.tests or ""
    if task.language == "javascript":
        return f"{code}\n{{\n{tests}\n}}\nconsole.log({marker!r});\n"
    return f"{code}\n{tests}\nprint({marker!r}, flush=True)\n"


def run_unit(task: CodingTask, code: str, *, limits: Limits, isolation: Isolation = "bwrap",
             record_dir: Path | None = None) -> Verdict:
    if task.language not in INTERPRETER:
        raise ValueError(f"task {task.id}: no interpreter for language {task.language!r}")
    interpreter, filename = INTERPRETER[task.language]
    marker = f"assay-tests-finished-{secrets.token_hex(16)}"
    with tempfile.TemporaryDirectory(prefix="assay-unit-") as tmp:
        work = Path(tmp)
        (work / filename).write_text(program_text(task, code, marker), encoding="utf-8")
        target = f"{SANDBOX_WORKDIR}/{filename}" if isolation == "bwrap" else str(work / filename)
        result = run_sandboxed([interpreter, target], work, limits=limits, isolation=isolation,
                               record_dir=record_dir)
    record = result.to_record()
    if result.reason == "sandbox_error":
        return Verdict(None, "sandbox_error", record, infra_error=result.detail or "sandbox error")
    if result.reason == "ok" and marker not in result.stdout_tail:
        return Verdict(False, "tests_not_finished", record)
    return Verdict(result.reason == "ok", result.reason, record)
