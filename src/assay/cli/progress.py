"""The progress display of model runs (a ``Progress`` of rows, ``assay.api.Progress``): a bar on
a terminal, a quiet line in a log."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console


class TerminalProgress:
    """A rich progress bar on a terminal; a quiet line every few seconds when not a TTY (CI
    logs), so long runs show life without flooding the log."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.total = 0
        self.done = 0
        self.invalid = 0
        self.failed = 0
        self.errors = 0
        self._last_line = 0.0
        self._bar: Any = None
        self._task: Any = None
        self._note: str | None = None  # the counts' words as last advanced
        self._said = 0  # ``done`` as the last line printed said it

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self._last_line = time.monotonic()
        if done:
            self.console.print(f"resuming: {done} of {total} already answered", highlight=False)
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("[bold]asked"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("run", total=total, completed=done, note="")

    def advance(self, row: dict[str, Any]) -> None:
        self.done += 1
        self.invalid += bool(row.get("invalid_reason"))
        self.failed += row.get("passed") is False
        self.errors += bool(row.get("error"))
        # the words and counts of the report: asked = answered + infra errors
        if "passed" in row:  # a coding sample
            note = f"failed {self.failed} · infra errors {self.errors}"
        else:
            note = f"invalid {self.invalid} · infra errors {self.errors}"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, note=note)
        elif time.monotonic() - self._last_line >= 5 or self.done == self.total:
            self._say(note)
        self._note = note

    def _say(self, note: str) -> None:
        self._last_line = time.monotonic()
        self._said = self.done
        self.console.print(f"assay: {self.done}/{self.total} asked ({note})", highlight=False)

    def note(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}", highlight=False)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._note is not None and self._said != self.done:
            self._say(self._note)  # a run that stopped early: the last line counts it all
