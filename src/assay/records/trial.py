"""What an agent trial writes: ``trial.json`` (how far it got, stage by stage) and its grades
(``grades/<revision>.json``, one file per verifier revision, never overwritten).

The runner holds the trial record as its model and sets each field as a stage learns it (each
assignment validated), so a stage that wrote a field of the wrong shape fails in the test that
ran it, not in a reader months later; it is rewritten atomically after every stage. The
verifier builds the grade the same way. The grade's evidence (``details``) names what this
verifier writes (revisions, integrity, preparation, findings); each check's own record stays
an open mapping on purpose, and so do keys this verifier does not name (``extra``): evidence
grows with every new defence, and a reader takes from it what it knows. Both files are written
by :func:`as_written`: fields in the model's order, a field never set absent, not null.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from assay.records.base import Record
from assay.records.fork import ForkStart
from assay.records.io import read_json_file
from assay.records.statuses import (
    CheckOutcome,
    GradeFailureCode,
    InfraCode,
    IntegrityCode,
    TrialRecordStatus,
)

#: The stages of a trial, in the order they run (``runner/trial.py``).
StageName = Literal["prepare", "agent", "freeze", "verify"]

TRIAL_JSON = "trial.json"
GRADES = "grades"
#: The instruction exactly as the agent received it (the task's, then the generated rules),
#: written before the agent starts: what a reader and a re-run compare against.
INSTRUCTION_FILE = "instruction.md"


class TaskIdentity(Record):
    """Which task, exactly, the trial ran."""

    model_config = ConfigDict(validate_assignment=True)  # the runner fills it in

    id: str
    """The task id from task.yaml."""
    revision: int
    """The task's revision number."""
    family: str | None
    """The task family, when the bundle names one."""
    split: str
    """``dev``, ``validation`` or ``holdout``."""
    path: str
    """Where the bundle was when the trial ran (absolute)."""
    spec_sha256: str
    """sha256 of task.yaml's bytes."""
    fixture_digest_pinned: str | None
    """The starting tree's digest pinned in task.yaml, if any."""
    fixture_digest: str | None = None
    """The starting tree's digest as exported for this trial (set by the prepare stage)."""


class Stage(Record):
    """One stage of the trial: prepare, agent, freeze or verify."""

    model_config = ConfigDict(validate_assignment=True)  # the runner fills it in

    name: StageName
    """``prepare``, ``agent``, ``freeze`` or ``verify``, in that order."""
    started_at: str
    """UTC time the stage started."""
    status: Literal["running", "ok", "failed"]
    """``running`` until it ends; ``failed`` when it raised."""
    seconds: float | None = None
    """Wall time of the stage, so a slow environment never reads as a slow agent."""
    queued_seconds: float | None = None
    """``verify`` only: how long the frozen artifact waited for a verification slot before
    the stage started (not part of ``seconds``; ``runner/slots.py``)."""
    detail: str | None = None
    """Why a failed stage failed."""


class GradeSummary(Record):
    """The verdict in trial.json; the whole grade is in ``grades/<revision>.json``."""

    revision: str
    """The verifier revision that graded the trial."""
    accepted: bool
    """Whether every required check passed."""
    failure_code: GradeFailureCode | None
    """The first reason it was not accepted (docs/guide/agent-tasks.md lists them), None when
    accepted."""


