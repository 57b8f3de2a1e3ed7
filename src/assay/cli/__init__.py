"""The ``assay`` command line: parse, call, print. Logic lives in the modules it calls.

One module per group of commands; importing this package registers them all on ``app``.
"""

from __future__ import annotations

import sys
import warnings

from assay.api import TornRowWarning
from assay.cli import (  # noqa: F401  (registers the commands)
    agents,
    analysis,
    env_shell,
    envs,
    experiments,
    exports,
    grading,
    history,
    judge,
    judge_pairwise,
    regrade,
    runs,
    tasks,
    trials,
)
from assay.cli.app import app, err
from assay.errors import EXIT_OK, AssayError

__all__ = ["app", "main"]


def main() -> None:
    """The console entry point: every ``AssayError`` that reaches here becomes its exit code
    and a one-line message, never a traceback."""
    _report_torn_rows()
    try:
        app(prog_name="assay")  # not "python -m assay": the name a user types
    except AssayError as exc:
        err.print(f"[bold red]assay:[/] {exc}", highlight=False)
        raise SystemExit(exc.exit_code) from None
    except BrokenPipeError:  # e.g. `assay report X | head`
        sys.stderr.close()
        raise SystemExit(EXIT_OK) from None


def _report_torn_rows() -> None:
    """Every torn last line a reader meets (``records.io.iter_rows``) as one line on stderr,
    each file every time, never Python's warning format or its once-per-place filter."""
    from rich.markup import escape

    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        if issubclass(category, TornRowWarning):
            err.print(f"[yellow]assay: warning:[/] {escape(str(message))}", highlight=False)
        else:
            shown(message, category, filename, lineno, file, line)  # type: ignore[arg-type]

    warnings.simplefilter("always", TornRowWarning)
    warnings.showwarning = show
