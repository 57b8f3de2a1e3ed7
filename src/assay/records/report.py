"""What a report says: ``report.json`` of a narrow or coding run, and the comparison that
``assay compare --json`` writes.

Reports are derived data (rebuilt from the rows at will), but other tools read them, so their
keys are an interface: the builders in ``assay.report`` produce plain dicts, and validate them
here before returning them, so a builder that drifts from the declared shape fails loudly in
tests instead of silently changing what a reader sees. The figures are documented beside each
field (docs/guide/narrow.md, "What the report figures mean" explains them for people).
Unknown figures are ``null``, never 0.

The models are strict (no coercion): a report is computed by assay, not typed by a person, so a
``"3"`` where a count belongs is a bug to catch, not an input to forgive. An integer is still
accepted where a float belongs (``latency_ms`` of 400 is 400.0).

The module is over 400 lines because it is record declarations with a docstring under
every field and nothing else; split, a reader would lose the one place where every top-level
key a report file can carry is listed (the case-by-case parts, the wrong answers and the latency
histogram, are declared in ``records/report_cases.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from assay.errors import RecordError
from assay.records.base import Record
from assay.records.io import read_json_file
from assay.records.narrow import NarrowParameters
from assay.records.report_cases import CodingFailedTask, LatencyHistogram, NarrowWrongCase

REPORT_JSON = "report.json"

#: ``[low, high]`` of a 95% interval; a list, as report readers have always read it.
Interval95 = Annotated[list[float], Field(min_length=2, max_length=2)]


def _read_lazily(value: Any) -> bool:
    """A list a builder keeps on disk and reads one item at a time (``report.spilled``): it is
    checked item by item, never whole in memory."""
    return isinstance(value, Sequence) and not isinstance(value, list | tuple | str | bytes)


def _item_type(annotation: Any) -> Any:
    """``X`` of a field declared ``list[X]`` or ``list[X] | None``."""
    for arg in (annotation, *get_args(annotation)):
        if get_origin(arg) is list:
            return get_args(arg)[0]
    raise TypeError(f"not a list field: {annotation!r}")


class ReportPart(Record):
    """A strict sub-object of a report (see the module docstring for why strict)."""

    model_config = ConfigDict(strict=True)


class ReportRecord(ReportPart):
    """A whole report file: ``schema`` names its kind and version."""

    schema_: str = Field(alias="schema")
    """``name/version`` of this report's schema."""

    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def checked(cls, data: dict[str, Any], where: Path | str) -> dict[str, Any]:
        """``data`` itself, once it names exactly this schema and validates: what a builder
        returns and a writer writes, so the bytes on disk are the builder's, checked."""
        if data.get("schema") != cls.schema_id():
            raise RecordError(f"{where}: schema {data.get('schema')!r}, expected "
                              f"{cls.schema_id()!r}")
        lazy = {k: v for k, v in data.items() if _read_lazily(v)}
        cls.read({**data, **dict.fromkeys(lazy, [])} if lazy else data, where)
        for name, items in lazy.items():
            adapter = TypeAdapter(_item_type(cls.model_fields[name].annotation))
            for i, item in enumerate(items):
                try:
                    adapter.validate_python(item)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    loc = ".".join(str(x) for x in (name, i, *first["loc"]))
                    raise RecordError(f"{where}: field {loc!r}: {first['msg']}") from None
        return data

    @classmethod
    def load(cls, data: dict[str, Any], where: Path | str) -> Self:
        """Read a report written earlier: a newer schema is refused, an older one is read
        while its fields still validate."""
        cls.check_schema_id(data.get("schema"), where)
        return cls.read(data, where)


# --------------------------------------------------------------------------- narrow report


