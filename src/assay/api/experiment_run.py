"""Running an experiment from start to report: the one path ``assay exp run`` and a Python
caller both take.

:func:`run_experiment` does everything the command does, in the same order: every trial (or
the ones a crashed or stopped run left), the experiment's ``pairwise:`` check, the report
(report.json, report.md, report.html, outcomes.jsonl) and the holdout ledger's note that
results were shown. What it returns is an :class:`ExperimentRun`: the runner's counts and
spend, the check's summary or why it is missing, and the report; the CLI only prints it and
picks an exit code. The settings of a run are one :class:`ExperimentOptions`, so the flags of
``exp run`` and the keywords of the function cannot drift apart.

Also here, for ``exp status`` and the progress display: the read-only state of a run
(:func:`open_state`) and each arm's accepted and graded trials so far (:func:`arm_tallies`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import InputError, RecordError
from assay.runner.experiment import ExperimentResult
from assay.runner.progress import Progress, TrialDone

if TYPE_CHECKING:
    from assay.records.experiment import ExperimentReport
    from assay.runner.state import StateDB

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ExperimentOptions:
    """How to run an experiment file; every field is a flag of ``assay exp run`` of the same
    name (``grace_seconds`` is ``--grace``). ``None`` means the file's own value or the
    runner's default."""

    #: trials at once (default: the file's ``concurrency``)
    jobs: int | None = None
    #: seconds between the watchdog's SIGTERM and its SIGKILL at an agent's wall budget
    grace_seconds: float = 10.0
    #: a whole-run spending cap replacing the file's (recorded in the manifest's sessions)
    total_cost_usd: float | None = None
    #: look at a holdout split past its allowance (the set is then reported as reused)
    holdout_reuse: bool = False
    #: ``local`` or ``ray`` (docs/scaling.md)
    executor: str = "local"
    ray_address: str | None = None
    gateway_host: str | None = None
    #: ``shared_fs``, ``object_store`` or ``auto``
    ray_transfer: str | None = None
    #: local attempts verifying at once (default: the usable cores, at most ``jobs``; 0: none)
    verify_jobs: int | None = None
    #: run a plan of more than ``PLAN_TRIALS_DEFAULT_MAX`` trials
    allow_large_plan: bool = False
    #: run only this tier of the file's ``tiers:``
    tier: str | None = None
    #: a sequential bar's run that a look stopped: run its remaining trials on purpose
    #: (recorded; it is then analysed as the fixed design)
    run_to_end: bool = False
    #: show each look's Δ and interval as it is taken (recorded in the session)
    show_interim: bool = False

    @classmethod
    def of(cls, options: ExperimentOptions | None = None, **given: Any) -> ExperimentOptions:
        """``options`` with the keywords ``given`` on top; a name that is no option is refused
        (a misspelt ``job=4`` must not run at the file's concurrency unnoticed)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise InputError(f"unknown experiment option(s): {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        return replace(options or cls(), **given)


@dataclass
class ExperimentRun(ExperimentResult):
    """What :func:`run_experiment` did: the runner's result (``status``: ``complete``,
    ``infra_errors``, ``budget_stopped``, ``agent_start_failed``, ``evidence_gaps`` or
    ``stopped_at_look``; the
    counts, spending, unpriced models and evidence gaps), plus what the API adds after it."""

    #: the ``pairwise:`` check's summary, ``{"error": why, "exit_code": 3}`` when it could
    #: not be done, None when the file has none or the run stopped at its budget
    pairwise: dict[str, Any] | None = None
    #: the experiment report as written to report.json, as its record model
    #: (``docs/records.md``: ``assay.experiment.report``)
    report: ExperimentReport | None = None

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.md"

    @property
    def pairwise_error(self) -> str | None:
        """Why the experiment's pairwise check is missing, when it is."""
        if self.pairwise is not None and "error" in self.pairwise:
            return str(self.pairwise["error"])
        return None

    @property
    def complete(self) -> bool:
        """Every trial done and graded, and the pairwise check (if any) done."""
        return self.status == "complete" and self.pairwise_error is None


class _ShownOnce:
    """The caller's display, told first (once) that results are being shown: a verdict on a
    holdout task reaching anyone is its results being seen (``runner/holdout.py``)."""

    def __init__(self, inner: Progress[TrialDone], shown: Callable[[], object]) -> None:
        self.inner = inner
        self.shown: Callable[[], object] | None = shown
        if hasattr(inner, "watch_spend"):
            self.watch_spend = inner.watch_spend

    def start(self, total: int, done: int) -> None:
        self.inner.start(total, done)

    def advance(self, item: TrialDone) -> None:
        if self.shown is not None:
            first, self.shown = self.shown, None
            first()
        self.inner.advance(item)

    def note(self, message: str) -> None:
        self.inner.note(message)

    def finish(self) -> None:
        self.inner.finish()


