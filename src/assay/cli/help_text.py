"""What ``--help`` shows, made legible in one place: reflowed text, readable value names,
commands in the order a user meets them.

Typer keeps a docstring's line breaks (in rich mode), names a value's type as Python spells
it (``<bool>``, ``<str>``, ``<list[str]>``) and wraps an optional argument's metavar in
brackets again (``[[PILOT]]``). Rather than fight each declaration, the root group walks the
finished command tree once when it is built (``--help``, a run, the generated reference alike):
a paragraph's single line breaks become spaces (lists and indented lines keep theirs), an
option's value is named by what it is (``INTEGER``, ``NUMBER``, ``TEXT``, ``PATH``; a flag
takes none), an argument's metavar loses the brackets and dots Typer adds itself, and the
commands are listed in :data:`WORKFLOW` order.
"""

from __future__ import annotations

import inspect
import re
from types import SimpleNamespace
from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption

#: top-level commands in the order the README and the guide meet them; any other follows
WORKFLOW = ("run", "report", "compare", "history", "suite", "serve", "grade", "regrade",
            "task", "trial", "exp", "env", "agents", "judge")
#: a type as Typer names it, as the help names the value
VALUE_WORDS = {"int": "INTEGER", "float": "NUMBER", "str": "TEXT", "path": "PATH",
               "bool": "BOOLEAN"}
#: a line that starts a new line in the help as written: a list item or an indented line
_KEEP_BREAK = re.compile(r"^(\s|[-*•] |\d+[.)] |\$ )")


def reflow(text: str | None) -> str | None:
    """``text`` with each paragraph's single line breaks made spaces (a line that starts a
    list item or is indented keeps its break; ``\\b`` paragraphs are left as written)."""
    if not text:
        return text
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):
            out.append(para)
            continue
        lines = para.split("\n")
        joined = lines[0]
        for line in lines[1:]:
            joined += ("\n" if _KEEP_BREAK.match(line) else " ") + line
        out.append(joined)
    return "\n\n".join(out)


def _value_word(param: TyperOption) -> str:
    """The option's value named by what it is: Typer's own label (``<int range>``,
    ``<list[Path]>``, ``<a|b>``) read back into a word."""
    desc = param.type_descriptor
    if desc.is_choice:
        return "|".join(str(c) for c in desc.choices or ())
    label = param.bare_type()
    if desc.is_ranged:
        label = str(desc.ranged_type_name)
    elif desc.is_path:
        label = "path"
    label = label.removeprefix("list[").removesuffix("]").lower()
    return VALUE_WORDS.get(label, label.upper())


def polish(cmd: Any) -> None:
    """Reflow every help text and name every value, in ``cmd`` and below it (a command of
    Typer's own click, which it vendors: read through the attributes every command has)."""
    cmd.help = reflow(cmd.help)
    if cmd.short_help:
        cmd.short_help = reflow(cmd.short_help)
    for param in cmd.params:
        if isinstance(param, TyperOption):
            param.help = reflow(param.help)
            if param.metavar is None:
                param.metavar = "" if param.is_flag else _value_word(param)
        elif isinstance(param, TyperArgument):
            param.help = reflow(param.help)
            if param.metavar:
                param.metavar = param.metavar.strip("[]").removesuffix("...").strip("[]")
            param.__class__ = PlainArgument
    if hasattr(cmd, "get_help_option"):  # built once and kept by the command: a flag, no value
        shown = cmd.get_help_option(SimpleNamespace(help_option_names=["--help"]))
        if shown is not None:
            shown.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        polish(sub)


class PlainArgument(TyperArgument):
    """An argument shown as a user types it: ``DIR...`` or ``[PILOT]`` in the usage line
    (Typer writes ``{DIR}...`` for a required one), its name alone in the arguments panel (the
    name says what it is; Typer adds ``<list[Path]>``). ``tests/test_cli_help.py`` holds the
    output to this, so a Typer that renames these hooks fails a test instead of the help."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class AssayGroup(TyperGroup):
    """The root group: polished once built, commands in :data:`WORKFLOW` order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        polish(self)

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(self.commands)
        rank = {name: i for i, name in enumerate(WORKFLOW)}
        return sorted(names, key=lambda n: (rank.get(n, len(WORKFLOW)), names.index(n)))


__all__ = ["WORKFLOW", "AssayGroup", "polish", "reflow"]