class Latency(ReportPart):
    """Nearest-rank percentiles of ``latency_ms`` over the answers used (narrow: one per case
    and repeat, a format retry's two calls counted together; coding: one per sample), and
    their distribution."""

    p50: float | None
    """Median time spent on the answers used, in ms; null when no answer has a latency."""
    p95: float | None
    """95th percentile (nearest rank), in ms; null when no answer has a latency."""
    max: float | None
    """Slowest answer used, in ms; null when no answer has a latency."""
    p90: float | None = None
    """90th percentile (nearest rank), in ms; null when no answer has a latency, or in reports
    written before it was computed."""
    p99: float | None = None
    """99th percentile (nearest rank), in ms; null likewise."""
    histogram: LatencyHistogram | None = None
    """Every latency counted into bins (what report.html draws); null when no answer has a
    latency, or in reports written before it was computed."""


class LabelFigures(ReportPart):
    """Precision, recall and F1 of one label over the answered cases."""

    precision: float | None
    """Answers of this label that were right; null when the label was never answered."""
    recall: float | None
    """Cases expecting this label that got it; null when no case expects it."""
    f1: float | None
    """Harmonic mean of precision and recall; 0 when either is 0, null when undefined."""
    support: int
    """Answered cases that expect this label."""
    predicted: int
    """Answered cases whose answer is this label."""
    precision_ci95: Interval95 | None = None
    """95% interval of the precision, clustered by case (a case's repeats count once, with
    their rate); null when the label was never answered or in reports from before it."""
    recall_ci95: Interval95 | None = None
    """95% interval of the recall, clustered by case; null when no case expects the label or
    in reports from before it."""


class Agreement(ReportPart):
    """How often the repeats of a case give the same answer, over their valid answers."""

    cases_with_all_repeats: int
    """Cases with every repeat answered (no infra error)."""
    consistent_cases: int
    """Of the compared cases, those whose valid answers are all the same."""
    rate: float | None
    """``consistent_cases / cases_compared``; null when no case has two valid answers (an
    all-invalid run agrees on nothing)."""
    unstable_cases: list[str]
    """Ids of the compared cases whose valid answers differ, sorted."""
    cases_compared: int | None = None
    """Cases with every repeat answered and at least two valid answers: only these count;
    null in reports written before invalid answers were left out (those counted them)."""
    answers: int | None = None
    """Answers of the cases with every repeat answered; null in older reports."""
    invalid_answers: int | None = None
    """Of those answers, the ones without a valid answer (left out of the agreement); null in
    older reports."""


class UsageTotals(ReportPart):
    """Token totals over the answered cases, honest about what the endpoint did not report."""

    prompt_tokens: int | float | None
    """Prompt tokens summed over the answers that reported them; null when none did. A number
    as the endpoint sent it (an int, or a float from endpoints that send floats)."""
    completion_tokens: int | float | None
    """Completion tokens summed likewise; null when none reported them."""
    total_tokens: int | float | None
    """Total tokens summed likewise; null when none reported them."""
    incomplete: bool
    """True as soon as one answer lacked a figure: the totals are then lower bounds."""
    rows_missing_usage: int
    """Answered cases without usage, or with usage marked incomplete."""


class ScorerInfo(ReportPart):
    """Which scorer decided the verdicts, as the manifest recorded it, and in words."""

    type: str
    """``label``, ``normalized_text``, ``numeric``, ``json_fields`` or ``judge``."""
    config: dict[str, Any] | None
    """The scorer's record from the manifest (options, fields, the normalisation's id); null
    for runs from before scorers (scored by ``label``)."""
    description: str
    """The rule a person reads: what is read, how it is compared, the normalisation."""
    output_field: str | None = None
    """The key of the reply's JSON object the scorer reads (``suite.yaml``'s
    ``output_field``); null in reports written before it was kept."""


class FieldFigures(ReportPart):
    """Accuracy of one field a ``json_fields`` scorer lists."""

    n: int
    """Answered rows (invalid answers count as wrong in every field)."""
    correct: int
    """Rows whose answer has this field right."""
    accuracy: float | None
    """``correct / n``; null when nothing was answered."""
    accuracy_ci95: Interval95 | None
    """95% Wilson score interval clustered by case (a case's repeats count once, with their
    rate); null when nothing was answered."""


