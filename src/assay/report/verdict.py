"""``exp verdict``: accept, reject or inconclusive, from the bar written before the run.

The rule, applied in this order (every check is listed in the output, whatever the decision):

- **Hard requirements** (the bar's ``integrity_violations``, ``max_new_failures`` and
  ``max_cost_increase``, when set): integrity violations in the candidate arm at most the
  allowed number; tasks the baseline passes and the candidate never does at most
  ``max_new_failures``; the candidate's cost per completed task at most
  ``1 + max_cost_increase`` times the baseline's.
- **No regression**: the interval's lower bound above ``-max_regression``.
- **Improvement**: Δ at least ``hoped_improvement``.
- **Noise floor** (when the experiment measured one, ``noise_floor: {arm: ...}``): the A/A
  interval of that arm against its interleaved copy includes 0. When it excludes 0 the setup
  itself is unstable and the verdict says so; it is never an accept (the check is listed like
  the others, and an unmeasured floor is ``ok: null``).

**Reject** when a hard requirement fails, or when the interval's upper bound is below
``hoped_improvement`` (the hoped-for effect is ruled out). **Accept** when every check holds.
Otherwise **inconclusive**, with the number of tasks the power planner says would detect the
hoped improvement at 80% power (with the baseline's per-task rates and the same repetitions).
A check that cannot be decided (a cost that is not computable, no interval with one cluster) is
``ok: null`` and can only make the verdict inconclusive, never accept it.

Cost is compared with its completeness in mind: a lower-bound candidate cost above the allowed
increase is a certain failure (the true cost is only higher); a lower-bound baseline cost makes
the ratio undecidable.
"""

from __future__ import annotations

from typing import Any

from assay.errors import EXIT_BELOW_BAR, EXIT_INCONCLUSIVE, EXIT_OK
from assay.records.experiment import BarCheck, ExperimentVerdict
from assay.records.statuses import DECISIONS, Decision
from assay.report.noise_floor import NoiseFloorFigures
from assay.report.outcomes import OutcomeSet
from assay.stats.power import tasks_needed
from assay.suites.experiment import Bar

EXIT_CODES: dict[Decision, int] = {"accept": EXIT_OK, "reject": EXIT_BELOW_BAR,
                                   "inconclusive": EXIT_INCONCLUSIVE}
CLEAN_NOTE = "no violation observed in this batch is not proof there are none"


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.1f} pts" if pct else f"{x:g}"


def _cost_check(bar: Bar, cmp: dict[str, Any]) -> BarCheck | None:
    limit = bar.max_cost_increase
    if limit is None:
        return None
    ca, cb = cmp["cost"][cmp["a"]], cmp["cost"][cmp["b"]]
    want = f"cost per completed task at most +{100 * limit:.0f}% of the baseline's"
    pa, pb = ca["per_completed_usd"], cb["per_completed_usd"]
    if pa is None or pb is None or pa <= 0:
        why = (f"baseline {ca['status']}, candidate {cb['status']}"
               if pa is None or pb is None else "baseline cost is 0")
        return BarCheck(name="cost", hard=True, want=want,
                        observed=f"not computable ({why})", ok=None)
    rel = pb / pa - 1.0
    observed = (f"{100 * rel:+.1f}% (${pb:.4f} vs ${pa:.4f}"
                + (", candidate a lower bound" if cb["status"] == "lower_bound" else "")
                + (", baseline a lower bound" if ca["status"] == "lower_bound" else "") + ")")
    if rel > limit and ca["status"] == "ok":
        ok: bool | None = False  # a lower-bound candidate cost can only be higher still
    elif rel <= limit and ca["status"] == "ok" and cb["status"] == "ok":
        ok = True
    else:
        ok = None
    return BarCheck(name="cost", hard=True, want=want, observed=observed, ok=ok)


def _reps(data: OutcomeSet) -> int:
    per: dict[tuple[str, str], int] = {}
    for t in data.trials:
        key = (t.outcome.task, t.outcome.arm)
        per[key] = per.get(key, 0) + 1
    return max(per.values(), default=1)


def _noise_check(nf: NoiseFloorFigures) -> BarCheck:
    """The measured noise floor as a check: an A/A interval that excludes 0 (or none at all)
    can never let a change be accepted."""
    ci = nf.get("ci")
    observed = ("not measured: " + str(nf.get("why_unknown")) if nf.get("delta") is None else
                f"Δ A/A = {_fmt(nf['delta'])}" + ("" if ci is None else
                                                   f" [{_fmt(ci[0])}, {_fmt(ci[1])}]")
                + f", {len(nf['flipped'])} of {nf['n_tasks']} task(s) flipped")
    return BarCheck(name="noise_floor", hard=False,
                    want=f"the A/A interval ({nf['arm']} against {nf['copy']}) includes 0",
                    observed=observed, ok=nf.get("stable"))


