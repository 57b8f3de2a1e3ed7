"""A judge's verdict on one piece of material, as stored: append-only, pinned, never replaced.

A judgement is a model's opinion, so it is only evidence with the judge that gave it: every row
carries the judge's full pin (model, rubric and template hashes, settings, reply contract) and
its revision. Rows are appended to a ``judgements.jsonl`` and never rewritten; a changed judge
is a new revision whose rows sit beside the old ones. An ``invalid`` judgement (a reply that
could not be parsed, or that cited what does not exist, twice) is kept as what happened, and is
never counted as a score.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from assay.errors import RecordError
from assay.records.base import Record
from assay.records.io import JsonlAppender, iter_rows

JUDGEMENTS = "judgements.jsonl"
CALIBRATION = "calibration-<revision>.json"
#: How much of a reply a record keeps: enough to see what went wrong, not a whole essay.
RAW_REPLY_LIMIT = 4000


class Judgement(Record):
    """One judge's verdict on one piece of material (an answer, an artifact, a trajectory)."""

    schema_name: ClassVar[str] = "assay.judgement"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = JUDGEMENTS

    judge_revision: str
    """The judge's revision (12 hex over model, rubric, template, settings and contract)."""
    pin: dict[str, Any]
    """Everything that pins the judge: model as asked, rubric and template sha256,
    temperature, max tokens, reply contract, endpoint without credentials."""
    subject: dict[str, Any]
    """What was judged, by id (suite/case/repeat, run/task/trial, or a calibration item)."""
    material_sha256: str | None = None
    """sha256 of the material as quoted, so a judgement is tied to the exact text judged."""
    status: Literal["valid", "invalid"]
    """``valid``: every criterion scored with citations that exist; ``invalid``: not, after
    the one retry (never counted as a score)."""
    scores: dict[str, str | int] | None = None
    """Score per criterion id; None when invalid."""
    citations: dict[str, list[str]] | None = None
    """Citations per criterion id (``path:line``, ``path:a-b``, ``event:N``); None when
    invalid."""
    reasons: dict[str, str] | None = None
    """The judge's short reason per criterion, when it gave one; None when invalid."""
    problems: list[str] = []
    """Why the judgement is invalid (the last reply's problems); empty when valid."""
    first_problems: list[str] = []
    """What was wrong with the first reply when a retry was sent; empty otherwise."""
    tries: int
    """Replies used: 1, or 2 after the retry."""
    served_model: str | None = None
    """The model id the endpoint said answered (the last reply)."""
    raw_reply: str | None = None
    """The last reply's text, cut at 4000 characters."""
    usage: dict[str, Any] | None = None
    """Token usage summed over the replies; None when the endpoint reported none."""
    at: str
    """When the judgement was made (UTC, ISO 8601)."""


def append_judgement(path: Path, judgement: Judgement) -> None:
    """Append one row and fsync it: a judgement paid for is not lost to a crash."""
    with JsonlAppender(path, sync_every=1) as out:
        out.append(judgement.to_json())


def iter_judgements(path: Path) -> Iterator[Judgement]:
    """Every judgement in ``path``, validated; a torn last line (a crash mid-write) is
    skipped, a corrupt one in the middle is a ``RecordError``."""
    try:
        for n, row in enumerate(iter_rows(path), 1):
            yield Judgement.read(row, f"{path}: row {n}")
    except ValueError as exc:
        raise RecordError(str(exc)) from None


class CriterionAgreement(Record):
    """How the judge agreed with people on one criterion."""

    scale: list[str | int]
    """The criterion's allowed scores, in order (the confusion table's order)."""
    graded: int
    """Items people graded on this criterion."""
    n: int
    """Of those, items with a valid judgement: the pairs every figure below is computed on."""
    invalid: int
    """Of those, items whose judgement was invalid: counted apart, never as agreement or
    disagreement."""
    exact: float | None
    """Share of the ``n`` pairs where judge and person gave the same score; None when n is 0."""
    kappa: float | None
    """Cohen's kappa (unweighted); None when undefined (one score throughout) or n is 0."""
    kappa_ci: tuple[float, float] | None
    """The interval on kappa, by ``method`` at ``confidence``; None when kappa is."""
    method: str
    """How the interval was computed (``bootstrap (2000, seed 0)`` or ``se (Cohen 1960)``)."""
    confidence: float
    """The interval's confidence level."""
    weighted_kappa: float | None = None
    """Linearly weighted kappa, for integer scales (near misses count partly); None for
    label scales."""
    confusion: dict[str, dict[str, int]]
    """Counts by the person's score (outer key), then the judge's score (inner key)."""


class JudgeCalibration(Record):
    """``calibration-<revision>.json``: one judge revision against human grades, written once
    (a different calibration of the same revision is refused, never written over)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True,
                              populate_by_name=True)
    schema_name: ClassVar[str] = "assay.judge.calibration"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = CALIBRATION

    schema_: str = Field(alias="schema")
    """``assay.judge.calibration/1``."""
    judge_revision: str
    """The judge revision calibrated (the file name carries it too)."""
    pin: dict[str, Any]
    """The judge's full pin, as in every judgement."""
    human: dict[str, Any]
    """Where the human grades came from: ``kind`` (``jsonl`` or ``rubric_run``), ``path``,
    ``sha256`` (over the items, their material and grades) and ``items``."""
    items: int
    """Items judged."""
    invalid: int
    """Items whose judgement was invalid after the retry."""
    criteria: dict[str, CriterionAgreement]
    """Agreement per criterion that people graded."""
    ungraded: list[str]
    """The judge's criteria no person graded: no agreement for them."""
    unmapped: list[str]
    """What the human grades carry that maps to no criterion of the judge."""
    served_models: list[str] = []
    """Every model id the endpoint said answered these judgements (the name as asked is in
    ``pin``)."""
    judgements: str
    """The file beside this one that holds every judgement made for it."""
    at: str
    """When the calibration was computed (UTC)."""
