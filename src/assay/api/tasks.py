"""Checking suites and tasks, and running agent trials, from Python.

Thin on purpose: the work is in :mod:`assay.grading.suite_check`, :mod:`assay.runner.trial` and
:mod:`assay.runner.task_check`. What these add is what the CLI used to add on its own: paths
become loaded, validated bundles, agent names become agents, and a sandbox that cannot run here
is reported once, up front, instead of as one failed trial after another.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.api.options import CODING_DEFAULTS
from assay.api.runs import load_suite
from assay.errors import InputError, SuiteError

if TYPE_CHECKING:
    from assay.agents import Agent
    from assay.grading.suite_check import TaskCheck
    from assay.runner.task_check import TaskReport
    from assay.runner.trial import TrialResult
    from assay.suites.bundle import Bundle
    from assay.suites.coding import CodingSuite
    from assay.suites.harbor_task import Imported

PathLike = str | os.PathLike[str]


def _sandbox(isolation: str) -> None:
    """``bwrap`` must run here (:class:`SandboxUnavailable` otherwise); ``none`` is taken as
    asked, and recorded as NOT ISOLATED wherever it is used."""
    if isolation not in ("bwrap", "none"):
        raise InputError(f"sandbox={isolation!r}: must be 'bwrap' or 'none'")
    if isolation == "bwrap":
        from assay.sandbox import check_bwrap

        check_bwrap()


def check_suite(tasks: PathLike | CodingSuite, *, sandbox: str = CODING_DEFAULTS["sandbox"],
                exec_timeout: float = CODING_DEFAULTS["exec_timeout"]) -> list[TaskCheck]:
    """Every task's reference solution must pass and an empty answer must fail, through the
    sandbox and grader a model's answer goes through; a ``broken`` check names the problems."""
    from assay.grading.suite_check import check_suite as check
    from assay.runner.coding import CodingParams
    from assay.suites.coding import CodingSuite

    if isinstance(tasks, CodingSuite):
        suite = tasks
    else:
        loaded = load_suite(tasks)
        if not isinstance(loaded, CodingSuite):
            raise InputError(f"{tasks}: not a coding tasks file")
        suite = loaded
    _sandbox(sandbox)
    params = CodingParams(exec_timeout_s=float(exec_timeout), isolation=sandbox)  # type: ignore[arg-type]
    return check(suite, params)


def load_bundles(dirs: Sequence[PathLike]) -> list[Bundle]:
    """The task bundles in ``dirs`` (each a bundle, or a folder of bundles), all validated;
    every problem of every bundle in one :class:`SuiteError`, and task ids must be unique."""
    from assay.suites.bundle import find_bundles, load_bundle

    paths = [Path(d) for d in dirs]
    roots = find_bundles(paths)
    if not roots:
        raise InputError("no task bundle (a folder with task.yaml) in "
                         + ", ".join(map(str, paths)))
    problems = []
    bundles = []
    for r in roots:
        try:
            bundles.append(load_bundle(r))
        except SuiteError as exc:
            problems += exc.problems
    if problems:
        raise SuiteError(problems)
    ids = [b.id for b in bundles]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"task ids used twice: {', '.join(dupes)}")
    return bundles


def _bundles(tasks: Sequence[PathLike | Bundle]) -> list[Bundle]:
    from assay.suites.bundle import Bundle

    loaded = [t for t in tasks if isinstance(t, Bundle)]
    paths = [t for t in tasks if not isinstance(t, Bundle)]
    return loaded + (load_bundles(paths) if paths else [])


def run_trial(task: PathLike | Bundle, agent: str | Agent, out: PathLike, *, rep: int = 0,
              attempt: int = 0) -> TrialResult:
    """Prepare, run ``agent`` in the sandbox, freeze, verify: one trial into ``out`` (never
    overwritten: :class:`NeverOverwrite`). ``agent`` is an :class:`Agent` or its name:
    ``oracle``, ``nop``, ``command:<shell command>`` or ``mutant:<name>``. The verdict is in
    the result's ``grade``; ``grade`` is None when the trial could not be run."""
    from assay.agents import parse_agent

    bundles = _bundles([task])
    if len(bundles) != 1:
        raise InputError(f"{task}: holds {len(bundles)} task bundles; a trial runs one")
    if isinstance(agent, str):
        try:
            the_agent = parse_agent(agent)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    else:
        the_agent = agent
    _sandbox("bwrap")
    from assay.runner.trial import run_trial as run_one

    return run_one(bundles[0], the_agent, Path(out), rep=rep, attempt=attempt)


