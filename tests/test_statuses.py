"""The status and failure-code Literals of ``records/statuses.py`` against the records on disk.

Typing a field with a closed set makes its model refuse what is not in the set, so the sets
must hold every value an older assay wrote: the codes below were collected from the history
of the verifier, the integrity check and the report writers. A value outside the set (a typo,
a code no verifier writes) is refused when read, with the file named.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, get_args

import pytest

from assay.errors import RecordError
from assay.grading.verify.integrity import check_integrity
from assay.records.experiment import ExperimentAttemptRow, ExperimentVerdict
from assay.records.statuses import (
    CHECK_NAMES,
    INTEGRITY_CODES,
    INTEGRITY_ORDER,
    CheckFailure,
    GradeFailureCode,
)
from assay.records.trial import Grade

GOLDEN = Path(__file__).parent / "golden"

#: every failure code a grade has held since grades were written (from the git history of
#: grading/verifier.py, grading/verify/verifier.py and the integrity check)
WRITTEN_BEFORE = ["verifier_error", "agent_timeout", "budget_exhausted", "resource_limit",
                  "protected_file_changed", "link_into_protected_path", "link_outside_workspace",
                  "test_tooling_changed", "compiled_code_added", "change_outside_allowed_paths",
                  "test_runner_tampered", "no_change", "candidate_timeout", "tests_missing",
                  "behavior_failed", "regression_failed", "judge_failed",
                  "required_check_missing",
                  "stdlib_shadowed"]  # issue 32


def _grade() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "grade-idle.json").read_text())
    return data


@pytest.mark.parametrize("code", WRITTEN_BEFORE)
def test_every_failure_code_an_older_verifier_wrote_still_reads(code: str) -> None:
    data = _grade()
    data["failure_code"] = code
    assert Grade.read(data, "grades/v1.json").failure_code == code


def test_the_set_of_grade_codes_is_exactly_what_verifiers_wrote() -> None:
    assert sorted(get_args(GradeFailureCode)) == sorted(WRITTEN_BEFORE)


@pytest.mark.parametrize("bad", ["tests_failed", "Behavior_failed", "rejected", ""])
def test_a_code_no_verifier_writes_is_refused_with_the_file(bad: str) -> None:
    data = _grade()
    data["failure_code"] = bad
    with pytest.raises(RecordError, match="grades/v1.json"):
        Grade.read(data, "grades/v1.json")
    nested = copy.deepcopy(_grade())
    nested["details"]["integrity"]["failure_code"] = bad
    with pytest.raises(RecordError, match="grades/v1.json"):
        Grade.read(nested, "grades/v1.json")


def test_the_check_failed_family_is_one_code_per_check() -> None:
    assert [f"{n}_failed" for n in CHECK_NAMES] == list(get_args(CheckFailure))


def test_the_first_integrity_problem_in_the_fixed_order_is_the_code(tmp_path: Path) -> None:
    """A protected test edited and a file added outside the allowed paths: both are problems,
    the one earlier in INTEGRITY_ORDER is the failure code; every problem's code is in the
    set the records accept."""
    entry = {"type": "file", "mode": "0644", "size": 1, "sha256": "a"}
    pristine = [{**entry, "path": "tests/test_x.py"}, {**entry, "path": "src/x.py"}]
    artifact = [{**entry, "path": "tests/test_x.py", "sha256": "b"},
                {**entry, "path": "src/x.py"}, {**entry, "path": "notes/extra.txt"}]
    res = check_integrity(pristine, artifact, protected=["tests/**"],
                          allowed=["src/**"])
    codes = [p["code"] for p in res.problems]
    assert set(codes) == {"protected_file_changed", "change_outside_allowed_paths"}
    assert res.failure_code == "protected_file_changed"
    assert INTEGRITY_ORDER.index("protected_file_changed") < INTEGRITY_ORDER.index(
        "change_outside_allowed_paths")
    assert set(codes) <= INTEGRITY_CODES


def test_report_rows_written_before_runtimes_were_kept_still_read() -> None:
    """The first experiment reports listed an attempt's label, status, error and calls only;
    an attempt that never ended was shown as its trial.json said (``running``)."""
    row = ExperimentAttemptRow.read({"attempt": "a1", "status": "running", "error": None,
                                     "calls": 3}, "report.json")
    assert row.seconds is None and row.timed_out is None
    with pytest.raises(RecordError):
        ExperimentAttemptRow.read({"attempt": "a1", "status": "finished", "error": None,
                                   "calls": 3}, "report.json")


def test_a_verdict_reads_as_its_model_and_refuses_an_unknown_decision() -> None:
    v = {"decision": "inconclusive", "reasons": ["no interval"],
         "checks": [{"name": "integrity", "hard": True, "want": "at most 0", "observed": "0",
                     "ok": True}], "tasks_to_settle": 40, "note": None, "warnings": [],
         "exit_code": 4}
    got = ExperimentVerdict.read(v, "report.json")
    assert got.decision == "inconclusive" and got.checks[0].ok is True
    assert got.model_dump(mode="json") == v  # the record's key order is the writer's
    with pytest.raises(RecordError):
        ExperimentVerdict.read({**v, "decision": "maybe"}, "report.json")
