"""A Harbor job directory read as an assay trial table, so runs a team already has get paired
statistics, new failures and coverage without being run again.

Harbor writes ``jobs/<job>/config.json`` and ``result.json`` for the job and, per trial,
``<trial>/result.json`` (its ``TrialResult``: ``task_name``, ``trial_name``, ``agent_info`` with
``model_info``, ``agent_result`` with tokens and ``cost_usd``, ``verifier_result.rewards``,
``exception_info``, and ``started_at``/``finished_at`` timings per phase). The mapping:

- task: ``task_name``; arm: the agent's name and its model's (``agent/model``), or the agent
  alone when there is no model;
- repetition: the trial's place among the same task and arm, ordered by start time then name;
- passed: the verifier's reward (``rewards["reward"]``, or the only reward when there is one)
  at least ``threshold``; a trial with an exception and no verifier result was never graded
  (an infra error: it counts for nothing in Δ and lowers coverage), the exception type is its
  failure code;
- a trial whose agent hit its timeout keeps its verdict and is marked timed out;
- cost: ``agent_result.cost_usd`` when Harbor recorded one, else unknown (never 0);
- runtime: the agent execution phase's start to finish.

Harbor's files are read as data and never written: a report on a Harbor job goes elsewhere.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.records.outcomes import Outcome
from assay.report.outcomes import AttemptFigures, OutcomeSet, TrialOutcome

DEFAULT_THRESHOLD = 1.0


def is_harbor_job(path: Path) -> bool:
    """A folder with a job ``config.json`` whose subfolders hold trial ``result.json`` files."""
    if not (path / "config.json").is_file() or (path / "manifest.json").is_file():
        return False
    return any(_trial_result(p) is not None for p in sorted(path.iterdir())[:200]
               if p.is_dir())


def _trial_result(trial_dir: Path) -> dict[str, Any] | None:
    path = trial_dir / "result.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(data, dict) and "task_name" in data and "trial_name" in data:
        return data
    return None


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(timing: Any) -> float | None:
    if not isinstance(timing, dict):
        return None
    t0, t1 = _when(timing.get("started_at")), _when(timing.get("finished_at"))
    if t0 is None or t1 is None:
        return None
    return max((t1 - t0).total_seconds(), 0.0)


def _reward(verifier: Any, where: Path) -> float | None:
    if not isinstance(verifier, dict):
        return None
    rewards = verifier.get("rewards")
    if not isinstance(rewards, dict) or not rewards:
        return None
    if "reward" in rewards:
        value = rewards["reward"]
    elif len(rewards) == 1:
        value = next(iter(rewards.values()))
    else:
        raise InputError(f"{where}: several rewards ({', '.join(sorted(rewards))}) and none "
                         "named 'reward': which one decides is not known")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: verifier_result.rewards: {value!r} is not a number")
    return float(value)


def _arm(result: dict[str, Any]) -> str:
    info = result.get("agent_info") or {}
    agent = str(info.get("name") or "agent")
    model = (info.get("model_info") or {}).get("name")
    return f"{agent}/{model}" if model else agent


def load_harbor_job(job_dir: Path, *, threshold: float = DEFAULT_THRESHOLD) -> OutcomeSet:
    """Every trial of the job as an outcome (see the module docstring for the mapping)."""
    found: list[tuple[str, str, datetime | None, str, dict[str, Any], Path]] = []
    for trial_dir in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        result = _trial_result(trial_dir)
        if result is None:
            continue
        found.append((str(result["task_name"]), _arm(result), _when(result.get("started_at")),
                      str(result["trial_name"]), result, trial_dir))
    if not found:
        raise InputError(f"{job_dir}: no Harbor trial result (a subfolder with result.json "
                         "holding task_name and trial_name)")
    found.sort(key=lambda f: (f[0], f[1], f[2] is None, f[2] or datetime.min, f[3]))
    trials: list[TrialOutcome] = []
    reps: dict[tuple[str, str], int] = {}
    for task, arm, _, _, result, trial_dir in found:
        rep = reps.get((task, arm), 0)
        reps[(task, arm)] = rep + 1
        where = trial_dir / "result.json"
        reward = _reward(result.get("verifier_result"), where)
        exc = result.get("exception_info") or {}
        exc_type = exc.get("exception_type") if isinstance(exc, dict) else None
        timed_out = bool(exc_type and "timeout" in str(exc_type).lower()
                         and "agent" in str(exc_type).lower())
        agent_result = result.get("agent_result") or {}
        cost = agent_result.get("cost_usd") if isinstance(agent_result, dict) else None
        cost = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) \
            else None
        passed = None if reward is None else reward >= threshold
        code = None
        if passed is None:
            code = str(exc_type or "not_verified")
        elif not passed:
            code = str(exc_type) if exc_type else "reward_below_threshold"
        outcome = Outcome.model_validate({
            "task": task, "arm": arm, "rep": rep, "passed": passed, "cost_usd": cost,
            "cost_complete": None if cost is None else True,
            "seconds": _seconds(result.get("agent_execution")), "timed_out": timed_out,
            "failure_code": code, "link": str(trial_dir.relative_to(job_dir)),
            "reward": reward})
        att = AttemptFigures(attempt=str(result["trial_name"]),
                             status="graded" if passed is not None else "infra_error",
                             error=str(exc.get("exception_message"))[:500] if exc_type else None,
                             seconds=outcome.seconds, timed_out=timed_out, cost_usd=cost,
                             cost_complete=True)
        trials.append(TrialOutcome(outcome, [att], "graded" if passed is not None else
                                   "not graded"))
    tasks = list(dict.fromkeys(t.outcome.task for t in trials))
    arms = list(dict.fromkeys(t.outcome.arm for t in trials))
    notes = [f"Harbor job {job_dir.name}: passed = reward ≥ {threshold:g}; an arm is "
             "agent/model; repetitions are trials in start order"]
    return OutcomeSet(job_dir, "harbor", trials, tasks, arms, notes=notes)


__all__ = ["DEFAULT_THRESHOLD", "is_harbor_job", "load_harbor_job"]
