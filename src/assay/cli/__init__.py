"""The ``assay`` command line: parse, call, print. Logic lives in the modules it calls.

One module per group of commands; importing this package registers them all on ``app``.
"""

from __future__ import annotations

import sys

from assay.cli import (  # noqa: F401  (registers the commands)
    agents,
    analysis,
    experiments,
    grading,
    history,
    judge,
    judge_pairwise,
    regrade,
    runs,
    tasks,
)
from assay.cli.app import app, err
from assay.errors import EXIT_OK, AssayError

__all__ = ["app", "main"]


def main() -> None:
    """The console entry point: every ``AssayError`` that reaches here becomes its exit code
    and a one-line message, never a traceback."""
    try:
        app()
    except AssayError as exc:
        err.print(f"[bold red]assay:[/] {exc}", highlight=False)
        raise SystemExit(exc.exit_code) from None
    except BrokenPipeError:  # e.g. `assay report X | head`
        sys.stderr.close()
        raise SystemExit(EXIT_OK) from None