def check_tasks(tasks: Sequence[PathLike | Bundle], out: PathLike, *, reruns: int = 3,
                mutants: bool = False, workers: int = 2) -> list[TaskReport]:
    """``nop`` must fail, ``oracle`` must pass on every one of ``reruns``, and with
    ``mutants`` every built-in bad agent must be rejected. The trials go under ``out``, with
    ``task-check.json`` beside them."""
    from assay.records.io import atomic_write_json
    from assay.runner.task_check import check_tasks as check

    bundles = _bundles(tasks)
    _sandbox("bwrap")
    root = Path(out)
    reports = check(bundles, root, reruns=reruns, mutants=mutants, workers=workers)
    atomic_write_json(root / "task-check.json", [r.to_record() for r in reports])
    return reports


def import_harbor(task_dirs: Sequence[PathLike], out: PathLike, *,
                  reward_threshold: float = 1.0) -> list[Imported]:
    """Convert Harbor task folders into bundles under ``out/<task id>/``: every folder is
    validated first (a :class:`SuiteError` naming file, line and field, and nothing written),
    an existing bundle is never replaced (:class:`NeverOverwrite`). A task whose environment
    cannot be reproduced here is converted and marked; ``check_tasks`` reports it
    ``unsupported``. Harbor's paths are mapped onto the sandbox's own, named here because they
    belong to the sandbox, the verifier and the oracle."""
    from assay.agents.base import SOLUTION_MOUNT
    from assay.grading.check_run import TESTS_MOUNT
    from assay.sandbox.bwrap import SANDBOX_WORKDIR
    from assay.suites.harbor_task import SandboxPaths, import_harbor_tasks

    paths = SandboxPaths(work=SANDBOX_WORKDIR, tests=TESTS_MOUNT, solution=SOLUTION_MOUNT)
    return import_harbor_tasks([Path(d) for d in task_dirs], Path(out), paths,
                               threshold=reward_threshold)


__all__ = ["check_suite", "check_tasks", "import_harbor", "load_bundles", "run_trial"]


def run_experiment(experiment: str | os.PathLike[str], out: str | os.PathLike[str], *,
                   jobs: int | None = None, grace_seconds: float = 10.0,
                   holdout_reuse: bool = False, executor: str = "local",
                   ray_address: str | None = None, gateway_host: str | None = None,
                   ray_transfer: str | None = None, verify_jobs: int | None = None,
                   allow_large_plan: bool = False) -> Any:
    """Run (or resume: the same call) every trial of an experiment file into ``out``, then
    run the experiment's ``pairwise:`` check, if it has one, and write its report (the check's
    trouble is in the report's ``judge_preference.error``, never raised: the trials are done);
    returns the runner's result (status, trial counts, money spent).
    ``holdout_reuse`` lets a new run look at a holdout split past its allowance;
    ``executor="ray"`` runs the attempts as Ray tasks on the cluster at ``ray_address``, their
    files carried by ``ray_transfer`` (``shared_fs``, ``object_store``, ``auto``;
    ``docs/scaling.md``); ``verify_jobs`` how many local attempts verify at once (default:
    the usable cores, at most ``jobs``; 0: no gate); ``allow_large_plan`` lets a plan of more
    than 10,000 trials run (``suites/limits.py``)."""
    from assay.report.experiment import write_experiment_report
    from assay.runner.experiment import run_experiment as _run

    result = _run(Path(experiment), Path(out), jobs=jobs, grace_seconds=grace_seconds,
                  holdout_reuse=holdout_reuse, executor=executor, ray_address=ray_address,
                  gateway_host=gateway_host, ray_transfer=ray_transfer,
                  verify_jobs=verify_jobs, allow_large_plan=allow_large_plan)
    run_pairwise_check(Path(out), result.status)
    write_experiment_report(Path(out))
    return result


def run_pairwise_check(out: Path, status: str, *, jobs: int = 2) -> dict[str, Any] | None:
    """The experiment's ``pairwise:`` check after its trials (``api/pairwise.py``); not after a
    run stopped at its total budget (the judge's calls would be spent past it)."""
    from assay.api.pairwise import pairwise_check

    if status == "budget_stopped":
        return None
    return pairwise_check(out, jobs=jobs)
