"""Reading pass/fail counts from the output of pytest, node's test runner and unittest.

Counts are details for a reader and one more guard: a run that exits 0 but reports no passed
test (pytest's ``--collect-only`` smuggled in through a config file, say) is not a pass.
"""

from __future__ import annotations

import re
from typing import Any

_PYTEST_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)"
    r"(?:, )?)+)(?: in [\d.]+s.*)?\s*=*\s*$", re.MULTILINE)
_PYTEST_ITEM = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
_PYTEST_NONE = re.compile(r"^=*\s*no tests ran", re.MULTILINE)
_NODE = re.compile(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)\s*$", re.MULTILINE)
# unittest's "Ran 3 tests in 0.001s", a blank line, then "OK", "OK (skipped=1)" or
# "FAILED (failures=1, errors=2)"
_UNITTEST = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*\n\s*\n(OK|FAILED)(?: \(([^)\n]*)\))?\s*$",
                       re.MULTILINE)
_UNITTEST_ITEM = re.compile(r"(failures|errors|skipped|expected failures|unexpected successes)"
                            r"=(\d+)")


def parse_counts(output: str) -> dict[str, Any] | None:
    """``{"runner": "pytest"|"node"|"unittest", "passed": n, "failed": n, ...}``, or None if
    no runner's summary is in the output."""
    matches = list(_PYTEST_SUMMARY.finditer(output))
    if matches:
        counts: dict[str, Any] = {"runner": "pytest", "passed": 0, "failed": 0, "errors": 0}
        for n, kind in _PYTEST_ITEM.findall(matches[-1].group(1)):
            counts["errors" if kind.startswith("error") else kind] = int(n)
        return counts
    if _PYTEST_NONE.search(output):
        return {"runner": "pytest", "passed": 0, "failed": 0, "errors": 0}
    node = dict(_NODE.findall(output))
    if "pass" in node or "fail" in node:
        return {"runner": "node", "passed": int(node.get("pass", 0)),
                "failed": int(node.get("fail", 0)), "errors": int(node.get("cancelled", 0)),
                "tests": int(node.get("tests", 0))}
    runs = list(_UNITTEST.finditer(output))
    if runs:
        ran, word, detail = runs[-1].groups()
        items = {k: int(n) for k, n in _UNITTEST_ITEM.findall(detail or "")}
        failed = items.get("failures", 0) + items.get("unexpected successes", 0)
        errors = items.get("errors", 0)
        if word == "FAILED" and not failed + errors:
            errors = 1  # FAILED with no figure we know: never read as a pass
        not_passed = (failed + errors + items.get("skipped", 0)
                      + items.get("expected failures", 0))
        return {"runner": "unittest", "passed": max(int(ran) - not_passed, 0),
                "failed": failed, "errors": errors, "skipped": items.get("skipped", 0),
                "tests": int(ran)}
    return None


def counts_say_pass(counts: dict[str, Any] | None) -> bool | None:
    """True / False when the counts decide, None when there are none to judge by."""
    if counts is None:
        return None
    return counts["passed"] > 0 and counts["failed"] == 0 and counts["errors"] == 0