class NarrowReport(ReportRecord):
    """The figures of a narrow run, rebuilt from ``raw_predictions.jsonl`` and the manifest."""

    schema_name: ClassVar[str] = "assay.narrow.report"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = REPORT_JSON

    run_id: str
    """The run's id, from the manifest."""
    suite: str
    """The suite's name."""
    model: str
    """The model as requested."""
    served_models: dict[str, int]
    """Answers per model id the endpoint said served them (``(not reported)`` when it said
    none)."""
    system_fingerprints: list[str]
    """Every system fingerprint the endpoint reported, from the manifest."""
    isolation_note: str | None
    """A sentence every view must show about isolation; null for narrow runs, which run no
    code (the key is kept for readers that look for it in either kind of report)."""
    expected_rows: int
    """Cases × repeats: the rows a complete run has."""
    n: int
    """Case × repeat pairs with an answer (infra errors left out)."""
    correct: int
    """Answers whose label equals the expected one."""
    accuracy: float | None
    """``correct / n``; invalid answers count as wrong; null when nothing was answered."""
    accuracy_ci95: Interval95 | None
    """95% Wilson score interval of the accuracy, clustered by case: n is the effective number
    of cases (five repeats of the same answers count as one case, not five), so
    ``--fail-under-ci`` cannot be passed by repeating; null when nothing was answered."""
    invalid_remaining: int
    """Answers still without a valid label after the format retry."""
    invalid_first_try: int
    """Answers whose first try was unusable (the format retry was sent)."""
    retried: int
    """Answers that took more than one attempt."""
    invalid_reasons: dict[str, int]
    """Why the remaining invalid answers are invalid, with counts."""
    infra_errors: int
    """Case × repeat pairs with no usable answer from the endpoint (excluded, resumable)."""
    infra_error_ids: list[str]
    """Ids of the cases with an infra error, sorted, each once."""
    missing_rows: int
    """Rows not yet written (``expected_rows`` minus the rows standing); a resume asks them."""
    latency_ms: Latency
    """Time spent on the answers used, backoff waits excluded, measured in the client."""
    confusion: dict[str, dict[str, int]]
    """Counts by expected label (outer) and answered label (inner, ``(invalid)`` for no valid
    label); keyed by label because the labels are the suite's."""
    per_label: dict[str, LabelFigures]
    """Precision, recall and F1 of each of the suite's labels."""
    agreement: Agreement | None
    """Agreement across repeats; null when every case is asked once."""
    usage: UsageTotals
    """Token totals as the endpoint reported them."""
    torn_tail_bytes: int
    """Bytes of a torn last line in the rows file (an interrupted write), not counted."""
    warnings: list[str]
    """The manifest's warnings (served model changed mid-run, ...)."""
    labels: list[str]
    """The allowed labels, in order."""
    labels_source: str | None
    """Where the labels came from (``suite.yaml`` or the cases); null in older manifests."""
    parameters: NarrowParameters
    """What the model was asked with, as the manifest records it."""
    started_at: str | None
    """UTC time the run was created."""
    ended_at: str | None
    """UTC time the latest session ended; null while a session runs or after a crash."""
    wrong_cases: list[NarrowWrongCase] | None = None
    """Every case answered wrongly or invalidly in some repeat, rescued by the format retry, or
    lost to an endpoint error, with its input, raw answers and reasons; most informative first
    (by ``pattern``, then the most failed repeats, then id). Empty when every answer was right
    first time; null in reports written before it was listed (unknown, not "none")."""
    inputs_source: str | None = None
    """Where the case inputs in ``wrong_cases`` come from: the run's copy of its cases
    (``suite/cases.jsonl``, checked against the manifest's sha256); null when the run holds no
    such copy, or it does not match (the inputs are then unknown)."""
    scorer: ScorerInfo | None = None
    """The scorer of the run; null in reports written before scorers (those runs were scored
    by ``label``)."""
    per_field: dict[str, FieldFigures] | None = None
    """Per-field accuracy of a ``json_fields`` run, by field path (nested fields as ``a.b``,
    parents first); null for other scorers. ``confusion`` and ``per_label`` are empty unless the
    scorer is ``label``."""


