"""``assay exp report``: per arm, per trial, the A/B comparison and the verdict, from disk alone.

Built from the run directory's records through ``report.outcomes`` (the manifest for the plan
and the bar, each attempt's ``trial.json``, newest grade and ``model_calls.jsonl``), never from
the runner or its database, so a report can be rebuilt anywhere the directory is copied. A
trial's result is its graded attempt's grade; attempts that ended in infrastructure errors or
interruptions are counted, never silently dropped. Cost and tokens add up every attempt of an
arm, failures included, and say when any call reported no usage (lower bounds, never zeros).

The comparison is between the bar's baseline and candidate (or the two arms, in the file's
order); the verdict needs a bar frozen in the manifest whose hash still matches, because a
verdict against a bar edited afterwards would be a verdict against nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.errors import NotComparable, RecordError
from assay.records.experiment import REPORT_FILE, ExperimentReport
from assay.records.failures import infra_code
from assay.records.fork import FORKS, fork_totals
from assay.records.io import atomic_write_text, dumps_row, read_json_file
from assay.report.abcompare import (
    build_comparison,
    default_arms,
    preference_markdown,
    preference_section,
)
from assay.report.ci_outputs import md
from assay.report.conditions import conditions_markdown, run_conditions
from assay.report.experiment_html import write_experiment_html
from assay.report.holdout import holdout_line, holdout_summary, reused_banner
from assay.report.methods import if_it_fails, method_footnote
from assay.report.noise_floor import measure_noise_floor, noise_floor_arm, noise_floor_markdown
from assay.report.outcomes import (
    EVIDENCE_GAP,
    OutcomeSet,
    TrialOutcome,
    gap_note,
    load_run_outcomes,
)
from assay.report.render.numbers import NA, pct, pts
from assay.report.sequential import apply_looks, looks_markdown, sequential_section
from assay.report.trial_html import write_trial_pages
from assay.report.verdict import decide
from assay.suites.experiment import Bar, ExperimentSpec, bar_sha256, pairwise_arms

SCHEMA = "assay.experiment.report/2"
OUTCOMES_FILE = "outcomes.jsonl"
#: Where ``exp run`` puts an experiment's ``pairwise:`` check (``runner/pairwise.py``).
PAIRWISE_DIR = "pairwise"
_PAIRWISE_SUMMARY = "pairwise.json"
_PAIRWISE_ERROR = "pairwise_error.json"
_TOKENS = ("input", "cached_input", "output", "reasoning")


def frozen_bar(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The bar as frozen before the first trial, checked against its hash and the identity."""
    bar = manifest.get("identity", {}).get("settings", {}).get("bar")
    if bar is None:
        return None
    if "bar_sha256" in manifest and manifest["bar_sha256"] != bar_sha256(bar):
        raise RecordError(f"{run_dir / 'manifest.json'}: the bar does not match its frozen "
                          "hash (bar_sha256): the manifest was edited after the run started")
    return {**bar, "sha256": bar_sha256(bar)}


