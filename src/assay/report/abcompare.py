"""``exp compare``'s object: Δ and its interval beside everything a reader needs to doubt it.

The statistics are ``stats.abtest.compare_arms``; this module feeds it the trial table and adds
the figures that are not statistics but decide whether the number can be trusted: what the
candidate newly breaks, integrity violations and human interventions per arm, cost per
completed task with its completeness, every attempt's runtime with its timeouts, coverage of
the plan, and whether the mechanism under test fired.

Two rules keep these honest. Cost per completed task divides the cost of *every* attempt of an
arm (failed and infra-errored ones included: they were paid for) by the number of accepted
trials, so a cheap arm that fails often is not made to look cheap. A timed-out attempt's runtime
is when it was stopped, not when it would have finished: in a percentile it counts as longer
than every finished attempt, and a percentile that falls on one is reported as censored ("over
the limit"), never as the limit.
"""

from __future__ import annotations

import math
from collections.abc import Container, Hashable, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from assay.errors import InputError, NotComparable
from assay.report.outcomes import OutcomeSet, TrialOutcome
from assay.stats.abtest import METHODS, compare_arms
from assay.stats.describe import nearest_rank
from assay.stats.moderated import clustered_wilson
from assay.suites.experiment import is_aa_arm


class Percentiles(TypedDict):
    """p50, p90 and max of a set of runtimes (None: none, or censored: a killed attempt)."""

    p50: float | None
    p90: float | None
    max: float | None
    censored: list[str]  # which of the three fell on a timed-out attempt


class ArmLatency(TypedDict):
    """Every attempt whose agent ran, timeouts kept; and the accepted trials on their own."""

    attempts: int
    timeouts: int
    timeout_rate: float | None
    all: Percentiles
    accepted: Percentiles
    seconds: list[float]
    timed_out: list[bool]


#: ``ok``: every attempt's cost known; ``lower_bound``: some usage or price missing;
#: ``not_computable``: nothing accepted to divide by; ``unknown``: no cost known at all.
CostStatus = Literal["ok", "lower_bound", "not_computable", "unknown"]


class ArmCost(TypedDict):
    """What an arm spent, over every attempt, and per accepted (completed) task."""

    total_usd: float | None
    complete: bool
    accepted: int
    per_completed_usd: float | None
    status: CostStatus


class PassRate(TypedDict):
    """An arm's task-weighted pass rate and its clustered Wilson interval."""

    pass_rate: float | None
    ci: list[float] | None
    n_tasks: int


SUBGROUPS = ("triggered", "not_triggered")
SELECTION_BIAS = ("subgroup view: only trials where the mechanism {what}, in both arms by the "
                  "same rule. Whether it fires depends on what the arm did (the candidate "
                  "may change who triggers), so the two arms' subgroups are different "
                  "populations and this Δ is not the effect of the change (selection bias); "
                  "the end-to-end comparison without --subgroup is the one to decide on")


def _percentiles(values: Sequence[float], timed_out: Sequence[bool]) -> Percentiles:
    """p50, p90 and max with timed-out attempts ranked above every finished one."""
    ranked = [math.inf if t else float(v) for v, t in zip(values, timed_out, strict=True)]
    censored: list[str] = []

    def at(name: str, q: float) -> float | None:
        v = nearest_rank(ranked, q)
        if v is not None and math.isinf(v):
            censored.append(name)
            return None
        return None if v is None else round(v, 3)

    return Percentiles(p50=at("p50", 50), p90=at("p90", 90), max=at("max", 100),
                       censored=censored)


def arm_latency(trials: Sequence[TrialOutcome]) -> ArmLatency:
    """Every attempt whose agent ran, timeouts kept; and the accepted trials on their own."""
    secs: list[float] = []
    flags: list[bool] = []
    for t in trials:
        for a in t.attempts:
            if a.seconds is not None:
                secs.append(float(a.seconds))
                flags.append(bool(a.timed_out))
    acc = [(float(t.outcome.seconds), False) for t in trials
           if t.outcome.passed and t.outcome.seconds is not None]
    timeouts = sum(flags)
    return {"attempts": len(secs), "timeouts": timeouts,
            "timeout_rate": timeouts / len(secs) if secs else None,
            "all": _percentiles(secs, flags),
            "accepted": _percentiles([s for s, _ in acc], [f for _, f in acc]),
            "seconds": [round(s, 3) for s in secs], "timed_out": flags}


