"""An experiment run directory's own records: ``manifest.json`` (what was run, frozen before the
first trial, plus one entry per session) and ``report.json`` (what the trials showed).

Both are validated against these models as they are written (``runner/experiment.py``,
``report/experiment.py``) and read back with :func:`read_experiment_manifest` and
:func:`read_experiment_report`; the bytes on disk are the writer's dict, so a run written
before these models existed reads the same. Both models are open (``extra="allow"``): a
feature that adds a key (an environment image, a fork's prefixes, a holdout look) extends the
record without breaking a reader; the keys every run has are typed and documented here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from assay.records.base import Record
from assay.records.io import read_json_file
from assay.records.statuses import Decision, ExperimentStatus, TrialRecordStatus

MANIFEST_FILE = "manifest.json"
REPORT_FILE = "report.json"

#: An attempt's status in the report's trial table: its ``trial.json``'s (``unknown`` when
#: that is unreadable or says something else), ``interrupted`` when it never ended nor was
#: graded, ``evidence_gap`` when its directory is gone; from an outcomes file ``graded`` or
#: ``not graded``; from a Harbor job ``graded`` or ``infra_error``.
AttemptStatus = Literal[TrialRecordStatus, "unknown", "interrupted", "evidence_gap",
                        "not graded"]
#: A trial's state in the report's trial table.
TrialTableState = Literal["graded", "not graded", "pending", "evidence_gap"]

_OPEN = ConfigDict(extra="allow", use_attribute_docstrings=True, populate_by_name=True)


class ToolIdentity(Record):
    """The assay that wrote the record."""

    model_config = _OPEN

    version: str
    """assay's version."""
    git_commit: str | None = None
    """The commit of the checkout it ran from; None for an installed package."""
    git_dirty: bool | None = None
    """Whether that checkout had uncommitted changes; None when unknown."""
    python: str | None = None
    """The Python version."""


class ExperimentArm(Record):
    """One arm as run: the agent, the model it reaches through the gateway, and how."""

    model_config = _OPEN

    agent: str
    """The agent: ``oracle``, ``nop``, ``command:...``, ``mutant:...`` or an agent CLI."""
    model: str | None
    """The model name its calls are sent with; None for an arm without a model."""
    protocol: str | None
    """The wire protocol of the model (``chat``, ``responses``, ``anthropic``); None without a
    model."""
    base_url: str | None
    """The upstream's base URL, redacted (no credentials or query); None without one."""
    params: dict[str, Any]
    """Request parameters the gateway pins on every call (temperature, ...)."""


class SequentialPlan(Record):
    """A sequential bar's plan, frozen in ``manifest.json`` before the first trial
    (``runner/sequential.py``)."""

    model_config = _OPEN

    spending: str
    """The Lan-DeMets spending function: ``pocock`` or ``obrien_fleming``."""
    alpha: float
    """The whole run's two-sided error, as the fixed design's 95% interval."""
    looks: list[int]
    """Task counts at which the bar is read; the last is every task."""
    levels: list[float]
    """The two-sided level each look's interval is read at (``stats/sequential.py``)."""
    task_order: list[str]
    """Every task, in the order the run takes them (drawn from the seed, stratified by
    family); each look sees the tasks before it."""


class SequentialLook(Record):
    """One look of a sequential bar, as committed to ``state.sqlite`` (table ``looks``) before
    its decision took effect."""

    model_config = _OPEN

    index: int
    """0 for the first look."""
    tasks: int
    """Tasks the look saw (the first ones of the task order)."""
    planned_tasks: int
    """Tasks in the plan."""
    level: float
    """The level its interval was read at."""
    last: bool
    """Whether it is the last look (which spends the rest of the error)."""
    trials_done: int
    """Graded trials of its tasks."""
    delta: float | None
    """Δ over its tasks; None when no task was graded in both arms."""
    ci: list[float] | None
    """The interval at ``level``; None without two clusters."""
    n_compared: int
    """Tasks graded in both arms."""
    decision: Literal["continue", "accept", "reject", "inconclusive"]
    """What it decided: ``continue`` (not the last look), ``accept`` or ``reject`` (the run
    stops), ``inconclusive`` (the last look only)."""
    reasons: list[str]
    """Hard requirements that failed, or why there was no comparison."""


