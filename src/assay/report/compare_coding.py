"""Comparing two coding runs of the same task file, task by task.

Samples are not paired across runs (sample 2 of A has nothing to do with sample 2 of B), tasks
are: so the unit of pairing and of clustering is the task, and each side contributes its
per-task pass rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.manifest import read_manifest
from assay.records.report import CodingComparison
from assay.report.coding import build_coding_report
from assay.report.compare_narrow import NotComparable
from assay.stats import paired_bootstrap_diff


def compare_coding_runs(run_a: Path, run_b: Path, *, seed: int = 0,
                        n_boot: int = 10000) -> dict[str, Any]:
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    if ma["suite"]["tasks_sha256"] != mb["suite"]["tasks_sha256"]:
        raise NotComparable("the runs are not of the same task file (fingerprints "
                            f"{ma['suite']['tasks_sha256'][:12]} vs "
                            f"{mb['suite']['tasks_sha256'][:12]})")
    ra, rb = build_coding_report(run_a), build_coding_report(run_b)
    ta = {t["id"]: t for t in ra["tasks"] if t["pass_rate"] is not None}
    tb = {t["id"]: t for t in rb["tasks"] if t["pass_rate"] is not None}
    ids = [t["id"] for t in ra["tasks"] if t["id"] in ta and t["id"] in tb]
    if not ids:
        raise NotComparable("no auto-graded task has answers in both runs")
    a = [ta[i]["pass_rate"] for i in ids]
    b = [tb[i]["pass_rate"] for i in ids]
    diff, lo, hi = paired_bootstrap_diff(a, b, ids, n_boot=n_boot, seed=seed)
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
    return CodingComparison.checked({
        "schema": CodingComparison.schema_id(),
        "run_a": {"dir": str(run_a), "model": ma["model"]["requested"],
                  "grade_revision": ra["grade_revision"]},
        "run_b": {"dir": str(run_b), "model": mb["model"]["requested"],
                  "grade_revision": rb["grade_revision"]},
        "tasks": len(ids),
        "pass_at_1_a": sum(a) / len(a),
        "pass_at_1_b": sum(b) / len(b),
        "pass_at_1_diff_b_minus_a": diff,
        "diff_ci95": [lo, hi],
        "interval": {"method": "wilson_mover", "clustered_by": "task"},
        "newly_failing": [i for i in ids if ta[i]["passes"] > 0 and tb[i]["passes"] == 0],
        "newly_passing": [i for i in ids if ta[i]["passes"] == 0 and tb[i]["passes"] > 0],
        "per_task": per_task,
        "warnings": warnings,
    }, f"comparison of {run_a} and {run_b}")


def compare_coding_markdown(c: dict[str, Any]) -> str:
    lo, hi = c["diff_ci95"]
    lines = [f"# assay compare (coding): A = {c['run_a']['model']}, B = {c['run_b']['model']}",
             "", *[f"> **Warning:** {w}" for w in c["warnings"]], "",
             f"- tasks compared: {c['tasks']} (grade revisions: A "
             f"{c['run_a'].get('grade_revision')}, B {c['run_b'].get('grade_revision')})",
             f"- pass@1 A {100 * c['pass_at_1_a']:.1f}%, B {100 * c['pass_at_1_b']:.1f}%",
             f"- difference B − A: {100 * c['pass_at_1_diff_b_minus_a']:+.1f} points, 95% paired "
             f"CI by task [{100 * lo:+.1f}, {100 * hi:+.1f}] ({c['interval']['method']})",
             f"- newly failing in B (A solved it at least once, B never): "
             f"{', '.join(c['newly_failing']) or 'none'}",
             f"- newly passing in B: {', '.join(c['newly_passing']) or 'none'}", "",
             "| task | A | B | change |", "|---|---:|---:|---:|"]
    for t in c["per_task"]:
        lines.append(f"| {t['id']} | {t['a']} | {t['b']} | {100 * t['delta']:+.0f} |")
    lines.append("")
    return "\n".join(lines)
