"""The wrong answers in ``report.md``: a table of the listed cases (or tasks), then each one with
its input, raw answers and reasons.

Every text from the run goes through ``markdown_text`` (code spans and fences the text cannot
close); the words around it are assay's. Long texts are cut for reading; report.json keeps more
and the run's rows keep all of it. A report written before the list existed says "n/a".
"""

from __future__ import annotations

from typing import Any

from assay.report.coding_cases import PATTERN_WORDS as TASK_WORDS
from assay.report.markdown_text import md_block, md_cell, md_code
from assay.report.narrow_cases import pattern_words, short_answer

#: cases (or tasks) shown one by one; the table and report.json list them all
MAX_DETAILED = 50
#: rows of the overview table
MAX_TABLE = 200
#: characters of an input, answer or code shown
SHOW_CHARS = 600
#: characters shown from the end of an output tail
SHOW_TAIL = 1200


def shown(cut: dict[str, Any], keep: int = SHOW_CHARS,
          tail: bool = False) -> tuple[str | None, str]:
    """(the text to show, a note saying how much of it that is, of the whole text)."""
    text, chars = cut.get("text"), cut.get("chars")
    if text is None:
        return None, "n/a"
    part = text[-keep:] if tail else text[:keep]
    if len(part) < (chars or 0):
        where = "last" if tail else "first"
        return part, f"{where} {len(part):,} of {chars:,} chars"
    return part, f"{chars:,} chars"


def _more(total: int, cap: int, what: str) -> list[str]:
    return [f"… and {total - cap} more {what} in report.json.", ""] if total > cap else []


def narrow_cases_markdown(rep: dict[str, Any]) -> list[str]:
    by_label = (rep.get("scorer") or {}).get("type", "label") == "label"
    noun = "label" if by_label else "answer"
    cases = rep.get("wrong_cases")
    out = ["", "## Wrong and invalid answers", ""]
    if cases is None:
        return out + ["n/a: this report was written before wrong answers were listed; "
                      "`assay report RUN_DIR` rebuilds it."]
    if not cases:
        return out + ["None: every answer was right the first time."]
    source = rep.get("inputs_source")
    out += [f"{len(cases)} case{'s' if len(cases) != 1 else ''}, most informative first (the "
            f"same wrong {noun} every time, then invalid every time, never right, right only "
            "sometimes, right only after the format retry, endpoint errors). Inputs from "
            + (md_code(source) if source else "n/a (this run holds no copy of its cases)")
            + ".", "",
            "| # | case | expected | answers (by repeat) | right | pattern |",
            "|---:|---|---|---|---:|---|"]
    for i, c in enumerate(cases[:MAX_TABLE], start=1):
        answers = ", ".join(short_answer(a) for a in c["answers"])
        expected = c["expected"] if len(c["expected"]) <= 80 else c["expected"][:79] + "…"
        out.append(f"| {i} | {md_cell(c['id'])} | {md_cell(expected)} | "
                   f"{md_cell(answers)} | {c['right']} of {c['repeats']} | "
                   f"{pattern_words(c['pattern'], by_label, c)} |")
    out.append("")
    out += _more(len(cases), MAX_TABLE, "cases")
    for i, c in enumerate(cases[:MAX_DETAILED], start=1):
        text, note = shown(c["input"])
        out += [f"### {i}. {md_code(c['id'])}: {pattern_words(c['pattern'], by_label, c)}", "",
                f"Expected {md_code(c['expected'])}. Input ({note}):", ""]
        out += md_block(text, empty="n/a") + [""]
        for a in c["answers"]:
            out.append(f"- repeat {a['repeat']}: **{a['verdict']}**, parsed "
                       f"{md_code(a['parsed'], 'no ' + noun)}: {md_code(a['reason'])}")
        out.append("")
        for a in c["answers"]:
            for k, raw in enumerate(a["answers"], start=1):
                text, note = shown(raw)
                out += [f"Repeat {a['repeat']}, answer {k} of {len(a['answers'])} ({note}):", ""]
                out += md_block(text, empty="no text") + [""]
    out += _more(len(cases), MAX_DETAILED, "cases in detail")
    return out


def no_failed_tasks_sentence(rep: dict[str, Any]) -> str:
    """What a coding report says when no task is listed as failed: "every sample has a
    verdict" only when that is so (no answer waiting for a regrade, no rubric answer waiting
    for a human), else what still waits. The terminal, report.md and report.html say it
    alike."""
    waiting = int((rep.get("rubric") or {}).get("ungraded") or 0)
    if rep.get("ungraded") or waiting:  # no verdict yet is not a verdict
        parts = ([f"{rep['ungraded']} answers not yet graded (assay regrade)"]
                 if rep.get("ungraded") else []) + (
            [f"{waiting} rubric answers wait for human grading (assay grade)"]
            if waiting else [])
        return "None among the graded samples; " + "; ".join(parts) + "."
    return "None: every graded sample passed and every sample has a verdict."


def coding_failures_markdown(rep: dict[str, Any], details: bool = True) -> list[str]:
    """The section; without ``details`` only its table (for a terminal, where neither pages
    of candidate code nor the escape sequences it may hold belong)."""
    tasks = rep.get("failed_tasks")
    out = ["", "## Failed samples", ""]
    if tasks is None:
        return out + ["n/a: this report was written before failed samples were listed; "
                      "`assay report RUN_DIR` rebuilds it."]
    if not tasks:
        return out + [no_failed_tasks_sentence(rep)]
    out += [f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}, those failing every time "
            "first.", "",
            "| # | task | type | passes | no verdict | pattern |", "|---:|---|---|---:|---:|---|"]
    for i, t in enumerate(tasks[:MAX_TABLE], start=1):
        out.append(f"| {i} | {md_cell(t['id'])} | {t['type'] or 'n/a'} | "
                   f"{t['passes']} of {t['samples']} | {t['infra_errors']} | "
                   f"{TASK_WORDS.get(t['pattern'], t['pattern'])} |")
    out.append("")
    out += _more(len(tasks), MAX_TABLE, "tasks")
    if not details:
        return out + ["Reasons, output tails and the code graded: report.md, report.html."]
    for i, t in enumerate(tasks[:MAX_DETAILED], start=1):
        out += [f"### {i}. {md_code(t['id'])} ({t['type'] or 'n/a'}): "
                f"{TASK_WORDS.get(t['pattern'], t['pattern'])}, {t['passes']} of "
                f"{t['samples']} passed", ""]
        for s in t["failed"]:
            out.append(f"- sample {s['sample']}: **{s['verdict']}** ({md_code(s['reason'])}): "
                       f"{md_code(s['explanation'])}")
            if s["failing_tests"]:
                out.append("  failing: " + ", ".join(md_code(n) for n in s["failing_tests"]))
        out.append("")
        for s in t["failed"]:
            text, note = shown(s["code"])
            if text is None or not text.strip():
                text, note = shown(s["raw"])
                label = "raw answer (no code extracted)"
            else:
                label = "code graded"
            out += [f"Sample {s['sample']}, {label} ({note}):", ""]
            out += md_block(text, empty="no text") + [""]
            for name in ("stderr_tail", "stdout_tail"):
                text, note = shown(s[name], SHOW_TAIL, tail=True)
                if text:
                    out += [f"Sample {s['sample']}, {name.split('_')[0]} ({note}):", ""]
                    out += md_block(text) + [""]
    out += _more(len(tasks), MAX_DETAILED, "tasks in detail")
    return out
