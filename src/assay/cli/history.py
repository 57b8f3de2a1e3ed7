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
from rich.table import Table

from assay.cli.app import app, err, fail, out
from assay.errors import EXIT_DRIFT

if TYPE_CHECKING:
    from assay.api.history import History, HistoryRow


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _headline(row: HistoryRow) -> str:
    h = row.get("headline")
    ci = h["ci"] if h else None
    text = _pct(h["value"] if h else None)
    if ci:
        text += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return text + f" n={h['n'] if h else None}"


def _drift(row: HistoryRow) -> str:
    d = row.get("drift")
    if d is None:
        return ""
    if d.get("error"):
        return f"not paired: {d['error']}"
    lo, hi = d.get("ci") or (None, None)
    delta = d.get("delta")
    text = "n/a pts" if delta is None else f"{100 * delta:+.1f} pts"
    if lo is not None and hi is not None:
        text += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    return ("[bold red]DRIFT " + text + "[/]") if d.get("flagged") else text


def _served(row: HistoryRow) -> str:
    served = ", ".join(row.get("served_models") or []) or "(not reported)"
    text = f"{row.get('model') or '(no model)'} → {served}"
    if row.get("served_change"):
        text = "[bold yellow]" + escape(text) + " (CHANGED)[/]"
    else:
        text = escape(text)
    return text


def _cost(row: HistoryRow) -> str:
    if row.get("cost_usd") is not None:
        return f"${row['cost_usd']:.4f}" + (" ≥" if row.get("cost_note") else "")
    if row.get("tokens") is not None:
        return f"{row['tokens']} tok"
    return "unknown"


def print_history(h: History) -> None:
    for g in h["groups"]:
        title = f"{g['kind']} · {g['suite']} · {g['who']}  ({g['runs']} runs)"
        for s in g["series"]:
            caption = (f"series {s['index'] + 1}" + (f": {s['started_because']}"
                                                     if s["started_because"] else ""))
            table = Table(title=escape(title), caption=escape(caption), show_lines=False)
            for col in ("started (UTC)", "run", "headline [95% CI]", "invalid", "infra",
                        "cost", "model asked → served", "fingerprints", "changed",
                        "drift vs before"):
                table.add_column(col, overflow="fold")
            for r in s["runs"]:
                fps = " ".join(f"{k}:{v[:7]}" for k, v in (r.get("fingerprints") or {}).items()
                               if v)
                table.add_row(escape(str(r.get("started_at") or "?")),
                              escape(Path(r["dir"]).name), _headline(r),
                              _pct(r.get("invalid_rate")), _pct(r.get("infra_rate")),
                              _cost(r), _served(r), escape(fps),
                              escape(", ".join(r.get("changed") or [])) or "", _drift(r))
            out.print(table)
    for r in h["unreadable"]:
        out.print(f"[yellow]unreadable:[/] {escape(r['dir'])}: {escape(str(r['problem']))}")
    out.print(f"drift threshold {h['drift_threshold']:g}: {len(h['drift_flags'])} drift "
              f"flag(s), {len(h['served_model_changes'])} served-model change(s)",
              highlight=False)


@app.command()
def history(
    dirs: Annotated[list[Path], typer.Argument(metavar="DIR...", help="Run directories, or "
                                               "folders holding them (searched recursively).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")]
    = False,
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
    """Every run (narrow, coding, experiment) under DIR..., grouped by suite and model or arm,
    in time order, with what changed and drift between consecutive comparable runs.
    Exit 0, 2 bad input, 5 drift with --fail-on-drift."""
    from assay.api.history import build_history

    if not dirs:
        raise fail("give at least one directory")
    h = build_history(list(dirs), threshold=drift_threshold)
    if as_json:
        print(json.dumps(h, indent=2, sort_keys=False))
    else:
        print_history(h)
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
