"""The terminal face of a blind rubric sitting: rich panels for the answer, a prompt per score.

Drawing is the CLI's business, so grading never imports rich; this module only renders what
``assay.api.grading.grade_session`` hands it, which is already redacted, so nothing drawn here can
name a model or a run. Task and answer texts are printed as plain ``Text``, never as markup:
they are model output and suite text, and a ``[bold]`` in them must show as typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from assay.api.grading import Ask, ShownAnswer, grade_session

_SYNTAX_LANGUAGES = {"python": "python", "javascript": "javascript"}


class RichScreen:
    """A :class:`~assay.api.grading.GraderScreen` on a rich console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def show(self, answer: ShownAnswer) -> None:
        console = self.console
        console.rule()
        console.print(Text(f"answer {answer.index} of {answer.total} · task {answer.task_id} · "
                           f"blind id {answer.answer_id}", style="bold"))
        console.print(Panel(Text(answer.prompt), title="prompt", title_align="left"))
        console.print(Panel(Text(answer.rubric), title="rubric", title_align="left"))
        body: Text | Syntax
        if not answer.text.strip():
            body = Text("(empty answer)", style="italic")
        elif answer.language in _SYNTAX_LANGUAGES:
            body = Syntax(answer.text, _SYNTAX_LANGUAGES[answer.language], word_wrap=True,
                          line_numbers=True, background_color="default")
        else:
            body = Text(answer.text)
        console.print(Panel(body, title="answer", title_align="left"))

    def tell(self, message: str) -> None:
        self.console.print(Text(message))

    def warn(self, message: str) -> None:
        self.console.print(Text(message, style="yellow"))


def interactive_session(run_dirs: Sequence[Path], *, grader: str, seed: int | None = None,
                        regrade: bool = False, console: Console,
                        ask: Ask = input) -> dict[str, Any]:
    """A grading sitting on ``console``, reading the grader's replies through ``ask``
    (``input`` on a terminal, a script in tests). The summary is the session's:
    graded, skipped, remaining, seed, revision, answers, stopped."""
    return grade_session(run_dirs, grader=grader, seed=seed, regrade=regrade,
                         screen=RichScreen(console), ask=ask)
