"""The case-by-case parts of a report: the answers that went wrong, with their raw text and the
reason, and the latency histogram a page draws the distribution from.

Their own module because they are what a person fixing a prompt or a task reads, not headline
figures: ``records/report.py`` embeds them in the narrow and coding reports. Every text that
came from a model (an answer, candidate code, an output tail) is data, cut to a readable length
here and escaped by every view; ``chars`` keeps the full length so a reader knows what was cut,
and the full text stays in the run's rows. These parts were added to report schema 1 without a
version bump: they are new keys only (no existing key changes meaning), and reports written
before them read with these keys null ("not computed"), never as "no wrong answers".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from assay.records.base import Record

#: How one repeat of a narrow case counts (``report/narrow_cases.py``).
NarrowVerdict = Literal["right", "wrong", "invalid", "infra_error"]
#: What a listed narrow case's repeats show, in the order cases are listed (most informative
#: first).
NarrowPattern = Literal["consistent_wrong", "consistent_invalid", "always_wrong", "flaky",
                        "format_retry", "endpoint_error"]
#: Why a listed coding sample is listed (``report/coding_cases.py``).
CodingSampleVerdict = Literal["failed", "infra_error", "grader_error"]
#: What a listed coding task's samples show, in the order tasks are listed.
CodingPattern = Literal["always_fails", "flaky", "infra_only"]


class _Part(Record):
    """Strict like every report part (see ``records/report.py``)."""

    model_config = ConfigDict(strict=True)


class CutText(_Part):
    """A text from a run, cut to a readable length."""

    text: str | None
    """The text, cut to a readable length: the start of an answer or input, the end of an
    output tail; null when there was none (no answer arrived, nothing ran)."""
    chars: int | None
    """Length of the whole text in characters; null with ``text``."""
    cut: bool
    """True when ``text`` holds less than the whole text (the rows file has all of it)."""


class LatencyHistogram(_Part):
    """Every measured latency counted into equal-width bins: the distribution without the rows.
    Bin ``i`` covers ``[start_ms + i * bin_ms, start_ms + (i + 1) * bin_ms)``; the slowest value
    is counted in the last bin."""

    start_ms: float
    """Lower edge of the first bin, in ms (the fastest value rounded down to a bin edge)."""
    bin_ms: float
    """Width of every bin, in ms: 1, 2 or 5 times a power of ten, at most 30 bins."""
    counts: list[int]
    """How many latencies fall in each bin, fastest bin first."""
    n: int
    """Latencies counted: the sum of ``counts``."""


class NarrowRepeatAnswer(_Part):
    """One repeat of a listed case: what the model answered and why it counts as it does."""

    repeat: int
    """Which repeat (0-based)."""
    verdict: NarrowVerdict
    """``right``, ``wrong`` (a valid label, not the expected one), ``invalid`` (no valid label
    after the format retry) or ``infra_error`` (no answer from the endpoint)."""
    reason: str
    """One sentence a person reads: the wrong label, the parse error, the format retry, the
    endpoint error."""
    parsed: str | None
    """What the scorer read from the answer used (the label; a text, or a number or object as
    JSON); null when invalid or on an infra error."""
    answers: list[CutText]
    """Every raw answer text in order (one, or two when the format retry was sent); empty when
    no answer arrived."""
    format_retry: bool
    """True when the first answer was unusable and the format retry was sent."""
    invalid_reason: str | None
    """The parser's reason the answer used gives no valid label; null when it gives one."""
    first_invalid_reason: str | None
    """The parser's reason the first answer was unusable, when the format retry was sent."""
    error: str | None
    """The endpoint error (infra errors only)."""
    finish_reason: str | None
    """Why the endpoint stopped generating the answer used (``length``: cut off by
    ``max_tokens``); null when it did not say."""
    latency_ms: float | None
    """Time spent on the answers used; null on an infra error."""
    score_detail: dict[str, Any] | None = None
    """The scorer's detail from the row (per-field verdicts, the difference, the normalised
    texts); null for ``label`` and for invalid answers."""


