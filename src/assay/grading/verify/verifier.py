"""The verifier: a verdict on a frozen artifact, from outside the agent's reach.

It rebuilds the workspace from the pristine starting tree plus the changes recorded in the
artifact (never the live workspace), checks integrity first, then runs ``behavior`` and
``regression`` as separate commands in fresh sandboxes, with the hidden tests mounted read-only
outside the workspace only now. The candidate's code is still untrusted here. A check that runs
out of time on the candidate's tree while the trusted tree runs it well inside the limit fails
with ``candidate_timeout`` (a graded failure, never verified again); a verifier that crashes, a
trusted tree that cannot be run, or a time-out not shown to be the candidate's yields an invalid
grade (``grader_error``), never a pass. A task's ``acceptance.judge``
runs last, on the same rebuilt tree and the recorded trajectory (``grading/verify/judge_check.py``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, get_args

from assay.environments.run import task_root
from assay.environments.seed import seed_from_image
from assay.errors import NeverOverwrite, VerifierError
from assay.grading.verify.check_run import HOME_MOUNT, TESTS_MOUNT, run_command, runner_shadows
from assay.grading.verify.expected_tests import (
    TRUSTED_SHARE,
    TrustedTests,
    derived_plan,
    expected_tests,
    timeout_owner,
    trusted_timing,
)
from assay.grading.verify.integrity import check_integrity
from assay.grading.verify.judge_check import run_judge_check
from assay.grading.verify.rebuild import build_workspace
from assay.grading.verify.shadowing import shadow_names
from assay.grading.verify.tamper_scan import scan_workspace
from assay.grading.verify.test_report import check_verdict
from assay.grading.verify.testcounts import counts_say_pass, parse_counts
from assay.records.artifact import ARTIFACT_JSON, ARTIFACT_TAR, list_tree
from assay.records.io import write_new_text
from assay.records.manifest import utc_now
from assay.records.statuses import (
    CHECK_NAMES,
    CheckFailure,
    CheckOutcome,
    GradeFailureCode,
    IntegrityCode,
    is_execution_failure,
)
from assay.records.statuses import EXECUTION_FAILURES as STATUS_EXECUTION_FAILURES
from assay.records.trial import GRADES, Grade, GradeDetails, Integrity, Validity, as_written
from assay.records.workspace import scratch_dir, verify_prefix
from assay.suites.bundle import Bundle, Command, check_starting_tree

__all__ = ["HOME_MOUNT", "TESTS_MOUNT", "grade_path", "run_check", "verify"]

# Execution outcomes that fail a trial whatever the artifact holds.
EXECUTION_FAILURES = STATUS_EXECUTION_FAILURES


class _NothingFrozen(Exception):  # noqa: N818 - a control-flow signal, caught below
    """The freeze refused the workspace (over its bounds): there is nothing to check."""


def grade_path(trial_dir: Path, revision: str) -> Path:
    return trial_dir / GRADES / f"{revision}.json"


def _plain_status(result: Any, counts: dict[str, Any] | None, rule: str) -> CheckOutcome:
    """The verdict of a check that is not tamper-evident: exit code plus the summary rule."""
    say = counts_say_pass(counts)
    if say is None and rule == "required":
        say = False  # exited without a test summary: no test is known to have run
    if result.reason in ("timeout", "sandbox_error"):
        return "error"
    return "pass" if result.reason == "ok" and say is not False else "fail"


def run_check(name: str, command: Command, workspace: Path, bundle: Bundle,
              record_dir: Path, *, pristine: Path | None = None,
              fixture_digest: str | None = None) -> dict[str, Any]:
    """One acceptance command in a fresh sandbox over a private copy of the workspace.

    Tamper-evident unless the task opted the check out: the verdict then comes from assay's
    structured report, the expected ids collected on trusted code and the canaries; the exit
    code and the printed summary stay in the record beside it."""
    tamper: dict[str, Any] = {"applied": False}
    trusted: TrustedTests | None = None
    if command.reward is not None:
        tamper["why"] = ("the verdict is the reward the task's script wrote (its process tree, "
                         "the candidate's code included, could write it too)")
    elif not command.tamper_evident:
        tamper["why"] = "the task opted this check out (tamper_evident: false)"
    elif pristine is None or fixture_digest is None:
        tamper["why"] = "no pristine tree to learn the expected tests from"
    else:
        trusted = expected_tests(bundle, command.command, pristine, fixture_digest)
        if not trusted["report"] and trusted.get("reason") in ("timeout", "sandbox_error"):
            # The trusted tree could not be run: no grade rather than a weaker one.
            return {"status": "error", "command": command.command,
                    "counts_rule": command.counts, "reason": trusted["reason"],
                    "exit_code": trusted.get("exit_code"), "counts": None,
                    "stdout_counts": None, "wall_seconds": trusted.get("wall_seconds"),
                    "tamper_evident": {"applied": False, "why": "collecting the expected "
                                       f"tests on the trusted tree ended in {trusted['reason']}"}}
        if not trusted["report"]:
            tamper["why"] = ("the command wrote no structured report on the trusted tree "
                             f"(exit {trusted.get('exit_code')}): neither pytest nor node's "
                             "test runner ran, so its exit code and summary decide")
            trusted = None
    seed = secrets.randbits(62) if trusted is not None and trusted.get("runner") == "pytest" \
        else None
    run = run_command(command.command, workspace, bundle, record_dir=record_dir,
                      tamper_evident=trusted is not None, reward=command.reward,
                      derived=derived_plan(trusted, seed) if trusted and seed is not None
                      else None, pristine=pristine)
    result = run.result
    output = result.stdout_tail + "\n" + result.stderr_tail
    summary = parse_counts(output)
    record: dict[str, Any] = {"command": command.command, "counts_rule": command.counts,
                              "reason": result.reason, "exit_code": result.exit_code}
    status: CheckOutcome
    if run.reward is not None:
        # The script's exit code and summary are kept for a reader; the reward decides.
        status = ("error" if result.reason in ("timeout", "sandbox_error")
                  else run.reward["status"])
        counts = summary
        record["reward"] = run.reward
    elif trusted is None:
        status = _plain_status(result, summary, command.counts)
        counts = summary
    else:
        canaries = [c for c in run.canaries if c.file in set(trusted["canary_files"])]
        runner = trusted.get("runner") or "pytest"
        verdict = check_verdict(run.tap_text if runner == "node" else run.report_text,
                        exit_code=result.exit_code, canaries=canaries,
                        expected_ids=trusted["ids"], summary=summary, runner=runner,
                        planted=run.canaries)
        counts = verdict.get("counts")
        if result.reason in ("timeout", "sandbox_error"):
            status = "error"
        else:
            status = "pass" if verdict["status"] == "pass" else "fail"
        tamper = {"applied": True, "runner": runner, "verdict": verdict["status"],
                  "tampered": verdict["tampered"], "problems": verdict["problems"],
                  "failure": verdict.get("failure"), "canaries": verdict.get("canaries", []),
                  "canaries_planted": len(run.canaries),
                  # how many canaries of each kind ran, and how this verification drew them
                  "canary_counts": verdict.get("canary_counts"),
                  "derived_seed": seed,
                  "derived_pool": trusted.get("derived_stats"),
                  "expected_ids_source": trusted["source"],
                  "expected_ids": len(trusted["ids"]),
                  "expected_ids_partial": bool(trusted["collect_errors"]),
                  "expected_ids_cache": trusted["cache"],
                  "missing_ids": verdict.get("missing_ids", []),
                  "extra_ids": verdict.get("extra_ids", []),
                  "failed_ids": verdict.get("failed_ids", []),
                  # the task's real tests apart from the canaries, for every display
                  "passed_ids": verdict.get("passed_ids", []),
                  "first_failure": verdict.get("first_failure"),
                  "canary_summary": verdict.get("canary_summary")}
        if not canaries:
            tamper["why_weaker"] = "no test file of this check collects a canary"
        elif not (verdict.get("canary_counts") or {}).get("derived"):
            tamper["why_weaker"] = ("no derived canary: none could be made from this check's "
                                    "test files, or none failed with the reference solution; "
                                    "only the random-shape canaries speak for the runner")
    if result.reason == "timeout":
        # whose time-out: the candidate's when the trusted tree runs the same check well
        # inside the limit (a failed check, graded), else the grader's (no grade)
        timing = (trusted or {}).get("trusted_run") if trusted is not None else None
        if timing is None and pristine is not None and fixture_digest is not None:
            timing = trusted_timing(bundle, command.command, pristine, fixture_digest)
        owner, why = timeout_owner(timing, bundle.spec.budget.verifier_wall_seconds)
        record["timeout"] = {"owner": owner, "why": why, "trusted_run": timing}
        if owner == "candidate":
            status = "fail"
            record["failure"] = "candidate_timeout"
            if tamper.get("applied"):
                # a run cut short leaves canaries unreported: not evidence of tampering
                tamper["tampered_before_timeout"] = tamper["tampered"]
                tamper["tampered"] = []
    record.update({
        "status": status, "counts": counts, "stdout_counts": summary,
        "tamper_evident": tamper, "bytecode_removed": run.bytecode_removed,
        "wall_seconds": round(result.wall_seconds, 3),
        "stdout_tail": result.stdout_tail[-2000:], "stderr_tail": result.stderr_tail[-2000:],
        "limits_applied": {k: v.to_record() for k, v in result.limits_applied.items()},
        "evidence": dict(result.evidence)})
    return record


def _preparation_over(seconds: float, pristine_seconds: float, entries: int,
                      limit: float) -> dict[str, Any]:
    """Whether rebuilding the delivered tree on the host used up ``verifier_wall_seconds``
    (``limit``) before any check could start. The tree is the candidate's (an agent can leave
    up to ``resources.workspace_files`` entries), so its preparation counts against the
    candidate like a check that hangs: over the limit, every check fails with
    ``candidate_timeout``, graded and never retried. Only when the starting tree was prepared
    well inside the limit (``TRUSTED_SHARE`` of it): a machine too slow to prepare even that is
    the grader's trouble."""
    out: dict[str, Any] = {"seconds": round(seconds, 3),
                           "pristine_seconds": round(pristine_seconds, 3),
                           "entries": entries, "limit_seconds": limit, "over": False}
    if seconds > limit and pristine_seconds < limit * TRUSTED_SHARE:
        out["over"] = True
        out["why"] = (f"preparing the delivered tree ({entries} entries) took {seconds:.1f} s, "
                      f"over verifier_wall_seconds ({limit:g} s), while the starting tree took "
                      f"{pristine_seconds:.2f} s")
    return out


