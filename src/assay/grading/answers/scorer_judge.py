"""The ``judge`` scorer: a pinned judge model decides whether each narrow answer passes.

The answer (the reply text, or the string at ``output_field`` with ``reads: json``) is the
material; the case's input, and its ``expected`` when it has one, are the quoted context, so
the judge sees the question and the reference as data like the answer. The judge core
(``grading/judge/reply.py``) quotes, asks, checks citations and retries once; this module adds the
suite's pass rule (``pass: {criterion, at_least}`` or ``{criterion, one_of}``) and keeps every
judgement in the run's append-only ``judgements.jsonl``.

A judgement that cannot be made is never a verdict: transport trouble at the judge's endpoint
or a reply still unusable after its retry raises, and the runner records the row as an error
(left out of the accuracy, asked again on resume), as ``grader_error`` is for coding grades.
The judge's endpoint is its own (``judge.yaml``'s ``base_url`` or ``base_url_env``, the key in
its ``api_key_env``): never the endpoint under test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.errors import AssayError, GradingError
from assay.grading.answers.score_base import Reading, Score, ScorerBase
from assay.grading.judge.calibration import calibration_for, calibration_label
from assay.grading.judge.endpoint import judge_base_url, judge_client
from assay.grading.judge.reply import Material, judge_material
from assay.records.judgement import JUDGEMENTS, append_judgement
from assay.suites.cases import Case, NarrowSuite
from assay.suites.judge_spec import LoadedJudge


def judge_of(suite: NarrowSuite) -> LoadedJudge:
    judge = suite.scorer.judge_loaded
    if judge is None:
        raise ValueError("a judge scorer without its loaded judge")
    return judge


def check_judge_endpoint(suite: NarrowSuite, environ: Mapping[str, str] = os.environ) -> None:
    """For a suite scored by a judge: its endpoint is named (else ``InputError``)."""
    if suite.scorer.type == "judge":
        judge_base_url(judge_of(suite), environ)


def calibration_words(judge: LoadedJudge) -> str:
    """The judge's agreement with people, or ``uncalibrated``, as the report shows it."""
    try:
        return calibration_label(calibration_for(judge))
    except AssayError as exc:  # a damaged calibration file, or one of another revision
        return f"uncalibrated (the calibration file cannot be read: {exc})"


def passes(rule: dict[str, Any], score: Any) -> bool:
    if "at_least" in rule:
        return type(score) is int and score >= rule["at_least"]
    return score in rule.get("one_of", [])


def context_of(case: Case) -> str:
    text = f"Question:\n{case.input}"
    if isinstance(case.expected, str):
        text += f"\n\nReference answer:\n{case.expected}"
    return text


class JudgeScorer(ScorerBase):
    """Reads text (or the JSON field's string) and asks the judge."""

    def __init__(self, suite: NarrowSuite, run_dir: Path | None = None,
                 environ: Mapping[str, str] = os.environ) -> None:
        super().__init__(suite)
        if run_dir is None:
            raise ValueError("the judge scorer keeps its judgements in a run directory")
        self.suite_name = suite.name
        self.judge = judge_of(suite)
        self.path = run_dir / JUDGEMENTS
        self.client = judge_client(self.judge, environ=environ)

    def read(self, text: str | None, refusal: str | None) -> Reading:
        return self._read_string(text, refusal, nonempty=True)

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score:
        material = Material.answer(str(value), context=context_of(case))
        judgement = await judge_material(
            self.client, self.judge, material,
            subject={"suite": self.suite_name, "case": case.id, "repeat": repeat})
        append_judgement(self.path, judgement)
        rule = self.spec.pass_rule
        if judgement.status != "valid" or judgement.scores is None:
            raise GradingError("the judge's reply was unusable after its retry: "
                               + "; ".join(judgement.problems)[:300])
        score = judgement.scores.get(rule["criterion"])
        return Score(passes(rule, score), {
            "judge_revision": judgement.judge_revision, "criterion": rule["criterion"],
            "score": score, "scores": dict(judgement.scores),
            "pass": {k: v for k, v in rule.items() if k != "criterion"},
            "reason": (judgement.reasons or {}).get(rule["criterion"]),
            "citations": (judgement.citations or {}).get(rule["criterion"], []),
            "tries": judgement.tries})

    async def aclose(self) -> None:
        await self.client.aclose()


def manifest_extras(suite: NarrowSuite) -> dict[str, Any]:
    """The judge's pin and calibration for the manifest's scorer record."""
    judge = judge_of(suite)
    return {"pin": judge.pin(), "calibration": calibration_words(judge)}
