"""What every command shares: the Typer app, the two consoles, and the one way to fail.

Exit codes: 0 done; 2 bad input (nothing was run, no run directory left behind); 3 nothing
answers at the endpoint, or the run finished but some cases ended in infra errors (resume with
the command printed); 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from assay.cli.help_text import AssayGroup
from assay.errors import (
    EXIT_BAD_INPUT,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  cls=AssayGroup,
                  help="Evidence-first evals of models and coding agents on your own tasks.")
# Piped output (CI logs, `| tee`) gets 120 columns instead of rich's 80, so report tables stay
# one line a row; a terminal or an explicit COLUMNS decides for itself.
_LOG_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120


class LogConsole(Console):
    """A console whose lines of text, printed to a pipe, are never wrapped: a log line keeps a
    path, a run name or a digest whole (a fold would hide it from grep). Tables, rules and
    Markdown are still laid out to the width (unwrapped they would be cut off); a terminal
    wraps between words as before."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        if (soft_wrap is None and not self.is_terminal
                and all(isinstance(o, str | Text) for o in objects)):
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **kwargs)


out = LogConsole(width=_LOG_WIDTH)
err = LogConsole(stderr=True, width=_LOG_WIDTH)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    # never wrapped by rich: a path or URL in the message stays whole in a log (grep finds it)
    err.print(f"[bold red]assay:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _require_sandbox(sandbox: str) -> None:
    if sandbox not in ("bwrap", "none"):
        raise fail("--sandbox must be bwrap or none")
    if sandbox == "none":
        err.print("[bold red]NOT ISOLATED:[/] candidate code runs without the sandbox "
                  "(--sandbox none)")
        return
    from assay.api.sandbox import SandboxUnavailable, require_sandbox

    try:
        require_sandbox(sandbox)
    except SandboxUnavailable as exc:
        raise fail(f"the sandbox cannot run here: {exc}\nInstall bubblewrap, or pass "
                   "--sandbox none to run candidate code NOT ISOLATED.") from None