def arm_cost(trials: Sequence[TrialOutcome]) -> ArmCost:
    """Cost per completed task over every attempt; unknown and lower bounds said as such."""
    costs = [a.cost_usd for t in trials for a in t.attempts]
    accepted = sum(1 for t in trials if t.outcome.passed)
    known = [c for c in costs if c is not None]
    if not known:
        return {"total_usd": None, "complete": False, "accepted": accepted,
                "per_completed_usd": None, "status": "unknown"}
    complete = len(known) == len(costs) and all(
        a.cost_complete for t in trials for a in t.attempts if a.cost_usd is not None)
    total = float(sum(known))
    per = total / accepted if accepted else None
    status: CostStatus = ("not_computable" if not accepted
                          else ("ok" if complete else "lower_bound"))
    return {"total_usd": round(total, 6), "complete": complete, "accepted": accepted,
            "per_completed_usd": None if per is None else round(per, 6), "status": status}


def arm_pass_rate(data: OutcomeSet, arm: str, clusters: dict[str, str] | None,
                  level: float = 0.95,
                  tasks: Container[Hashable] | None = None) -> PassRate:
    """The arm's task-weighted pass rate and its clustered Wilson interval
    (``stats.moderated.clustered_wilson``: never zero width, inside [0, 1]), on ``tasks`` (the
    compared ones): the same tasks, weighting and clustering as Δ, so that the two rates'
    difference is Δ and the per-arm rates and Δ tell one story."""
    by_task: dict[str, list[int]] = {}
    for t in data.arm_trials(arm):
        if t.outcome.passed is None or (tasks is not None and t.outcome.task not in tasks):
            continue
        cell = by_task.setdefault(t.outcome.task, [0, 0])
        cell[0] += 1
        cell[1] += int(t.outcome.passed)
    if not by_task:
        return {"pass_rate": None, "ci": None, "n_tasks": 0}
    listed = list(by_task)
    rates = [by_task[k][1] / by_task[k][0] for k in listed]
    weights = [float((data.weights or {}).get(k, 1.0)) for k in listed]
    labels: dict[str, int] = {}
    codes = [labels.setdefault((clusters or {}).get(k, k), len(labels)) for k in listed]
    rate, lo, hi, _ = clustered_wilson(rates, [by_task[k][0] for k in listed], codes, weights,
                                       level=level)
    return {"pass_rate": rate, "ci": [lo, hi], "n_tasks": len(listed)}


def _counts(trials: Sequence[TrialOutcome]) -> dict[str, int]:
    graded = [t.outcome for t in trials if t.outcome.passed is not None]
    return {"integrity": sum(1 for o in graded if o.is_integrity_violation()),
            "interventions": sum(1 for o in graded if o.intervention)}


def _triggered(trials: Sequence[TrialOutcome]) -> dict[str, int]:
    graded = [t.outcome for t in trials if t.outcome.passed is not None]
    return {"triggered": sum(1 for o in graded if o.triggered is True),
            "not_triggered": sum(1 for o in graded if o.triggered is False),
            "unknown": sum(1 for o in graded if o.triggered is None)}


def _subgroup(trials: list[TrialOutcome], plan: list[str], want: bool,
              arms: tuple[str, str]) -> tuple[list[TrialOutcome], list[str]]:
    """Both arms' trials where the mechanism fired (or did not), by the same rule, on the
    tasks where both arms have such a graded trial.

    Refused when an arm does not say whether it fired: keeping all of its trials against the
    other arm's filtered ones compares two different populations (and reproduces the full
    comparison on one side). Even with both arms filtered the view is not the effect of the
    change (the candidate may change who triggers): the caller adds that note."""
    what = "fired" if want else "did not fire"
    flag = "triggered" if want else "not_triggered"
    blind = [arm for arm in arms
             if not any(t.outcome.triggered is not None for t in trials if t.outcome.arm == arm)]
    if blind:
        raise NotComparable(
            f"--subgroup {flag}: arm {' and '.join(repr(b) for b in blind)} does not record "
            "whether the mechanism fired (no trigger_event on the arm), so its trials cannot "
            "be filtered by the same rule as the other arm's; keeping all of them against "
            f"the trials where it {what} would compare two different populations. Name the "
            "event with trigger_event on both arms, or decide on the comparison without "
            "--subgroup. Even then a subgroup is selection bias: the candidate may change "
            "who triggers")
    kept = [t for t in trials if t.outcome.triggered is want]
    graded = {arm: {t.outcome.task for t in kept
                    if t.outcome.arm == arm and t.outcome.passed is not None} for arm in arms}
    tasks = graded[arms[0]] & graded[arms[1]]
    if not tasks:
        raise NotComparable(
            f"--subgroup {flag}: no task has a graded trial where the mechanism {what} in both "
            f"arms ({arms[0]}: {len(graded[arms[0]])} task(s), {arms[1]}: "
            f"{len(graded[arms[1]])} task(s)); nothing to compare. The comparison without "
            "--subgroup is the one to decide on")
    return [t for t in kept if t.outcome.task in tasks], [t for t in plan if t in tasks]


