"""A narrow-task report as a person reads it: Markdown on disk and the same tables on a terminal.

Unknown figures print as "n/a", never as 0, so a table cannot suggest a measurement that was
never made.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay.report.cases_markdown import narrow_cases_markdown
from assay.report.invalid_hint import invalid_hint
from assay.report.markdown_text import md_cell
from assay.report.narrow import INVALID_COLUMN
from assay.report.narrow_cases import pattern_words, short_answer
from assay.report.render.numbers import NA, RESUME_NOTE, ci, num, pct

#: wrong cases a terminal shows (report.md and report.html show more, report.json all)
TERMINAL_CASES = 10

def headline_rows(rep: dict[str, Any]) -> list[tuple[str, str]]:
    lat = rep["latency_ms"]
    usage = rep["usage"]
    tokens = num(usage["total_tokens"])
    if usage["incomplete"]:
        tokens += f" (incomplete: {usage['rows_missing_usage']} answers without usage)"
    rows = [
        ("cases × repeats answered", f"{rep['n']} of {rep['expected_rows']}"),
        ("correct", str(rep["correct"])),
        ("accuracy (95% Wilson CI)", f"{pct(rep['accuracy'])} {ci(rep['accuracy_ci95'])}"),
        ("invalid after retry", str(rep["invalid_remaining"])),
        ("invalid on first try", str(rep["invalid_first_try"])),
        ("format retries sent", str(rep["retried"])),
        ("infra errors (excluded)", str(rep["infra_errors"])),
        ("latency p50 / p95 / max (ms)",
         f"{num(lat['p50'])} / {num(lat['p95'])} / {num(lat['max'])}"),
        ("tokens (total)", tokens),
        ("served model", ", ".join(f"{k} ({v})" for k, v in rep["served_models"].items()) or NA),
    ]
    if rep["missing_rows"]:
        rows.insert(1, ("not yet answered", f"{rep['missing_rows']} ({RESUME_NOTE})"))
    if rep["agreement"]:
        ag = rep["agreement"]
        rows.append(("agreement across repeats", agreement_words(ag)))
    if rep["invalid_reasons"]:
        rows.append(("invalid reasons", ", ".join(f"{k}: {v}" for k, v in
                                                   sorted(rep["invalid_reasons"].items()))))
    return rows


def agreement_basis(ag: dict[str, Any]) -> str:
    """What the agreement rate rests on: the cases compared (two valid answers or more) and
    how many answers were invalid, so that a rate over few valid answers, or none, cannot read
    as stability."""
    compared = ag.get("cases_compared")
    if compared is None:  # a report from before invalid answers were left out
        return (f"{ag['consistent_cases']} of {ag['cases_with_all_repeats']} cases identical, "
                "invalid answers included")
    invalid = f"{ag['invalid_answers']} of {ag['answers']} answers invalid, left out"
    if not compared:
        return f"no case has two valid answers; {invalid}"
    return (f"{ag['consistent_cases']} of {compared} cases with two or more valid answers "
            f"identical; {invalid}")


def agreement_words(ag: dict[str, Any]) -> str:
    """The agreement figure and what it rests on, in one cell."""
    return f"{pct(ag['rate'])} ({agreement_basis(ag)})"


def by_label(rep: dict[str, Any]) -> bool:
    """Whether the run was scored by label (reports from before scorers were)."""
    return (rep.get("scorer") or {}).get("type", "label") == "label"


def scorer_words(rep: dict[str, Any]) -> str:
    """The scorer sentence every view shows."""
    info = rep.get("scorer")
    return info["description"] if info else "label (a report from before scorers)"


def field_rows(rep: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(field, correct of n, accuracy, interval) for every field of a json_fields run."""
    return [(path, f"{f['correct']} of {f['n']}", pct(f["accuracy"]), ci(f["accuracy_ci95"]))
            for path, f in (rep.get("per_field") or {}).items()]


