"""Comparing two coding runs of the same task file, task by task.

Samples are not paired across runs (sample 2 of A has nothing to do with sample 2 of B), tasks
are: so the unit of pairing and of clustering is the task, and each side contributes its
per-task pass rate. Rubric tasks are compared the same way on their human grades: each side's
mean 0-3 grade per task, over the tasks graded in both runs, each run's grades as of the grading
round asked for (the latest by default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.manifest import read_manifest
from assay.records.report import CodingComparison
from assay.report.coding import build_coding_report
from assay.report.compare_narrow import NotComparable
from assay.report.methods import method_footnote
from assay.stats import paired_bootstrap_diff


def _side(run: Path, manifest: dict[str, Any], rep: dict[str, Any]) -> dict[str, Any]:
    rub = rep["rubric"]
    return {"dir": str(run), "model": manifest["model"]["requested"],
            "grade_revision": rep["grade_revision"], "rubric_round": rub.get("round"),
            "rubric_answers": rub["answers"], "rubric_ungraded": rub["ungraded"]}


def _rubric_comparison(ra: dict[str, Any], rb: dict[str, Any], *, seed: int,
                       n_boot: int) -> dict[str, Any] | None:
    """Rubric tasks graded in both runs, paired by task; None when there is none."""
    ta = {t["id"]: t for t in ra["tasks"] if t.get("rubric_mean_score") is not None}
    tb = {t["id"]: t for t in rb["tasks"] if t.get("rubric_mean_score") is not None}
    ids = [t["id"] for t in ra["tasks"] if t["id"] in ta and t["id"] in tb]
    if not ids:
        return None
    a = [float(ta[i]["rubric_mean_score"]) for i in ids]
    b = [float(tb[i]["rubric_mean_score"]) for i in ids]
    diff, lo, hi = paired_bootstrap_diff(a, b, ids, n_boot=n_boot, seed=seed)
    return {
        "tasks": len(ids), "mean_score_a": sum(a) / len(a), "mean_score_b": sum(b) / len(b),
        "mean_score_diff_b_minus_a": diff, "diff_ci95": [lo, hi],
        "per_task": [{"id": i, "a": f"{ta[i]['rubric_graded']}/{ta[i]['rubric_answers']}",
                      "b": f"{tb[i]['rubric_graded']}/{tb[i]['rubric_answers']}",
                      "a_mean_score": float(ta[i]["rubric_mean_score"]),
                      "b_mean_score": float(tb[i]["rubric_mean_score"]),
                      "delta": float(tb[i]["rubric_mean_score"])
                      - float(ta[i]["rubric_mean_score"])} for i in ids],
    }


def compare_coding_runs(run_a: Path, run_b: Path, *, seed: int = 0, n_boot: int = 10000,
                        rubric_round: str | None = None) -> dict[str, Any]:
    """B − A on pass@1 and on the human rubric grades. ``rubric_round`` names a grading round
    (a revision made by one ``assay grade`` over both runs, or one run's): each run is read as
    of its newest round not newer than that one, and at least one run must have it."""
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    if ma["suite"]["tasks_sha256"] != mb["suite"]["tasks_sha256"]:
        raise NotComparable("the runs are not of the same task file (fingerprints "
                            f"{ma['suite']['tasks_sha256'][:12]} vs "
                            f"{mb['suite']['tasks_sha256'][:12]})")
    round_a, round_b = _rounds_for(run_a, run_b, rubric_round)
    ra = build_coding_report(run_a, rubric_round=round_a)
    rb = build_coding_report(run_b, rubric_round=round_b)
    ta = {t["id"]: t for t in ra["tasks"] if t["pass_rate"] is not None}
    tb = {t["id"]: t for t in rb["tasks"] if t["pass_rate"] is not None}
    ids = [t["id"] for t in ra["tasks"] if t["id"] in ta and t["id"] in tb]
    rubric = _rubric_comparison(ra, rb, seed=seed, n_boot=n_boot)
    if not ids and rubric is None:
        raise NotComparable("no auto-graded task has answers in both runs, and no rubric task "
                            "has a human grade in both (assay grade RUN_A RUN_B)")
    a = [ta[i]["pass_rate"] for i in ids]
    b = [tb[i]["pass_rate"] for i in ids]
    diff, lo, hi = (paired_bootstrap_diff(a, b, ids, n_boot=n_boot, seed=seed) if ids
                    else (None, None, None))
    per_task = [{"id": i, "a": f"{ta[i]['passes']}/{ta[i]['samples']}",
                 "b": f"{tb[i]['passes']}/{tb[i]['samples']}",
                 "delta": tb[i]["pass_rate"] - ta[i]["pass_rate"]} for i in ids]
    warnings = []
    if ma["parameters"] != mb["parameters"]:
        warnings.append(f"parameters differ: {ma['parameters']['samples']} vs "
                        f"{mb['parameters']['samples']} samples, temperature "
                        f"{ma['parameters']['temperature']} vs {mb['parameters']['temperature']}")
    if ra["not_isolated"] or rb["not_isolated"]:
        warnings.append("at least one run was NOT ISOLATED (--sandbox none)")
    for side, rep in (("A", ra), ("B", rb)):
        if rep["rubric"]["ungraded"]:
            warnings.append(f"{rep['rubric']['ungraded']} rubric answer(s) of {side} are not "
                            "graded yet: the rubric figures are over graded answers only")
    return CodingComparison.checked({
        "schema": CodingComparison.schema_id(),
        "run_a": _side(run_a, ma, ra),
        "run_b": _side(run_b, mb, rb),
        "tasks": len(ids),
        "pass_at_1_a": sum(a) / len(a) if ids else None,
        "pass_at_1_b": sum(b) / len(b) if ids else None,
        "pass_at_1_diff_b_minus_a": diff,
        "diff_ci95": [lo, hi] if ids else None,
        "interval": {"method": "wilson_mover", "clustered_by": "task"},
        "newly_failing": [i for i in ids if ta[i]["passes"] > 0 and tb[i]["passes"] == 0],
        "newly_passing": [i for i in ids if ta[i]["passes"] == 0 and tb[i]["passes"] > 0],
        "per_task": per_task,
        "warnings": warnings,
        "rubric": rubric,
    }, f"comparison of {run_a} and {run_b}")


def _rounds_for(run_a: Path, run_b: Path, wanted: str | None) -> tuple[str | None, str | None]:
    """The round each run is read as of: its newest round not newer than ``wanted``."""
    from assay.errors import GradingError
    from assay.grading.rubric import rubric_rounds

    if wanted is None:
        return None, None
    names = [[r["name"] for r in rubric_rounds(d)] for d in (run_a, run_b)]
    if not any(wanted in n for n in names):
        have = sorted(set(names[0]) | set(names[1]))[-10:]
        raise GradingError(f"no grading round {wanted!r} in either run; they have: "
                           f"{', '.join(have) or 'none (nothing graded yet)'}")
    picked = [max((x for x in n if x <= wanted), default=None) for n in names]
    return picked[0], picked[1]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def compare_coding_markdown(c: dict[str, Any]) -> str:
    ra, rb = c["run_a"], c["run_b"]
    lines = [f"# assay compare (coding): A = {ra['model']}, B = {rb['model']}",
             "", *[f"> **Warning:** {w}" for w in c["warnings"]], "",
             f"- tasks compared: {c['tasks']} (grade revisions: A "
             f"{ra.get('grade_revision')}, B {rb.get('grade_revision')})",
             f"- pass@1 A {_pct(c['pass_at_1_a'])}, B {_pct(c['pass_at_1_b'])}"]
    if c["diff_ci95"] is not None:
        lo, hi = c["diff_ci95"]
        lines.append(f"- difference B − A: {100 * c['pass_at_1_diff_b_minus_a']:+.1f} points, "
                     f"95% paired interval by task [{100 * lo:+.1f}, {100 * hi:+.1f}]¹")
    lines += [f"- newly failing in B (A solved it at least once, B never): "
              f"{', '.join(c['newly_failing']) or 'none'}",
              f"- newly passing in B: {', '.join(c['newly_passing']) or 'none'}"]
    if ra.get("rubric_answers") or rb.get("rubric_answers"):
        lines.append(f"- rubric grades as of round A {ra.get('rubric_round') or 'none'} "
                     f"({ra.get('rubric_ungraded', 0)} of {ra.get('rubric_answers', 0)} "
                     f"ungraded), B {rb.get('rubric_round') or 'none'} "
                     f"({rb.get('rubric_ungraded', 0)} of {rb.get('rubric_answers', 0)} "
                     "ungraded)")
    lines.append("")
    if c["per_task"]:
        lines += ["| task | A | B | change |", "|---|---:|---:|---:|"]
        lines += [f"| {t['id']} | {t['a']} | {t['b']} | {100 * t['delta']:+.0f} |"
                  for t in c["per_task"]]
        lines.append("")
    rub = c.get("rubric")
    if rub:
        lo, hi = rub["diff_ci95"]
        lines += [f"## Rubric grades (0-3, {rub['tasks']} tasks graded in both)", "",
                  f"- mean grade A {rub['mean_score_a']:.2f}, B {rub['mean_score_b']:.2f}; "
                  f"difference B − A {rub['mean_score_diff_b_minus_a']:+.2f}, 95% paired "
                  f"CI by task [{lo:+.2f}, {hi:+.2f}]", "",
                  "| task | A graded | B graded | A mean | B mean | change |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {t['id']} | {t['a']} | {t['b']} | {t['a_mean_score']:.2f} | "
                  f"{t['b_mean_score']:.2f} | {t['delta']:+.2f} |" for t in rub["per_task"]]
        lines.append("")
    if c["diff_ci95"] is not None:
        lines += [method_footnote(c["interval"]["method"]), ""]
    return "\n".join(lines)
