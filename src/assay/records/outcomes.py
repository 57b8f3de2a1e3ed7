"""The outcomes file: one row per trial, the common ground between assay and other harnesses.

``assay exp compare`` and ``exp plan`` read either an experiment run directory or a JSONL file
of these rows, so results from another harness get the same paired statistics; ``exp report``
writes ``outcomes.jsonl`` into every experiment run directory, so what assay analysed can be
analysed again by anything that reads JSON. Only ``task``, ``arm``, ``rep`` and ``passed`` are
required: a figure a harness does not have stays absent and is reported as unknown, never as
zero. Fields the schema does not name are kept (``--cluster repo`` reads a ``repo`` field).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from assay.records.base import Record
from assay.records.statuses import INTEGRITY_CODES

#: Failure codes that are integrity violations (the verifier's integrity check and its
#: tamper-evidence), so an outcomes file that gives only ``failure_code`` is counted right.
INTEGRITY_FAILURE_CODES = INTEGRITY_CODES


class Outcome(Record):
    """One trial's result: an arm at a task, repetition ``rep``."""

    schema_name: ClassVar[str] = "assay.outcome"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "outcomes.jsonl"
    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    task: str = Field(min_length=1)
    """The task id."""
    arm: str = Field(min_length=1)
    """The arm (configuration) that ran it."""
    rep: int = Field(ge=0)
    """The repetition number; (task, arm, rep) is unique in a file."""
    passed: bool | None
    """Whether the trial was accepted; null when it was never graded (an infra error, not
    run): it then counts for nothing in Δ and lowers coverage."""
    family: str | None = None
    """The task's family, for ``--cluster family``."""
    cost_usd: float | None = Field(default=None, ge=0)
    """What every attempt of the trial cost, failures included; absent when unknown."""
    cost_complete: bool | None = None
    """False when some usage was missing, so ``cost_usd`` is a lower bound; absent with a
    ``cost_usd`` means the harness reported it as complete."""
    seconds: float | None = Field(default=None, ge=0)
    """The agent's runtime; for a timed-out trial, when it was stopped."""
    timed_out: bool | None = None
    """Whether the agent was stopped at its time limit (its ``seconds`` is then not a finish
    time)."""
    failure_code: str | None = None
    """Why the trial was not accepted. An open string, not ``statuses.FailureCode``: another
    harness writes its own codes here (a Harbor job's exception type, ``needs_human``)."""
    integrity_violation: bool | None = None
    """Whether the verifier found tampering; derived from ``failure_code`` when absent."""
    intervention: bool | None = None
    """Whether a human had to step in (``needs_human``)."""
    triggered: bool | None = None
    """Whether the mechanism under test (e.g. context compaction) fired in the trial; null
    when the adapter cannot tell."""
    link: str | None = None
    """Where the trial's records are, relative to the source."""

    def is_integrity_violation(self) -> bool:
        if self.integrity_violation is not None:
            return self.integrity_violation
        return self.failure_code in INTEGRITY_FAILURE_CODES

    def extra_field(self, name: str) -> Any:
        return (self.model_extra or {}).get(name)


__all__ = ["INTEGRITY_FAILURE_CODES", "Outcome"]