class SequentialRecord(Record):
    """``sequential.json``: a sequential bar's looks so far, rewritten atomically after each
    look (from ``state.sqlite``, which holds them first); what the report reads."""

    model_config = _OPEN
    schema_name: ClassVar[str] = "assay.experiment.sequential"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "sequential.json"

    schema_: str = Field(alias="schema")
    """``assay.experiment.sequential/1``."""
    spending: str | None
    """The spending function."""
    baseline: str
    """Arm A."""
    candidate: str
    """Arm B."""
    hoped_improvement: float
    """The bar's hoped improvement."""
    max_regression: float
    """The bar's largest regression allowed."""
    planned_tasks: int
    """Tasks in the plan."""
    looks_planned: list[int]
    """Task counts of every look."""
    levels: list[float]
    """Each look's level."""
    looks: list[SequentialLook]
    """The looks taken, in order."""
    stopped_at_look: int | None
    """The index of the look that accepted or rejected; None while none did."""
    decision: str | None
    """That look's decision."""
    run_to_end: bool
    """Whether the run was resumed past its deciding look on purpose (``--run-to-end``): it
    is then analysed as the fixed design."""


class ExperimentSession(Record):
    """One ``exp run`` session over the run directory (a resume is a new session)."""

    model_config = _OPEN

    started_at: str
    """When the session started (UTC)."""
    pid: int
    """The runner's process id."""
    jobs: int
    """Trials at once."""
    verify_jobs: int | None = None
    """Local attempts verifying at once; None: no gate (or a Ray executor)."""
    watchdog_grace_seconds: float
    """Seconds between the watchdog's SIGTERM and SIGKILL at an agent's wall budget."""
    assay: ToolIdentity
    """The assay that ran this session."""
    ended_at: str | None = None
    """When it ended; absent while it runs or when it was killed."""
    status: ExperimentStatus | None = None
    """``complete``, ``infra_errors``, ``budget_stopped``, ``agent_start_failed``,
    ``evidence_gaps`` or ``stopped_at_look`` (a sequential bar's look decided); absent when it
    never ended."""
    spent_usd_total: float | None = None
    """USD spent by the whole run at the session's end (a lower bound unless
    ``spent_complete``)."""
    spent_complete: bool | None = None
    """Whether every call's cost was known."""
    run_to_end: bool | None = None
    """With a sequential bar: whether this session was asked (``--run-to-end``) to run the
    trials a deciding look left; absent without a sequential bar."""
    show_interim: bool | None = None
    """With a sequential bar: whether each look's Δ and interval were shown as it was taken
    (``--show-interim``): a person who saw them may have been swayed."""


class ExperimentManifest(Record):
    """``manifest.json`` of an experiment run: the experiment's identity (frozen, also in
    ``state.sqlite``; a resume with another identity is refused), the arms as run, the limits,
    prices and bar, and the sessions."""

    model_config = _OPEN
    schema_name: ClassVar[str] = "assay.experiment.manifest"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = MANIFEST_FILE

    schema_: str = Field(alias="schema")
    """``assay.experiment.manifest/1``."""
    kind: Literal["experiment"]
    """``experiment``."""
    name: str
    """The experiment's name."""
    experiment_file: str
    """The experiment file's absolute path when the run started (a copy is in the run
    directory as ``experiment.yaml``)."""
    identity: dict[str, Any]
    """What makes two runs the same experiment: the file's digest, its settings, each task's
    revision and digests, each arm."""
    identity_sha256: str
    """sha256 of ``identity``."""
    assay: ToolIdentity
    """The assay that created the run."""
    created_at: str
    """When the run directory was created (UTC)."""
    arms: dict[str, ExperimentArm]
    """Each arm as run."""
    limits: dict[str, Any]
    """The file's limits: ``tokens`` and ``cost_usd`` per attempt, ``total_cost_usd``."""
    prices: dict[str, Any]
    """USD per million input and output tokens, per model."""
    retries: dict[str, Any]
    """Retries of infrastructure errors per trial."""
    repetitions: int
    """Trials per task and arm."""
    seed: int
    """The experiment's seed (order, resampling)."""
    concurrency: int
    """Trials at once when the run was created."""
    watchdog_grace_seconds: float
    """Seconds between SIGTERM and SIGKILL at an agent's wall budget."""
    bar: dict[str, Any] | None
    """The decision rule written before the first trial; None: no verdict."""
    bar_sha256: str | None
    """sha256 of ``bar``."""
    task_meta: dict[str, dict[str, Any]]
    """Per task: its ``family`` and ``split``."""
    sessions: list[ExperimentSession]
    """Every session, in order."""
    sequential: SequentialPlan | None = None
    """With a sequential bar: the task order drawn from the seed, the looks and their levels,
    frozen before the first trial; absent otherwise."""


