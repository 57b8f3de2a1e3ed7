"""``assay history DIR…``: every run under some directories, over time, with drift flagged.

Parse, build the history (``report/history_series.py``), print a table per group, and with
``--fail-on-drift`` exit :data:`~assay.errors.EXIT_DRIFT` when the newest run of a series
drifted or its served model changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.text import Text

from assay.api.history import (
    drift_rule,
    drift_text,
    headline_text,
    pct,
    series_caption,
    served_text,
    served_words,
)
from assay.cli.app import app, err, fail, out
from assay.errors import EXIT_DRIFT

if TYPE_CHECKING:
    from assay.api.history import Group, History, HistoryRow, Series


def _drift(row: HistoryRow) -> str:
    """The paired difference from the run before (red and DRIFT when flagged)."""
    text = drift_text(row)
    d = row.get("drift")
    if not text or d is None or d.get("error"):
        return escape(text)
    return ("[bold red]DRIFT " + escape(text) + "[/]") if d.get("flagged") else "Δ " + text


def _served(row: HistoryRow) -> str:
    text = escape(served_text(row))
    if row.get("served_change"):
        return "[bold yellow]" + text + " (CHANGED)[/]"
    return text


def _cost(row: HistoryRow) -> str:
    if row.get("cost_usd") is not None:
        return f"cost ${row['cost_usd']:.4f}" + (" or more" if row.get("cost_note") else "")
    if row.get("tokens") is not None:
        return f"{row['tokens']} tokens"
    return "cost unknown"


def _wide_cells(row: HistoryRow) -> list[str]:
    """What ``--wide`` adds: the start time, rates, cost, fingerprints and what changed."""
    fps = " ".join(f"{k}:{v[:7]}" for k, v in (row.get("fingerprints") or {}).items() if v)
    cells = [f"started {escape(str(row.get('started_at') or '?'))}",
             f"invalid {pct(row.get('invalid_rate'))}", f"infra {pct(row.get('infra_rate'))}",
             _cost(row), f"asked {escape(str(row.get('model') or '(no model)'))}"]
    if fps:
        cells.append(escape(fps))
    if row.get("changed"):
        cells.append("changed: " + escape(", ".join(row["changed"])))
    return cells


def flow(first: str, cells: list[str], width: int, indent: int = 6) -> list[str]:
    """``first`` and ``cells`` (rich markup) on as few lines of ``width`` as they fit, two
    spaces apart, each cell whole: a line breaks between cells, never inside one, so a run
    name, a number with its unit or a digest is never split (a cell wider than the line gets
    a line of its own, printed unwrapped: a log keeps it greppable)."""
    lines = [first]
    size = Text.from_markup(first).cell_len
    for cell in (c for c in cells if c):
        n = Text.from_markup(cell).cell_len
        if size + 2 + n <= width:
            lines[-1] += "  " + cell
            size += 2 + n
        else:
            lines.append(" " * indent + cell)
            size = indent + n
    return lines


def _series_caption(group: Group, series: Series) -> tuple[str, list[str]]:
    """What a series is, as a head and cells for :func:`flow` (why it began, a word a cell:
    a long reason wraps between words)."""
    head, cells = series_caption(group, series)
    if series["started_because"]:
        cells = cells[:-1] + cells[-1].split()
    return escape("  " + head), [escape(c) for c in cells]


def print_history(h: History, *, wide: bool = False) -> None:
    """A block per group, a caption per series, a run per line (more lines only when the
    cells do not fit the console's width; a cell is never split)."""
    width = out.width
    pairs = 0
    for g in h["groups"]:
        noun = "run" if g["runs"] == 1 else "runs"
        out.print(f"[bold]{escape(g['suite'])} · {escape(g['who'])}[/] ({g['kind']}, "
                  f"{g['runs']} {noun})", highlight=False, soft_wrap=True)
        for s in g["series"]:
            head, cells = _series_caption(g, s)
            for line in flow(head, cells, width, indent=4):
                out.print(line, highlight=False, soft_wrap=True)
            for r in s["runs"]:
                pairs += r.get("drift") is not None
                cells = [headline_text(r), _served(r), _drift(r)]
                if wide:
                    cells += _wide_cells(r)
                for line in flow("    " + escape(Path(r["dir"]).name), cells, width):
                    out.print(line, highlight=False, soft_wrap=True)
    for r in h["unreadable"]:
        out.print(f"[yellow]unreadable:[/] {escape(r['dir'])}: {escape(str(r['problem']))}",
                  highlight=False, soft_wrap=True)
    for r in h.get("without_answers") or []:
        out.print(f"left out, no answer recorded: {escape(r['dir'])}", highlight=False,
                  soft_wrap=True)
    if not h["groups"]:
        out.print("no run with an answer found", highlight=False)
        return
    rule = drift_rule(h["drift_threshold"])
    out.print(f"drift ({rule}): {len(h['drift_flags'])} of {pairs} consecutive pair(s)",
              highlight=False, soft_wrap=True)
    changes = h["served_model_changes"]
    if not changes:
        out.print("served model: no change under the same name", highlight=False)
    for c in changes:
        out.print(f"[bold yellow]served model changed[/] under {escape(served_words(c))} "
                  f"(first in {escape(Path(c['dir']).name)})", highlight=False, soft_wrap=True)


@app.command()
def history(
    dirs: Annotated[list[Path], typer.Argument(metavar="DIR...", help="Run directories, or "
                                               "folders holding them (searched recursively).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON: every "
                                          "figure of every run.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Also show each run's start time, "
                                       "invalid and infra rates, cost, fingerprints and what "
                                       "changed.")] = False,
    html: Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Also write a "
                                              "one-file HTML page with a trend plot per "
                                              "group.")] = None,
    drift_threshold: Annotated[float, typer.Option(
        "--drift-threshold", min=0, max=1, help="Flag a pair of runs when the paired 95% "
        "interval excludes zero by more than this (a fraction: 0.05 is 5 points); recorded "
        "in the JSON.")] = 0.0,
    fail_on_drift: Annotated[bool, typer.Option(
        "--fail-on-drift", help=f"Exit {EXIT_DRIFT} when the newest run of a series drifted "
        "from the run before it, or its served model changed under the same name.")] = False,
) -> None:
    """Every run under DIR..., by suite and model, oldest first, with drift.

    Narrow, coding and experiment runs, grouped by suite and model or arm, in time order: the
    headline with its interval, the served model, and the drift between consecutive
    comparable runs (--wide: more). A run with no answer is left out and named. Exit 0, 2 bad
    input, 5 drift with --fail-on-drift."""
    from assay.api.history import build_history

    if not dirs:
        raise fail("give at least one directory")
    h = build_history(list(dirs), threshold=drift_threshold)
    if as_json:
        print(json.dumps(h, indent=2, sort_keys=False))
    else:
        print_history(h, wide=wide)
    if html is not None:
        from assay.api.history import write_history_html

        try:
            write_history_html(html, h)
        except OSError as exc:
            raise fail(f"--html {html}: cannot be written: {exc.strerror or exc}") from None
        err.print(f"history page: {html}", highlight=False)
    if fail_on_drift and h["latest_alarms"]:
        err.print(f"[bold red]drift:[/] {len(h['latest_alarms'])} series' newest run drifted "
                  "or changed served model: " + escape(", ".join(h["latest_alarms"])),
                  highlight=False)
        raise typer.Exit(EXIT_DRIFT)