def _one_split(data: OutcomeSet, tasks: set[str]) -> None:
    """A comparison never blends splits: a Δ over dev and holdout tasks is neither's, and
    spends the holdout as if it were dev. Splits come from the run's manifest (``task_meta``)
    or an outcomes file's ``split`` field; a source that names none is taken as one split."""
    meta = (data.manifest or {}).get("task_meta") or {}
    splits: dict[str, set[str]] = {}
    for t in data.trials:
        if t.outcome.task not in tasks:
            continue
        split = (meta.get(t.outcome.task) or {}).get("split") or t.outcome.extra_field("split")
        if split is not None:
            splits.setdefault(str(split), set()).add(t.outcome.task)
    if len(splits) > 1:
        named = ", ".join(f"{k} ({len(v)} task(s))" for k, v in sorted(splits.items()))
        raise NotComparable(
            f"{data.source}: the tasks span several splits: {named}; a comparison never blends "
            "splits. Run each split as its own experiment (select: {split: dev}), or compare "
            "an outcomes file holding one split's rows")


def build_comparison(data: OutcomeSet, *, a: str, b: str, cluster: str = "task",
                     method: str = "wilson_mover", seed: int = 0, level: float = 0.95,
                     subgroup: str | None = None) -> dict[str, Any]:
    """The comparison object of ``exp compare --json`` (and of the experiment report)."""
    for name, arm in (("--a", a), ("--b", b)):
        if arm not in data.arms:
            raise InputError(f"{data.source}: {name} {arm!r} is not an arm here (arms: "
                             f"{', '.join(data.arms)})")
    if method not in METHODS:
        raise InputError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if subgroup is not None and subgroup not in SUBGROUPS:
        raise InputError(f"--subgroup must be one of {', '.join(SUBGROUPS)}, got {subgroup!r}")
    clusters = data.cluster_map(cluster)
    notes = list(data.notes)
    trials = [t for t in data.trials if t.outcome.arm in (a, b)]
    _one_split(data, {t.outcome.task for t in trials})
    plan = data.tasks
    if subgroup is not None:
        trials, plan = _subgroup(trials, plan, subgroup == "triggered", (a, b))
        notes.append(SELECTION_BIAS.format(what="fired" if subgroup == "triggered"
                                           else "did not fire"))
    res = compare_arms(((t.outcome.task, t.outcome.arm, t.outcome.rep, t.outcome.passed)
                        for t in trials), a=a, b=b, clusters=clusters, weights=data.weights,
                       tasks=plan, method=method, level=level, seed=seed)  # type: ignore[arg-type]
    out = res.to_dict()
    links: dict[str, dict[str, list[str]]] = {}
    for t in trials:
        if t.outcome.link:
            side = "a" if t.outcome.arm == a else "b"
            links.setdefault(t.outcome.task, {"a": [], "b": []})[side].append(t.outcome.link)
    for row in out["per_task"]:
        row["links"] = links.get(row["task"], {"a": [], "b": []})
    by_arm = {arm: [t for t in trials if t.outcome.arm == arm] for arm in (a, b)}
    counts = {arm: _counts(ts) for arm, ts in by_arm.items()}
    out.update(
        a=a, b=b, cluster_by=cluster, subgroup=subgroup,
        coverage={"compared": res.n_tasks, "planned": res.n_planned,
                  "fraction": res.coverage},
        cost={arm: arm_cost(ts) for arm, ts in by_arm.items()},
        latency={arm: arm_latency(ts) for arm, ts in by_arm.items()},
        integrity={arm: c["integrity"] for arm, c in counts.items()},
        interventions={arm: c["interventions"] for arm, c in counts.items()},
        triggered={arm: _triggered(ts) for arm, ts in by_arm.items()},
        pass_rate={arm: arm_pass_rate(data, arm, clusters, level,
                                      {r.task for r in res.per_task}) for arm in (a, b)},
        notes=notes + out["notes"],
    )
    if res.n_tasks < 10:
        out["notes"].append(f"only {res.n_tasks} task(s) compared: the interval is wide "
                            "because this few tasks carry little evidence; read the per-task "
                            "table")
    return out