#: A failed check's code more exact than ``<check>_failed``.
ExactCheckFailure = Literal["candidate_timeout", "tests_missing"]
#: ``<check>_failed`` for every check (``statuses.CheckFailure``, the one list of the family).
_CHECK_FAILED: dict[str, CheckFailure] = dict(zip(CHECK_NAMES, get_args(CheckFailure),
                                                  strict=True))


def _check_failures(details: GradeDetails) -> dict[str, ExactCheckFailure]:
    """The checks whose failure has a more exact code than ``<check>_failed``: a time-out the
    candidate's code caused, expected tests that were never reported."""
    out: dict[str, ExactCheckFailure] = {}
    for n in ("behavior", "regression"):
        rec = getattr(details, n) or {}
        if rec.get("failure") == "candidate_timeout":
            out[n] = "candidate_timeout"
        elif rec.get("tamper_evident", {}).get("failure") == "tests_missing":
            out[n] = "tests_missing"
    return out


def _first_failure(validity: Validity, exec_status: str, checks: dict[str, CheckOutcome],
                   required: set[str], integrity_code: IntegrityCode | None,
                   changed: bool | None, missing: dict[str, ExactCheckFailure] | None = None
                   ) -> GradeFailureCode | None:
    """The first reason the trial is not accepted, in the order a reader should fix things.
    Only required checks can reject; a check the task did not require is reported, not used.
    ``missing`` names the checks that failed only because expected tests were not reported."""
    missing = missing or {}
    if validity.status != "valid":
        return "verifier_error"
    if is_execution_failure(exec_status):
        return exec_status
    if "integrity" in required and checks.get("integrity") == "fail":
        return integrity_code
    if changed is False:
        return "no_change"
    for name in CHECK_NAMES:
        if name in required and checks.get(name) != "pass":
            return missing.get(name) or _CHECK_FAILED[name]
    if not all(checks.get(c) == "pass" for c in required):
        return "required_check_missing"
    return None