# --------------------------------------------------------------------------- coding report


class SuiteFigure(ReportPart):
    """A mean over tasks with its task-clustered interval."""

    mean: float
    """Mean over the auto-graded tasks, each task weighing the same."""
    ci95: Interval95
    """95% Wilson interval on the task-clustered effective sample size (a task counts once,
    with its rate over its samples); never zero width."""
    tasks: int
    """Tasks the mean is over."""


class TaskFigures(ReportPart):
    """One task of a coding run: k of n, the failures, and whether its samples disagree."""

    id: str
    """The task id."""
    type: str | None
    """``unit``, ``diff`` or ``rubric``; null when the task has no answer yet."""
    samples: int
    """Graded samples (infra errors and ungraded answers left out)."""
    passes: int
    """Graded samples that passed."""
    pass_rate: float | None
    """``passes / samples``; null when no sample is graded (rubric tasks, no answer yet)."""
    mixed: bool
    """Some samples passed and some failed."""
    failures: list[str]
    """``#<sample>: <reason>`` of every failed sample."""
    infra_errors: int
    """Samples with no answer from the endpoint, or whose grader failed."""
    rubric_answers: int
    """Answers kept for human rubric grading."""
    rubric_graded: int = 0
    """Of those, answers with a human grade in the grading round reported."""
    rubric_passes: int = 0
    """Graded answers scoring at least ``rubric.pass_score``."""
    rubric_mean_score: float | None = None
    """Mean 0-3 grade of the task's graded answers; null when none is graded."""


class RubricAnswer(ReportPart):
    """One rubric answer and the grade that stands for it (unblinded)."""

    id: str
    """The task id."""
    sample: int
    """The sample number."""
    score: int | None
    """The 0-3 grade; null while the answer is ungraded."""
    passed: bool | None
    """``score >= pass_score``; null while ungraded."""
    round: str | None
    """The grading round the grade was given in; null while ungraded."""
    grader: str | None
    """Who gave it."""
    graded_at: str | None
    """UTC time of the grade."""
    note: str | None
    """The grader's note."""


class RubricRound(ReportPart):
    """A grading round on disk (``RUN_DIR/grades/rubric/<name>.jsonl``); rounds are kept
    forever, the report only chooses which counts."""

    name: str
    """``<UTC-stamp>-<grader>``: the name ``--rubric-round`` takes."""
    grader: str | None
    """Who graded in it."""
    source: str | None
    """``interactive`` (``assay grade``) or ``csv`` (``assay grade --import``)."""
    started_at: str | None
    """UTC time the round began (a sitting's start, an import's time)."""
    grades: int
    """Grade rows the round holds."""
    counted: int
    """Of those, grades standing in this report."""


class RubricSummary(ReportPart):
    """Unblinded figures of the human rubric grades: the newest grade of each answer as of
    the grading round reported (the latest, unless ``--rubric-round`` chose an older one)."""

    answers: int
    """Rubric answers in the run."""
    graded: int
    """Of those, answers with a grade."""
    ungraded: int
    """Answers still to grade."""
    mean_score: float | None
    """Mean of the grades; null when nothing is graded (no mean of nothing)."""
    scale: str
    """The grade scale, ``0-3``."""
    pass_score: int = 2
    """The lowest score that counts as a pass (JUnit, per-task passes)."""
    passed: int = 0
    """Graded answers scoring at least ``pass_score``."""
    round: str | None = None
    """The grading round the figures are as of; null when nothing is graded yet."""
    round_chosen: bool = False
    """True when ``--rubric-round`` chose the round; false for the latest (the default)."""
    rounds: list[RubricRound] = Field(default_factory=list)
    """Every grading round of the run, oldest first, newer ones included."""
    grades: list[RubricAnswer] = Field(default_factory=list)
    """Every rubric answer with its standing grade, by task and sample."""