def decide(bar: Bar, cmp: dict[str, Any], data: OutcomeSet, *,
           seed: int = 0, noise_floor: NoiseFloorFigures | None = None) -> ExperimentVerdict:
    """The verdict object (see the module docstring for the rule). ``noise_floor``: the
    experiment's measured A/A figures (``report/noise_floor.py``), when it has them."""
    b = cmp["b"]
    checks: list[BarCheck] = []
    allowed = bar.integrity_violations
    seen = int(cmp["integrity"][b])
    checks.append(BarCheck(name="integrity", hard=True,
                           want=f"at most {allowed} integrity violation(s) in {b}",
                           observed=str(seen), ok=seen <= allowed))
    if bar.max_new_failures is not None:
        newly = sum(len(v) for v in cmp["new_failures"].values())
        checks.append(BarCheck(name="new_failures", hard=True,
                               want=f"at most {bar.max_new_failures} task(s) newly failing",
                               observed=str(newly), ok=newly <= bar.max_new_failures))
    cost = _cost_check(bar, cmp)
    if cost is not None:
        checks.append(cost)
    ci = cmp["ci"]
    max_reg = float(bar.max_regression)
    hoped = float(bar.hoped_improvement)
    checks.append(BarCheck(name="no_regression", hard=False,
                           want=f"interval's lower bound above {_fmt(-max_reg)}",
                           observed="no interval" if ci is None else
                           f"[{_fmt(ci[0])}, {_fmt(ci[1])}] over {cmp['n_tasks']} task(s)",
                           ok=None if ci is None else ci[0] > -max_reg))
    checks.append(BarCheck(name="improvement", hard=False, want=f"Δ at least {_fmt(hoped)}",
                           observed=f"Δ = {_fmt(cmp['delta'])}", ok=cmp["delta"] >= hoped))

    if noise_floor is not None:
        checks.append(_noise_check(noise_floor))

    reasons: list[str] = []
    if noise_floor is not None and noise_floor.get("stable") is False:
        reasons.append(f"the setup itself is unstable: two interleaved copies of "
                       f"{noise_floor['arm']} differ by {_fmt(noise_floor['delta'])} and the "
                       "A/A interval excludes 0, so a difference between arms cannot be told "
                       "from the setup's own noise; find it (flaky tasks, shared caches or "
                       "state, a drifting model) before deciding")
    failed_hard = [c for c in checks if c.hard and c.ok is False]
    for c in failed_hard:
        reasons.append(f"hard requirement {c.name} failed: want {c.want}, observed "
                       f"{c.observed}")
    ruled_out = ci is not None and ci[1] < hoped
    if ruled_out:
        reasons.append(f"the hoped improvement is ruled out: the interval's upper bound "
                       f"{_fmt(ci[1])} is below {_fmt(hoped)}")
    decision: Decision
    if failed_hard or ruled_out:
        decision = "reject"
    elif all(c.ok is True for c in checks):
        decision = "accept"
        reasons.append(f"every requirement holds: Δ = {_fmt(cmp['delta'])} reaches "
                       f"{_fmt(hoped)} and the lower bound {_fmt(ci[0])} is above "
                       f"{_fmt(-max_reg)}")
    else:
        decision = "inconclusive"
        for c in checks:
            if c.ok is not True:
                reasons.append(f"{c.name} not shown: want {c.want}, observed {c.observed}")
    settle = None
    if decision == "inconclusive":
        settle = _tasks_to_settle(cmp, data, hoped, max_reg, seed)
        if settle is not None:
            what = (f"the hoped improvement of {_fmt(hoped)}" if hoped > 0 else
                    f"a change of {_fmt(max_reg)}")
            reasons.append(f"about {settle} tasks (× {_reps(data)} repetition(s)) would be "
                           f"needed to detect {what} at 80% power (assay exp plan)")
    cov = cmp["coverage"]
    if cov["fraction"] < 1.0:
        reasons.append(f"the estimate rests on {cov['compared']} of {cov['planned']} planned "
                       "tasks (the rest had no graded trial in one arm)")
    note = CLEAN_NOTE if seen == 0 else None
    return ExperimentVerdict(decision=decision, reasons=reasons, checks=checks,
                             tasks_to_settle=settle, note=note, exit_code=EXIT_CODES[decision])


def _tasks_to_settle(cmp: dict[str, Any], data: OutcomeSet, hoped: float, max_reg: float,
                     seed: int) -> int | None:
    effect = hoped if hoped > 0 else max_reg
    rates = [row["p_a"] for row in cmp["per_task"]]
    if effect <= 0 or not rates:
        return None
    return tasks_needed(effect, reps=_reps(data), p_a=rates, seed=seed, n_sims=1000,
                        n_max=2000)


__all__ = ["CLEAN_NOTE", "DECISIONS", "EXIT_CODES", "decide"]
