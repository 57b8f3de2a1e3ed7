"""A coding report as a person reads it: Markdown on disk (``report.md``) and on the terminal.

Kept apart from the figures (``report.coding``) so the wording of a table can change without
touching what was measured. Unknown figures print as "n/a", never as 0, so a table cannot
suggest a measurement that was never made.
"""

from __future__ import annotations

from typing import Any

from assay.report.cases_markdown import coding_failures_markdown

NOT_ISOLATED = ("NOT ISOLATED: candidate code ran without the sandbox (--sandbox none); "
                "treat these results and this machine accordingly.")


def _fmt(iv: dict[str, Any] | None) -> str:
    if not iv:
        return "n/a"
    lo, hi = iv["ci95"]
    return f"{100 * iv['mean']:.1f}% [{100 * lo:.1f}%, {100 * hi:.1f}%]"


def _latency(lat: dict[str, Any] | None) -> str:
    lat = lat or {}
    return " / ".join("n/a" if lat.get(k) is None else f"{lat[k]:,.0f}"
                      for k in ("p50", "p95", "max"))


def coding_headline(rep: dict[str, Any]) -> list[tuple[str, str]]:
    rub = rep["rubric"]
    rows = [
        ("tasks auto-graded", str(rep["auto_graded_tasks"])),
        ("samples per task", str(rep["samples_per_task"])),
        ("pass@1 (mean over samples, 95% CI by task)", _fmt(rep["pass_at_1"])),
        (f"pass^{rep['pass_all_k']} (every sample passes)", _fmt(rep["pass_all"])),
    ]
    for k, iv in rep["pass_at_k"].items():
        if k != "1":
            rows.append((f"pass@{k} (unbiased)", _fmt(iv)))
    rows += [
        ("tasks with mixed outcomes", f"{len(rep['mixed_tasks'])}"
         + (f" ({', '.join(rep['mixed_tasks'][:10])})" if rep["mixed_tasks"] else "")),
        ("failure reasons", ", ".join(f"{k}: {v}" for k, v in
                                      sorted(rep["failure_reasons"].items())) or "none"),
        ("infra errors (excluded)", str(rep["infra_errors"])),
        ("grade revision", (rep.get("grade_revision") or "none")
         + (f", {rep['ungraded']} answers not yet graded" if rep.get("ungraded") else "")),
        ("rubric answers graded", f"{rub['graded']} of {rub['answers']}"
         + (f", mean {rub['mean_score']:.2f} / 3" if rub["mean_score"] is not None else "")),
        ("served model", ", ".join(f"{k} ({v})" for k, v in rep["served_models"].items())
         or "n/a"),
        ("latency p50 / p95 / max (ms)", _latency(rep.get("latency_ms"))),
    ]
    if rep["missing_rows"]:
        rows.insert(0, ("not yet answered", f"{rep['missing_rows']} (resume with the same --out)"))
    return rows


def coding_markdown(rep: dict[str, Any], details: bool = True) -> str:
    """``report.md``; without ``details`` the failed samples are a table only (a terminal)."""
    out = [f"# assay coding report: {rep['suite']} × {rep['model']}", ""]
    if rep["not_isolated"]:
        out += [f"> **{NOT_ISOLATED}**", ""]
    out += [f"> **Warning:** {w}" for w in rep["warnings"]]
    out += ["| figure | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in coding_headline(rep)]
    out += ["", "## Per task", "", "| task | type | passes | failures |", "|---|---|---:|---|"]
    for t in rep["tasks"]:
        if t["type"] == "rubric":
            n = t["rubric_answers"]
            passes = f"{n} answer{'' if n == 1 else 's'} for human grading"
        else:
            passes = f"{t['passes']} of {t['samples']}" + (" (mixed)" if t["mixed"] else "")
        fails = "; ".join(t["failures"]) or ""
        if t["infra_errors"]:
            fails += f" {t['infra_errors']} infra errors"
        out.append(f"| {t['id']} | {t['type']} | {passes} | {fails} |")
    out += coding_failures_markdown(rep, details)
    out.append("")
    return "\n".join(out)