def _arm_row(trials: list[TrialOutcome]) -> dict[str, Any]:
    acc: dict[str, Any] = {"planned": len(trials), "graded": 0, "accepted": 0, "attempts": 0,
                           "infra_error_attempts": 0, "interrupted_attempts": 0,
                           "integrity_violations": 0, "interventions": 0, "calls": 0,
                           "usage_missing_calls": 0, "unpriced_calls": 0, "cost_usd": 0.0,
                           "torn_rows": 0, "evidence_gaps": 0}
    codes: Counter[str] = Counter()
    infra_codes: Counter[str] = Counter()
    silent = 0  # graded trials whose graded attempt made no model call
    tokens = dict.fromkeys(_TOKENS, 0)
    for t in trials:
        if t.outcome.passed is not None and not any(
                (a.ledger or {}).get("calls", 0) for a in t.attempts if a.status == "graded"):
            silent += 1
        for a in t.attempts:
            acc["attempts"] += 1
            if a.status == "infra_error":
                acc["infra_error_attempts"] += 1
                infra_codes[infra_code(a.error)] += 1
            elif a.status == "interrupted":
                acc["interrupted_attempts"] += 1
            elif a.status == EVIDENCE_GAP:
                acc["evidence_gaps"] += 1
            ledger = a.ledger or {}
            for k in ("calls", "usage_missing_calls", "unpriced_calls", "cost_usd",
                      "torn_rows"):
                acc[k] += ledger.get(k, 0)
            for k in _TOKENS:
                tokens[k] += ledger.get(k, 0)
        o = t.outcome
        if o.passed is None:
            continue
        acc["graded"] += 1
        acc["accepted"] += int(o.passed)
        acc["integrity_violations"] += int(o.is_integrity_violation())
        acc["interventions"] += int(bool(o.intervention))
        codes[o.failure_code or "accepted"] += 1
    planned, attempts = acc["planned"], acc["attempts"]
    complete = (acc["usage_missing_calls"] == 0 and acc["unpriced_calls"] == 0
                and acc["evidence_gaps"] == 0)
    return {
        "planned": planned, "graded": acc["graded"], "accepted": acc["accepted"],
        "coverage": acc["graded"] / planned if planned else None,
        "pass_rate_of_graded": acc["accepted"] / acc["graded"] if acc["graded"] else None,
        "failure_codes": dict(sorted(codes.items())),
        "attempts": attempts, "infra_error_attempts": acc["infra_error_attempts"],
        "interrupted_attempts": acc["interrupted_attempts"],
        "infra_error_rate": acc["infra_error_attempts"] / attempts if attempts else None,
        "infra_failure_codes": dict(sorted(infra_codes.items())),
        "graded_without_model_calls": silent,
        "integrity_violations": acc["integrity_violations"],
        "interventions": acc["interventions"],
        "tokens": tokens, "calls": acc["calls"], "usage_missing_calls": acc["usage_missing_calls"],
        "unpriced_calls": acc["unpriced_calls"],
        "cost_usd": round(acc["cost_usd"], 6) if acc["calls"] or acc["evidence_gaps"] else None,
        "cost_complete": complete,
        "torn_ledger_rows": acc["torn_rows"], "evidence_gaps": acc["evidence_gaps"],
        "cost_note": None if complete else _cost_note(acc),
    }


def _mark_unpriced(manifest: dict[str, Any], arms: dict[str, dict[str, Any]]) -> None:
    """An arm whose model has no entry in the price table has an unknown cost, never $0: its
    row says "no price for MODEL" where the cost would stand."""
    if "prices" not in manifest:
        return  # an outcomes file: no table to miss a model in
    for arm, row in arms.items():
        model = ((manifest.get("arms") or {}).get(arm) or {}).get("model")
        if model and model not in (manifest.get("prices") or {}):
            row["unpriced_model"] = model
            # a torn row or a lost attempt is a reason of its own, said beside the price
            lost = row.get("torn_ledger_rows") or row.get("evidence_gaps")
            row["cost_note"] = f"no price for {model}" + (
                f"; {row['cost_note']}" if lost and row.get("cost_note") else "")
            row["cost_complete"] = False
            if row.get("unpriced_calls", 0) >= row.get("calls", 0):
                row["cost_usd"] = None


def _silent_arms(manifest: dict[str, Any], arms: dict[str, dict[str, Any]],
                 pair: tuple[str, ...]) -> list[str]:
    """An arm with a model whose every graded trial made no model call was never tested (a
    wrong URL, a missing network, an agent that ignores its endpoint): named, and no verdict
    is drawn from it."""
    out = []
    for arm in pair:
        row, spec = arms.get(arm) or {}, (manifest.get("arms") or {}).get(arm) or {}
        graded, silent = row.get("graded", 0), row.get("graded_without_model_calls", 0)
        if spec.get("model") and graded and silent == graded:
            out.append(f"arm {arm} made no model calls in {silent} of {graded} trials: it has "
                       f"a model ({spec['model']}) but never asked it, so no verdict is drawn "
                       "from it")
    return out


