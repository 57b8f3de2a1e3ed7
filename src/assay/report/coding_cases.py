"""The coding samples that failed, as a person fixing a task or a grader reads them: why (the
failing tests, the exit code and error line, the timeout, the sandbox or endpoint error), the
output tails, and the code that was graded.

Built from the joined view the figures use (``records.coding.graded_samples``: the answer row
with its grade in one revision), so a regrade's report lists that revision's failures. Tasks
that fail every time come first: they are the reproducible ones.
"""

from __future__ import annotations

import re
from typing import Any, get_args

from assay.records.report_cases import CodingPattern, CodingSampleVerdict
from assay.report.narrow_cases import RAW_KEPT, cut

#: characters kept from the end of each output tail
TAIL_KEPT = 2000
#: the order tasks are listed in
PATTERNS: tuple[CodingPattern, ...] = get_args(CodingPattern)
#: each pattern as the views say it
PATTERN_WORDS: dict[str, str] = {
    "always_fails": "fails every time",
    "flaky": "passes in some samples only",
    "infra_only": "nothing failed; samples without a verdict",
}

_PYTEST_FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)
_TAP_NOT_OK = re.compile(r"^\s*not ok \d+ - (.+?)\s*$", re.MULTILINE)
_PY_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+), in (.*)$')
_NODE_TRAILER = re.compile(r"^Node\.js v\d")
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$")


def cut_tail(text: str | None, keep: int = TAIL_KEPT) -> dict[str, Any]:
    """A :class:`CutText` of the last ``keep`` characters: the end of output is what failed."""
    if not text:
        return {"text": None, "chars": None, "cut": False}
    return {"text": text[-keep:], "chars": len(text), "cut": len(text) > keep}


def failing_tests(stdout: str, stderr: str) -> list[str]:
    """Tests the output names as failing: pytest's ``FAILED`` summary lines, TAP's ``not ok``
    lines, else the innermost line of a Python traceback in the program (``line N: <source>``,
    the assertion that failed in a plain-assert unit task)."""
    both = f"{stdout}\n{stderr}"
    named = _PYTEST_FAILED.findall(both) + _TAP_NOT_OK.findall(both)
    if named:
        return list(dict.fromkeys(named))[:20]
    lines = stderr.splitlines()
    last: str | None = None
    for i, line in enumerate(lines):
        m = _PY_FRAME.match(line)
        if m and m.group(1).endswith(".py") and i + 1 < len(lines) \
                and not _PY_FRAME.match(lines[i + 1]):
            last = f"line {m.group(2)}: {lines[i + 1].strip()}"
    return [last] if last else []


def error_line(stderr: str) -> str | None:
    """The exception line of the output (``AssertionError: ...``), else its last line (not
    the ``Node.js v20`` trailer node prints after every uncaught error)."""
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and not _NODE_TRAILER.match(ln.strip())]
    for ln in reversed(lines):
        if _ERROR_LINE.match(ln):
            return ln[:300]
    return lines[-1][:300] if lines else None


def sample_verdict(row: dict[str, Any]) -> CodingSampleVerdict:
    if row.get("error"):
        return "infra_error" if row.get("reason") == "infra_error" else "grader_error"
    return "failed"


def explanation(row: dict[str, Any], ex: dict[str, Any]) -> str:
    """The sentence a person reads for one failed sample."""
    kind, why = sample_verdict(row), row.get("reason") or "unknown"
    detail = ex.get("detail")
    if kind == "infra_error":
        return f"endpoint error: {row.get('error')}"
    if kind == "grader_error":
        return f"grader error ({why}): {row.get('error')}"
    if why == "timeout":
        wall = ex.get("wall_seconds")
        return "timed out" + (f" after {wall:.1f} s" if isinstance(wall, int | float) else "")
    if why in ("memory_limit", "process_limit", "disk_limit"):
        return f"hit the {why.split('_')[0]} limit" + (f": {detail}" if detail else "")
    if why == "nonzero_exit":
        line = error_line(ex.get("stderr_tail") or "")
        return f"exit code {ex.get('exit_code')}" + (f": {line}" if line else "")
    if why == "tests_not_finished":
        return "exited 0 before the last test ran (the program was ended early)"
    if why == "does_not_apply":
        return f"the diff does not apply: {detail or 'no reason given'}"
    if why == "different_result":
        files = ", ".join(ex.get("differs") or []) or "(not listed)"
        return f"the diff applies, but these files differ from the golden result: {files}"
    if why == "empty":
        return "the answer holds no code"
    return why + (f": {detail}" if detail else "")


def failed_sample(row: dict[str, Any]) -> dict[str, Any]:
    """A :class:`CodingFailedSample` dict from a joined answer-and-grade row."""
    ex = found if isinstance(found := row.get("exec"), dict) else {}
    stdout, stderr = ex.get("stdout_tail") or "", ex.get("stderr_tail") or ""
    detail = ex.get("detail")
    if detail is None and ex.get("differs"):
        detail = "files differ: " + ", ".join(ex["differs"])
    return {
        "sample": int(row["sample"]),
        "verdict": sample_verdict(row),
        "reason": row.get("reason") or "unknown",
        "explanation": explanation(row, ex),
        "failing_tests": failing_tests(stdout, stderr),
        "exit_code": ex.get("exit_code"),
        "timed_out": ex.get("timed_out"),
        "wall_seconds": ex.get("wall_seconds"),
        "stdout_tail": cut_tail(stdout),
        "stderr_tail": cut_tail(stderr),
        "detail": None if detail is None else str(detail),
        "error": row.get("error"),
        "code": cut(row.get("code"), RAW_KEPT),
        "raw": cut(row.get("raw"), RAW_KEPT),
    }


def failed_tasks(finals: dict[tuple[str, int], dict[str, Any]],
                 task_ids: list[str]) -> list[dict[str, Any]]:
    """Every unit or diff task with a failed sample or one without a verdict, ordered: always
    failing, then flaky, then infra errors only; then the most failures; then file order."""
    order = {t: i for i, t in enumerate(task_ids)}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for (tid, _), row in sorted(finals.items()):
        by_task.setdefault(tid, []).append(row)
    out = []
    for tid, rows in by_task.items():
        kind = rows[0].get("type")
        if kind == "rubric":
            continue
        bad = [r for r in rows if r.get("error") or r.get("passed") is False]
        if not bad:
            continue
        graded = [r for r in rows if not r.get("error") and r.get("passed") is not None]
        passes = sum(1 for r in graded if r["passed"])
        failed = sum(1 for r in graded if not r["passed"])
        out.append({
            "id": tid, "type": kind,
            "pattern": ("always_fails" if failed and not passes else
                        "flaky" if failed else "infra_only"),
            "samples": len(graded), "passes": passes,
            "infra_errors": sum(1 for r in rows if r.get("error")),
            "failed": [failed_sample(r) for r in bad],
        })
    return sorted(out, key=lambda t: (PATTERNS.index(t["pattern"]),
                                      -(t["samples"] - t["passes"]), t["passes"],
                                      order.get(t["id"], len(order)), t["id"]))
