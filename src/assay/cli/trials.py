"""``assay trial show TRIAL_DIR``: one agent trial, opened in the terminal
(``api.records.trial_view`` reads it; this module only prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from assay.cli.app import fail, out
from assay.cli.tasks import trial_app
from assay.errors import EXIT_BAD_INPUT

#: how each kind of line of a tool call is coloured (report/tool_calls.call_lines)
CALL_STYLES = {"tool": "cyan", "cmd": "bold", "add": "green", "del": "red", "hunk": "cyan",
               "head": "bold"}


def _n(value: object, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


@trial_app.command("show")
def trial_show(
    trial_dir: Annotated[Path, typer.Argument(metavar="TRIAL_DIR", help="An attempt folder "
                                              "(trials/TASK/ARM/REP/aN) or its trial folder "
                                              "(the last attempt is shown).")],
) -> None:
    """Open one trial: the instruction, the change against the starting tree, each check, the
    step-by-step transcript, the ledger totals and the timings."""
    from assay.api.records import trial_view
    from assay.api.render import call_lines, call_view, without_echo

    if not trial_dir.is_dir():
        raise fail(f"{trial_dir}: not a directory (pass an attempt folder of a run, "
                   "trials/TASK/ARM/REP/aN)", EXIT_BAD_INPUT)
    try:
        view = trial_view(trial_dir)
    except FileNotFoundError as exc:
        raise fail(str(exc), EXIT_BAD_INPUT) from None
    t = view.trial
    out.print(Rule(f"trial {escape(view.title)} · attempt {t.get('attempt')}"))
    out.print(f"[bold]{escape(view.outcome)}[/]   agent: {escape(str(t.get('agent')))}   "
              f"task: {escape(str((t.get('task') or {}).get('path')))}", highlight=False)
    if t.get("error"):
        out.print(f"[red]error:[/] {escape(str(t['error']))}", highlight=False)

    out.print(Rule("instruction"))
    out.print(Text(view.instruction or "(the task bundle's instruction cannot be read)"))

    out.print(Rule("change (against the starting tree)"))
    if view.change_note:
        out.print(Text(view.change_note))
    if not view.changes and not view.change_note:
        out.print("no change to the starting tree")
    from rich.syntax import Syntax  # here: pygments' lexers cost every command 35 ms to import

    for ch in view.changes:
        if ch.diff is not None:
            out.print(f"[bold]{ch.how}[/] {escape(ch.path)}", highlight=False)
            out.print(Syntax(ch.diff.rstrip("\n"), "diff", theme="ansi_dark", word_wrap=True))
        else:
            out.print(f"[bold]{ch.how}[/] {escape(ch.path)}  [dim]({escape(ch.note or '')})[/]",
                      highlight=False)

    out.print(Rule(f"checks (grade {escape(view.grade_revision or 'none')})"))
    if not view.checks:
        out.print("not graded")
    for c in view.checks:
        colour = {"pass": "green", "fail": "red"}.get(c.outcome, "yellow")
        req = "" if c.required else " (not required)"
        out.print(f"[bold {colour}]{c.outcome}[/] {escape(c.name)}{req}"
                  + (f"  exit {c.exit_code}" if c.exit_code is not None else "")
                  + (f"  {escape(c.reason)}" if c.reason else ""), highlight=False)
        if c.command:
            out.print(Text(f"  $ {c.command}", style="dim"))
        for line in c.summary:
            out.print(Text(f"  {line}", style="bold"))
        if c.output_tail:
            out.print(Text("\n".join("  " + line for line in c.output_tail.splitlines())))

    out.print(Rule(f"steps (from {view.steps_source})"))
    if view.steps_note:
        out.print(Text(view.steps_note))
    for s in view.steps:
        figures = (f"in {_n(s.input_tokens)} · out {_n(s.output_tokens)} tokens · "
                   f"{_n(None if s.latency_ms is None else round(s.latency_ms), ' ms')}")
        out.print(Text.assemble((f"step {s.n}", "bold"), "  ", (figures, "dim")))
        if s.error:
            out.print(Text(f"  error: {s.error}", style="red"))
        if s.reasoning:
            out.print(Text("  thinking: " + s.reasoning.replace("\n", "\n  "), style="dim"))
        if s.text:
            out.print(Text("  model: " + s.text.replace("\n", "\n  ")))
        calls = [call_view(tc.name, tc.arguments) for tc in s.tool_calls]
        for call in calls:  # the command or patch it is, never JSON with \n escapes
            for kind, line in call_lines(call):
                out.print(Text("  " + ("  " if kind != "tool" else "") + line,
                               style=CALL_STYLES.get(kind, "")))
        for r in s.results:  # less a first line that only repeats the command
            r = without_echo(r, calls)
            out.print(Text("  result: " + r.replace("\n", "\n    "), style="dim"))

    out.print(Rule("ledger and timings"))
    table = Table(show_header=False, box=None)
    led = view.ledger
    if led is not None:
        cost = ("no price" if led["unpriced_calls"] and not led["cost_usd"]
                else f"${led['cost_usd']:.4f}" + (" (lower bound)" if led["unpriced_calls"]
                                                  or led["usage_missing_calls"] else ""))
        table.add_row("model calls", str(led["calls"]))
        table.add_row("tokens", f"in {led['input']} (cached {led['cached_input']}) · "
                                f"out {led['output']}")
        table.add_row("cost", cost)
    else:
        table.add_row("model calls", "none (no ledger: the arm had no model)")
    table.add_row("transcript", view.transcript_state)
    if view.refusals:
        table.add_row("refused", view.refusals)
    for name, seconds, status in view.timings:
        table.add_row(f"stage {name}", f"{_n(seconds, ' s')} ({status})")
    out.print(table)
