"""One trial table from either source ``exp compare`` accepts: a run directory or an outcomes file.

Everything downstream (the comparison, the verdict, the plan, every report format) reads this
table and nothing else, so a team's Harbor results or a spreadsheet exported as JSONL get
exactly the statistics an assay run gets. From a run directory the table is rebuilt from the
records on disk alone (the manifest for the plan, each attempt's ``trial.json``, its newest
grade, its ``model_calls.jsonl`` and its agent stream), never from the runner or its database,
so it can be rebuilt wherever the directory is copied.

A trial's result is its graded attempt's verdict. Attempts that ended in infrastructure errors
or interruptions stay in the table as attempts: their cost counts (money spent is spent) and
their runtimes are shown, but they never count as results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import ValidationError

from assay.errors import InputError, NotComparable, Problem, RecordError, SuiteError
from assay.records.experiment import AttemptStatus, TrialTableState
from assay.records.io import read_json_file
from assay.records.ledger import ledger_totals
from assay.records.outcomes import Outcome
from assay.records.state_index import recorded_attempt_dirs
from assay.records.statuses import TrialRecordStatus
from assay.report.check_summary import grade_check_lines

_RECORD_STATUS: dict[object, AttemptStatus] = {s: s for s in get_args(TrialRecordStatus)}

LEDGER_KEYS = ("calls", "input", "cached_input", "output", "reasoning", "cost_usd",
               "usage_missing_calls", "unpriced_calls")


@dataclass
class AttemptFigures:
    """What one attempt cost and how long its agent ran, whatever became of it."""

    attempt: str
    status: AttemptStatus
    error: str | None = None
    seconds: float | None = None
    timed_out: bool = False
    ledger: dict[str, Any] | None = None
    """Sums of the attempt's ``model_calls.jsonl`` (None from an outcomes file)."""
    cost_usd: float | None = None
    cost_complete: bool = True


@dataclass
class TrialOutcome:
    """A trial's row plus its attempts; ``state`` is graded / not graded / pending /
    evidence_gap (an attempt the state database names has no directory)."""

    outcome: Outcome
    attempts: list[AttemptFigures] = field(default_factory=list)
    state: TrialTableState = "graded"


@dataclass
class OutcomeSet:
    """The trial table of one source, with the plan it was drawn against."""

    source: Path
    kind: Literal["run", "file", "harbor"]
    trials: list[TrialOutcome]
    tasks: list[str]
    """The planned tasks (for a file: every task it names), in order."""
    arms: list[str]
    """Every arm, in the experiment file's order (for a file: first appearance)."""
    weights: dict[str, float] | None = None
    manifest: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    evidence_gaps: list[str] = field(default_factory=list)
    """Attempt directories the run's state database names and the disk lacks (relative to
    the run directory): their records are lost, their trials never pending nor complete."""

    def arm_trials(self, arm: str) -> list[TrialOutcome]:
        return [t for t in self.trials if t.outcome.arm == arm]

    def cluster_map(self, by: str) -> dict[str, str] | None:
        """Task -> cluster label for ``--cluster``; ``task`` means every task its own.

        A task whose trials disagree on the field, or lack it, is refused: clustering on a
        label some rows do not carry would silently make those tasks singletons.
        """
        if by == "task":
            return None
        labels: dict[str, str] = {}
        missing: list[str] = []
        for t in self.trials:
            o = t.outcome
            value = o.family if by == "family" else o.extra_field(by)
            if value is None:
                if t.state == "graded":
                    missing.append(o.task)
                continue
            value = str(value)
            old = labels.setdefault(o.task, value)
            if old != value:
                raise NotComparable(f"{self.source}: task {o.task!r} has two values of "
                                    f"{by!r} ({old!r}, {value!r}); cannot cluster on it")
        missing = sorted(set(missing) - set(labels))
        if missing:
            raise NotComparable(f"{self.source}: --cluster {by}: no {by!r} for task(s) "
                                f"{', '.join(missing[:5])}" + (" …" if len(missing) > 5 else ""))
        return labels


