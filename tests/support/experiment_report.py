"""A hand-written experiment report dict (schema ``assay.experiment.report/2``, the shape in
the lead's REPORT_SHAPE notes) whose every figure is worked out by hand below, for the tests of
the renderers (HTML page, JUnit XML, step summary), which read nothing else.

Two arms, ``base`` (A) and ``cand`` (B), five tasks, two repetitions each:

| task       | family | base (A)           | cand (B)                         | p_a | p_b | diff |
|------------|--------|--------------------|----------------------------------|-----|-----|------|
| XSS        | XFAM   | fail, fail (tests) | pass, pass                       | 0   | 1   | +1   |
| fmt-money  | money  | pass, pass         | pass, pass                       | 1   | 1   | 0    |
| parse-date | dates  | pass, fail (tests) | pass, pass                       | .5  | 1   | +.5  |
| slow-io    | money  | pass, fail (tests) | not graded (3 infra attempts)    | left out        |
| tz-shift   | dates  | pass, pass         | fail, fail (agent_timeout, 600s) | 1   | 0   | -1   |

Δ = (1 + 0 + .5 - 1) / 4 = 0.125 over the 4 compared tasks, clustered by family (3 clusters:
XFAM {XSS}, money {fmt-money}, dates {parse-date, tz-shift}). The t interval on cluster sums
(weights 1): S = (1, 0, -.5), W = (1, 1, 2), residuals S - WΔ = (.875, -.125, -.75), squares
sum 1.34375; var = G/(G-1) × 1.34375 / 4² = .125977, se = .354932; t(.975, 2) = 4.302653;
ci = [-1.402148, 1.652148] (cluster_t, df 2). Coverage 4 of 5 tasks = 80%.
base: 6 of 10 graded accepted, 60%, Wilson 95% [31.3%, 83.2%]; cand: 6 of 8, 75%,
Wilson [40.9%, 92.9%], coverage 8/10; 11 attempts of which 3 infra errors: 27.3%.
Cost: base $1.20 complete / 6 accepted = $0.2000; cand $0.90 with 2 calls missing usage /
6 accepted = at least $0.1500 (lower bound).
Runtimes (percentiles by nearest rank over finished attempts; timeouts counted apart):
base all 12.0 / 45.0 / 50.3 s, accepted 8.8 / 20.0 / 20.0 s; cand all 9.5 / 16.0 / 16.0 s,
accepted 10.1 / 16.0 / 16.0 s, 2 timeouts of 11 attempts (18.2%), one attempt runtime unknown.
New failures: tz-shift (dates). Holdout looked at 2 times, allowed 1: reused.
"""

from __future__ import annotations

import copy
from typing import Any

XSS = "<img src=x onerror=alert(1)>"
XFAM = "<b>fam</b>"
TASKS = [XSS, "fmt-money", "parse-date", "slow-io", "tz-shift"]
FAMILY = {XSS: XFAM, "fmt-money": "money", "parse-date": "dates", "slow-io": "money",
          "tz-shift": "dates"}
DELTA = 0.125
CI = [-1.402148156003407, 1.652148156003407]

# (accepted, failure_code, seconds, timed_out) per repetition; None: not graded
_BASE = {
    XSS: [(False, "tests_failed", 45.0, False), (False, "tests_failed", 50.3, False)],
    "fmt-money": [(True, None, 7.7, False), (True, None, 8.8, False)],
    "parse-date": [(True, None, 12.0, False), (False, "tests_failed", 30.5, False)],
    "slow-io": [(True, None, 20.0, False), (False, "tests_failed", 35.0, False)],
    "tz-shift": [(True, None, 8.2, False), (True, None, 9.1, False)],
}
_CAND = {
    XSS: [(True, None, 14.2, False), (True, None, 16.0, False)],
    "fmt-money": [(True, None, 9.0, False), (True, None, 9.5, False)],
    "parse-date": [(True, None, 10.1, False), (True, None, 11.4, False)],
    "slow-io": None,
    "tz-shift": [(False, "agent_timeout", 600.0, True), (False, "agent_timeout", 600.0, True)],
}
# slow-io in cand: rep 0 had two infra-error attempts, rep 1 one whose runtime is unknown
_CAND_INFRA = {0: [("a0", 1.2), ("a1", 0.9)], 1: [("a0", None)]}


