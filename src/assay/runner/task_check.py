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
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
                **({"environment_image": self.image} if self.image is not None else {})}


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


def check_tasks(bundles: list[Bundle], out_root: Path, *, reruns: int = 3,
                mutants: bool = False, workers: int = 2,
                only_mutants: Collection[str] | None = None) -> list[TaskReport]:
    """The trials of every bundle (nop, ``reruns`` oracles, with ``mutants`` the built-in bad
    agents that apply to it, or only those named in ``only_mutants``), ``workers`` at once."""
    reports = {b.id: TaskReport(b.id, "missing") for b in bundles}
    jobs: list[tuple[Bundle, Agent, str, int]] = []
    for b in bundles:
        why = b.spec.initial_state.environment.unsupported
        if why is None and b.spec.initial_state.environment.image is not None:
            try:
                image = ensure_image(b)
            except TrialRefused as exc:
                why = str(exc)
            except (InputError, InfraError) as exc:  # the build failed: this task's, not all
                why = f"its image could not be built here: {exc}"
            else:
                reports[b.id].image = image_record(image) if image is not None else None
        if why is not None:
            reports[b.id].unsupported = why
            reports[b.id].problems.append(f"unsupported environment: {why}")
            continue
        jobs.append((b, parse_agent("nop"), "nop", 0))
        jobs += [(b, parse_agent("oracle"), "oracle", r) for r in range(reruns)]
        if mutants:
            jobs += [(b, MutantAgent(m), f"mutant:{m.name}", 0) for m in MUTANTS
                     if m.applies(b) and (only_mutants is None or m.name in only_mutants)]

    def one(job: tuple[Bundle, Agent, str, int]) -> tuple[Bundle, str, int, TrialResult]:
        b, agent, label, rep = job
        safe = label.replace(":", "-")
        return b, label, rep, run_trial(b, agent, out_root / b.id / safe / str(rep), rep=rep)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(one, jobs))

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
