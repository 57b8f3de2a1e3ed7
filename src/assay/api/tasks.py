"""Checking suites and tasks, and running agent trials, from Python.

Thin on purpose: the work is in :mod:`assay.grading.answers.suite_check`, :mod:`assay.runner.trial`
and :mod:`assay.runner.task_check`. What these add is what the CLI used to add on its own: paths
become loaded, validated bundles, agent names become agents, and a sandbox that cannot run here is
reported once, up front, instead of as one failed trial after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.api.options import CODING_DEFAULTS
from assay.api.runs import load_suite
from assay.api.sandbox import require_sandbox as _sandbox
from assay.errors import InputError, SuiteError

if TYPE_CHECKING:
    from assay.agents import Agent
    from assay.grading.answers.narrow_check import NarrowCheck
    from assay.grading.answers.suite_check import TaskCheck
    from assay.records.statuses import TrialRunStatus
    from assay.records.trial import Grade, TrialRecord
    from assay.runner.task_check import CheckProgress as CheckProgress
    from assay.runner.task_check import HangBudget, TaskReport
    from assay.suites.bundle import Bundle, DigestCheck
    from assay.suites.cases import NarrowSuite
    from assay.suites.coding import CodingSuite
    from assay.suites.harbor.task import Imported

PathLike = str | os.PathLike[str]


def check_suite(tasks: PathLike | NarrowSuite | CodingSuite, *,
                sandbox: str = CODING_DEFAULTS["sandbox"],
                exec_timeout: float = CODING_DEFAULTS["exec_timeout"]) -> list[TaskCheck]:
    """Every task's reference solution must pass and an empty answer must fail, through the
    sandbox and grader a model's answer goes through; a ``broken`` check names the problems.
    ``tasks``: a path or what :func:`load_suite` returned (a narrow suite is refused: it has no
    reference solutions)."""
    from assay.grading.answers.suite_check import check_suite as check
    from assay.runner.coding import CodingParams
    from assay.suites.cases import NarrowSuite
    from assay.suites.coding import CodingSuite

    if isinstance(tasks, CodingSuite):
        suite = tasks
    elif isinstance(tasks, NarrowSuite):
        raise InputError(f"{tasks.root}: not a coding tasks file")
    else:
        loaded = load_suite(tasks)
        if not isinstance(loaded, CodingSuite):
            raise InputError(f"{tasks}: not a coding tasks file")
        suite = loaded
    _sandbox(sandbox)
    params = CodingParams(exec_timeout_s=float(exec_timeout), isolation=sandbox)  # type: ignore[arg-type]
    return check(suite, params)


def check_narrow_suite(suite: PathLike | NarrowSuite) -> NarrowCheck:
    """A narrow suite's reply contract, without a model: the prompt names the reply the
    scorer reads, every expected value given back in it reads and scores right, an empty reply
    is invalid, every label is expected by some case (``grading/answers/narrow_check.py``).
    ``suite``: a suite directory or what :func:`load_suite` returned; a coding suite is
    refused (:func:`check_suite` checks those)."""
    from assay.grading.answers.narrow_check import check_narrow_suite as check
    from assay.suites.cases import NarrowSuite

    loaded = suite if isinstance(suite, NarrowSuite) else load_suite(suite)
    if not isinstance(loaded, NarrowSuite):
        raise InputError(f"{suite}: a coding tasks file, not a narrow suite")
    return check(loaded)


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


@dataclass(frozen=True)
class TrialRun:
    """One trial as its records say: ``trial.json`` and the grade it names, read back from
    ``trial_dir`` as their models (``docs/records.md``)."""

    trial_dir: Path
    #: ``graded`` or ``infra_error`` (``refused`` and ``worker_lost`` belong to a runner's
    #: trials, never to one run here)
    status: TrialRunStatus
    record: TrialRecord
    #: the verdict (``grade.accepted``, ``grade.failure_code``, ``grade.checks``); None when
    #: the trial could not be run (``record.error`` says why)
    grade: Grade | None


def run_trial(task: PathLike | Bundle, agent: str | Agent, out: PathLike, *, rep: int = 0,
              attempt: int = 0) -> TrialRun:
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

    done = run_one(bundles[0], the_agent, Path(out), rep=rep, attempt=attempt)
    assert done.record is not None  # a trial run here always ends in its record
    from assay.report.atif import write_beside

    write_beside(done.trial_dir)  # trajectory.atif.json beside trial.json (never raises)
    return TrialRun(done.trial_dir, done.status, done.record, done.grade)


def check_tasks(tasks: Sequence[PathLike | Bundle], out: PathLike, *, reruns: int = 3,
                mutants: bool = False, workers: int = 2,
                only_mutants: Sequence[str] | None = None,
                hang_budget: HangBudget = "measured",
                progress: Callable[[CheckProgress], None] | None = None) -> list[TaskReport]:
    """``nop`` must fail, ``oracle`` must pass on every one of ``reruns``, and with
    ``mutants`` every built-in bad agent must be rejected (``only_mutants``: just these, by
    name, which implies ``mutants``; a task author chasing one). The trials go under ``out``,
    with ``task-check.json`` beside them. An unknown mutant name is an :class:`InputError`
    that lists the known ones, before anything runs. A hanging mutant is judged against the
    trusted tree's measured time (``hang_budget="task"``: under the task's whole verifier
    limit, as before); ``progress`` is told each finished trial."""
    from assay.agents import MUTANTS
    from assay.records.io import atomic_write_json
    from assay.runner.task_check import check_tasks as check

    if only_mutants is not None:
        known = [m.name for m in MUTANTS]
        unknown = sorted(set(only_mutants) - set(known))
        if unknown:
            raise InputError(f"--mutant: no built-in bad agent named {', '.join(unknown)} "
                             f"(known: {', '.join(known)})")
        mutants = True
    bundles = _bundles(tasks)
    _sandbox("bwrap")
    root = Path(out)
    reports = check(bundles, root, reruns=reruns, mutants=mutants, workers=workers,
                    only_mutants=only_mutants, hang_budget=hang_budget, progress=progress)
    atomic_write_json(root / "task-check.json", [r.to_record() for r in reports])
    return reports


def import_harbor(task_dirs: Sequence[PathLike], out: PathLike, *,
                  reward_threshold: float = 1.0, reward_key: str | None = None,
                  reward_aggregate: str | None = None,
                  approximate_base: bool = False) -> list[Imported]:
    """Convert Harbor task folders into bundles under ``out/<task id>/``: every folder is
    validated first (a :class:`SuiteError` naming file, line and field, and nothing written),
    an existing bundle is never replaced (:class:`NeverOverwrite`). A task whose environment
    cannot be reproduced here is converted and marked; ``check_tasks`` reports it
    ``unsupported``. A task whose tests write a ``reward.json`` without a ``reward`` key needs
    ``reward_key`` (one of its metrics) or ``reward_aggregate`` (``mean``, ``min``, ``all``),
    else it is refused. Harbor's paths are mapped onto the sandbox's own, named here because they
    belong to the sandbox, the verifier and the oracle. A task's Dockerfile is carried over and
    builds on its real base, pulled; ``approximate_base`` marks each such bundle
    ``environment.approximate_base: true`` (the Debian translation where the base cannot be
    pulled)."""
    from assay.agents.base import SOLUTION_MOUNT
    from assay.grading.verify.check_run import TESTS_MOUNT
    from assay.sandbox.bwrap import SANDBOX_WORKDIR
    from assay.suites.harbor.task import SandboxPaths, import_harbor_tasks

    paths = SandboxPaths(work=SANDBOX_WORKDIR, tests=TESTS_MOUNT, solution=SOLUTION_MOUNT)
    return import_harbor_tasks([Path(d) for d in task_dirs], Path(out), paths,
                               threshold=reward_threshold, reward_key=reward_key,
                               reward_aggregate=reward_aggregate,
                               approximate_base=approximate_base)


@dataclass(frozen=True)
class ModelTrial:
    """What :func:`run_model_trial` left: the last graded attempt and its grade, or why there
    is none."""

    attempt_dir: Path | None
    grade: Grade | None
    error: str | None = None


def run_model_trial(task: PathLike | Bundle, agent: str, out: PathLike, *, model: str,
                    protocol: str = "chat", script: PathLike | None = None,
                    base_url_env: str | None = None,
                    api_key_env: str | None = None) -> ModelTrial:
    """A trial whose agent needs a model runs as a one-arm, one-task experiment: the same
    runner, gateway (scoped token, ledger, budgets) and verifier as every experiment trial, and
    the same resume. The experiment file is written into ``out`` (``trial-experiment.yaml``),
    so the run can be repeated; the run itself is ``out/run``."""
    import yaml

    from assay.api.experiment_run import run_experiment
    from assay.records.io import read_json_file
    from assay.records.trial import read_grade

    bundles = _bundles([task])
    if len(bundles) != 1:
        raise InputError(f"{task}: holds {len(bundles)} task bundles; a trial runs one")
    bundle = bundles[0]
    spec: dict[str, Any] = {"name": model, "protocol": protocol}
    if script is not None:
        spec["script"] = str(Path(script).resolve())
    for key, value in (("base_url_env", base_url_env), ("api_key_env", api_key_env)):
        if value:
            spec[key] = value
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    exp = root / "trial-experiment.yaml"
    if not exp.exists():
        exp.write_text(yaml.safe_dump({
            "name": f"trial-{bundle.id}", "tasks": [str(bundle.root.resolve())],
            "arms": {"agent": {"agent": agent, "model": spec}}}, sort_keys=False))
    run_experiment(exp, root / "run")
    attempts = sorted((root / "run" / "trials" / bundle.id / "agent" / "0").glob("a*"),
                      key=lambda p: int(p.name[1:]))
    for a in reversed(attempts):
        grades = sorted((a / "grades").glob("*.json"))
        if grades:
            return ModelTrial(a, read_grade(a, grades[-1].stem))
    last = read_json_file(attempts[-1] / "trial.json") if attempts else {}
    return ModelTrial(attempts[-1] if attempts else None, None, last.get("error"))


def find_bundles(dirs: Sequence[PathLike]) -> list[Path]:
    """The bundle folders in ``dirs``: each is a bundle, or a folder of bundles (one level
    down); nothing is loaded."""
    from assay.suites.bundle import find_bundles as find

    return find([Path(d) for d in dirs])


def load_bundle(root: PathLike) -> Bundle:
    """One bundle, validated (:class:`SuiteError` naming file, line and field)."""
    from assay.suites.bundle import load_bundle as load

    return load(Path(root))


def experiment_bundles(experiment: PathLike, tier: str | None = None) -> list[Bundle]:
    """The bundles an experiment file (or one of its tiers, ``suites/tiers.py``) selects."""
    from assay.suites.experiment import load_experiment

    return list(load_experiment(Path(experiment), tier=tier).bundles.values())


def check_starting_tree(bundle: Bundle) -> DigestCheck:
    """A fresh export of the bundle's starting tree, digested, against its pinned
    ``fixture_digest`` (``ok``, missing or a mismatch)."""
    from assay.suites.bundle import check_starting_tree as check

    return check(bundle)


def pin_starting_tree(bundle: Bundle, digest: str) -> None:
    """Write ``digest`` into the bundle's task.yaml as its ``fixture_digest`` (one line edited
    or added; comments and order kept)."""
    from assay.suites.bundle import set_fixture_digest

    set_fixture_digest(bundle.root, digest)


def unpinned_image(bundle: Bundle) -> str | None:
    """The registry reference a task runs in when it names a tag and no digest (``task lint``
    reports it unpinned), else None."""
    from assay.environments.run import registry_reference
    from assay.suites.image_ref import parse_reference

    ref = registry_reference(bundle)
    return ref if ref is not None and parse_reference(ref).digest is None else None


def pin_image(bundle: Bundle) -> str:
    """Resolve the task's unpinned registry tag now (skopeo, one manifest read) and write
    ``environment_image: REGISTRY/NAME@sha256:…`` into its task.yaml; returns what was
    written."""
    from assay.environments.registry import resolve_tag
    from assay.suites.bundle import set_environment_image
    from assay.suites.image_ref import parse_reference

    ref = unpinned_image(bundle)
    if ref is None:
        raise InputError(f"{bundle.id}: its image is pinned already, or not a registry image")
    pinned = f"{parse_reference(ref).name}@{resolve_tag(ref)}"
    set_environment_image(bundle.root, pinned)
    return pinned


def split_overlaps(bundles: list[Bundle], digests: dict[str, str]) -> list[str]:
    """A warning per pair of bundles in different splits that look like one task."""
    from assay.suites.split_lint import split_overlaps as overlaps

    return overlaps(bundles, digests)


def parse_agent(spec: str) -> Agent:
    """An agent from its name: ``oracle``, ``nop``, ``command:<shell command>``,
    ``mutant:<name>`` or an agent CLI's adapter; a ``ValueError`` names the known ones."""
    from assay.agents import parse_agent as parse

    return parse(spec)


__all__ = ["ModelTrial", "TrialRun", "check_narrow_suite", "check_starting_tree", "check_suite",
           "check_tasks",
           "experiment_bundles", "find_bundles", "import_harbor", "load_bundle", "load_bundles",
           "parse_agent", "pin_image", "pin_starting_tree", "run_model_trial", "run_trial",
           "split_overlaps", "unpinned_image"]
