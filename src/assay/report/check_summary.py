"""What a check of a grade says, in words a reader can act on: the task's real tests first, the
canaries apart.

A tamper-evident check runs the task's tests beside canaries the verifier planted, some of which
must fail; pytest's own output and exit code mix the two (``exit 1 … 11 failed, 11 passed`` for
an accepted trial). Every display of a check (``assay trial show``, the trial page, the
experiment report, JUnit) reads this module instead, so each leads with the task's tests
(passed / failed, with names, and the first real failure's own line) and puts the canaries on
one line of their own. Pure functions over the grade's check record; a record written before
the split (no ``passed_ids``) still reads, with what it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: failed test names listed in a line before "and N more"
MAX_NAMED = 5


@dataclass(frozen=True)
class CheckSummary:
    """One check in three lines: ``tests`` (the task's own, with failed names), ``failure``
    (the first real test that failed and its failure line, or None) and ``canaries`` (None
    when the check was not tamper-evident)."""

    tests: str | None
    failure: str | None
    canaries: str | None

    def lines(self) -> list[str]:
        return [x for x in (self.tests, self.failure, self.canaries) if x]


def _canaries(n: int) -> str:
    return f"{n} {'canary' if n == 1 else 'canaries'}"


def _short(nodeid: str) -> str:
    """A test id without the mount prefix of the hidden tests (``/assay/tests/...``)."""
    return nodeid.split("/assay/", 1)[-1] if nodeid.startswith("/assay/") else nodeid


def tests_line(record: dict[str, Any]) -> str | None:
    """``task tests: 3 passed, 1 failed (test_x)``; None when no count is known."""
    counts = record.get("counts")
    if not isinstance(counts, dict) or counts.get("passed") is None:
        return None
    tamper = record.get("tamper_evident") or {}
    parts = [f"{counts.get('passed')} passed"]
    for key, word in (("failed", "failed"), ("errors", "errors"), ("skipped", "skipped")):
        if counts.get(key):
            parts.append(f"{counts[key]} {word}")
    n_missing = tamper.get("n_missing")
    if n_missing:
        parts.append(f"{n_missing} expected but not reported")
    text = "task tests: " + ", ".join(parts)
    failed = [_short(str(i)) for i in tamper.get("failed_ids") or []]
    if failed:
        more = len(failed) - MAX_NAMED
        text += " (failed: " + ", ".join(failed[:MAX_NAMED]) + (
            f", and {more} more" if more > 0 else "") + ")"
    if not tamper.get("applied"):
        text += " (from the printed summary: the check was not tamper-evident)"
    return text


def failure_line(record: dict[str, Any]) -> str | None:
    """The first real test that failed and why, never a canary."""
    first = (record.get("tamper_evident") or {}).get("first_failure")
    if not isinstance(first, dict) or not first.get("id"):
        return None
    message = (str(first.get("message") or "").strip().splitlines() or [""])[0]
    return f"first failure: {_short(str(first['id']))}" + (f": {message}" if message else "")


def canaries_line(record: dict[str, Any]) -> str | None:
    """``12 canaries planted, all failed as they must``, or what did not."""
    tamper = record.get("tamper_evident") or {}
    if not tamper.get("applied"):
        return None
    s = tamper.get("canary_summary")
    if not isinstance(s, dict):
        n = tamper.get("canaries_planted")
        return None if n is None else f"{_canaries(int(n))} planted"
    planted = int(s.get("planted") or 0)
    if planted == 0:
        return "no canary planted: no test file of this check could hold one"
    head = f"{_canaries(planted)} planted"
    must_fail, failed = int(s.get("must_fail") or 0), int(s.get("failed_as_they_must") or 0)
    must_pass, passed = int(s.get("must_pass") or 0), int(s.get("passed_as_they_must") or 0)
    moot = int(s.get("moot") or 0)
    if failed == must_fail and passed == must_pass:
        text = f"{head}, all failed as they must" if not must_pass else (
            f"{head}: {must_fail} failed and {must_pass} passed, all as they must")
    else:
        text = (f"{head}: {failed} of {must_fail} failed as they must"
                + (f", {passed} of {must_pass} passed as they must" if must_pass else ""))
    if moot:
        text += (f" ({moot} {'copy' if moot == 1 else 'copies'} of tests that failed anyway "
                 "prove nothing here)")
    if tamper.get("tampered"):
        text += "; the runner's report was bent (see integrity)"
    return text


def summarize(record: dict[str, Any]) -> CheckSummary:
    """The three lines of one check record (``details.behavior`` / ``details.regression``)."""
    return CheckSummary(tests_line(record), failure_line(record), canaries_line(record))


#: Each integrity code in words: what ``trial show`` and the trial page say a problem is.
INTEGRITY_WORDS: dict[str, str] = {
    "protected_file_changed": "a protected file (the task's own tests) was changed",
    "link_into_protected_path": "a link points into a protected path",
    "link_outside_workspace": "a link points out of the workspace",
    "test_tooling_changed": "a file that changes how Python or pytest run was added or "
                            "changed",
    "compiled_code_added": "compiled code the tests could import instead of a source was "
                           "added",
    "change_outside_allowed_paths": "a file outside the task's allowed paths was changed",
    "test_runner_tampered": "the test runner's own report was bent (a canary or the report's "
                            "structure says so)",
    "stdlib_shadowed": "a module of the deliverable is named like a standard-library or test "
                       "runner module, which the interpreter could load before the code "
                       "under test",
}


def integrity_lines(record: dict[str, Any]) -> list[str]:
    """An integrity record in words: each problem's code explained, with its path."""
    out = []
    for p in record.get("problems") or []:
        if not isinstance(p, dict):
            continue
        code = str(p.get("code"))
        where = p.get("path") or ""
        extra = f" -> {p['target']}" if p.get("target") else ""
        why = f" ({p['why']})" if p.get("why") else ""
        evidence = p.get("evidence")
        if isinstance(evidence, list) and evidence:
            why += f": {evidence[0]}" + (f" (and {len(evidence) - 1} more)"
                                         if len(evidence) > 1 else "")
        out.append(f"{code}: {INTEGRITY_WORDS.get(code, code)}"
                   + (f": {where}{extra}" if where else "") + why)
    return out


def grade_check_lines(grade: dict[str, Any]) -> dict[str, list[str]]:
    """Per test check of a grade (behavior, regression) that ran, its summary lines."""
    details = grade.get("details") or {}
    out: dict[str, list[str]] = {}
    for name in ("behavior", "regression"):
        rec = details.get(name)
        if isinstance(rec, dict):
            lines = summarize(rec).lines()
            if lines:
                out[name] = lines
    return out


__all__ = ["INTEGRITY_WORDS", "CheckSummary", "canaries_line", "failure_line",
           "grade_check_lines", "integrity_lines", "summarize", "tests_line"]