def _link(task: str, arm: str, rep: int, attempt: str = "a0") -> str:
    return f"trials/{task}/{arm}/{rep}/{attempt}"


def _trials() -> list[dict[str, Any]]:
    out = []
    for task in TASKS:
        for arm, plan in (("base", _BASE), ("cand", _CAND)):
            outcomes = plan[task]
            for rep in (0, 1):
                if outcomes is None:
                    atts = [{"attempt": a, "status": "infra_error",
                             "error": "sandbox failed: <bwrap> exit 1", "calls": 0,
                             "seconds": s, "timed_out": False} for a, s in _CAND_INFRA[rep]]
                    out.append({"task": task, "arm": arm, "rep": rep, "state": "not graded",
                                "accepted": None, "failure_code": None, "triggered": None,
                                "attempts": atts, "link": None})
                    continue
                ok, code, secs, killed = outcomes[rep]
                out.append({"task": task, "arm": arm, "rep": rep, "state": "graded",
                            "accepted": ok, "failure_code": code, "triggered": None,
                            "attempts": [{"attempt": "a0", "status": "finished", "error": None,
                                          "calls": 4, "seconds": secs, "timed_out": killed}],
                            "link": _link(task, arm, rep)})
    return out


def _per_task() -> list[dict[str, Any]]:
    rows = []
    for task in TASKS:
        if _CAND[task] is None:
            continue
        pa = sum(o[0] for o in _BASE[task])
        pb = sum(o[0] for o in _CAND[task])
        rows.append({"task": task, "cluster": FAMILY[task], "weight": 1.0,
                     "n_a": 2, "passed_a": pa, "p_a": pa / 2,
                     "n_b": 2, "passed_b": pb, "p_b": pb / 2, "diff": (pb - pa) / 2,
                     "links": {"a": [_link(task, "base", r) for r in (0, 1)],
                               "b": [_link(task, "cand", r) for r in (0, 1)]}})
    return rows


def _seconds(plan: dict[str, Any], infra: bool) -> tuple[list[float | None], list[bool]]:
    secs: list[float | None] = []
    killed: list[bool] = []
    for task in TASKS:
        if plan[task] is None:
            for rep in (0, 1):
                for _, s in _CAND_INFRA[rep] if infra else []:
                    secs.append(s)
                    killed.append(False)
            continue
        for _, _, s, k in plan[task]:
            secs.append(s)
            killed.append(k)
    return secs, killed


