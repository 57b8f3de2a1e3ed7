"""``assay task check``: does each task measure what it claims, before any agent is blamed?

For every bundle: ``nop`` must fail ``behavior`` (or the task tests nothing), ``oracle`` must be
accepted on every rerun, each in a clean environment (sometimes is "flaky", never is "broken"),
the starting tree must match its pinned digest, and with ``mutants`` every built-in bad agent
must be rejected: an accepted mutant is a defect in the grader, reported loudly. A bundle whose
environment this machine cannot give (``initial_state.environment.unsupported``, as ``task
import-harbor`` marks a task that needs a container image) runs no trial: it is reported
``unsupported`` with the reason, a status of its own, neither ok nor broken. So is a bundle
pinned to an image that cannot be had here (not built, not pinned, another engine): the reason
says how to build it. So is a task whose image fails to build here (a step that needs a host
beyond the package registries, a recipe the builder refuses): the other tasks are still
checked and ``task-check.json`` still written. A task that runs in an image has it in its
report (digest, source, what the build substituted).

A bundle's self-test takes seconds, not minutes: its trials run ``workers`` at once, and a mutant
whose tree hangs (``hang_at_import``) sleeps beside them under a verifier limit set from the
trusted tree's own measured time (:func:`hang_limit`) rather than the task's whole
``verifier_wall_seconds`` twice over. What it must prove is unchanged: the verifier stops the
hang and blames the candidate, judged as for any candidate against the trusted tree's time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from assay.agents import MUTANTS, Agent, MutantAgent, parse_agent
from assay.agents.mutants import NOT_APPLICABLE
from assay.environments.run import ensure_image, image_record
from assay.errors import InfraError, InputError, TrialRefused
from assay.runner.trial import TrialResult, run_trial
from assay.suites.bundle import Bundle, DigestState, check_starting_tree

#: What ``task check`` says of a task, worst first as the CLI colours it.
TaskCheckStatus = Literal["unsupported", "GRADER DEFECT", "broken", "flaky", "ok"]


@dataclass
class TaskReport:
    task_id: str
    digest: DigestState
    nop: str | None = None  # "fails behavior" / problem text
    oracle_accepted: int = 0
    oracle_runs: int = 0
    mutants: dict[str, str] = field(default_factory=dict)  # name -> "rejected:<code>" / ...
    problems: list[str] = field(default_factory=list)
    unsupported: str | None = None  # why the environment cannot be given here
    image: dict[str, Any] | None = None  # the pinned image the checks ran in
    #: per hanging mutant: the verifier limit it ran under and the trusted time that set it
    hang_judged: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def status(self) -> TaskCheckStatus:
        if self.unsupported is not None:
            return "unsupported"
        if any(v.startswith("ACCEPTED") for v in self.mutants.values()):
            return "GRADER DEFECT"
        if self.problems:
            return "broken"
        if 0 < self.oracle_accepted < self.oracle_runs:
            return "flaky"
        return "ok"

    def to_record(self) -> dict[str, Any]:
        return {"task": self.task_id, "status": self.status, "digest": self.digest,
                "nop": self.nop, "oracle": f"{self.oracle_accepted}/{self.oracle_runs}",
                "mutants": self.mutants, "problems": self.problems,
                **({"unsupported": self.unsupported} if self.unsupported is not None else {}),
                **({"environment_image": self.image} if self.image is not None else {}),
                **({"hang_judged": self.hang_judged} if self.hang_judged else {})}


def _describe(res: TrialResult) -> str:
    if res.grade is None:
        return f"infra_error: {res.error}"
    g = res.grade
    if g.validity.status != "valid":
        return f"grader_error: {g.validity.detail}"
    if g.accepted:
        return "accepted"
    reward = (g.details.behavior or {}).get("reward")
    # a reward check's own words say why (no reward file, or how far below the threshold)
    return f"rejected:{g.failure_code}" + (f" ({reward['detail']})" if reward else "")


#: A mutant that hangs (``Mutant.hangs``) is verified with ``verifier_wall_seconds`` cut to
#: this many times the trusted tree's own measured time (the slowest check of the first oracle
#: run, which is the pristine tree plus the reference fix under the same verifier) ...
HANG_FACTOR = 4.0
#: ... and never below this many seconds, nor above the task's own limit. The verifier blames a
#: time-out on the candidate only when the trusted tree ran the same check within half the
#: limit (``expected_tests.TRUSTED_SHARE``): a factor of 4 leaves the trusted tree twice that
#: margin for machine load, and the floor keeps a start-up hiccup from deciding it.
HANG_FLOOR_SECONDS = 10.0

HangBudget = Literal["measured", "task"]


@dataclass(frozen=True)
class CheckProgress:
    """One finished trial of ``task check``, for a progress display: how far (``done`` of
    ``total``), which trial (bundle and label: ``nop``, ``oracle``, ``mutant:<name>``) and what
    it said, and the seconds since the check started."""

    done: int
    total: int
    task: str
    label: str
    said: str
    elapsed_seconds: float


def _trusted_seconds(res: TrialResult) -> float | None:
    """The slowest check's wall seconds in an accepted oracle trial; None when there is none."""
    g = res.grade
    if g is None or not g.accepted:
        return None
    walls = [rec.get("wall_seconds") for rec in (g.details.behavior, g.details.regression)
             if isinstance(rec, dict)]
    found = [float(w) for w in walls if isinstance(w, (int, float))]
    return max(found) if found else None


