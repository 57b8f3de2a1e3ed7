"""``assay history DIR…``: every run under some directories, over time, with drift flagged.

Parse, build the history (``report/history_series.py``), print a table per group, and with
``--fail-on-drift`` exit :data:`~assay.errors.EXIT_DRIFT` when the newest run of a series
drifted or its served model changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from assay.cli.app import app, err, fail, out
from assay.errors import EXIT_DRIFT

if TYPE_CHECKING:
    from assay.api.history import Group, History, HistoryRow, Series


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _headline(row: HistoryRow) -> str:
    """The headline as one cell: its name, value, 95% interval and how many it rests on."""
    h = row.get("headline")
    if not h:
        return "headline n/a"
    text = f"{h.get('name') or 'headline'} {_pct(h.get('value'))}"
    ci = h.get("ci")
    if ci:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text + f" n={h.get('n')}"


def _drift(row: HistoryRow) -> str:
    """The paired difference from the run before, or nothing for a series' first run."""
    d = row.get("drift")
    if d is None:
        return ""
    if d.get("error"):
        return f"drift not paired: {escape(str(d['error']))}"
    lo, hi = d.get("ci") or (None, None)
    delta = d.get("delta")
    text = "n/a" if delta is None else f"{100 * delta:+.1f}"
    if lo is not None and hi is not None:
        text += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    text += " pts vs before"
    return ("[bold red]DRIFT " + text + "[/]") if d.get("flagged") else "Δ " + text


def _served(row: HistoryRow) -> str:
    served = ", ".join(row.get("served_models") or []) or "(not reported)"
    text = "served " + escape(served)
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
             f"invalid {_pct(row.get('invalid_rate'))}", f"infra {_pct(row.get('infra_rate'))}",
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
    """What a series is (runs that can be compared one after the other), as a head and cells
    for :func:`flow`: what its runs share, and why it began when it is not the group's
    first."""
    parts = series["runs"][0].get("comparable_parts") or {}
    head = f"  series {series['index'] + 1} of {len(group['series'])}, comparable runs:"
    cells = [f"same {k} {str(v)[:7]}" for k, v in parts.items() if v]
    if series["started_because"]:
        cells += ("began here: " + series["started_because"]).split()
    return escape(head), [escape(c) for c in cells]


def _served_words(change: dict[str, Any]) -> str:
    """A served-model change as a sentence: the name asked for, what served it before and
    after."""
    said = []
    for key, what in (("served_models", "served model"),
                      ("system_fingerprints", "system fingerprint")):
        pair = change.get(key)
        if pair:
            said.append(f"{what} {', '.join(pair['before'] or [])} → "
                        f"{', '.join(pair['after'] or [])}")
    return f"{change.get('requested')!r}: " + "; ".join(said)


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
                cells = [_headline(r), _served(r), _drift(r)]
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
    threshold = h["drift_threshold"]
    rule = (f"a paired 95% interval that excludes zero by more than {100 * threshold:g} pts"
            if threshold else "a paired 95% interval that excludes zero")
    out.print(f"drift ({rule}): {len(h['drift_flags'])} of {pairs} consecutive pair(s)",
              highlight=False, soft_wrap=True)
    changes = h["served_model_changes"]
    if not changes:
        out.print("served model: no change under the same name", highlight=False)
    for c in changes:
        out.print(f"[bold yellow]served model changed[/] under {escape(_served_words(c))} "
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