class TrialRecord(Record):
    """``trial.json``: one trial of one agent on one task, as far as it got."""

    model_config = ConfigDict(validate_assignment=True)  # the runner fills it in

    schema_name: ClassVar[str] = "assay.trial"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = TRIAL_JSON

    schema_: str = Field(alias="schema")
    """``assay.trial/1``."""
    trial_id: str
    """``<task>/<agent>/<rep>``."""
    attempt: int
    """Which try of the trial this is (0 for a single ``trial run``)."""
    task: TaskIdentity
    """The task, pinned."""
    agent: str
    """The agent spec as given (``oracle``, ``nop``, ``command:…``, ``mutant:…``)."""
    rep: int
    """The repetition number."""
    assay: dict[str, Any]
    """assay's version, git commit and dirtiness, and Python's version."""
    network_policy: dict[str, Any]
    """``requested`` (task.yaml), ``applied`` (what the sandbox did), and a ``note``."""
    budget: dict[str, Any]
    """The task's budget as written (agent and verifier wall seconds, assistant steps)."""
    resources: dict[str, Any]
    """The task's resources as written (cpu_cores, memory_limit_mib, pids)."""
    not_enforced: dict[str, str]
    """Limits asked for but not in force, each with the reason."""
    started_at: str
    """UTC time the trial started."""
    ended_at: str | None
    """UTC time it ended; None while it runs (or when the runner died)."""
    status: TrialRecordStatus
    """``graded`` once a grade exists; ``infra_error`` when it could not be run."""
    stages: list[Stage]
    """Every stage started, in order."""
    execution: dict[str, Any] | None
    """The agent's execution record (status, exit code, reason, limits applied, evidence);
    None before the agent ran."""
    environment: dict[str, Any] | None = None
    """The task's required tools as found inside the sandbox, with versions."""
    environment_image: dict[str, Any] | None = None
    """The image the agent and the verifier ran in: ``digest``, ``source_kind``,
    ``source_digest``, ``source_label``, ``substitutions`` (what the build approximated),
    ``workdir`` (where the workspace was mounted), ``pinned`` (false: the bundle names a
    source but no digest, and this is what the source built into) and ``host_tools`` (the
    host's trusted pytest and node lent read-only to the image: paths and versions); for an
    image pulled from a registry also ``reference`` (as the task names it) and
    ``manifest_digest`` (the registry's name for this platform's image; ``source_digest`` is
    the pin, an index's digest for a multi-platform image; ``digest`` the root filesystem's).
    Absent: the task ran on the host's own system."""
    agent_identity: dict[str, Any] | None = None
    """What an adapter configured, as it describes itself (``mcode``: the CLI's path and
    digest, its fixed flags, its config template's digest); absent for reference agents."""
    error: str | None = None
    """Why the trial could not be run (infra_error), starting with its code when it has one
    of its own."""
    failure_code: InfraCode | None = None
    """An infra_error of the arm rather than of the machine: ``agent_start_failed`` (the agent
    never got going: exit 126/127, its script or program missing, or an exit before its first
    model call that left the workspace untouched; ``execution.stderr_tail`` shows why) or
    ``model_unavailable`` (the upstream failed every model call: unreachable, 5xx, or a 4xx the
    agent cannot fix; each ledger row keeps the upstream's status and error). Kept, shown,
    left out of pass rates, counted against coverage, retried within ``retries.infra``."""
    grade: GradeSummary | None = None
    """The verdict, once graded."""
    fork: ForkStart | None = None
    """In a fork experiment: the frozen prefix state this attempt started from, with digests
    recomputed from the restored copy (equal across the arms of one task and repetition)."""
    workspace_git: dict[str, Any] | None = None
    """The workspace's one commit of the starting tree (``initial_state.git``): ``commit``,
    ``author``, ``date``; ``commit`` null with ``why`` when none could be made (no git on the
    machine). Absent: the task turned it off, or the trial predates it."""


class Validity(Record):
    """Whether the grade is a verdict at all."""

    status: Literal["valid", "invalid"]
    """``invalid`` when the verifier could not do its job: never a pass."""
    reason: str | None = None
    """``grader_error`` when invalid."""
    detail: str | None = None
    """What went wrong, for a reader."""


class Changes(Record):
    """What the delivered tree changed against the starting tree, path by path."""

    added: list[str]
    """Paths the candidate added."""
    deleted: list[str]
    """Paths the candidate deleted."""
    modified: list[str]
    """Paths whose content, type or mode changed."""


class Integrity(Record):
    """The integrity check: the changes, and what in them breaks the task's rules."""

    model_config = ConfigDict(validate_assignment=True)  # a tampered runner fails it later

    passed: bool
    """False when any problem was found (a bent test runner's report included)."""
    failure_code: IntegrityCode | None
    """The first problem's code (``protected_file_changed``, ``change_outside_allowed_paths``,
    ``compiled_code_added``, ``test_runner_tampered``, ...), None when it passed."""
    problems: list[dict[str, Any]]
    """Each problem: its ``code`` and its evidence (``path``, ``evidence``, ...)."""
    changes: Changes
    """The changes themselves."""


