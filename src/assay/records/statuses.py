"""Every status, state and failure code that records and the runner carry, each set in one place.

They used to be strings whose allowed values sat in comments beside each use (some of them out
of date). Here each set is a ``Literal`` type, so mypy checks the code that writes them and the
record models that read them say the same; the runtime tuples beside them are derived from the
type (``get_args``), never listed twice.
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args

#: How the agent's process ended, in a trial's ``execution.status`` (``agents.base`` maps the
#: sandbox's outcome to it; an adapter may say ``budget_exhausted`` from the agent's own output).
ExecutionStatus = Literal["succeeded", "exited_nonzero", "agent_timeout", "resource_limit",
                          "budget_exhausted", "infra_error"]
#: the execution statuses that fail the trial whatever its artifact holds
ExecutionFailure = Literal["agent_timeout", "budget_exhausted", "resource_limit"]
EXECUTION_FAILURES: frozenset[str] = frozenset(get_args(ExecutionFailure))


def is_execution_failure(status: str | None) -> TypeGuard[ExecutionFailure]:
    """True when ``status`` (an execution record's, read back as a string) fails the trial."""
    return status in EXECUTION_FAILURES


#: An infrastructure-class failure of the arm rather than of the machine (``records.failures``).
InfraCode = Literal["agent_start_failed", "model_unavailable"]
INFRA_CODES: tuple[InfraCode, ...] = get_args(InfraCode)
#: A trial's failure code once it is closed as ``infra_error`` (``runner.state``).
TrialFailureCode = Literal["agent_start_failed", "model_unavailable", "infra_error"]

#: A state of one attempt in ``state.sqlite``, in flow order, then the closing ones.
AttemptState = Literal["preparing", "running", "freezing", "verifying", "grader_error", "done",
                       "interrupted", "infra_error"]
#: The states an attempt moves through before it is closed or graded.
FlowState = Literal["preparing", "running", "freezing", "verifying"]
FLOW: tuple[FlowState, ...] = get_args(FlowState)
#: Attempt states after which nothing more happens to it.
ClosedState = Literal["done", "interrupted", "infra_error"]
CLOSED: tuple[ClosedState, ...] = get_args(ClosedState)
#: A trial's state in ``state.sqlite``: waiting for an attempt, one under way, or final.
TrialState = Literal["pending", "preparing", "running", "freezing", "verifying", "grader_error",
                     "done", "infra_error"]
#: Trial states that will not change any more.
TrialFinal = Literal["done", "infra_error"]
TRIAL_FINAL: tuple[TrialFinal, ...] = get_args(TrialFinal)

#: How one trial's run ended (``runner.trial``); ``worker_lost`` when the executor lost the
#: worker that held it (``runner.executor``).
TrialRunStatus = Literal["graded", "infra_error", "refused", "worker_lost"]
#: What ``trial.json`` says of itself (``records.trial.TrialRecord.status``).
TrialRecordStatus = Literal["running", "graded", "infra_error"]

#: The checks a task's acceptance can name and the verifier runs one by one (``behavior`` and
#: ``regression`` commands, the ``judge``); ``integrity`` is checked first, apart.
CheckName = Literal["behavior", "regression", "judge"]
CHECK_NAMES: tuple[CheckName, ...] = get_args(CheckName)
#: A check's outcome in a grade (``checks``): ``error`` is the grader's own failure (no
#: grade), ``not_run`` a check that never started.
CheckOutcome = Literal["pass", "fail", "error", "not_run"]
#: A required check that did not pass, as the grade's failure code: ``<check>_failed`` for each
#: check in :data:`CheckName` (the set of checks is closed, so this family is too).
CheckFailure = Literal["behavior_failed", "regression_failed", "judge_failed"]
#: A tamper-evident check's own failure, more exact than ``<check>_failed``
#: (``grading/verify/test_report.py``): expected tests never reported, or reported failing.
TestsFailure = Literal["tests_missing", "tests_failed"]
#: An integrity problem, in the order a reader should fix them; the first found is the trial's
#: failure code (``grading/verify/integrity.py``).
IntegrityProblem = Literal["protected_file_changed", "link_into_protected_path",
                           "link_outside_workspace", "test_tooling_changed", "stdlib_shadowed",
                           "compiled_code_added", "change_outside_allowed_paths"]
INTEGRITY_ORDER: tuple[IntegrityProblem, ...] = get_args(IntegrityProblem)
#: An integrity failure code: a problem above, or the test runner's own report found bent.
IntegrityCode = Literal[IntegrityProblem, "test_runner_tampered"]
INTEGRITY_CODES: frozenset[str] = frozenset(get_args(IntegrityCode))
#: A grade's failure code (``grades/<revision>.json``, ``trial.json``'s ``grade``), the first
#: reason in the order ``grading/verify/verifier.py`` checks them: no valid grade, the
#: execution, integrity, nothing changed, a required check (a time-out of the candidate's or
#: missing expected tests when that is the exact reason), a required check with no outcome.
GradeFailureCode = Literal["verifier_error", ExecutionFailure, IntegrityCode, "no_change",
                           CheckFailure, "candidate_timeout", "tests_missing",
                           "required_check_missing"]
#: A trial's failure code in the experiment's records: its grade's, or its infra code.
FailureCode = Literal[GradeFailureCode, TrialFailureCode]

#: How ``exp verdict`` decides against the bar (``report/verdict.py``).
Decision = Literal["accept", "reject", "inconclusive"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)

#: Which kind of suite a model run ran (``manifest.json``'s ``kind``; ``suites.kind`` decides
#: it from a path).
SuiteKind = Literal["narrow", "coding"]

#: How a model run (narrow or coding) session ended (``runner.engine``).
RunStatus = Literal["complete", "infra_errors", "aborted", "interrupted"]
#: How an experiment run ended (``runner.experiment``).
ExperimentStatus = Literal["complete", "infra_errors", "budget_stopped", "agent_start_failed",
                           "evidence_gaps", "stopped_at_look"]

__all__ = ["CHECK_NAMES", "CLOSED", "DECISIONS", "EXECUTION_FAILURES", "FLOW", "INFRA_CODES",
           "INTEGRITY_CODES", "INTEGRITY_ORDER", "TRIAL_FINAL", "AttemptState", "CheckFailure",
           "CheckName", "CheckOutcome", "ClosedState", "Decision", "ExecutionFailure",
           "ExecutionStatus", "ExperimentStatus", "FailureCode", "FlowState", "GradeFailureCode",
           "InfraCode", "IntegrityCode", "IntegrityProblem", "RunStatus", "SuiteKind",
           "TestsFailure", "TrialFailureCode", "TrialFinal", "TrialRecordStatus", "TrialRunStatus",
           "TrialState", "is_execution_failure"]
