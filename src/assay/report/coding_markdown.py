"""A coding report as a person reads it: Markdown on disk (``report.md``) and on the terminal.

Kept apart from the figures (``report.coding``) so the wording of a table can change without
touching what was measured. Unknown figures print as "n/a", never as 0, so a table cannot
suggest a measurement that was never made.
"""

from __future__ import annotations

from typing import Any

from assay.report.cases_markdown import coding_failures_markdown
from assay.report.markdown_text import md_cell
from assay.report.render.numbers import RESUME_NOTE

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


def rubric_round_words(rub: dict[str, Any]) -> str:
    """Which grading round counted, as a sentence part: ``round R (latest)``."""
    if not rub.get("round"):
        return ("no grading round yet" if not rub.get("graded")
                else "an unnamed round (a report written before rounds were named)")
    how = "chosen with --rubric-round" if rub.get("round_chosen") else "latest"
    later = len([r for r in rub.get("rounds") or [] if r["name"] > rub["round"]])
    return (f"round {rub['round']} ({how}"
            + (f"; {later} newer round{'' if later == 1 else 's'} not counted" if later else "")
            + ")")


def rubric_line(rub: dict[str, Any]) -> str:
    """Graded of all, ungraded, passes, mean, and the round that counted."""
    if not rub["answers"]:
        return "none (no rubric task)"
    text = f"{rub['graded']} of {rub['answers']}, {rub['ungraded']} ungraded"
    if rub["mean_score"] is not None:
        text += (f"; {rub.get('passed', 0)} scored ≥ {rub.get('pass_score', 2)}, "
                 f"mean {rub['mean_score']:.2f} / 3")
    return text + f"; {rubric_round_words(rub)}"


def _rubric_cell(t: dict[str, Any]) -> str:
    n, g = t["rubric_answers"], t.get("rubric_graded", 0)
    if not g:
        return f"{n} answer{'' if n == 1 else 's'} for human grading"
    text = (f"{t.get('rubric_passes', 0)} of {g} graded pass (score ≥ 2), "
            f"mean {t['rubric_mean_score']:.2f} / 3")
    return text + (f"; {n - g} ungraded" if n > g else "")


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
        ("rubric answers graded", rubric_line(rub)),
        ("served model", ", ".join(f"{k} ({v})" for k, v in rep["served_models"].items())
         or "n/a"),
        ("latency p50 / p95 / max (ms)", _latency(rep.get("latency_ms"))),
    ]
    if rep["missing_rows"]:
        rows.insert(0, ("not yet answered", f"{rep['missing_rows']} ({RESUME_NOTE})"))
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
            passes = _rubric_cell(t)
        else:
            passes = f"{t['passes']} of {t['samples']}" + (" (mixed)" if t["mixed"] else "")
        fails = "; ".join(t["failures"]) or ""
        if t["infra_errors"]:
            fails += f" {t['infra_errors']} infra errors"
        out.append(f"| {t['id']} | {t['type']} | {passes} | {fails} |")
    if details:  # a terminal has the headline's count; report.md lists every answer
        out += rubric_grades_markdown(rep["rubric"])
    out += coding_failures_markdown(rep, details)
    out.append("")
    return "\n".join(out)


def rubric_grades_markdown(rub: dict[str, Any]) -> list[str]:
    """Each rubric answer with its standing grade, and the rounds on disk."""
    if not rub["answers"] or "grades" not in rub:
        return []
    out = ["", "## Rubric grades", "",
           f"Human grades on the 0-3 scale; an answer scoring ≥ {rub.get('pass_score', 2)} "
           f"passes. Grades as of {rubric_round_words(rub)}; "
           f"{rub['ungraded']} answer{'' if rub['ungraded'] == 1 else 's'} still ungraded.", "",
           "| task | sample | score | round | grader | note |", "|---|---:|---:|---|---|---|"]
    for a in rub.get("grades") or []:
        if a["score"] is None:
            out.append(f"| {a['id']} | {a['sample']} | ungraded |  |  |  |")
            continue
        note, who = (a.get("note") or "")[:200], a.get("grader") or ""
        out.append(f"| {a['id']} | {a['sample']} | {a['score']} | {a['round']} | "
                   f"{md_cell(who) if who else ''} | {md_cell(note) if note else ''} |")
    rounds = rub.get("rounds") or []
    if rounds:
        out += ["", "| grading round | grader | source | grades | counted |",
                "|---|---|---|---:|---:|"]
        out += [f"| {r['name']} | {md_cell(r.get('grader') or '?')} | {r.get('source') or ''} | "
                f"{r['grades']} | {r['counted']} |" for r in rounds]
    return out