def experiment_report() -> dict[str, Any]:
    """A fresh copy (tests change it freely)."""
    base_s, base_k = _seconds(_BASE, False)
    cand_s, cand_k = _seconds(_CAND, True)
    rep = {
        "schema": "assay.experiment.report/2",
        "name": "retry-prompt vs baseline",
        "run_dir": "runs/exp-1",
        "arms": {
            "base": {"planned": 10, "graded": 10, "accepted": 6, "coverage": 1.0,
                     "pass_rate_of_graded": 0.6,
                     "pass_rate_ci": [0.3126737697336583, 0.8318196702937637],
                     "failure_codes": {"accepted": 6, "tests_failed": 4},
                     "attempts": 10, "infra_error_attempts": 0, "interrupted_attempts": 0,
                     "infra_error_rate": 0.0, "integrity_violations": 0, "interventions": 0,
                     "tokens": {"input": 120000, "cached_input": 0, "output": 30000,
                                "reasoning": 0},
                     "calls": 40, "usage_missing_calls": 0, "cost_usd": 1.2,
                     "cost_complete": True, "cost_note": None},
            "cand": {"planned": 10, "graded": 8, "accepted": 6, "coverage": 0.8,
                     "pass_rate_of_graded": 0.75,
                     "pass_rate_ci": [0.409275430310169, 0.928520787247891],
                     "failure_codes": {"accepted": 6, "agent_timeout": 2},
                     "attempts": 11, "infra_error_attempts": 3, "interrupted_attempts": 0,
                     "infra_error_rate": 3 / 11, "integrity_violations": 0, "interventions": 1,
                     "tokens": {"input": 90000, "cached_input": 0, "output": 20000,
                                "reasoning": 0},
                     "calls": 33, "usage_missing_calls": 2, "cost_usd": 0.9,
                     "cost_complete": False,
                     "cost_note": "lower bound: some calls reported no usage"},
        },
        "trials": _trials(),
        "comparison": {
            "a": "base", "b": "cand", "delta": DELTA, "ci": list(CI), "method": "cluster_t",
            "level": 0.95, "se": 0.3549317716125171, "df": 2, "n_tasks": 4, "n_clusters": 3,
            "cluster_by": "family", "per_task": _per_task(),
            "left_out": [{"task": "slow-io", "cluster": "money", "missing_arms": ["cand"]}],
            "new_failures": {"dates": ["tz-shift"]},
            "mcnemar": None,
            "coverage": {"compared": 4, "planned": 5, "fraction": 0.8},
            "cost": {"base": {"total_usd": 1.2, "complete": True, "accepted": 6,
                              "per_completed_usd": 0.2, "status": "ok"},
                     "cand": {"total_usd": 0.9, "complete": False, "accepted": 6,
                              "per_completed_usd": 0.15, "status": "lower_bound"}},
            "latency": {
                "base": {"attempts": 10, "timeouts": 0, "timeout_rate": 0.0,
                         "all": {"p50": 12.0, "p90": 45.0, "max": 50.3},
                         "accepted": {"p50": 8.8, "p90": 20.0, "max": 20.0},
                         "seconds": base_s, "timed_out": base_k},
                "cand": {"attempts": 11, "timeouts": 2, "timeout_rate": 2 / 11,
                         "all": {"p50": 9.5, "p90": 16.0, "max": 16.0},
                         "accepted": {"p50": 10.1, "p90": 16.0, "max": 16.0},
                         "seconds": cand_s, "timed_out": cand_k},
            },
            "integrity": {"base": 0, "cand": 0}, "interventions": {"base": 0, "cand": 1},
            "triggered": {"base": {"triggered": 0, "not_triggered": 0, "unknown": 10},
                          "cand": {"triggered": 0, "not_triggered": 0, "unknown": 8}},
            "notes": ["1 task left out of Δ: no graded trial in cand"],
        },
        "bar": {"primary": "pass_rate", "hoped_improvement": 0.05, "max_regression": 0.02,
                "max_cost_increase": 0.2, "integrity_violations": 0, "max_new_failures": 2,
                "sha256": "ab" * 32},
        "verdict": {
            "decision": "inconclusive",
            "reasons": ["the interval's lower bound -140.2 pts is below -2.0 pts",
                        "Δ +12.5 pts reaches the hoped +5.0 pts but the interval is wide"],
            "checks": [
                {"name": "integrity violations in cand", "hard": True, "want": "0",
                 "observed": "0", "ok": True},
                {"name": "lower bound above -max_regression", "hard": False,
                 "want": "> -2.0 pts", "observed": "-140.2 pts", "ok": False},
                {"name": "Δ reaches hoped improvement", "hard": False, "want": ">= +5.0 pts",
                 "observed": "+12.5 pts", "ok": True},
                {"name": "cost per completed task", "hard": False, "want": "<= +20%",
                 "observed": "-25% (lower bound)", "ok": None},
                {"name": "new failures", "hard": False, "want": "<= 2", "observed": "1",
                 "ok": True},
            ],
            "tasks_to_settle": 40,
            "note": "no violation observed in this batch is not proof there are none",
        },
        "holdout": {"tasks": 5, "looks": 2, "max_looks": 1, "reused": True,
                    "ledger": "bundles/.assay/holdout-ledger.jsonl",
                    "by": [{"when": "2026-11-30T10:00:00+00:00", "who": "ana@ci-1",
                            "experiment": "first-try", "arms": ["base", "old"]},
                           {"when": "2026-12-01T09:00:00+00:00", "who": "ana@ci-1",
                            "experiment": "retry-prompt vs baseline",
                            "arms": ["base", "cand"]}]},
        "manifest": {"identity_sha256": "cd" * 32, "assay": "0.1.0",
                     "created_at": "2026-12-01T09:00:00+00:00"},
    }
    return copy.deepcopy(rep)


__all__ = ["CI", "DELTA", "FAMILY", "TASKS", "XFAM", "XSS", "experiment_report"]