class CodingReport(ReportRecord):
    """The figures of a coding run, from its answers and one grade revision."""

    schema_name: ClassVar[str] = "assay.coding.report"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = REPORT_JSON

    run_id: str
    """The run's id, from the manifest."""
    suite: str
    """The suite's name."""
    model: str
    """The model as requested."""
    not_isolated: bool
    """True when candidate code ran without the sandbox (``--sandbox none``)."""
    samples_per_task: int
    """Samples asked per task."""
    expected_rows: int
    """Tasks × samples: the answers a complete run has."""
    missing_rows: int
    """Answers not yet written; a resume asks them."""
    auto_graded_tasks: int
    """Unit and diff tasks with at least one graded sample: what the suite figures are over."""
    pass_at_1: SuiteFigure | None
    """Mean over tasks of the pass rate; null when no task is auto-graded."""
    pass_all: SuiteFigure | None
    """Share of tasks whose every graded sample passed (pass^k, k = ``pass_all_k``); null when
    no task is auto-graded."""
    pass_all_k: int
    """The fewest graded samples of an auto-graded task: the k of ``pass_all``."""
    pass_at_k: dict[str, SuiteFigure]
    """Unbiased pass@k for k = 1 .. ``pass_all_k``, keyed by k as a string."""
    pass_hat_k: dict[str, SuiteFigure]
    """pass^k (all of k samples pass, estimated unbiased) for the same k."""
    mixed_tasks: list[str]
    """Ids of the auto-graded tasks with mixed outcomes."""
    failure_reasons: dict[str, int]
    """Reasons of the failed samples, with counts."""
    infra_errors: int
    """Answers with an infra error (no answer, or the grader failed): excluded."""
    grade_revision: str | None
    """The grade revision the figures come from: the one asked for, else the newest
    (``inline`` for runs that graded inside their rows); null when the run has none yet."""
    ungraded: int
    """Answers not yet graded in that revision."""
    tasks: list[TaskFigures]
    """Every task, in the task file's order."""
    rubric: RubricSummary
    """The human rubric grades, unblinded."""
    served_models: dict[str, int]
    """Answers per model id the endpoint said served them."""
    warnings: list[str]
    """The manifest's warnings."""
    started_at: str | None
    """UTC time the run was created."""
    ended_at: str | None
    """UTC time the latest session ended."""
    latency_ms: Latency | None = None
    """Time of each sample's successful request (infra errors left out); null in reports
    written before it was computed."""
    failed_tasks: list[CodingFailedTask] | None = None
    """Every unit or diff task with a sample that failed or has no verdict, with the failure
    reason, output tails and the code graded; always-failing tasks first, then flaky ones,
    then those with infra errors only. Null in reports written before it was listed."""


# --------------------------------------------------------------------------- comparisons


class PairedTable(ReportPart):
    """The 2×2 table of paired outcomes."""

    both_right: int
    """Pairs both runs got right."""
    only_a: int
    """Pairs only run A got right."""
    only_b: int
    """Pairs only run B got right."""
    both_wrong: int
    """Pairs both runs got wrong."""
    same_partial: int = 0
    """Repeated cases both runs got right at the same rate strictly between 0 and 1 (neither
    better); always 0 when every case was asked once."""


class IntervalInfo(ReportPart):
    """How the paired interval was computed, so it can be computed again."""

    method: str
    """``wilson_mover``: each run's clustered Wilson interval, combined with a moderated
    correlation (``stats.moderated``); analytic, no seed."""
    clustered_by: str
    """The independent unit: ``case id`` or ``task`` (a case's repeats count once)."""