def load_outcomes_file(path: Path) -> OutcomeSet:
    """Every row validated; all problems reported at once with their line and field."""
    problems: list[Problem] = []
    trials: list[TrialOutcome] = []
    seen: dict[tuple[str, str, int], int] = {}
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc}") from None
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            cut = " (the last line is cut off)" if lineno == len(lines) else ""
            problems.append(Problem(path, lineno, None, f"not a JSON object: {exc}{cut}"))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(path, lineno, None, "not a JSON object"))
            continue
        try:
            o = Outcome.model_validate(row)
        except ValidationError as exc:
            for e in exc.errors():
                loc = ".".join(str(x) for x in e["loc"]) or None
                problems.append(Problem(path, lineno, loc, e["msg"]))
            continue
        key = (o.task, o.arm, o.rep)
        if key in seen:
            problems.append(Problem(path, lineno, "rep", f"trial {o.task}/{o.arm}/{o.rep} "
                                    f"already given on line {seen[key]}"))
            continue
        seen[key] = lineno
        att = AttemptFigures(attempt="a0", status="graded" if o.passed is not None else
                             "not graded", seconds=o.seconds, timed_out=bool(o.timed_out),
                             cost_usd=o.cost_usd, cost_complete=o.cost_complete is not False)
        trials.append(TrialOutcome(o, [att], "graded" if o.passed is not None else
                                   "not graded"))
    if problems:
        raise SuiteError(problems)
    if not trials:
        raise SuiteError([Problem(path, None, None, "no outcome rows")])
    tasks = list(dict.fromkeys(t.outcome.task for t in trials))
    arms = list(dict.fromkeys(t.outcome.arm for t in trials))
    return OutcomeSet(path, "file", trials, tasks, arms)


# ----------------------------------------------------------------------------- run directory


