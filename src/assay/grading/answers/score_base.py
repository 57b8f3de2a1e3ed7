"""What every narrow-suite scorer shares: the reading of a reply, the score, the protocol and the
base class that applies the format contract.

Apart from the scorer table (``scorers``) so that a scorer living elsewhere (the ``judge``
scorer, which calls a model) builds on it without the table and the scorer importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from assay.grading.answers.labels import InvalidReason, read_object, read_text
from assay.suites.cases import Case, NarrowSuite
from assay.suites.prompts import scorer_retry_instruction
from assay.suites.scorer_config import ScorerSpec


@dataclass(frozen=True)
class Reading:
    """What the format contract made of one reply."""

    value: Any  # the label, text, number or object read; None when invalid
    reason: InvalidReason | None = None  # None when valid
    detail: str | None = None

    @property
    def valid(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Score:
    """The verdict on a readable answer, and what the report shows about how it was reached."""

    correct: bool
    detail: dict[str, Any] | None = None


class Scorer(Protocol):
    """One row of the table. ``read`` must not call anything (it runs between the answer and
    the format retry); ``score`` may."""

    spec: ScorerSpec

    def read(self, text: str | None, refusal: str | None) -> Reading: ...

    def retry_instruction(self) -> str: ...

    async def score(self, value: Any, case: Case, repeat: int = 0) -> Score: ...

    async def aclose(self) -> None: ...


class ScorerBase:
    """The format contract's two readings (a field of one JSON object, or the whole text)."""

    def __init__(self, suite: NarrowSuite) -> None:
        self.spec = suite.scorer
        self.output_field = suite.config.output_field
        self._retry = scorer_retry_instruction(suite.scorer, self.output_field, suite.labels)

    def retry_instruction(self) -> str:
        return self._retry

    async def aclose(self) -> None:
        """Nothing to release: only a scorer with a client of its own (judge) has work here."""

    def _read_field(self, text: str | None, refusal: str | None) -> tuple[Any, Reading | None]:
        """(the value at ``output_field``, None), or (None, the invalid reading)."""
        obj, why, detail = read_object(text, refusal)
        if obj is None:
            return None, Reading(None, why, detail)
        if self.output_field not in obj:
            return None, Reading(None, "missing_field", f"{self.output_field!r} absent")
        return obj[self.output_field], None

    def _read_string(self, text: str | None, refusal: str | None, *,
                     nonempty: bool = False) -> Reading:
        """The whole reply (``reads: text``: only an empty reply is invalid) or the string at
        ``output_field`` (an empty one refused with ``nonempty``)."""
        if self.spec.reads == "text":
            body, why, detail = read_text(text, refusal)
            return Reading(body, why, detail)
        value, bad = self._read_field(text, refusal)
        if bad is not None:
            return bad
        if not isinstance(value, str) or (nonempty and not value.strip()):
            return Reading(None, "missing_field", f"{self.output_field!r} "
                           f"{type(value).__name__}")
        return Reading(value)