def _cost_note(acc: dict[str, Any]) -> str:
    """Why an arm's cost is a lower bound, each reason with its count."""
    why = []
    torn = acc["torn_rows"]
    if torn:
        why.append(f"{torn} call{'s' if torn > 1 else ''} whose ledger row was cut short "
                   "(the runner was killed while writing it): usage and cost unknown")
    if acc["usage_missing_calls"] > torn:
        why.append(f"{acc['usage_missing_calls'] - torn} calls reported no usage")
    if acc["unpriced_calls"] > torn:
        why.append(f"{acc['unpriced_calls'] - torn} calls had no price")
    if acc["evidence_gaps"]:
        n = acc["evidence_gaps"]
        why.append(f"{n} attempt director{'y is' if n == 1 else 'ies are'} gone (evidence "
                   "gap): calls and cost unknown")
    return "lower bound: " + "; ".join(why)


def _trial_row(t: TrialOutcome) -> dict[str, Any]:
    o = t.outcome
    return {"task": o.task, "arm": o.arm, "rep": o.rep, "state": t.state,
            "accepted": o.passed, "failure_code": o.failure_code, "triggered": o.triggered,
            "attempts": [{"attempt": a.attempt, "status": a.status, "error": a.error,
                          "calls": (a.ledger or {}).get("calls", 0), "seconds": a.seconds,
                          "timed_out": a.timed_out} for a in t.attempts],
            "link": o.link,
            **({"judge": judge} if (judge := o.extra_field("judge")) else {}),
            **({"check_lines": checks} if (checks := o.extra_field("check_lines")) else {})}


def _judge_row(trials: list[TrialOutcome]) -> dict[str, Any] | None:
    """Per arm, the ``acceptance.judge`` checks of its graded trials (None when no task has
    one): outcomes, the mean score, whether the check could reject, each judge's calibration."""
    checks = [j for t in trials if t.outcome.passed is not None
              and (j := t.outcome.extra_field("judge"))]
    if not checks:
        return None
    scores = [j["score"] for j in checks if isinstance(j.get("score"), int | float)
              and not isinstance(j.get("score"), bool)]
    return {"checked": len(checks),
            **{s: sum(1 for j in checks if j.get("status") == s) for s in ("pass", "fail",
                                                                           "error")},
            "mean_score": sum(scores) / len(scores) if scores else None,
            "required": sorted({bool(j.get("required")) for j in checks}),
            "calibration": {str(j.get("revision")): j.get("calibration") for j in checks}}


def judge_preference(run_dir: Path, a: str, b: str) -> dict[str, Any] | None:
    """``<run>/pairwise/``'s judge preference of ``b`` over ``a`` (the ``exp compare
    --preference`` section), when that directory judged these two arms of this run; with an
    ``error`` key when the last session could not judge (the figures, if any, are then of the
    orders recorded before). None when there is nothing, or it judged other arms."""
    folder = Path(run_dir) / PAIRWISE_DIR
    summary_path, error_path = folder / _PAIRWISE_SUMMARY, folder / _PAIRWISE_ERROR
    error = read_json_file(error_path).get("error") if error_path.is_file() else None
    section: dict[str, Any] | None = None
    if summary_path.is_file():
        summary = read_json_file(summary_path)
        if summary.get("schema") != "assay.pairwise.summary/1":
            raise RecordError(f"{summary_path}: not a pairwise summary "
                              f"({summary.get('schema')!r})")
        try:
            # the arms named: the report's comparison may be of another pair or orientation
            section = {"a": a, "b": b, **preference_section(summary, source=run_dir, a=a, b=b)}
        except NotComparable:
            return None
    if error is not None:
        section = {**(section or {}), "error": error}
    return section