def run_experiment(experiment: PathLike, out: PathLike,
                   options: ExperimentOptions | None = None, *,
                   progress: Progress[TrialDone] | None = None,
                   **given: Any) -> ExperimentRun:
    """Run (or resume: the same call) every trial of an experiment file into ``out``, then its
    ``pairwise:`` check (not after a run stopped at its total budget: the judge's calls would
    be spent past it; the check's trouble is in the result and the report, never raised: the
    trials are done), then write its report. ``options`` (or the same names as keywords, e.g.
    ``jobs=4``) are the flags of ``assay exp run``; ``progress`` is told each trial as it
    ends (``runner/progress.py``: ``start``, ``advance`` with a :class:`TrialDone`, ``note``,
    ``finish``). A holdout task's results count as shown when the first trial's outcome reaches the
    display. Raises :class:`InputError` before anything runs for a bad file or option;
    ``KeyboardInterrupt`` propagates (the same call resumes)."""
    from assay.api.pairwise import pairwise_check
    from assay.records.experiment import ExperimentReport
    from assay.report.experiment import write_experiment_report
    from assay.runner.experiment import run_experiment as run_trials
    from assay.runner.holdout import record_shown
    from assay.runner.progress import NullProgress

    opts = ExperimentOptions.of(options, **given)
    out_dir = Path(out)
    display = _ShownOnce(progress or NullProgress(),
                         lambda: record_shown(out_dir, command="exp run"))
    result = run_trials(Path(experiment), out_dir, jobs=opts.jobs,
                        grace_seconds=opts.grace_seconds, progress=display,
                        total_cost_usd=opts.total_cost_usd, holdout_reuse=opts.holdout_reuse,
                        executor=opts.executor, ray_address=opts.ray_address,
                        gateway_host=opts.gateway_host, ray_transfer=opts.ray_transfer,
                        verify_jobs=opts.verify_jobs, allow_large_plan=opts.allow_large_plan,
                        tier=opts.tier, run_to_end=opts.run_to_end,
                        show_interim=opts.show_interim)
    pairwise = None
    if result.status != "budget_stopped":
        pairwise = pairwise_check(out_dir, jobs=opts.jobs or 2)
    return ExperimentRun(
        **{f.name: getattr(result, f.name) for f in fields(ExperimentResult)}, pairwise=pairwise,
        report=ExperimentReport.read(write_experiment_report(out_dir), out_dir / "report.json"))


def claim_experiment_dir(experiment: PathLike, out_root: PathLike,
                         tier: str | None = None) -> Path:
    """A new run directory under ``out_root`` (``records/run_dirs.py``), named
    ``<experiment>-<arm models>-<UTC time>`` (the tier after the name when one is run)."""
    from assay.records.run_dirs import claim_run_dir
    from assay.suites.experiment import load_experiment

    spec = load_experiment(Path(experiment), tier=tier).spec
    models = sorted({a.model.name for a in spec.arms.values() if a.model is not None})
    name = spec.name if tier is None else f"{spec.name}-{tier}"
    return claim_run_dir(Path(out_root), name, "+".join(models) or "no-model")


def open_state(run_dir: PathLike) -> StateDB:
    """The run's ``state.sqlite``, read-only (WAL lets it be read while a runner writes, and a
    crashed run's file reads the same); a :class:`RecordError` when there is none."""
    from assay.runner.state import StateDB

    return StateDB.open_readonly(Path(run_dir))


def arm_tallies(run_dir: PathLike) -> dict[str, list[int]]:
    """Every arm in the manifest's order, with [accepted, graded] of its done trials so far
    (empty when the run has no state yet): a resumed run's pass rates include earlier
    sessions."""
    import json

    run = Path(run_dir)
    try:
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        arms = {str(a): [0, 0] for a in manifest.get("arms") or {}}
    except (OSError, ValueError, AttributeError):
        arms = {}
    try:
        db = open_state(run)
    except RecordError:
        return arms
    with db:
        for t in db.trials():
            if t.state == "done" and t.accepted is not None:
                tally = arms.setdefault(str(t.key.arm), [0, 0])
                tally[0] += int(bool(t.accepted))
                tally[1] += 1
    return arms


__all__ = ["ExperimentOptions", "ExperimentRun", "Progress", "TrialDone", "arm_tallies",
           "claim_experiment_dir", "open_state", "run_experiment"]
