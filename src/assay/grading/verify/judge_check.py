"""``acceptance.judge``: a pinned judge's verdict on the frozen artifact, as a check of the grade.

The verifier calls :func:`run_judge_check` after the test checks, with the tree it rebuilt from
the pristine starting tree and ``artifact.tar`` (the live workspace no longer exists) and the
attempt's recorded trajectory (``agent/``); what the judge reads is
``grading/verify/judge_material.py``'s parts, quoted by the judge module.

The endpoint is the judge's own: ``judge.yaml``'s ``base_url`` (or the variable its
``base_url_env`` names) and the key in its ``api_key_env``, read from the verifier's process,
the runner's host side. An arm's gateway token exists only in its agent's sandbox and is revoked
when the agent ends, so the judge can never be billed to, or reached through, the arm it judges.

Outcomes: ``pass`` / ``fail`` by the task's rule (``pass: {criterion, at_least | one_of}``),
``error`` when no judgement could be made (no endpoint, transport trouble, a reply still
unusable after its one retry). An error is not the candidate's failure: for a required judge
the verifier then records a grader error (no grade, never a pass; re-grade the same artifact),
unless another required check already rejects the trial. Every judgement is appended to the
attempt's ``judgements.jsonl`` with the judge's pin; the grade carries the scores, the pin and
the calibration status (the calibration file beside the judge.yaml, or ``uncalibrated``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from assay.errors import AssayError
from assay.records.judgement import Judgement, append_judgement
from assay.suites.bundle import Bundle, JudgePass
from assay.suites.judge_spec import LoadedJudge

JUDGEMENTS = "judgements.jsonl"
T = TypeVar("T")


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The coroutine to completion from synchronous code, in a thread of its own when this one
    already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def calibration_status(judge: LoadedJudge) -> dict[str, Any] | str:
    """The calibration written for this judge's revision (``judge calibrate``), or the word
    ``uncalibrated`` (also when the calibration file cannot be read: a figure that cannot be
    shown is not shown as agreement)."""
    from assay.grading.judge.calibration import UNCALIBRATED, calibration_for

    try:
        found = calibration_for(judge)
    except AssayError:
        return UNCALIBRATED
    return found if found is not None else UNCALIBRATED


def _decide(rule: JudgePass, score: str | int | None) -> bool:
    if rule.at_least is not None:
        return isinstance(score, int) and score >= rule.at_least
    return isinstance(score, str) and score.lower() in {v.lower() for v in rule.one_of or []}


def run_judge_check(bundle: Bundle, trial_dir: Path, *, tree: Path, pristine: Path,
                    subject: dict[str, Any]) -> dict[str, Any]:
    """The judge check's record for the grade's ``details["judge"]``; its ``status`` is the
    check's outcome (``pass``, ``fail``, ``error``). Never raises for the judge's doing."""
    from assay.grading.judge.endpoint import judge_client
    from assay.grading.judge.reply import judge_material
    from assay.grading.verify.judge_material import scrub, to_material, trial_parts
    from assay.suites.judge_spec import load_judge

    check = bundle.spec.acceptance.judge
    assert check is not None
    rule = check.pass_
    record: dict[str, Any] = {"required": check.required, "show": list(check.show),
                              "rule": rule.model_dump(exclude_none=True)}
    try:
        judge = load_judge(bundle.root / check.judge)
    except AssayError as exc:
        return {**record, "status": "error", "reason": f"the judge cannot be loaded: {exc}"}
    record.update(judge_revision=judge.revision, pin=judge.pin(),
                  calibration=calibration_status(judge))
    try:
        parts = trial_parts(bundle, trial_dir, check.show, tree=tree, pristine=pristine)
        # the run's own paths say nothing about the candidate's work
        scrub(parts, {str(trial_dir.resolve())})
        material = to_material(parts,
                               context=bundle.instruction_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # the check's trouble, not the whole grade's
        return {**record, "status": "error",
                "reason": f"the material could not be read: {type(exc).__name__}: {exc}"}
    record["material"] = {"sha256": material.sha256(), "files": sorted(material.files),
                          "events": len(material.events)}

    async def ask() -> Judgement:
        client = judge_client(judge, max_tries=3, backoff_base_s=0.2)
        try:
            return await judge_material(client, judge, material, subject=subject)
        finally:
            await client.aclose()

    try:
        judgement = _run(ask)
    except AssayError as exc:  # no endpoint, or no usable answer from it
        return {**record, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    append_judgement(trial_dir / JUDGEMENTS, judgement)
    record["judgement"] = {"status": judgement.status, "scores": judgement.scores,
                           "citations": judgement.citations, "problems": judgement.problems,
                           "tries": judgement.tries, "served_model": judgement.served_model}
    if judgement.status != "valid" or judgement.scores is None:
        return {**record, "status": "error",
                "reason": "the judge's reply was unusable after one retry: "
                          + "; ".join(judgement.problems)[:500]}
    score = judgement.scores.get(rule.criterion)
    record["score"] = score
    return {**record, "status": "pass" if _decide(rule, score) else "fail"}
