"""The command-line reference (docs/reference/cli.md), generated from the Typer app itself.

A hand-written list of commands and flags drifts the day an option is added or its default
changes; this page cannot, because it is rendered from the same command objects that parse the
command line, and a test (tests/test_cli_reference.py) renders it again and compares. Every
command is shown with its usage, its help, and a table of its arguments and options (flags,
type and bounds, default, help). Regenerate with::

    .venv/bin/python -m assay.cli.reference docs/reference

Only what the app object holds is read, never the command modules' source, so a refactoring of
those modules shows up here exactly when it changes what a user can type or read in --help.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
import typer.main

PAGE = "cli.md"
REGENERATE = ".venv/bin/python -m assay.cli.reference docs/reference"
#: how Typer names a value's type, and how the page says it
TYPE_WORDS = {"str": "text", "int": "integer", "float": "number", "path": "path",
              "list[Path]": "path", "list[str]": "text", "bool": "boolean"}

# Typer builds its commands on a click of its own (``typer._click``), so the objects are read by
# what they have (``commands``, ``param_type_name``, ``opts``), never by a click class.


def root_command() -> Any:
    """The command tree behind ``assay`` (importing ``assay.cli`` registers every group)."""
    from assay.cli import app

    return typer.main.get_command(app)


def is_group(cmd: Any) -> bool:
    return hasattr(cmd, "commands")


def walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command below ``cmd`` with its words after ``assay``, groups before their
    commands, each level in name order (``--help`` lists them in registration order)."""
    yield path, cmd
    if is_group(cmd):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                yield from walk(sub, (*path, name))


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _context(path: tuple[str, ...], cmd: Any) -> typer.Context:
    return typer.Context(cmd, info_name=" ".join(("assay", *path)))


def _type(param: Any, ctx: typer.Context) -> str:
    """The value's type as a user reads it, with its bounds."""
    if getattr(param, "is_flag", False):
        return "flag"
    shown = param.display_type(ctx).strip("<>")
    base = shown.removesuffix(" range")
    word = TYPE_WORDS.get(base, base)
    if param.nargs == -1:
        word += ", one or more"
    bounds = []
    if getattr(param, "min", None) is not None:
        bounds.append(f"{'>' if getattr(param, 'min_open', False) else '≥'} {param.min}")
    if getattr(param, "max", None) is not None:
        bounds.append(f"{'<' if getattr(param, 'max_open', False) else '≤'} {param.max}")
    return ", ".join([word, *bounds])


def _default(param: Any) -> str:
    """The default as a user would type it; "required" or "-" (unset) when there is none."""
    if param.required:
        return "**required**"
    value = param.default
    if callable(value):  # computed when the command runs: say so, never this machine's value
        return "computed"
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return f"`{(param.opts if value else param.secondary_opts)[0]}`"
        return "on" if value else "off"
    if value is None or value == () or value == []:
        return "-"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value)
    return f"`{value}`"


def _flags(param: Any) -> str:
    names = sorted([*param.opts, *param.secondary_opts],
                   key=lambda n: (n.startswith("--"), n))  # short forms first, as --help shows
    shown = " / ".join(f"`{n}`" for n in names)
    if param.multiple:
        shown += " (repeatable)"
    return shown


def _name(param: Any) -> str:
    """An argument's name (``RUN_DIR``, ``DIR...``), without the brackets of an optional one."""
    name = (param.metavar or param.name.upper()).replace("[", "").replace("]", "")
    if param.nargs == -1 and not name.endswith("..."):
        name += "..."
    return name


def _metavar(param: Any) -> str:
    """An argument as the usage line shows it: ``RUN_DIR``, or ``[RUN_B]`` when optional."""
    return _name(param) if param.required else f"[{_name(param)}]"


def usage(path: tuple[str, ...], cmd: Any) -> str:
    """``assay exp run [OPTIONS] EXPERIMENT.yaml``: the words, then what they take."""
    words = ["assay", *path]
    if any(p.param_type_name == "option" and not p.hidden for p in cmd.params):
        words.append("[OPTIONS]")
    words += [_metavar(p) for p in cmd.params if p.param_type_name == "argument"]
    return " ".join(words)


def _anchor(path: tuple[str, ...]) -> str:
    """GitHub's anchor for the heading ``assay <path>``."""
    return "-".join(("assay", *path))


def render_command(path: tuple[str, ...], cmd: Any) -> list[str]:
    """One command's section."""
    lines = [f"## `{' '.join(('assay', *path))}`", ""]
    if cmd.help:
        lines += [cmd.help.strip().replace("\b\n", ""), ""]
    if is_group(cmd):
        lines += ["| command | what it does |", "|---|---|"]
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                lines.append(f"| [`{name}`](#{_anchor((*path, name))}) | "
                             f"{_cell(sub.get_short_help_str(limit=300))} |")
        return [*lines, ""]
    ctx = _context(path, cmd)
    lines += ["```", usage(path, cmd), "```", ""]
    arguments = [p for p in cmd.params if p.param_type_name == "argument"]
    options = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]
    if arguments:
        lines += ["| argument | type | default | meaning |", "|---|---|---|---|"]
        for arg in arguments:
            lines.append(f"| `{_name(arg)}` | {_type(arg, ctx)} | "
                         f"{_default(arg)} | "
                         f"{_cell(getattr(arg, 'help', None) or '')} |")
        lines.append("")
    if options:
        lines += ["| option | type | default | meaning |", "|---|---|---|---|"]
        for opt in options:
            lines.append(f"| {_flags(opt)} | {_type(opt, ctx)} | {_default(opt)} | "
                         f"{_cell(opt.help or '')} |")
        lines.append("")
    return lines


def render(root: Any = None) -> str:
    """The whole page."""
    root = root or root_command()
    lines = ["# `assay`: the command line", "",
             "Generated from the command-line app by", "",
             f"    {REGENERATE}", "",
             "A test fails when this page and the app disagree, so edit the commands' help, not",
             "this file. Every command also answers `--help`. The exit codes are in the",
             "[README](../../README.md#exit-codes); the files the commands read are in",
             "[task.md](task.md), [experiment.md](experiment.md) and [suite.md](suite.md).", ""]
    commands = list(walk(root))
    lines += ["| command | what it does |", "|---|---|"]
    for path, cmd in commands[1:]:
        if not is_group(cmd):
            lines.append(f"| [`assay {' '.join(path)}`](#{_anchor(path)}) | "
                         f"{_cell(cmd.get_short_help_str(limit=300))} |")
    lines.append("")
    for path, cmd in commands[1:]:
        lines += render_command(path, cmd)
    return "\n".join(lines).rstrip("\n") + "\n"


def write(out_dir: Path) -> Path:
    """Write the page into ``out_dir`` and return its path."""
    target = out_dir / PAGE
    target.write_text(render(), encoding="utf-8")
    return target


if __name__ == "__main__":
    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference")))