class NarrowSide(ReportPart):
    """One of the two narrow runs compared."""

    dir: str
    """The run directory as given."""
    model: str
    """The model as requested."""
    accuracy: float
    """Accuracy over the paired cases only: the mean of their per-case rates."""


class NarrowComparison(ReportRecord):
    """Two narrow runs of the same suite, case by case (B − A)."""

    schema_name: ClassVar[str] = "assay.narrow.compare"
    schema_version: ClassVar[int] = 2
    file: ClassVar[str] = "(the path given to assay compare --json)"

    run_a: NarrowSide
    """Run A."""
    run_b: NarrowSide
    """Run B."""
    paired: int
    """Cases answered (at least once) in both runs: all figures are over these. A case is the
    unit whatever the repetitions: its repeats are one measurement, its rate."""
    only_in_one_run: int
    """Cases answered in one run only (left out)."""
    table: PairedTable
    """Per case: both right, only (or more often) A, only (or more often) B, both wrong; with
    one repeat a side, the usual 2×2 table."""
    mcnemar_p: float
    """Exact two-sided McNemar p-value from the discordant cases (with repeats: the exact sign
    test of cases where A's rate is higher against cases where B's is)."""
    accuracy_diff_b_minus_a: float
    """Mean over the paired cases of B's per-case accuracy minus A's."""
    diff_ci95: Interval95
    """95% paired interval of the difference, clustered by case; never zero width."""
    interval: IntervalInfo
    """How the interval was computed."""
    a_right_b_wrong: list[str]
    """Cases A got right more often than B (ids)."""
    b_right_a_wrong: list[str]
    """Cases B got right more often than A."""
    repeats: dict[str, int] | None = None
    """Repetitions per case of each run (``a``, ``b``): runs with different counts are
    compared on per-case rates; null in comparisons written before this was recorded."""
    answers: dict[str, int] | None = None
    """Answers of the paired cases used from each run (``a``, ``b``); every repeat counts
    toward its case's rate. Null in older comparisons."""
    warnings: list[str]
    """What makes the comparison weaker (different prompts or parameters)."""


class CodingSide(ReportPart):
    """One of the two coding runs compared."""

    dir: str
    """The run directory as given."""
    model: str
    """The model as requested."""
    grade_revision: str | None
    """The grade revision its figures come from; null when nothing is graded."""
    rubric_round: str | None = None
    """The human grading round its rubric grades are as of; null when none is graded."""
    rubric_answers: int = 0
    """Rubric answers in the run."""
    rubric_ungraded: int = 0
    """Of those, answers still ungraded as of that round."""


class RubricTaskDelta(ReportPart):
    """One rubric task compared: graded answers and mean 0-3 grade in each run."""

    id: str
    """The task id."""
    a: str
    """``graded/answers`` in run A."""
    b: str
    """``graded/answers`` in run B."""
    a_mean_score: float
    """Mean grade of A's graded answers."""
    b_mean_score: float
    """Mean grade of B's graded answers."""
    delta: float
    """B's mean grade minus A's."""


class RubricComparison(ReportPart):
    """The human rubric grades of both runs, paired by task (tasks graded in both)."""

    tasks: int
    """Rubric tasks with at least one graded answer in both runs: the figures are over these."""
    mean_score_a: float
    """Mean over those tasks of A's per-task mean grade (0-3)."""
    mean_score_b: float
    """The same for B."""
    mean_score_diff_b_minus_a: float
    """Paired difference of the means."""
    diff_ci95: Interval95
    """95% paired interval of the difference of mean grades, clustered by task (the moderated t
    on the 0-3 scale, clipped to ±3); never zero width."""
    per_task: list[RubricTaskDelta]
    """Every compared rubric task, in A's task order."""


class TaskDelta(ReportPart):
    """One task compared: k of n in each run and the change of pass rate."""

    id: str
    """The task id."""
    a: str
    """``passes/samples`` in run A."""
    b: str
    """``passes/samples`` in run B."""
    delta: float
    """Pass rate of B minus pass rate of A."""


