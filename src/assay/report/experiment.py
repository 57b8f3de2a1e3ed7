"""``assay exp report``: a per-trial table and per-arm counts, from the run directory alone.

Built from the records on disk (``manifest.json`` for the plan, each attempt's ``trial.json``,
its newest grade and its ``model_calls.jsonl``), never from the runner or its database, so a
report can be rebuilt anywhere the directory is copied. A trial's result is the grade of the
attempt that was graded; attempts that ended in infrastructure errors or interruptions are
counted, never silently dropped. Cost and tokens add up every attempt of an arm, failures
included, and say when any call reported no usage (then they are lower bounds, never zeros).
Statistics across arms are ``assay exp compare``'s job.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_text, read_json_file
from assay.records.ledger import ledger_totals
from assay.report.holdout import holdout_line, holdout_summary

SCHEMA = "assay.experiment.report/1"


def _newest_grade(attempt_dir: Path) -> dict[str, Any] | None:
    grades = sorted((attempt_dir / "grades").glob("*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(grades):
        try:
            return read_json_file(path)
        except Exception:  # noqa: BLE001 - a grade that cannot be read is not a grade
            continue
    return None


def build_experiment_report(run_dir: Path) -> dict[str, Any]:
    manifest = read_json_file(run_dir / "manifest.json")
    identity = manifest["identity"]
    tasks = sorted(identity["tasks"])
    arms = sorted(identity["arms"])
    reps = int(identity["settings"].get("repetitions", 1))
    trials: list[dict[str, Any]] = []
    per_arm: dict[str, dict[str, Any]] = {
        a: {"planned": 0, "graded": 0, "accepted": 0, "failure_codes": Counter(),
            "attempts": 0, "infra_error_attempts": 0, "interrupted_attempts": 0,
            "calls": 0, "input": 0, "cached_input": 0, "output": 0, "reasoning": 0,
            "cost_usd": 0.0, "usage_missing_calls": 0, "unpriced_calls": 0}
        for a in arms}
    for task in tasks:
        for arm in arms:
            for rep in range(reps):
                row = _trial(run_dir, task, arm, rep, per_arm[arm])
                trials.append(row)
    arm_rows = {}
    for arm, acc in per_arm.items():
        planned = acc["planned"]
        attempts = acc["attempts"]
        cost_complete = acc["usage_missing_calls"] == 0 and acc["unpriced_calls"] == 0
        arm_rows[arm] = {
            "planned": planned, "graded": acc["graded"], "accepted": acc["accepted"],
            "coverage": acc["graded"] / planned if planned else None,
            "pass_rate_of_graded": acc["accepted"] / acc["graded"] if acc["graded"] else None,
            "failure_codes": dict(sorted(acc["failure_codes"].items())),
            "attempts": attempts, "infra_error_attempts": acc["infra_error_attempts"],
            "interrupted_attempts": acc["interrupted_attempts"],
            "infra_error_rate": acc["infra_error_attempts"] / attempts if attempts else None,
            "tokens": {k: acc[k] for k in ("input", "cached_input", "output", "reasoning")},
            "calls": acc["calls"], "usage_missing_calls": acc["usage_missing_calls"],
            "cost_usd": round(acc["cost_usd"], 6) if acc["calls"] else None,
            "cost_complete": cost_complete,
            "cost_note": None if cost_complete else "lower bound: some calls reported no usage "
                                                     "or had no price",
        }
    return {"schema": SCHEMA, "name": manifest.get("name"), "run_dir": str(run_dir),
            "arms": arm_rows, "trials": trials, "holdout": holdout_summary(run_dir),
            "manifest": {"identity_sha256": manifest.get("identity_sha256"),
                         "assay": manifest.get("assay"), "created_at": manifest.get("created_at")}}


def _trial(run_dir: Path, task: str, arm: str, rep: int, acc: dict[str, Any]) -> dict[str, Any]:
    acc["planned"] += 1
    base = run_dir / "trials" / task / arm / str(rep)
    attempts = sorted((p for p in base.glob("a*") if p.is_dir()),
                      key=lambda p: int(p.name[1:]) if p.name[1:].isdigit() else 0)
    row: dict[str, Any] = {"task": task, "arm": arm, "rep": rep, "attempts": [],
                           "state": "pending", "accepted": None, "failure_code": None,
                           "stage_seconds": None, "link": None}
    for a in attempts:
        acc["attempts"] += 1
        ledger = ledger_totals(a / "model_calls.jsonl")
        for k in ("calls", "input", "cached_input", "output", "reasoning", "cost_usd",
                  "usage_missing_calls", "unpriced_calls"):
            acc[k] += ledger[k]
        try:
            rec = read_json_file(a / "trial.json")
        except Exception:  # noqa: BLE001 - a torn record: the attempt is shown as unknown
            rec = {}
        grade = _newest_grade(a)
        status = rec.get("status", "unknown")
        if grade is None and status == "infra_error":
            acc["infra_error_attempts"] += 1
        elif grade is None and status in ("running", "unknown"):
            acc["interrupted_attempts"] += 1
        row["attempts"].append({"attempt": a.name, "status": status,
                                "error": rec.get("error"), "calls": ledger["calls"]})
        if grade is not None and grade.get("validity", {}).get("status") == "valid":
            row.update(state="graded", accepted=grade["accepted"],
                       failure_code=grade["failure_code"],
                       stage_seconds={s["name"]: s.get("seconds") for s in rec.get("stages", [])},
                       link=str(a.relative_to(run_dir)))
    if row["state"] == "graded":
        acc["graded"] += 1
        acc["accepted"] += bool(row["accepted"])
        acc["failure_codes"][row["failure_code"] or "accepted"] += 1
    elif attempts:
        row["state"] = "not graded"
    return row


def experiment_markdown(rep: dict[str, Any]) -> str:
    out = [f"# assay experiment report: {rep['name']}", "",
           *([holdout_line(rep["holdout"]), ""] if rep.get("holdout") else []),
           "Per arm (statistics across arms: `assay exp compare`).", "",
           "| arm | planned | graded | coverage | accepted | infra error rate | cost USD | "
           "tokens in/out | failure codes |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    for arm, a in rep["arms"].items():
        cost = "n/a" if a["cost_usd"] is None else f"{a['cost_usd']:.4f}" + (
            "" if a["cost_complete"] else " (lower bound)")
        toks = f"{a['tokens']['input']}/{a['tokens']['output']}" if a["calls"] else "n/a"
        codes = ", ".join(f"{k}: {v}" for k, v in a["failure_codes"].items()) or "none"
        out.append(f"| {arm} | {a['planned']} | {a['graded']} | {pct(a['coverage'])} | "
                   f"{a['accepted']} | {pct(a['infra_error_rate'])} | {cost} | {toks} | "
                   f"{codes} |")
    out += ["", "## Trials", "", "| task | arm | rep | state | verdict | attempts | record |",
            "|---|---|---:|---|---|---|---|"]
    for t in rep["trials"]:
        verdict = ("" if t["accepted"] is None else
                   "accepted" if t["accepted"] else f"rejected: {t['failure_code']}")
        atts = ", ".join(f"{a['attempt']} {a['status']}" for a in t["attempts"]) or "none"
        link = f"[{t['link']}]({t['link']}/trial.json)" if t["link"] else ""
        out.append(f"| {t['task']} | {t['arm']} | {t['rep']} | {t['state']} | {verdict} | "
                   f"{atts} | {link} |")
    return "\n".join(out) + "\n"


def write_experiment_report(run_dir: Path) -> dict[str, Any]:
    rep = build_experiment_report(run_dir)
    atomic_write_text(run_dir / "report.json", json.dumps(rep, indent=2) + "\n")
    atomic_write_text(run_dir / "report.md", experiment_markdown(rep))
    return rep


__all__ = ["build_experiment_report", "experiment_markdown", "write_experiment_report"]