def build_experiment_report(run_dir: Path, *, data: OutcomeSet | None = None,
                            seed: int | None = None) -> dict[str, Any]:
    run_dir = Path(run_dir)
    data = data or load_run_outcomes(run_dir)
    manifest = data.manifest if data.kind != "run" or data.manifest else read_json_file(
        run_dir / "manifest.json")
    manifest = manifest or {"name": run_dir.name}
    bar = frozen_bar(run_dir, manifest)
    seed = int(manifest.get("seed", 0)) if seed is None else seed
    arms = {arm: _arm_row(data.arm_trials(arm)) for arm in data.arms}
    _mark_unpriced(manifest, arms)
    for arm in data.arms:
        if (judged := _judge_row(data.arm_trials(arm))) is not None:
            arms[arm]["judge"] = judged
    notes: list[str] = []
    comparison = verdict = None
    pair = default_arms(data, bar)
    if pair is None:
        notes.append(f"{len(data.arms)} arms and no bar naming baseline and candidate: run "
                     "`assay exp compare DIR --a ARM --b ARM`")
    else:
        try:
            comparison = build_comparison(data, a=pair[0], b=pair[1], seed=seed)
        except NotComparable as exc:
            notes.append(f"no comparison yet: {exc}")
        if comparison is not None and data.kind == "run":  # what the arms ran under
            comparison["conditions"] = run_conditions(run_dir, list(pair))
    nf_arm = noise_floor_arm(manifest) if data.kind == "run" else None
    noise = measure_noise_floor(data, nf_arm, seed=seed) if nf_arm else None
    if comparison is not None:
        for arm in pair or ():
            arms[arm]["pass_rate"] = comparison["pass_rate"][arm]["pass_rate"]
            arms[arm]["pass_rate_ci"] = comparison["pass_rate"][arm]["ci"]
        silent = _silent_arms(manifest, arms, pair or ())
        notes += silent
        if bar is not None and not silent:  # no verdict on an arm that never asked its model
            rule = Bar.model_validate({k: v for k, v in bar.items() if k != "sha256"})
            verdict = decide(rule, comparison, data, seed=seed,
                             noise_floor=noise).model_dump(mode="json")
            # conditions that did not match: said on the verdict, which stands as decided
            verdict["warnings"] = list((comparison.get("conditions") or {}).get("warnings", []))
    for arm_row in arms.values():
        arm_row.setdefault("pass_rate", None)
        arm_row.setdefault("pass_rate_ci", None)
    sequential = (sequential_section(run_dir, manifest, {a: arms[a] for a in pair or ()})
                  if data.kind == "run" else None)
    if sequential is not None and verdict is not None:  # report/sequential.py
        verdict = apply_looks(verdict, sequential)
    if data.evidence_gaps and comparison is None:  # else the comparison's notes say it
        notes.extend(data.notes[:1])
    if bar is None:
        notes.append("no bar in the experiment file: no verdict (a bar must be written before "
                     "the first trial)")
    preference = None
    if data.kind == "run":
        settings = (manifest.get("identity") or {}).get("settings") or {}
        pw_pair = (pairwise_arms(ExperimentSpec.model_validate(settings))
                   if settings.get("pairwise") else None) or pair
        preference = judge_preference(run_dir, *pw_pair) if pw_pair else None
    return {"schema": SCHEMA, "name": manifest.get("name"), "run_dir": str(run_dir),
            "arms": arms, "trials": [_trial_row(t) for t in data.trials],
            "comparison": comparison, "bar": bar, "verdict": verdict, "notes": notes,
            "evidence_gaps": data.evidence_gaps,
            "holdout": holdout_summary(run_dir) if data.kind == "run" else None,
            # the experiment's A/A pair (noise_floor: {arm: ...}), when it has one
            **({"noise_floor": noise} if noise is not None else {}),
            # a sequential bar's looks (runner/sequential.py, report/sequential.py)
            **({"sequential": sequential} if sequential is not None else {}),
            # a fork experiment's prefixes: their cost is apart from every arm's
            **({"fork": fork_totals(run_dir)} if data.kind == "run" and (run_dir / FORKS).is_dir()
               else {}),
            # an experiment's pairwise check, or a `judge pairwise --out RUN/pairwise`
            **({"judge_preference": preference} if preference is not None else {}),
            "manifest": {"identity_sha256": manifest.get("identity_sha256"),
                         "assay": manifest.get("assay"), "created_at": manifest.get("created_at"),
                         "bar_sha256": manifest.get("bar_sha256")}}


def _usd(x: float | None) -> str:
    return NA if x is None else f"${x:.4f}"