def verify(bundle: Bundle, trial_dir: Path, *, revision: str, trial_id: str,
           execution: dict[str, Any]) -> Grade:
    """Grade the artifact in ``trial_dir`` and write ``grades/<revision>.json`` (never over an
    existing one). Returns the grade."""
    target = grade_path(trial_dir, revision)
    if target.exists():
        raise NeverOverwrite(f"{target} exists: a grade is never overwritten; use a new "
                              "verifier revision")
    spec = bundle.spec
    acc = spec.acceptance
    checks: dict[str, CheckOutcome] = {}
    details = GradeDetails(verifier_revision=revision, task_revision=spec.revision,
                           task_spec_sha256=bundle.spec_sha256, started_at=utc_now())
    validity = Validity(status="valid")
    try:
        frozen = json.loads((trial_dir / ARTIFACT_JSON).read_text())
        if frozen.get("refused") is not None:  # the execution says resource_limit
            details.workspace_refused = frozen["refused"]
            raise _NothingFrozen
        with open(trial_dir / ARTIFACT_TAR, "rb") as fh:
            if hashlib.file_digest(fh, "sha256").hexdigest() != frozen["tar_sha256"]:
                raise VerifierError("artifact.tar does not match the digest in artifact.json")
        artifact = frozen["entries"]
        with tempfile.TemporaryDirectory(prefix=verify_prefix("verifier"), dir=scratch_dir(
                len(artifact), frozen.get("bytes"))) as tmp:
            pristine = Path(tmp) / "pristine"
            started = time.monotonic()
            bundle.export_starting_tree(pristine)
            check = check_starting_tree(bundle, pristine)
            pristine_seconds = time.monotonic() - started
            digest = details.fixture_digest = check.digest
            if check.problem:
                raise VerifierError(check.problem)
            seed_from_image(bundle, pristine)  # as the agent's workspace started
            integrity = check_integrity(list_tree(pristine), artifact,
                                        protected=acc.protected_paths,
                                        allowed=acc.allowed_paths,
                                        allowed_binaries=acc.allowed_binaries,
                                        ignored=frozen.get("excluded", {}).get(
                                            "patterns", bundle.ignored_paths),
                                        every_mode=bundle.spec.initial_state.environment.users
                                        == "several",
                                        shadow_names=shadow_names(
                                            None if (root := task_root(bundle)) is None
                                            else root.rootfs))
            details.integrity = Integrity.model_validate(integrity.to_record())
            checks["integrity"] = "pass" if integrity.passed else "fail"
            workspace = Path(tmp) / "candidate"
            started = time.monotonic()
            build_workspace(pristine, trial_dir, integrity, workspace)
            over = _preparation_over(time.monotonic() - started, pristine_seconds,
                                     len(artifact), spec.budget.verifier_wall_seconds)
            details.preparation = over
            details.suspicious = scan_workspace(workspace, integrity.changes)
            # named like pytest's own modules: never imported by a check (the start-up guard
            # resolves those from the interpreter), listed for a reader
            details.runner_modules_shadowed = runner_shadows(workspace)
            tampered: list[str] = []
            for name in ("behavior", "regression"):
                cmd = getattr(acc, name)
                if cmd is None:
                    continue
                if over["over"]:
                    # the delivered tree alone took the check's whole time limit to prepare:
                    # the candidate's time-out, as if the check had run and hung (not run)
                    record = {"command": cmd.command, "counts_rule": cmd.counts,
                              "status": "fail", "failure": "candidate_timeout",
                              "reason": "not_run", "why": over["why"],
                              "exit_code": None, "counts": None, "stdout_counts": None,
                              "wall_seconds": None, "stdout_tail": "", "stderr_tail": "",
                              "bytecode_removed": [], "limits_applied": {},
                              "tamper_evident": {"applied": False, "why": over["why"]}}
                    setattr(details, name, record)
                    checks[name] = "fail"
                    continue
                res = run_check(name, cmd, workspace, bundle,
                                trial_dir / "verify" / revision / name, pristine=pristine,
                                fixture_digest=digest)
                setattr(details, name, res)
                if res["status"] == "error":
                    # the grader's own failure (the trusted tree could not be run, the sandbox
                    # failed, a time-out not the candidate's): no grade, verified again later
                    validity = Validity(status="invalid", reason="grader_error",
                                        detail=f"{name} command: {res['reason']}"
                                        + (f" ({res['timeout']['why']})" if "timeout" in res
                                           else ""))
                checks[name] = res["status"]
                tampered += [f"{name}: {why}" for why in res["tamper_evident"].get("tampered", [])]
            ran = {n: rec for n in ("behavior", "regression")
                   if (rec := getattr(details, n)) is not None}
            details.not_tamper_evident = {
                n: rec["tamper_evident"]["why"] for n, rec in ran.items()
                if not rec["tamper_evident"]["applied"]}
            if tampered:
                # The runner's own report was bent: a hard reject, whatever else held.
                rec = details.integrity
                rec.passed = False
                rec.problems = rec.problems + [{"code": "test_runner_tampered",
                                                "evidence": tampered}]
                rec.failure_code = rec.failure_code or "test_runner_tampered"
                checks["integrity"] = "fail"
            if acc.judge is not None:  # after the tests, from the same rebuilt tree
                judged = run_judge_check(
                    bundle, trial_dir, tree=workspace, pristine=pristine,
                    subject={"trial_id": trial_id, "task": spec.id, "verifier_revision":
                             revision})
                details.judge = judged
                checks["judge"] = judged["status"]
    except _NothingFrozen:
        pass
    except (VerifierError, OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        validity = Validity(status="invalid", reason="grader_error",
                            detail=f"{type(exc).__name__}: {exc}")
    required = set(acc.required) | ({"judge"} if acc.judge and acc.judge.required else set())
    integrity_rec = details.integrity
    changes = None if integrity_rec is None else integrity_rec.changes
    changed = None if changes is None else any(
        (changes.added, changes.deleted, changes.modified))
    integrity_code = None if integrity_rec is None else integrity_rec.failure_code
    if "judge" in required and checks.get("judge") == "error" and validity.status == "valid" \
            and _first_failure(validity, execution.get("status", "succeeded"), checks,
                               required - {"judge"},
                               integrity_code, changed=changed) is None:
        # the judge decides this trial and could not judge: no grade, never a pass
        validity = Validity(status="invalid", reason="grader_error",
                            detail=f"judge: {(details.judge or {}).get('reason')}")
    required_pass = all(checks.get(c) == "pass" for c in required)
    failure = _first_failure(validity, execution.get("status", "succeeded"), checks, required,
                             integrity_code, changed=changed,
                             missing=_check_failures(details))
    accepted = failure is None and required_pass
    details.ended_at = utc_now()
    grade = Grade(
        schema=Grade.schema_id(),
        trial_id=trial_id,
        execution=execution,
        validity=validity,
        checks={c: checks.get(c, "not_run") for c in ("behavior", "regression", "integrity",
                                                       *(("judge",) if acc.judge else ()))},
        required=list(acc.required) + (["judge"] if "judge" in required else []),
        accepted=accepted,
        failure_code=failure,
        details=details,
    )
    write_new_text(target, json.dumps(as_written(grade), indent=2) + "\n")
    return grade