class ExperimentArmFigures(Record):
    """One arm's figures in the experiment report."""

    model_config = _OPEN

    planned: int
    """Trials planned."""
    graded: int
    """Trials with a grade."""
    accepted: int
    """Trials accepted."""
    coverage: float | None
    """``graded / planned``."""
    pass_rate_of_graded: float | None
    """``accepted / graded``; None with nothing graded."""
    failure_codes: dict[str, int]
    """Graded trials by failure code, the accepted ones under ``accepted`` (open keys: a report of a
    Harbor job counts Harbor's own codes)."""
    attempts: int
    """Attempts made."""
    infra_error_attempts: int
    """Attempts that ended in an infrastructure error (not graded)."""
    cost_usd: float | None
    """USD spent by the arm's calls; None when unknown (no price), never 0 for unknown."""
    cost_complete: bool
    """Whether every call's cost was known."""
    pass_rate: float | None
    """The pass rate the comparison uses (per-task means); None without a comparison."""
    pass_rate_ci: list[float | None] | None
    """Its interval; None without a comparison."""


class ExperimentAttemptRow(Record):
    """One attempt of a trial in the experiment report."""

    model_config = _OPEN

    attempt: str
    """Its label (``a0``, ``a1``, ...; a Harbor trial's name)."""
    status: AttemptStatus
    """``graded``, ``infra_error``, ``running`` (graded, its trial.json never closed),
    ``interrupted`` (never ended nor graded), ``evidence_gap`` (its directory is gone),
    ``unknown`` (its trial.json unreadable); ``not graded`` from an outcomes file."""
    error: str | None
    """Why it was not graded, when it says."""
    calls: int
    """Model calls in its ledger (0 without one)."""
    seconds: float | None = None
    """The agent's runtime; None when unknown (and in reports from before it was kept)."""
    timed_out: bool | None = None
    """Whether the agent was stopped at its time limit; None in reports from before it was
    kept."""


class ExperimentTrialRow(Record):
    """One trial in the experiment report."""

    model_config = _OPEN

    task: str
    """The task id."""
    arm: str
    """The arm."""
    rep: int
    """The repetition."""
    state: TrialTableState
    """``graded``; ``not graded`` (attempts, none with a valid grade); ``pending`` (no attempt
    yet); ``evidence_gap`` (an attempt the state database names has no directory)."""
    accepted: bool | None
    """The verdict; None without a grade."""
    failure_code: str | None
    """Why it was rejected; None when accepted or not graded. A grade's code
    (``statuses.GradeFailureCode``) for an assay run; a string, because a report of a Harbor
    job carries Harbor's own (its exception type, ``reward_below_threshold``)."""
    attempts: list[ExperimentAttemptRow]
    """Each attempt: its label, status, error, model calls, seconds, whether it timed out."""
    link: str | None = None
    """The graded attempt's directory, relative to the run directory."""
    check_lines: dict[str, list[str]] | None = None
    """Per test check of the grade (``behavior``, ``regression``), what a reader is shown:
    the task's real tests (passed, failed with names), the first real failure's line, and the
    canaries on a line of their own (``report/check_summary.py``); absent without a grade."""