def verdict_markdown(rep: dict[str, Any]) -> list[str]:
    v, bar = rep.get("verdict"), rep.get("bar")
    noise = noise_floor_markdown(rep["noise_floor"]) if rep.get("noise_floor") else []
    if v is None:
        return ["**No verdict**: " + ("no bar in the experiment file." if bar is None else
                                      "no comparison could be made yet."), "", *noise]
    out = [f"**Verdict: {v['decision'].upper()}**", ""]
    cmp = rep.get("comparison")
    if noise and cmp:  # beside Δ: the difference the setup makes on its own
        ci = cmp["ci"]
        ci_s = "no interval" if ci is None else f"[{pts(ci[0])}, {pts(ci[1])}]"
        out += [f"Δ ({md(cmp['b'])} − {md(cmp['a'])}) = **{pts(cmp['delta'])}** {ci_s}", "",
                *noise]
    out += [f"- {md(r)}" for r in v["reasons"]]
    out += ["", "| check | want | observed | holds | if it fails |", "|---|---|---|---|---|"]
    for c in v["checks"]:
        holds = {True: "yes", False: "**no**", None: "unknown"}[c["ok"]]
        out.append(f"| {c['name']} | {md(c['want'])} | {md(c['observed'])} | {holds} | "
                   f"{if_it_fails(c['hard'])} |")
    if v.get("note"):
        out += ["", f"_{v['note']}._"]
    out += [""] + [f"**Warning**: {md(w)}." for w in v.get("warnings") or []]
    return out + [""]


def comparison_markdown(c: dict[str, Any]) -> list[str]:
    ci = c["ci"]
    ci_s = "no interval" if ci is None else f"[{pts(ci[0])}, {pts(ci[1])}]"
    out = [f"## {md(c['b'])} vs {md(c['a'])}", "",
           f"Δ pass rate (B − A, tasks weighted equally unless weights were fixed) = "
           f"**{pts(c['delta'])}**, {int(c['level'] * 100)}% interval {ci_s}¹ over "
           f"{c['n_tasks']} task(s); coverage {c['coverage']['compared']}/"
           f"{c['coverage']['planned']} planned tasks.", ""]
    by_task = c["cluster_by"] == "task"
    if c.get("mcnemar"):
        m = c["mcnemar"]
        out += [f"Exact McNemar: {m['b']} task(s) pass only in A, {m['c']} only in B, "
                f"p = {m['p_value']:.3g}.", ""]
    out += [f"- {md(n)}" for n in c["notes"]]
    out += ["", "| arm | pass rate | interval | cost per completed task | integrity "
            "violations | interventions | timeouts | runtime p50 / p90 |",
            "|---|---:|---|---:|---:|---:|---:|---|"]
    for arm in (c["a"], c["b"]):
        pr, cost, lat = c["pass_rate"][arm], c["cost"][arm], c["latency"][arm]
        pci = "n/a" if pr["ci"] is None else f"[{pct(pr['ci'][0])}, {pct(pr['ci'][1])}]"
        per = {"ok": _usd(cost["per_completed_usd"]),
               "lower_bound": f"≥ {_usd(cost['per_completed_usd'])} (lower bound)",
               "not_computable": "not computable (no accepted trial)",
               "unknown": "unknown"}[cost["status"]]
        p = lat["all"]

        def sec(name: str, p: dict[str, Any] = p) -> str:
            return "timed out" if name in p["censored"] else (
                "n/a" if p[name] is None else f"{p[name]:.1f}s")

        out.append(f"| {md(arm)} | {pct(pr['pass_rate'])} | {pci} | {per} | "
                   f"{c['integrity'][arm]} | {c['interventions'][arm]} | "
                   f"{lat['timeouts']}/{lat['attempts']} | {sec('p50')} / {sec('p90')} |")
    newly = [(k, v) for k, v in c["new_failures"].items()]
    out += ["", "New failures (pass in A, never in B): " + (
        "; ".join(f"{md(k)}: {', '.join(md(t) for t in v)}" for k, v in newly)
        if newly else "none"), ""]
    if c["left_out"]:
        out += ["Left out of Δ (no graded trial in an arm): " + ", ".join(
            f"{md(r['task'])} (missing {', '.join(r['missing_arms'])})"
            for r in c["left_out"]), ""]
    if by_task:  # each task its own cluster: the column would repeat the task
        out += ["| task | A passed | B passed | Δ |", "|---|---:|---:|---:|"]
    else:
        out += [f"| task | {md(c['cluster_by'])} | A passed | B passed | Δ |",
                "|---|---|---:|---:|---:|"]
    for r in c["per_task"]:
        cluster = "" if by_task else f" {md(r['cluster'])} |"
        out.append(f"| {md(r['task'])} |{cluster} {r['passed_a']}/"
                   f"{r['n_a']} | {r['passed_b']}/{r['n_b']} | {pts(r['diff'])} |")
    resampled = ("resampled by task" if by_task else
                 f"resampled by {c['cluster_by']}, {c['n_clusters']} group(s)")
    out += ["", method_footnote(c["method"]) + f" Tasks {resampled}."]
    if c.get("conditions"):
        out += conditions_markdown(c["conditions"])
    return out + [""]