def preference_section(summary: dict[str, Any], *, source: Path, a: str,
                       b: str) -> dict[str, Any]:
    """``exp compare``'s "judge preference" section from a ``judge pairwise`` summary: the
    per-task preference of B over A with its own interval, the position-bias rate with its
    Wilson interval, ties and invalid pairs, and the judge's calibration (or the word
    ``uncalibrated``). The summary must have judged these two arms of this run, in this
    orientation: a preference of another pair of arms beside this Δ would read as this one's."""
    where = str(Path(source).resolve())
    sa, sb = summary.get("a") or {}, summary.get("b") or {}
    if (sa.get("run"), sa.get("arm"), sb.get("run"), sb.get("arm")) != (where, a, where, b):
        swapped = (sa.get("run"), sa.get("arm"), sb.get("run"), sb.get("arm")) == (
            where, b, where, a)
        raise NotComparable(
            f"--preference judged {sa.get('arm')!r} ({sa.get('run')}) against {sb.get('arm')!r} "
            f"({sb.get('run')}), not --a {a!r} against --b {b!r} of {where}"
            + ("; swap --a and --b, or judge the pair the other way round" if swapped else ""))
    judge = summary.get("judge") or {}
    keys = ("preference", "ci", "se", "df", "level", "method", "n_tasks", "n_clusters", "pairs",
            "b_wins", "a_wins", "ties", "flipped", "invalid_pairs", "position_bias",
            "per_task", "pairs_planned", "pairs_pending", "invalid_orders", "show", "notes")
    out = {k: summary.get(k) for k in keys}
    out.update(skipped=len(summary.get("skipped") or []),
               judge={"path": judge.get("path"), "revision": judge.get("revision"),
                      "model": (judge.get("pin") or {}).get("model"),
                      "calibration": judge.get("calibration") or "uncalibrated"})
    return out


def preference_markdown(section: dict[str, Any]) -> list[str]:
    """The section as Markdown lines, for the text output of ``exp compare``."""
    judge = section["judge"]
    from assay.grading.judge.calibration import calibration_label

    cal = judge["calibration"]
    cal_text = calibration_label(cal if isinstance(cal, dict) else None)
    pref, ci = section["preference"], section["ci"]
    bias = section["position_bias"] or {}
    lines = ["", "## Judge preference", "",
             f"Judge `{judge.get('model')}` revision `{judge.get('revision')}`: {cal_text}.", ""]
    if pref is None:
        lines.append("No preference: no pair has a valid verdict in both orders.")
    else:
        ci_text = (f" [{ci[0]:+.2f}, {ci[1]:+.2f}] ({section['level']:.0%}, {section['method']})"
                   if ci else " (no interval)")
        lines.append(f"Preference of B over A (B wins − A wins per pair, per task, in [−1, 1]): "
                     f"**{pref:+.2f}**{ci_text} over {section['n_tasks']} task(s), "
                     f"{section['pairs']} pair(s): B {section['b_wins']}, A "
                     f"{section['a_wins']}, ties {section['ties']}.")
    if bias.get("rate") is not None:
        lo, hi = bias["ci"]
        lines.append("")
        lines.append(f"Position bias: {bias['flipped']} of {bias['pairs']} pair(s) changed "
                     f"verdict with the order ({bias['rate']:.0%}, [{lo:.0%}, {hi:.0%}] "
                     "Wilson); counted as ties.")
    extra = []
    if section.get("invalid_pairs"):
        extra.append(f"{section['invalid_pairs']} pair(s) invalid (count for nothing)")
    if section.get("pairs_pending"):
        extra.append(f"{section['pairs_pending']} pair(s) not yet judged in both orders")
    if section.get("skipped"):
        extra.append(f"{section['skipped']} pair(s) skipped (no graded trial on a side)")
    if extra:
        lines += ["", "; ".join(extra) + "."]
    rows = section.get("per_task") or []
    if rows:
        lines += ["", "| task | preference | pairs | B | A | ties | flipped | invalid |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            p = "—" if r["preference"] is None else f"{r['preference']:+.2f}"
            lines.append(f"| {r['task']} | {p} | {r['pairs']} | {r['b_wins']} | {r['a_wins']} "
                         f"| {r['ties']} | {r['flipped']} | {r['invalid']} |")
    return lines


def default_arms(data: OutcomeSet, bar: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """The baseline and the candidate when the command line does not name them: the bar's
    ``baseline``/``candidate`` if set, else the two arms in the experiment file's order (a
    noise floor's A/A copy left out)."""
    if bar and bar.get("baseline") and bar.get("candidate"):
        return str(bar["baseline"]), str(bar["candidate"])
    arms = [a for a in data.arms if not is_aa_arm(a)]  # a noise floor's copy is not compared
    if len(arms) == 2:
        return arms[0], arms[1]
    return None


__all__ = ["SUBGROUPS", "arm_cost", "arm_latency", "arm_pass_rate", "build_comparison",
           "default_arms", "preference_markdown", "preference_section"]
