"""Input errors that point at the exact place to fix.

A suite is written by hand, so the useful error is the one an editor can jump to: file, line and
field. We collect every problem in a file before failing, because fixing them one run at a time
is the kind of afternoon this tool is meant to save.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": field '{self.field}'"
        return f"{where}: {self.message}"


class SuiteError(Exception):
    """Bad input: the CLI maps it to exit code 2 before any model is called."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = problems[:20]
        text = "\n".join(str(p) for p in shown)
        if len(problems) > len(shown):
            text += f"\n… and {len(problems) - len(shown)} more problems"
        super().__init__(text)

    @classmethod
    def one(cls, path: Path, message: str, *, line: int | None = None,
            field: str | None = None) -> SuiteError:
        return cls([Problem(path, line, field, message)])