class GradeDetails(Record):
    """A grade's evidence: what was graded, how, and what each check saw. The fields below are
    what this verifier writes, in the order it learns them (a grader that stopped early wrote
    only a prefix); each check's record and the judge's stay open mappings (``extra`` keeps
    what an older or newer verifier wrote and this one does not name)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    verifier_revision: str
    """The verifier revision (also the grade file's name)."""
    task_revision: int
    """The task's revision number when graded."""
    task_spec_sha256: str
    """sha256 of task.yaml's bytes when graded (an edited task.yaml is a new revision)."""
    started_at: str
    """UTC time the verification started."""
    workspace_refused: dict[str, Any] | None = None
    """The freeze refused the workspace (over its bounds): the figure; nothing was checked."""
    fixture_digest: str | None = None
    """The starting tree's digest as exported for this verification."""
    integrity: Integrity | None = None
    """The integrity check."""
    preparation: dict[str, Any] | None = None
    """Rebuilding the delivered tree: ``seconds``, ``pristine_seconds``, ``entries``,
    ``limit_seconds``, ``over`` (and ``why`` when over: every check then fails with
    ``candidate_timeout``)."""
    suspicious: list[dict[str, Any]] | None = None
    """The tamper scan's findings in the files the candidate added or changed (never reject by
    themselves)."""
    runner_modules_shadowed: list[str] | None = None
    """The deliverable's paths named like the test runner's own modules, which the checks
    shadowed."""
    behavior: dict[str, Any] | None = None
    """The behavior check's record: command, status, reason, exit code, counts, tails, limits,
    its time-out's owner and its tamper evidence (canaries, expected ids)."""
    regression: dict[str, Any] | None = None
    """The regression check's record, as ``behavior``'s."""
    not_tamper_evident: dict[str, str] | None = None
    """The checks whose verdict is not tamper-evident, each with the reason."""
    judge: dict[str, Any] | None = None
    """The acceptance judge's record (``grading/verify/judge_check.py``), when the task has one."""
    ended_at: str | None = None
    """UTC time the verification ended."""


class Grade(Record):
    """``grades/<revision>.json``: a verdict on a frozen artifact, written once."""

    schema_name: ClassVar[str] = "assay.trial.grade"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "grades/<revision>.json"

    schema_: str = Field(alias="schema")
    """``assay.trial.grade/1``."""
    trial_id: str
    """The trial graded."""
    execution: dict[str, Any]
    """The agent's execution record the grade took into account (a timeout fails the trial
    whatever the artifact holds)."""
    validity: Validity
    """Whether this is a verdict at all."""
    checks: dict[str, CheckOutcome]
    """``behavior``, ``regression``, ``integrity``: each check's outcome."""
    required: list[str]
    """The checks task.yaml requires; only these can reject."""
    accepted: bool
    """True only when every required check passed and the grade is valid."""
    failure_code: GradeFailureCode | None
    """The first reason the trial is not accepted, in the order a reader should fix things."""
    details: GradeDetails
    """The verifier's evidence: revisions, digests, integrity (changes and problems), each check's
    command, counts, tamper evidence (canaries with each one's outcome, how many of each kind ran in
    ``canary_counts``, the seed of the derived draw in ``derived_seed``, how many derived copies
    were made, run, kept and dropped on the trusted tree in ``derived_pool``; how the canaries
    behaved in ``canary_summary``; expected ids; the task's real tests apart from every canary:
    ``failed_ids``, ``passed_ids`` and ``first_failure``, the first real test that failed with its
    failure line), a time-out's owner (``timeout``: the candidate's, failure ``candidate_timeout``,
    or the grader's), tails and limits, the tamper scan's findings (``suspicious``), the
    deliverable's paths named like the test runner's own modules that the checks shadowed
    (``runner_modules_shadowed``), and which checks were not tamper-evident."""


def as_written(record: TrialRecord | Grade) -> dict[str, Any]:
    """The record as its file holds it: fields in the model's order, an optional field that was
    never set absent rather than a made-up null (the runner fills the trial record in stage by
    stage; a grade names only what its verifier learnt)."""
    return record.model_dump(mode="json", by_alias=True, exclude_unset=True)


def read_trial(trial_dir: Path) -> TrialRecord:
    """``trial.json`` as its model; a corrupt one or a newer schema is a RecordError."""
    path = Path(trial_dir) / TRIAL_JSON
    data = read_json_file(path)
    TrialRecord.check_schema_id(data.get("schema"), path)
    return TrialRecord.read(data, path)


def read_grade(trial_dir: Path, revision: str) -> Grade:
    """One grade as its model; grades written before the grade had a ``schema`` read as
    ``assay.trial.grade/1``."""
    path = Path(trial_dir) / GRADES / f"{revision}.json"
    data = read_json_file(path)
    data.setdefault("schema", Grade.schema_id())
    Grade.check_schema_id(data["schema"], path)
    return Grade.read(data, path)
