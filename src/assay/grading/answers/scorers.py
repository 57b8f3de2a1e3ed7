"""The scorer table of narrow suites: who decides that one answer is right.

A scorer has two steps, because they fail differently. ``read`` applies the format contract to
the reply (one strict JSON object and the value at ``output_field``, or, for a scorer that reads
text, the reply without its reasoning): an answer it cannot read is *invalid*, and the runner
sends the one format retry. ``score`` compares what was read with the case's ``expected``: a
readable answer that does not match is *wrong*, never retried. ``score`` is awaitable so a scorer
may call a model (the ``judge`` scorer); the others return at once.

Like ``grading/answers/table.py`` for coding tasks, the table maps the suite's ``scorer.type`` to
the code; the suite's validation (``suites/scorer_config.py``) has already checked the options and
every case's ``expected``, so a scorer here never meets an expected value it cannot compare.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.grading.answers.labels import parse_answer, read_object, read_text
from assay.grading.answers.score_base import Reading, Score, Scorer, ScorerBase
from assay.grading.answers.scorer_rules import (
    as_json_number,
    compare_fields,
    compare_numbers,
    read_number,
)
from assay.suites.cases import Case, NarrowSuite
from assay.suites.scorer_config import FOLD_WORDS, fold_text


class LabelScorer(ScorerBase):
    """One of the suite's labels, compared stripped and lower-cased (today's scorer)."""

    def __init__(self, suite: NarrowSuite) -> None:
        super().__init__(suite)
        self.labels = suite.labels

    def read(self, text: str | None, refusal: str | None) -> Reading:
        parsed = parse_answer(text, output_field=self.output_field, labels=self.labels,
                              refusal=refusal)
        return Reading(parsed.label if parsed.valid else None, parsed.reason, parsed.detail)

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score:
        return Score(value == case.expected)


class NormalizedTextScorer(ScorerBase):
    """A text compared with the expected one after folding (``fold_text``): from the JSON
    field, or the whole reply (``reads: text``, where only an empty reply is invalid)."""

    def read(self, text: str | None, refusal: str | None) -> Reading:
        return self._read_string(text, refusal)

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score:
        a, e = fold_text(value), fold_text(str(case.expected))
        return Score(a == e, {"answer": a[:2000], "expected": e[:2000]})


class NumericScorer(ScorerBase):
    """A number within the suite's tolerance of the expected one (``scorer_rules``)."""

    def read(self, text: str | None, refusal: str | None) -> Reading:
        if self.spec.reads == "text":
            value, why, detail = read_text(text, refusal)
            if value is None:
                return Reading(None, why, detail)
        else:
            value, bad = self._read_field(text, refusal)
            if bad is not None:
                return bad
        number, why_not = read_number(value)
        if number is None:
            return Reading(None, "not_a_number", why_not)
        return Reading(as_json_number(number))

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score:
        ok, detail = compare_numbers(read_number(value)[0],  # type: ignore[arg-type]
                                     read_number(case.expected)[0],  # type: ignore[arg-type]
                                     self.spec.abs_tol, self.spec.rel_tol)
        return Score(ok, detail)


class JsonFieldsScorer(ScorerBase):
    """The answer's object field by field: the whole reply object, or the object at
    ``output_field`` when suite.yaml sets one. The format contract is only "one object"; a
    listed field missing or mistyped makes that field wrong, not the answer invalid."""

    def read(self, text: str | None, refusal: str | None) -> Reading:
        if self.spec.object_field is None:
            obj, why, detail = read_object(text, refusal)
            return Reading(obj, why, detail)
        value, bad = self._read_field(text, refusal)
        if bad is not None:
            return bad
        if not isinstance(value, dict):
            return Reading(None, "not_an_object", f"{self.output_field!r} "
                           f"{type(value).__name__}")
        return Reading(value)

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score:
        ok, fields = compare_fields(self.spec.fields, value, case.expected)  # type: ignore[arg-type]
        return Score(ok, {"fields": fields})


