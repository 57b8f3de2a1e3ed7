"""``assay agents check``: each agent CLI installed (or found) and run once through assay."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from assay.cli.app import app, fail
from assay.errors import EXIT_CHECK_FAILED

agents_app = typer.Typer(no_args_is_help=True, help="Agent CLIs: install, find and check them.")
app.add_typer(agents_app, name="agents")


@agents_app.command("check")
def agents_check(
    names: Annotated[list[str] | None, typer.Argument(metavar="[AGENT]...", help="Agents to "
                                                      "check (default: every adapter).")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list.")] = False,
) -> None:
    """Install or find each adapter's pinned CLI and run one trial of it against the built-in
    scripted model (builtin/replay) on a trivial task, through the runner, gateway, sandbox and
    verifier. Exit 0 when every checked agent was accepted or could not be installed here
    (said in the table), 1 when one ran and failed."""
    from rich.table import Table

    from assay.api.agents import agent_names, check_agent, known_agents
    from assay.cli.app import _require_sandbox, err, out

    _require_sandbox("bwrap")
    wanted = names or known_agents()
    names_known = agent_names()
    unknown = [n for n in wanted if n not in names_known]
    if unknown:
        raise fail(f"unknown agent(s) {', '.join(unknown)} (known: {', '.join(names_known)})")
    rows = []
    for name in wanted:
        err.print(f"checking {name} …", highlight=False)
        rows.append(check_agent(name))
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        table = Table(title="assay agents check", title_justify="left")
        for col in ("agent", "version", "protocol", "ok", "seconds", "detail"):
            table.add_column(col)
        for r in rows:
            ok = {True: "[green]ok[/]", False: "[red]failed[/]", None: "not installed"}[r.ok]
            table.add_row(r.agent, r.version or "n/a", r.protocol, ok,
                          "n/a" if r.seconds is None else f"{r.seconds:.1f}", r.detail)
        out.print(table)
    if any(r.ok is False for r in rows):
        raise typer.Exit(EXIT_CHECK_FAILED)