def to_markdown(rep: dict[str, Any]) -> str:
    labels = rep["labels"]
    cols = [*labels, INVALID_COLUMN]
    out = [f"# assay report: {rep['suite']} × {rep['model']}", "",
           f"Run `{rep['run_id']}`, {rep['started_at']} → {rep['ended_at'] or 'not finished'}.",
           ""]
    for w in rep["warnings"]:
        out.append(f"> **Warning:** {w}")
    if rep["warnings"]:
        out.append("")
    out += ["| figure | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in headline_rows(rep)]
    out += ["", f"Scorer: {md_cell(scorer_words(rep))}."]
    if rep.get("per_field"):
        out += ["", "## Per field (95% Wilson intervals)", "",
                "| field | right | accuracy | 95% CI |", "|---|---:|---:|---|"]
        out += [f"| {md_cell(a)} | {b} | {c} | {d} |" for a, b, c, d in field_rows(rep)]
    if not by_label(rep):
        return _tail_markdown(rep, out)
    out += ["", "## Confusion matrix (rows: expected, columns: answered)", "",
            "| expected | " + " | ".join(cols) + " |",
            "|---|" + "---:|" * len(cols)]
    for e in labels:
        row = rep["confusion"].get(e, {})
        out.append(f"| {e} | " + " | ".join(str(row.get(c, 0)) for c in cols) + " |")
    out += ["", "## Per label", "", "| label | precision | recall | F1 | support |",
            "|---|---:|---:|---:|---:|"]
    for label, m in rep["per_label"].items():
        out.append(f"| {label} | {pct(m['precision'])} | {pct(m['recall'])} | "
                   f"{pct(m['f1'])} | {m['support']} |")
    return _tail_markdown(rep, out)


def _tail_markdown(rep: dict[str, Any], out: list[str]) -> str:
    """Infra errors, unstable cases, the wrong answers and the footer: every scorer's."""
    if rep["infra_error_ids"]:
        out += ["", "## Infra errors", "",
                "Cases without an answer (endpoint trouble, not wrong answers): "
                + ", ".join(f"`{i}`" for i in rep["infra_error_ids"][:50])]
    if rep["agreement"] and rep["agreement"]["unstable_cases"]:
        out += ["", "## Unstable across repeats", "",
                ", ".join(f"`{i}`" for i in rep["agreement"]["unstable_cases"][:50])]
    hint = invalid_hint(rep)
    if hint:
        out += ["", f"**Hint:** {hint}"]  # our words; the labels are the suite author's
    out += narrow_cases_markdown(rep)
    labels_from = f"Labels from {rep['labels_source']}. " if by_label(rep) else ""
    out += ["", f"{labels_from}Accuracy counts invalid answers as wrong "
            "and leaves infra errors out of the denominator.", ""]
    return "\n".join(out)


def print_report(rep: dict[str, Any], console: Console) -> None:
    for w in rep["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
    head = Table(title=f"{rep['suite']} × {rep['model']}", show_header=False, title_justify="left")
    head.add_column("figure", style="bold")
    head.add_column("value")
    for k, v in headline_rows(rep):
        head.add_row(k, v)
    console.print(head)
    console.print(Text(f"scorer: {scorer_words(rep)}"))
    if rep.get("per_field"):
        pf = Table(title="per field (95% Wilson CI)", title_justify="left")
        for name in ("field", "right", "accuracy", "95% CI"):
            pf.add_column(name, justify="left" if name == "field" else "right")
        for a, b, c, d in field_rows(rep):
            pf.add_row(Text(a), b, c, d)
        console.print(pf)
    if by_label(rep):
        _print_labels(rep, console)
    _print_cases(rep, console)
    hint = invalid_hint(rep)
    if hint:  # last, where a reader's eye ends: the fix for the most common invalid reason
        console.print(Text.assemble(("hint: ", "bold yellow"), hint))


def _print_labels(rep: dict[str, Any], console: Console) -> None:
    labels = rep["labels"]
    cols = [*labels, INVALID_COLUMN]
    conf = Table(title="confusion (rows expected, columns answered)", title_justify="left")
    conf.add_column("expected", style="bold")
    for c in cols:
        conf.add_column(c, justify="right")
    for e in labels:
        row = rep["confusion"].get(e, {})
        cells = []
        for c in cols:
            v = row.get(c, 0)
            cells.append(f"[green]{v}[/]" if c == e and v else
                         (f"[red]{v}[/]" if v and c != e else str(v)))
        conf.add_row(e, *cells)
    console.print(conf)
    pl = Table(title="per label", title_justify="left")
    for name in ("label", "precision", "recall", "F1", "support"):
        pl.add_column(name, justify="left" if name == "label" else "right")
    for label, m in rep["per_label"].items():
        pl.add_row(label, pct(m["precision"]), pct(m["recall"]), pct(m["f1"]), str(m["support"]))
    console.print(pl)


def _print_cases(rep: dict[str, Any], console: Console) -> None:
    cases = rep.get("wrong_cases") or []
    if cases:
        wt = Table(title=f"wrong and invalid answers ({len(cases)} cases, most informative "
                   "first; raw answers in report.md)", title_justify="left")
        for name in ("case", "expected", "answers", "pattern"):
            wt.add_column(name)
        for c in cases[:TERMINAL_CASES]:  # Text: ids and labels are data, not rich markup
            wt.add_row(Text(c["id"]), Text(c["expected"][:80]),
                       Text(", ".join(short_answer(a) for a in c["answers"])),
                       pattern_words(c["pattern"], by_label(rep), c))
        console.print(wt)