class BarCheck(Record):
    """One requirement of the bar, as the verdict lists it (every one, whatever the decision)."""

    model_config = _OPEN

    name: str
    """``integrity``, ``new_failures``, ``cost``, ``no_regression``, ``improvement`` or
    ``noise_floor``."""
    hard: bool
    """A hard requirement: failing it rejects, whatever the interval says."""
    want: str
    """What the bar asks, in words."""
    observed: str
    """What was measured, in words."""
    ok: bool | None
    """Whether it holds; None when it cannot be decided (it can only make the verdict
    inconclusive, never accept it)."""


class ExperimentVerdict(Record):
    """``exp verdict``: the decision against the bar written before the run
    (``report/verdict.py`` says the rule)."""

    model_config = _OPEN

    decision: Decision
    """``accept``, ``reject`` or ``inconclusive``."""
    reasons: list[str]
    """Why, one sentence each."""
    checks: list[BarCheck]
    """Every requirement of the bar with what was observed."""
    tasks_to_settle: int | None = None
    """When inconclusive: about how many tasks would detect the hoped improvement at 80%
    power; None otherwise or when it cannot be said."""
    note: str | None = None
    """Said when no integrity violation was seen: that is not proof there are none."""
    warnings: list[str] = []
    """Conditions the arms did not share (``report/conditions.py``): a gateway-wide ceiling
    hit, 429/overload rates or prompt-cache hits apart beyond the noise, time windows that do
    not overlap. The decision stands; the comparison is not clean."""
    exit_code: int
    """The exit code ``exp verdict`` ends with: 0 accept, 1 reject (below the bar), 4
    inconclusive."""


class ReportManifestRef(Record):
    """What the report repeats of the manifest, so a report read alone says what it is of."""

    model_config = _OPEN

    identity_sha256: str | None
    """The experiment's identity digest."""
    assay: ToolIdentity | None
    """The assay that created the run."""
    created_at: str | None
    """When the run was created."""
    bar_sha256: str | None
    """The bar's digest; None without a bar."""


class ExperimentReport(Record):
    """``report.json`` of an experiment run (or of a Harbor job or outcomes file reported the
    same way): per-arm figures, per-trial rows, the paired comparison, the verdict against the
    bar. The comparison, verdict, holdout and preference sections are open mappings whose keys
    are said in ``report/abcompare.py``, ``report/verdict.py``, ``report/holdout.py`` and
    ``runner/pairwise.py``."""

    model_config = _OPEN
    schema_name: ClassVar[str] = "assay.experiment.report"
    schema_version: ClassVar[int] = 2
    file: ClassVar[str] = REPORT_FILE

    schema_: str = Field(alias="schema")
    """``assay.experiment.report/2``."""
    name: str | None
    """The experiment's name."""
    run_dir: str
    """The directory reported."""
    arms: dict[str, ExperimentArmFigures]
    """Each arm's figures."""
    trials: list[ExperimentTrialRow]
    """Every trial."""
    comparison: dict[str, Any] | None
    """B against A, paired by task: Δ, its interval, coverage, per-task rows; None when no two
    arms could be compared."""
    bar: dict[str, Any] | None
    """The bar frozen before the first trial; None without one."""
    verdict: ExperimentVerdict | None
    """The decision against the bar; None without a bar or a comparison."""
    notes: list[str]
    """Why something is missing (no bar, no comparison yet, an arm that never called its
    model)."""
    evidence_gaps: list[str]
    """Attempt directories gone: their evidence is lost."""
    holdout: dict[str, Any] | None
    """The holdout looks of the run's tasks; None for other sources."""
    manifest: ReportManifestRef
    """What the manifest says the run is."""


def read_experiment_manifest(run_dir: Path) -> ExperimentManifest:
    """An experiment run's ``manifest.json``, validated."""
    path = Path(run_dir) / MANIFEST_FILE
    data = read_json_file(path)
    ExperimentManifest.check_schema_id(data.get("schema"), path)
    return ExperimentManifest.read(data, path)


def read_experiment_report(run_dir: Path) -> ExperimentReport:
    """An experiment run's ``report.json``, validated."""
    path = Path(run_dir) / REPORT_FILE
    data = read_json_file(path)
    ExperimentReport.check_schema_id(data.get("schema"), path)
    return ExperimentReport.read(data, path)


__all__ = ["ExperimentManifest", "ExperimentReport", "read_experiment_manifest",
           "read_experiment_report"]