class CodingComparison(ReportRecord):
    """Two coding runs of the same task file, task by task (B − A)."""

    schema_name: ClassVar[str] = "assay.coding.compare"
    schema_version: ClassVar[int] = 2
    file: ClassVar[str] = "(the path given to assay compare --json)"

    run_a: CodingSide
    """Run A."""
    run_b: CodingSide
    """Run B."""
    tasks: int
    """Auto-graded tasks with graded answers in both runs: the pass@1 figures are over these."""
    pass_at_1_a: float | None
    """Mean pass rate of A over those tasks; null when there are none (rubric tasks only)."""
    pass_at_1_b: float | None
    """Mean pass rate of B over those tasks; null when there are none."""
    pass_at_1_diff_b_minus_a: float | None
    """Paired difference of the mean pass rates; null when there are no such tasks."""
    diff_ci95: Interval95 | None
    """95% paired interval of the difference, clustered by task; never zero width; null when
    there are no such tasks."""
    interval: IntervalInfo
    """How the interval was computed."""
    newly_failing: list[str]
    """Tasks A solved at least once and B never."""
    newly_passing: list[str]
    """Tasks A never solved and B did at least once."""
    per_task: list[TaskDelta]
    """Every compared task, in A's task order."""
    warnings: list[str]
    """What makes the comparison weaker (different parameters, no sandbox, ungraded
    rubric answers)."""
    rubric: RubricComparison | None = None
    """The human rubric grades compared; null when no rubric task is graded in both runs."""


# --------------------------------------------------------------------------- reading back

REPORTS: dict[str, type[NarrowReport] | type[CodingReport]] = {
    m.schema_name: m for m in (NarrowReport, CodingReport)}


def _report_model(schema: object, where: Path | str) -> type[NarrowReport] | type[CodingReport]:
    name = schema.rpartition("/")[0] if isinstance(schema, str) else ""
    model = REPORTS.get(name)
    if model is None:
        raise RecordError(f"{where}: not an assay report (schema {schema!r})")
    return model


def check_report(data: dict[str, Any], where: Path | str) -> dict[str, Any]:
    """``data`` unchanged once it validates as the report its ``schema`` names: the check a
    writer makes before a report reaches disk."""
    return _report_model(data.get("schema"), where).checked(data, where)


COMPARISONS: dict[str, type[NarrowComparison] | type[CodingComparison]] = {
    m.schema_name: m for m in (NarrowComparison, CodingComparison)}


def report_record(data: dict[str, Any], where: Path | str) -> NarrowReport | CodingReport:
    """A report already in hand (``assay.run``'s result), as the model its ``schema`` names."""
    return _report_model(data.get("schema"), where).load(data, where)


def comparison_record(data: dict[str, Any], where: Path | str
                      ) -> NarrowComparison | CodingComparison:
    """A comparison in hand (``assay.compare``'s result), as the model its ``schema`` names."""
    name = str(data.get("schema", "")).rpartition("/")[0]
    model = COMPARISONS.get(name)
    if model is None:
        raise RecordError(f"{where}: not an assay comparison (schema {data.get('schema')!r})")
    return model.load(data, where)


def read_report(path: Path) -> NarrowReport | CodingReport:
    """A ``report.json`` (or a run directory holding one), validated as the kind its
    ``schema`` names; a newer schema is refused. Reports are derived data, so a report that no
    longer validates is rebuilt with ``assay report RUN_DIR`` rather than repaired."""
    if path.is_dir():
        path = path / REPORT_JSON
    data = read_json_file(path)
    model = _report_model(data.get("schema"), path)
    model.check_schema_id(data.get("schema"), path)
    try:
        return model.read(data, path)
    except RecordError as exc:
        raise RecordError(f"{exc} (`assay report {path.parent}` rebuilds it from the run's "
                          "records)") from None
