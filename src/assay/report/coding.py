"""Figures for a coding run: per-task consistency first, suite means with task-clustered
intervals second.

A single best-of number hides a model that solves a task one time in three. So each task shows
k of n, the reasons of its failures, and whether its samples disagree; the suite figures are
means over tasks (each task weighs the same however many samples it has) with task-clustered
Wilson intervals (``stats.moderated.clustered_wilson``): a task counts once, with its rate over
its samples, and four tasks that all pass give a wide interval, never [100%, 100%].

This module computes the report dict (``report.json``) from the run's rows alone and draws
nothing: Markdown is ``coding_markdown``, HTML is ``html``, so every view shows the same figures.
The failed samples, listed one by one, are ``coding_cases``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from assay.records.coding import CodingManifest, graded_samples
from assay.records.layout import sample_key, standing_rows
from assay.records.manifest import read_run_manifest
from assay.records.report import CodingReport
from assay.report.coding_cases import failed_tasks
from assay.report.latency import latency_figures
from assay.stats import clustered_wilson, pass_at_k, pass_hat_k


def final_sample_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The row standing for each (task, sample)."""
    return standing_rows(rows, sample_key)


def _interval(values: list[float], samples: list[int] | None = None) -> dict[str, Any] | None:
    """Mean over tasks with its task-clustered Wilson interval. ``samples``: each task's graded
    samples when ``values`` are pass rates over them; else each value counts as one trial of
    its task (pass@k, pass^k, all-pass: one figure a task)."""
    if not values:
        return None
    mean, lo, hi, _ = clustered_wilson(values, samples or [1] * len(values))
    return {"mean": mean, "ci95": [lo, hi], "tasks": len(values)}


def task_table(finals: dict[tuple[str, int], dict[str, Any]],
               task_ids: list[str],
               grades: dict[tuple[str, int], dict[str, Any]] | None = None
               ) -> list[dict[str, Any]]:
    """One row per task; ``grades`` are the standing human rubric grades by (task, sample)."""
    from assay.grading.rubric import PASS_SCORE

    grades = grades or {}
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in task_ids}
    for (tid, _), row in sorted(finals.items()):
        by_task.setdefault(tid, []).append(row)
    table = []
    for tid, rows in by_task.items():
        graded = [r for r in rows if not r.get("error") and r.get("passed") is not None]
        kind = rows[0]["type"] if rows else None
        passes = sum(1 for r in graded if r["passed"])
        failures = [f"#{r['sample']}: {r['reason']}" for r in graded if not r["passed"]]
        rubric = [r for r in rows if r.get("type") == "rubric" and not r.get("error")]
        scores = [grades[key]["score"] for key in ((tid, int(r["sample"])) for r in rubric)
                  if key in grades]
        table.append({
            "id": tid, "type": kind, "samples": len(graded), "passes": passes,
            "pass_rate": passes / len(graded) if graded else None,
            "mixed": 0 < passes < len(graded),
            "failures": failures,
            "infra_errors": sum(1 for r in rows if r.get("error")),
            "rubric_answers": len(rubric),
            "rubric_graded": len(scores),
            "rubric_passes": sum(1 for s in scores if s >= PASS_SCORE),
            "rubric_mean_score": sum(scores) / len(scores) if scores else None,
        })
    return table