def _newest_grade(attempt_dir: Path) -> dict[str, Any] | None:
    """The newest readable grade: a re-verification writes a new revision, never over one."""
    grades = sorted((attempt_dir / "grades").glob("*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(grades):
        try:
            return read_json_file(path)
        except RecordError:  # a grade that cannot be read is not a grade
            continue
    return None


def _attempt_dirs(base: Path) -> list[Path]:
    return sorted((p for p in base.glob("a*") if p.is_dir() and p.name[1:].isdigit()),
                  key=lambda p: int(p.name[1:]))


def stream_has_event(attempt_dir: Path, event: str) -> bool | None:
    """Whether the agent's stdout holds a JSON event named ``event`` (``type`` or ``event``
    key); None when there is no stream to look at. The stream is the agent's output, read as
    data: a line that does not parse is skipped, never evaluated."""
    path = attempt_dir / "agent" / "stdout.log"
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        for raw in fh:
            if event.encode() not in raw:
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and event in (obj.get("type"), obj.get("event")):
                return True
    return False


def judge_summary(judge: dict[str, Any]) -> dict[str, Any]:
    """A grade's ``acceptance.judge`` check in a few fields for the trial table: its outcome,
    whether it could reject, the score, and the judge's revision and calibration status."""
    cal = judge.get("calibration")
    return {"status": judge.get("status"), "required": bool(judge.get("required")),
            "criterion": (judge.get("rule") or {}).get("criterion"), "score": judge.get("score"),
            "revision": judge.get("judge_revision"),
            "calibration": cal if isinstance(cal, str) else "calibrated"}


def load_run_outcomes(run_dir: Path) -> OutcomeSet:
    try:
        manifest = read_json_file(run_dir / "manifest.json")
        identity = manifest["identity"]
        settings = identity["settings"]
        tasks = sorted(identity["tasks"])
        arms = list(settings.get("arms") or identity["arms"])
    except (KeyError, TypeError) as exc:
        raise RecordError(f"{run_dir / 'manifest.json'}: not an experiment manifest (no "
                          f"{exc})") from None
    reps = int(settings.get("repetitions", 1))
    meta = manifest.get("task_meta") or {}
    triggers = {name: (arm or {}).get("trigger_event")
                for name, arm in (settings.get("arms") or {}).items()}
    has_model = {name: (arm or {}).get("model") is not None
                 for name, arm in (settings.get("arms") or {}).items()}
    trials: list[TrialOutcome] = []
    families: dict[str, str | None] = {t: (meta.get(t) or {}).get("family") for t in tasks}
    begun = _begun_attempts(run_dir)
    for task in tasks:
        for arm in arms:
            for rep in range(reps):
                trials.append(_run_trial(run_dir, task, arm, rep, families,
                                         triggers.get(arm), has_model.get(arm, True),
                                         begun.get((task, arm, str(rep)), ())))
    for t in trials:  # a family learnt from any trial record fills the others
        if t.outcome.family is None and families.get(t.outcome.task):
            t.outcome.family = families[t.outcome.task]
    weights = settings.get("weights")
    gaps = [f"trials/{t.outcome.task}/{t.outcome.arm}/{t.outcome.rep}/{a.attempt}"
            for t in trials for a in t.attempts if a.status == EVIDENCE_GAP]
    notes = [gap_note(gaps)] if gaps else []
    return OutcomeSet(run_dir, "run", trials, tasks, arms, weights=weights, manifest=manifest,
                      notes=notes, evidence_gaps=gaps)


#: An attempt (and a trial without a graded attempt) whose directory is gone.
EVIDENCE_GAP: Literal["evidence_gap"] = "evidence_gap"


def gap_note(gaps: list[str]) -> str:
    """The one sentence every report and comparison shows for lost attempt directories."""
    shown = ", ".join(gaps[:10]) + (", ..." if len(gaps) > 10 else "")
    return (f"evidence gap: {len(gaps)} attempt director{'ies are' if len(gaps) > 1 else 'y is'}"
            f" gone ({shown}): the state database says they were begun, their records, "
            "ledgers and grades are lost; their trials are not results and every cost that "
            "includes them is a lower bound")


def _begun_attempts(run_dir: Path) -> dict[tuple[str, str, str], list[str]]:
    """Attempt labels per (task, arm, rep) the state database says were begun."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for rel in recorded_attempt_dirs(run_dir) or ():
        parts = Path(rel).parts
        if len(parts) == 5 and parts[0] == "trials":
            out.setdefault((parts[1], parts[2], parts[3]), []).append(parts[4])
    return out


@dataclass
class _Graded:
    """The attempt whose valid grade is the trial's result."""

    dir: Path
    grade: dict[str, Any]  # as read: a grade's file, not validated (older verifiers' too)
    execution: dict[str, Any]
    fig: AttemptFigures


def _run_trial(run_dir: Path, task: str, arm: str, rep: int,
               families: dict[str, str | None], trigger: str | None,
               has_model: bool, begun: Any = ()) -> TrialOutcome:
    base = run_dir / "trials" / task / arm / str(rep)
    attempts: list[AttemptFigures] = []
    graded: _Graded | None = None
    found = _attempt_dirs(base)
    present = {a.name for a in found}
    for label in begun:
        if label not in present:  # begun, and its directory is gone: nothing of it is known
            attempts.append(AttemptFigures(
                attempt=label, status=EVIDENCE_GAP, cost_complete=False,
                error="the attempt directory is gone: its records, ledger and grades are lost"))
    for a in found:
        ledger = ledger_totals(a / "model_calls.jsonl")
        try:
            rec = read_json_file(a / "trial.json")
        except (RecordError, FileNotFoundError):  # torn, or never written (the runner died
            rec = {}  # between the attempt's directory and its first record): unknown
        if families.get(task) is None:
            families[task] = (rec.get("task") or {}).get("family")
        execution = rec.get("execution") or {}
        grade = _newest_grade(a)
        status = _RECORD_STATUS.get(rec.get("status"), "unknown")
        if grade is None and status in ("running", "unknown"):
            status = "interrupted"
        fig = AttemptFigures(
            attempt=a.name, status=status, error=rec.get("error"),
            seconds=execution.get("wall_seconds"),
            timed_out=execution.get("status") == "agent_timeout", ledger=ledger,
            cost_usd=ledger["cost_usd"] if has_model else None,
            cost_complete=ledger["usage_missing_calls"] == 0 and ledger["unpriced_calls"] == 0)
        attempts.append(fig)
        if grade is not None and (grade.get("validity") or {}).get("status") == "valid":
            graded = _Graded(a, grade, execution, fig)
    attempts.sort(key=lambda f: int(f.attempt[1:]) if f.attempt[1:].isdigit() else 0)
    cost = None
    if has_model and attempts:
        cost = sum(a.cost_usd or 0.0 for a in attempts)
    complete = all(a.cost_complete for a in attempts)
    row: dict[str, Any] = {"task": task, "arm": arm, "rep": rep, "passed": None,
                           "family": families.get(task), "cost_usd": cost,
                           "cost_complete": complete if cost is not None else None}
    state: TrialTableState = "pending" if not attempts else "not graded"
    if any(a.status == EVIDENCE_GAP for a in attempts):
        state = EVIDENCE_GAP  # never pending, never a result (unless another attempt's grade
        # is on disk: then the result stands and only the cost is a lower bound)
    if graded is not None:
        grade, execution = graded.grade, graded.execution
        code = grade.get("failure_code")
        row.update(passed=bool(grade.get("accepted")), failure_code=code,
                   seconds=graded.fig.seconds, timed_out=graded.fig.timed_out,
                   integrity_violation=(grade.get("checks") or {}).get("integrity") == "fail"
                   or code == "test_runner_tampered",
                   intervention=code == "needs_human" or execution.get("status") ==
                   "needs_human",
                   triggered=stream_has_event(graded.dir, trigger) if trigger else None,
                   link=str(graded.dir.relative_to(run_dir)))
        judge = (grade.get("details") or {}).get("judge")
        if isinstance(judge, dict):
            row["judge"] = judge_summary(judge)
        checks = grade_check_lines(grade)
        if checks:  # the task's real tests and the canaries apart, for every display
            row["check_lines"] = checks
        state = "graded"
    return TrialOutcome(Outcome.model_validate(row), attempts, state)


__all__ = ["EVIDENCE_GAP", "AttemptFigures", "OutcomeSet", "TrialOutcome", "gap_note",
           "judge_summary", "load_outcomes_file", "load_run_outcomes",
           "stream_has_event"]