def hang_limit(bundle: Bundle, trusted_seconds: float | None) -> float:
    """The verifier limit a hanging mutant runs under: ``HANG_FACTOR`` × the trusted tree's time,
    at least ``HANG_FLOOR_SECONDS``, at most the task's limit (which is also the answer when the
    trusted time is unknown: the oracle was never accepted, so nothing can be judged faster)."""
    task_limit = bundle.spec.budget.verifier_wall_seconds
    if trusted_seconds is None:
        return task_limit
    return min(task_limit, max(HANG_FLOOR_SECONDS, HANG_FACTOR * trusted_seconds))


def _with_limit(bundle: Bundle, seconds: float) -> Bundle:
    budget = bundle.spec.budget.model_copy(update={"verifier_wall_seconds": seconds})
    return replace(bundle, spec=bundle.spec.model_copy(update={"budget": budget}))


def check_tasks(bundles: list[Bundle], out_root: Path, *, reruns: int = 3,
                mutants: bool = False, workers: int = 2,
                only_mutants: Collection[str] | None = None,
                hang_budget: HangBudget = "measured",
                progress: Callable[[CheckProgress], None] | None = None) -> list[TaskReport]:
    """The trials of every bundle (nop, ``reruns`` oracles, with ``mutants`` the built-in bad
    agents that apply to it, or only those named in ``only_mutants``), ``workers`` at once.

    A mutant that hangs sleeps, so it does not take one of the ``workers``: it runs beside them
    once the bundle's first oracle run is done, under :func:`hang_limit` (``hang_budget``
    ``"measured"``); it must still be rejected as the candidate's time-out, judged by the
    verifier against the trusted tree's time under that same limit. Should the verifier not
    blame the candidate at the shorter limit (a loaded machine slowed the trusted tree too),
    the mutant runs again under the task's own limit, so a short limit never decides a verdict
    the full one would not. ``hang_budget="task"`` runs every mutant under the task's limit
    with the others, as before (the bench's baseline). ``progress`` is told each finished
    trial."""
    reports = {b.id: TaskReport(b.id, "missing") for b in bundles}
    jobs: list[tuple[Bundle, Agent, str, int]] = []
    hang_jobs: list[tuple[Bundle, Agent, str, int]] = []
    for b in bundles:
        why = b.spec.initial_state.environment.unsupported
        if why is None and b.spec.initial_state.environment.image is not None:
            try:
                image = ensure_image(b)
            except TrialRefused as exc:  # said beside the task's id: not twice
                why = str(exc).removeprefix(f"{b.id}: ")
            except (InputError, InfraError) as exc:  # the build failed: this task's, not all
                why = f"its image could not be built here: {exc}"
            else:
                reports[b.id].image = image_record(image) if image is not None else None
        if why is not None:
            reports[b.id].unsupported = why
            reports[b.id].problems.append(f"unsupported environment: {why}")
            continue
        # the first oracle first: its time is what a hanging mutant is judged against
        jobs += [(b, parse_agent("oracle"), "oracle", r) for r in range(reruns)]
        jobs.append((b, parse_agent("nop"), "nop", 0))
        if mutants:
            for m in MUTANTS:
                if m.applies(b) and (only_mutants is None or m.name in only_mutants):
                    job: tuple[Bundle, Agent, str, int] = (b, MutantAgent(m),
                                                           f"mutant:{m.name}", 0)
                    (hang_jobs if m.hangs and hang_budget == "measured" else jobs).append(job)

    total = len(jobs) + len(hang_jobs)
    started = time.monotonic()
    lock = threading.Lock()
    finished = [0]

    def trial(b: Bundle, agent: Agent, label: str, rep: int, *, sub: int = 0) -> TrialResult:
        safe = label.replace(":", "-")
        return run_trial(b, agent, out_root / b.id / safe / str(rep + sub), rep=rep + sub)

    def told(b: Bundle, label: str, res: TrialResult) -> None:
        if progress is None:
            return
        with lock:
            finished[0] += 1
            step = CheckProgress(finished[0], total, b.id, label, _describe(res),
                                 time.monotonic() - started)
        progress(step)

    def one(job: tuple[Bundle, Agent, str, int]) -> tuple[Bundle, str, int, TrialResult]:
        b, agent, label, rep = job
        res = trial(b, agent, label, rep)
        told(b, label, res)
        return b, label, rep, res

    first_oracle: dict[str, Future[tuple[Bundle, str, int, TrialResult]]] = {}

    def hang(job: tuple[Bundle, Agent, str, int]) -> tuple[Bundle, str, int, TrialResult]:
        b, agent, label, rep = job
        oracle = first_oracle.get(b.id)
        trusted = _trusted_seconds(oracle.result()[3]) if oracle is not None else None
        limit = hang_limit(b, trusted)
        res = trial(b if limit >= b.spec.budget.verifier_wall_seconds else _with_limit(b, limit),
                  agent, label, rep)
        judged: dict[str, Any] = {"limit_seconds": limit, "trusted_seconds": trusted,
                                  "task_limit_seconds": b.spec.budget.verifier_wall_seconds,
                                  "said": _describe(res)}
        if (limit < b.spec.budget.verifier_wall_seconds
                and not _describe(res).startswith("rejected")):
            res = trial(b, agent, label, rep, sub=1)  # the task's own limit decides
            judged["again_at_task_limit"] = _describe(res)
        with lock:
            reports[b.id].hang_judged[label.split(":", 1)[1]] = judged
        told(b, label, res)
        return b, label, rep, res

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool, \
            ThreadPoolExecutor(max_workers=max(1, min(len(hang_jobs), 2 * workers))) as sleepers:
        futures = []
        for job in jobs:
            fut = pool.submit(one, job)
            futures.append(fut)
            if job[2] == "oracle" and job[3] == 0:
                first_oracle[job[0].id] = fut
        futures += [sleepers.submit(hang, job) for job in hang_jobs]
        results = [f.result() for f in futures]

    for b in bundles:
        rep = reports[b.id]
        check = check_starting_tree(b)
        rep.digest = check.state
        if check.problem:
            rep.problems.append(check.problem)
        elif check.state == "missing":
            rep.problems.append("no fixture_digest pinned (assay task lint --write-digest)")

    for b, label, run, res in results:
        rep = reports[b.id]
        said = _describe(res)
        if label == "nop":
            behavior = res.grade.checks["behavior"] if res.grade else None
            rep.nop = "fails behavior" if behavior == "fail" else said
            if behavior != "fail":
                rep.problems.append(f"nop does not fail behavior ({said}): the task tests "
                                    "nothing")
        elif label == "oracle":
            rep.oracle_runs += 1
            if said == "accepted":
                rep.oracle_accepted += 1
            else:
                rep.problems.append(f"oracle run {run}: {said}")
        else:
            name = label.split(":", 1)[1]
            if said == "accepted":
                rep.mutants[name] = "ACCEPTED"
            elif said.startswith("rejected"):
                rep.mutants[name] = said
            elif NOT_APPLICABLE in said:  # nothing in this workspace for its attack
                rep.mutants[name] = "n/a: " + said.split(f"{NOT_APPLICABLE}: ", 1)[-1]
            else:
                rep.mutants[name] = said
                rep.problems.append(f"mutant {name}: {said}")
    for rep in reports.values():
        if rep.oracle_runs and rep.oracle_accepted == 0:
            rep.problems.insert(0, "oracle never accepted")
        elif 0 < rep.oracle_accepted < rep.oracle_runs:
            # flaky is its own status; keep the per-run problems as evidence only
            rep.problems = [p for p in rep.problems if not p.startswith("oracle run")]
    return [reports[b.id] for b in bundles]