def rubric_summary(run_dir: Path, finals: dict[tuple[str, int], dict[str, Any]],
                   round_name: str | None = None) -> dict[str, Any]:
    """Unblinded rubric figures from the newest grade of every answer as of ``round_name``
    (default: the latest round); every round stays on disk and is listed."""
    from assay.grading.rubric import PASS_SCORE, grades_as_of, rubric_rounds

    answers = sorted((r for r in finals.values()
                      if r.get("type") == "rubric" and not r.get("error")),
                     key=lambda r: (str(r["id"]), int(r["sample"])))
    used, standing = grades_as_of(run_dir, round_name)
    rows: list[dict[str, Any]] = []
    for r in answers:
        g = standing.get((str(r["id"]), int(r["sample"])))
        score = None if g is None else int(g["score"])
        rows.append({"id": str(r["id"]), "sample": int(r["sample"]), "score": score,
                     "passed": None if score is None else score >= PASS_SCORE,
                     "round": None if g is None else g.get("revision"),
                     "grader": None if g is None else g.get("grader"),
                     "graded_at": None if g is None else g.get("graded_at"),
                     "note": None if g is None else (g.get("note") or None)})
    scores = [a["score"] for a in rows if a["score"] is not None]
    counted = Counter(a["round"] for a in rows if a["round"] is not None)
    rounds = [{"name": x["name"], "grader": x["grader"], "source": x["source"],
               "started_at": x["started_at"], "grades": x["rows"],
               "counted": counted.get(x["name"], 0)} for x in rubric_rounds(run_dir)]
    return {"answers": len(rows), "graded": len(scores), "ungraded": len(rows) - len(scores),
            "mean_score": sum(scores) / len(scores) if scores else None, "scale": "0-3",
            "pass_score": PASS_SCORE, "passed": sum(1 for s in scores if s >= PASS_SCORE),
            "round": used, "round_chosen": round_name is not None, "rounds": rounds,
            "grades": rows}


def build_coding_report(run_dir: Path, revision: str | None = None,
                        rubric_round: str | None = None) -> dict[str, Any]:
    """Figures from the answers, one grade revision (the newest unless ``revision``) and the
    human rubric grades as of one grading round (the latest unless ``rubric_round``);
    checked against :class:`CodingReport`."""
    from assay.grading.rubric import grades_as_of

    manifest = read_run_manifest(run_dir, CodingManifest)
    grade_revision, finals = graded_samples(run_dir, manifest, revision)
    samples = manifest["parameters"]["samples"]
    _, grades = grades_as_of(run_dir, rubric_round)
    tasks = task_table(finals, manifest["suite"]["task_ids"], grades)
    auto = [t for t in tasks if t["type"] in ("unit", "diff") and t["samples"]]
    n_min = min((t["samples"] for t in auto), default=0)
    pass_at: dict[str, Any] = {}
    pass_hat: dict[str, Any] = {}
    for k in range(1, n_min + 1):
        pass_at[str(k)] = _interval([pass_at_k(t["samples"], t["passes"], k) for t in auto])
        pass_hat[str(k)] = _interval([pass_hat_k(t["samples"], t["passes"], k) for t in auto])
    all_pass = [1.0 if t["passes"] == t["samples"] else 0.0 for t in auto]
    graded_rows = [r for r in finals.values() if not r.get("error") and r.get("passed") is not None]
    errors = [r for r in finals.values() if r.get("error")]
    return CodingReport.checked({
        "schema": CodingReport.schema_id(),
        "run_id": manifest["run_id"],
        "suite": manifest["suite"]["name"],
        "model": manifest["model"]["requested"],
        "not_isolated": bool(manifest.get("not_isolated")),
        "samples_per_task": samples,
        "expected_rows": manifest["suite"]["n_tasks"] * samples,
        "missing_rows": manifest["suite"]["n_tasks"] * samples - len(finals),
        "auto_graded_tasks": len(auto),
        "pass_at_1": _interval([t["pass_rate"] for t in auto], [t["samples"] for t in auto]),
        "pass_all": _interval(all_pass),
        "pass_all_k": n_min,
        "pass_at_k": pass_at,
        "pass_hat_k": pass_hat,
        "mixed_tasks": [t["id"] for t in auto if t["mixed"]],
        "failure_reasons": dict(Counter(r["reason"] for r in graded_rows if not r["passed"])),
        "infra_errors": len(errors),
        "grade_revision": grade_revision,
        "ungraded": sum(1 for r in finals.values() if r.get("reason") == "ungraded"),
        "tasks": tasks,
        "rubric": rubric_summary(run_dir, finals, rubric_round),
        "served_models": dict(Counter(r.get("served_model") or "(not reported)"
                                      for r in finals.values() if not r.get("error"))),
        "warnings": manifest.get("warnings", []),
        "started_at": manifest.get("started_at"),
        "ended_at": manifest.get("ended_at"),
        # every answered request, a grader error's too (its answer arrived in that time)
        "latency_ms": latency_figures([r["latency_ms"] for r in finals.values()
                                       if r.get("latency_ms") is not None]),
        "failed_tasks": failed_tasks(finals, manifest["suite"]["task_ids"]),
    }, run_dir / CodingReport.file)