def _judge(suite: NarrowSuite, run_dir: Path | None) -> Scorer:
    # imported here: the judge core is only loaded by suites that use it
    from assay.grading.answers.scorer_judge import JudgeScorer

    return JudgeScorer(suite, run_dir)


#: ``scorer.type`` → the scorer, from the suite and the run directory (where the judge scorer
#: keeps its judgements)
SCORERS: dict[str, Callable[[NarrowSuite, Path | None], Scorer]] = {
    "label": lambda suite, _: LabelScorer(suite),
    "normalized_text": lambda suite, _: NormalizedTextScorer(suite),
    "numeric": lambda suite, _: NumericScorer(suite),
    "json_fields": lambda suite, _: JsonFieldsScorer(suite),
    "judge": _judge,
}


def scorer_for(suite: NarrowSuite, run_dir: Path | None = None) -> Scorer:
    """The scorer the suite names (the judge scorer needs ``run_dir`` and opens a client to
    the judge's endpoint: ``aclose`` it)."""
    return SCORERS[suite.scorer.type](suite, run_dir)


def manifest_record(suite: NarrowSuite) -> dict[str, Any]:
    """The scorer's record for the manifest: for a judge, with its pin and calibration, which
    the comparable settings leave out (a calibration written between two sessions changes what
    the report says, not what the verdicts are)."""
    record = suite.scorer.to_record()
    if suite.scorer.type == "judge":
        from assay.grading.answers.scorer_judge import manifest_extras

        record |= manifest_extras(suite)
    return record


def describe(record: dict[str, Any] | None) -> str:
    """The scorer as a report says it, from the manifest's record (``None``: a run from before
    scorers, which was scored by label)."""
    rec = record or {"type": "label", "reads": "json"}
    kind = rec.get("type")
    reads = ("reads the whole reply as text (reasoning blocks removed)"
             if rec.get("reads") == "text" else "reads the answer's JSON")
    if kind == "label":
        return "label: the label at the output field, stripped and lower-cased, must equal the " \
               "expected label"
    if kind == "normalized_text":
        return f"normalized_text ({reads}): equal after normalisation: {FOLD_WORDS}"
    if kind == "numeric":
        return (f"numeric ({reads}): |answer − expected| ≤ max(abs_tol {rec.get('abs_tol')}, "
                f"rel_tol {rec.get('rel_tol')} × |expected|), in decimal; numbers written as "
                "strings are read only in plain forms (1e3 yes, 1,000 no)")
    if kind == "json_fields":
        where = ("the whole answer object" if rec.get("object_field") is None
                 else f"the object at {rec.get('object_field')!r}")
        rules = ", ".join(f"{k}: {_rule_words(v)}" for k, v in (rec.get("fields") or {}).items())
        text = (f"json_fields ({where}): right when every listed field is right ({rules}); "
                "fields not listed are ignored")
        if rec.get("normalization"):
            text += f"; normalized_text is {FOLD_WORDS}"
        return text
    if kind == "judge":
        rule = rec.get("pass") or {}
        need = (f"at least {rule['at_least']!r}" if "at_least" in rule
                else f"one of {rule.get('one_of')!r}")
        return (f"judge ({reads}): judge {rec.get('judge')} (revision "
                f"{rec.get('judge_revision')}), right when criterion {rule.get('criterion')!r} "
                f"scores {need}; calibration: {rec.get('calibration') or 'uncalibrated'}")
    return str(kind)


def _rule_words(rule: dict[str, Any]) -> str:
    if rule.get("rule") == "numeric":
        return f"numeric (abs_tol {rule.get('abs_tol')}, rel_tol {rule.get('rel_tol')})"
    if rule.get("rule") == "json_fields":
        inner = ", ".join(f"{k}: {_rule_words(v)}" for k, v in (rule.get("fields") or {}).items())
        return f"object ({inner})"
    return str(rule.get("rule"))
