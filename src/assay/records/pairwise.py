"""What ``assay judge pairwise`` writes: one row per judged order, the plan, and the summary.

``pairwise_judgements.jsonl`` is append-only: each pair is judged twice (each candidate shown
first once) and each order is a row of its own, with the judge's pin, so a later reader can
recount, or see that a row came from another judge revision. ``pairwise_plan.json`` freezes
what the judge was shown under which opaque id (drawn from the recorded seed) before the first
call, so a resumed run shows the same ids; ``pairwise.json`` is the summary, rebuilt from the
rows every time.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from assay.records.base import Record

JUDGEMENTS_FILE = "pairwise_judgements.jsonl"
PLAN_FILE = "pairwise_plan.json"
SUMMARY_FILE = "pairwise.json"


class PairJudgement(Record):
    """One order of one pair: what the judge was shown, what it answered, mapped back."""

    schema_name: ClassVar[str] = "assay.judgement.pairwise"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = JUDGEMENTS_FILE

    pair: str
    """The pair's key, ``<task>/<rep>``."""
    task: str
    """The task both candidates were trials of."""
    rep: int
    """The repetition paired (A's rep r against B's rep r)."""
    order: Literal["ab", "ba"]
    """``ab``: arm A's candidate was shown first; ``ba``: arm B's."""
    ids: dict[str, str]
    """The opaque id each side was shown under: ``{"a": id, "b": id}``."""
    shown: list[str]
    """The opaque ids in the order the judge read them."""
    judge_revision: str
    """The pairwise revision: the judge's revision with the pairwise prompt and contract."""
    pin: dict[str, Any]
    """The judge's pinned fields (model, rubric and template digests, temperature, contract)."""
    status: Literal["valid", "invalid"]
    """``invalid`` when no usable reply came after one retry: the order counts for nothing."""
    verdict: str | None
    """The reply's choice as given: an opaque id or ``tie``; None when invalid."""
    preferred: Literal["a", "b", "tie"] | None
    """The choice mapped back to the arms; None when invalid."""
    citations: dict[str, list[str]] | None
    """The reply's citations per opaque id (checked against that candidate's material)."""
    reason: str | None = None
    """The judge's one-line reason, as data (truncated)."""
    problems: list[str] = Field(default_factory=list)
    """Why the reply was invalid (parse, unknown id, missing or invented citation)."""
    tries: int
    """Replies asked for (2 when the retry was used)."""
    served_model: str | None
    """The model the endpoint says answered."""
    raw_reply: str | None
    """The last reply's text, truncated."""
    scrubbed: dict[str, int] = Field(default_factory=dict)
    """Identifying strings replaced in each side's material, by side (counts only)."""
    at: str
    """UTC time the reply was recorded."""


class PlanSide(Record):
    """One side of the comparison: a run directory and an arm in it."""

    run: str
    """The run directory, absolute."""
    arm: str
    """The arm."""


class PlanJudge(Record):
    """The judge the plan was frozen for."""

    path: str
    """Its ``judge.yaml``, absolute."""
    pin: dict[str, Any]
    """The judge's pinned fields (model, rubric and template digests, temperature, contract)."""


class PairAttempt(Record):
    """The graded attempt one side of a pair shows the judge."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    dir: str
    """The attempt directory, absolute."""
    bundle: str
    """The task bundle it ran (the pristine tree is rebuilt from it)."""
    fixture_digest: str | None
    """The starting tree's digest the attempt started from (both sides must agree)."""


class PlannedPair(Record):
    """One pair: the same task and repetition on both sides, from the same starting tree."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    task: str
    """The task."""
    rep: int
    """The repetition."""
    ids: dict[str, str]
    """The opaque id each side is shown under: ``{"a": id, "b": id}``."""
    a: PairAttempt
    """Side A's attempt."""
    b: PairAttempt
    """Side B's attempt."""


class SkippedPair(Record):
    """A task and repetition that could not be judged, and why."""

    task: str
    """The task."""
    rep: int
    """The repetition."""
    why: str
    """No graded trial on a side, different starting trees, planned on one side only."""


class PairwisePlan(Record):
    """``pairwise_plan.json``: the sources, the judge and the seed, frozen before any call."""

    schema_name: ClassVar[str] = "assay.pairwise.plan"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = PLAN_FILE

    schema_: str = Field(alias="schema")
    """``assay.pairwise.plan/1``."""
    a: PlanSide
    """Side A: ``run`` (the run directory, absolute) and ``arm``."""
    b: PlanSide
    """Side B: ``run`` and ``arm``."""
    judge: PlanJudge
    """The judge's path and pin."""
    judge_revision: str
    """The pairwise revision every row must carry."""
    show: list[str]
    """Which material parts each candidate was shown (``diff``, ``files``, ``trajectory``,
    ``answer``)."""
    seed: int
    """The seed the opaque ids were drawn from."""
    pairs: list[PlannedPair]
    """Every pair: ``task``, ``rep``, ``ids`` and the attempt directory of each side."""
    skipped: list[SkippedPair]
    """Planned pairs that could not be judged (a side without a graded trial), and why."""
    created_at: str
    """UTC time the plan was frozen."""