def experiment_markdown(rep: dict[str, Any]) -> str:
    banner = reused_banner(rep.get("holdout"))
    out = [*([f"**{banner}**", ""] if banner else []),
           f"# assay experiment report: {md(rep['name'])}", "",
           *([holdout_line(rep["holdout"]), ""] if rep.get("holdout") else []),
           *([f"**{md(gap_note(rep['evidence_gaps']))}**", ""]
             if rep.get("evidence_gaps") else [])]
    out += verdict_markdown(rep)
    if rep.get("sequential"):
        out += looks_markdown(rep["sequential"])
    if rep.get("comparison"):
        out += comparison_markdown(rep["comparison"])
    out += [f"- {md(n)}" for n in rep.get("notes", [])]
    if rep.get("judge_preference"):
        out += pairwise_markdown(rep["judge_preference"])
    out += ["", "## Per arm", "",
            "| arm | planned | graded | coverage | accepted | infra error rate | cost USD | "
            "tokens in/out | failure codes |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for arm, a in rep["arms"].items():
        cost = "n/a" if a["cost_usd"] is None else f"{a['cost_usd']:.4f}" + (
            "" if a["cost_complete"] else " (lower bound)")
        if a.get("unpriced_model"):
            cost = a["cost_note"] + ("" if a["cost_usd"] is None else
                                     f" (priced calls: {a['cost_usd']:.4f})")
        toks = f"{a['tokens']['input']}/{a['tokens']['output']}" if a["calls"] else "n/a"
        codes = ", ".join(f"{k}: {v}" for k, v in a["failure_codes"].items()) or "none"
        if a.get("infra_failure_codes"):
            codes += "; attempts " + ", ".join(f"{k}: {v}"
                                               for k, v in a["infra_failure_codes"].items())
        out.append(f"| {md(arm)} | {a['planned']} | {a['graded']} | {pct(a['coverage'])} "
                   f"| {a['accepted']} | {pct(a['infra_error_rate'])} | {cost} | {toks} | "
                   f"{md(codes)} |")
    lower = [f"- {md(arm)}: cost is a {md(a['cost_note'])}" for arm, a in rep["arms"].items()
             if a.get("cost_note")]
    out += ["", *lower] if lower else []
    judged = {arm: a["judge"] for arm, a in rep["arms"].items() if a.get("judge")}
    if judged:
        out += ["", "## Judge check (acceptance.judge)", "",
                "| arm | checked | pass | fail | error | mean score | can reject | judge |",
                "|---|---:|---:|---:|---:|---:|---|---|"]
        for arm, j in judged.items():
            mean = "n/a" if j["mean_score"] is None else f"{j['mean_score']:.2f}"
            cal = ", ".join(f"{r} {c}" for r, c in j["calibration"].items())
            out.append(f"| {md(arm)} | {j['checked']} | {j['pass']} | {j['fail']} | "
                       f"{j['error']} | {mean} | {'yes' if True in j['required'] else 'no'} | "
                       f"{md(cal)} |")
    if rep.get("fork"):
        f = rep["fork"]
        cost = "n/a" if f["cost_usd"] is None else f"{f['cost_usd']:.4f}" + (
            "" if f["cost_complete"] else " (lower bound)")
        out += ["", f"Fork prefixes (shared by the arms, not in their costs): "
                    f"{f['prefix_attempts']} attempts, {f['frozen_states']} frozen states, "
                    f"{f['calls']} model calls, cost USD {cost}."]
    out += ["", "## Trials", "", "| task | arm | rep | state | verdict | attempts | record |",
            "|---|---|---:|---|---|---|---|"]
    for t in rep["trials"]:
        verdict = ("" if t["accepted"] is None else
                   "accepted" if t["accepted"] else f"rejected: {t['failure_code']}")
        if t.get("judge"):
            j = t["judge"]
            verdict += f" (judge: {j['status']}" + (
                f", {j['criterion']} {j['score']}" if j.get("score") is not None else "") + ")"
        atts = ", ".join(f"{a['attempt']} {a['status']}" for a in t["attempts"]) or "none"
        link = f"[{t['link']}]({t['link']}/trial.json)" if t["link"] else ""
        out.append(f"| {md(t['task'])} | {md(t['arm'])} | {t['rep']} | {t['state']} "
                   f"| {md(verdict)} | {md(atts)} | {link} |")
    rejected = [t for t in rep["trials"] if t["accepted"] is False and t.get("check_lines")]
    if rejected:
        out += ["", "### Checks of the rejected trials", "",
                "The task's own tests first; the canaries the verifier planted on a line of "
                "their own.", ""]
        for t in rejected:
            out.append(f"- {md(t['task'])} · {md(t['arm'])} · rep {t['rep']} "
                       f"({md(str(t['failure_code']))}):")
            for name, lines in t["check_lines"].items():
                out.append(f"  - {name}: " + "; ".join(md(x) for x in lines))
    return "\n".join(out) + "\n"


def pairwise_markdown(section: dict[str, Any]) -> list[str]:
    """The judge preference section, or why it is missing."""
    if "preference" not in section:
        return ["", "## Judge preference", "",
                f"Missing: the pairwise judging did not run: {md(section['error'])}", ""]
    lines = preference_markdown(section)
    lines[3:3] = [f"A = {md(section['a'])}, B = {md(section['b'])}.", ""]
    if section.get("error"):
        lines += ["", f"_The last session could not judge: {md(section['error'])}; the "
                      "figures are of the orders recorded before._", ""]
    return lines


def write_outcomes(run_dir: Path, data: OutcomeSet) -> Path:
    """``outcomes.jsonl``: the trial table as rows any tool (or ``exp compare``) can read."""
    path = run_dir / OUTCOMES_FILE
    atomic_write_text(path, "".join(dumps_row(t.outcome.to_json()) + "\n"
                                    for t in data.trials))
    return path


def write_experiment_report(run_dir: Path, *, data: OutcomeSet | None = None,
                            out: Path | None = None,
                            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """report.json, report.md, report.html and outcomes.jsonl into ``out`` (default: the run
    directory). ``progress`` is told each step (and each trial page) as it starts.
    ``data`` from another source (a Harbor job, an outcomes file) is reported the same way;
    such a source is never written into, so ``out`` is required then."""
    run_dir = Path(run_dir)
    data = data or load_run_outcomes(run_dir)
    if out is None and data.kind != "run":
        raise ValueError("write_experiment_report: out= is required for a source that is not "
                         "an assay run directory")
    dest = Path(out) if out is not None else run_dir
    dest.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _text: None)
    say(f"comparing {len(data.trials)} trials")
    rep = build_experiment_report(run_dir, data=data)
    ExperimentReport.read(rep, dest / REPORT_FILE)  # the record's shape (records/experiment.py)
    write_outcomes(dest, data)
    atomic_write_text(dest / REPORT_FILE, json.dumps(rep, indent=2) + "\n")
    atomic_write_text(dest / "report.md", experiment_markdown(rep))
    pages = (write_trial_pages(dest, rep, progress) if data.kind == "run" and dest == run_dir
             else None)
    say("report.html")
    write_experiment_html(dest, rep, pages)
    return rep


__all__ = ["OUTCOMES_FILE", "PAIRWISE_DIR", "build_experiment_report", "experiment_markdown",
           "frozen_bar", "judge_preference", "write_experiment_report", "write_outcomes"]