class NarrowWrongCase(_Part):
    """A case with at least one repeat answered wrongly or invalidly, rescued by the format
    retry, or lost to an endpoint error: its input, what it expects and every repeat."""

    id: str
    """The case id."""
    input: CutText
    """The case's input text, whole (``cut`` false); ``text`` null when the run directory holds
    no copy of its cases (runs from before ``suite/cases.jsonl``)."""
    expected: str
    """What the case expects: the label or text, or a number or object as JSON."""
    pattern: NarrowPattern
    """What its repeats show, in the order cases are listed: ``consistent_wrong`` (every
    answered repeat gave the same wrong label), ``consistent_invalid`` (every answered repeat
    invalid), ``always_wrong`` (never right, answers differ), ``flaky`` (right in some repeats,
    not in others), ``format_retry`` (right, but only after the format retry),
    ``endpoint_error`` (no wrong answer, some repeats without an answer: only in reports
    from before infra errors were left off this list)."""
    repeats: int
    """Repeats of the case with a row standing."""
    right: int
    """Repeats answered with the expected label."""
    wrong: int
    """Repeats answered with another valid label."""
    invalid: int
    """Repeats without a valid label after the format retry."""
    infra_errors: int
    """Repeats without an answer from the endpoint."""
    answers: list[NarrowRepeatAnswer]
    """Every standing repeat, right ones included so a flaky case shows both, by repeat."""


class CodingFailedSample(_Part):
    """One sample of a listed task that failed or has no verdict: why, and what was graded."""

    sample: int
    """Which sample (0-based)."""
    verdict: CodingSampleVerdict
    """``failed`` (graded, did not pass), ``infra_error`` (no answer from the endpoint) or
    ``grader_error`` (the grader failed: no verdict yet)."""
    reason: str
    """The grade's reason code: ``nonzero_exit``, ``timeout``, ``does_not_apply``,
    ``different_result``, ``sandbox_error``, ``infra_error``, ..."""
    explanation: str
    """One sentence a person reads: the exit code and the error line, the timeout, why the diff
    did not apply, the files that differ, the endpoint or sandbox error."""
    failing_tests: list[str]
    """The tests the output names as failing (pytest ``FAILED`` lines, TAP ``not ok`` lines,
    the assertion line of a Python traceback); empty when the output names none."""
    exit_code: int | None
    """Exit code of the execution; null when nothing ran or it was killed."""
    timed_out: bool | None
    """True when the time limit killed it; null when nothing ran."""
    wall_seconds: float | None
    """Seconds the execution took; null when nothing ran."""
    stdout_tail: CutText
    """The end of the execution's standard output, cut (text null when nothing ran)."""
    stderr_tail: CutText
    """The end of its standard error, cut."""
    detail: str | None
    """What the grader or sandbox added: why a diff does not apply, which files differ, what
    went wrong in the sandbox."""
    error: str | None
    """The endpoint's or the grader's error message, for the two kinds of infra error."""
    code: CutText
    """The code (or diff) extracted from the answer and graded, cut."""
    raw: CutText
    """The model's whole answer text, cut."""


class CodingFailedTask(_Part):
    """A task with at least one sample that failed or has no verdict."""

    id: str
    """The task id."""
    type: str | None
    """``unit`` or ``diff`` (rubric answers are graded by people, never listed here)."""
    pattern: CodingPattern
    """In the order tasks are listed: ``always_fails`` (every graded sample failed),
    ``flaky`` (some passed), ``infra_only`` (nothing failed, some samples have no verdict)."""
    samples: int
    """Graded samples."""
    passes: int
    """Graded samples that passed."""
    infra_errors: int
    """Samples without a verdict (endpoint or grader error)."""
    failed: list[CodingFailedSample]
    """Every failed sample and every sample without a verdict, by sample."""
