"""A tool call drawn as what it is: a shell command as the command, a patch or an edit as a
diff, a written file as its lines; never a JSON string with literal ``\\n`` escapes.

Agents send tool arguments as a JSON object in a string (``{"command": "pytest -q\\n"}``).
Shown raw, a reader decodes escapes in their head and reads every command twice, because many
tools echo it at the top of their result (``Command: pytest -q``). Here the arguments are parsed
(as data: a string that is not a whole JSON object, e.g. one cut at the display cap, is shown as
it came), the known shapes are drawn as such, any other key is listed with its value as text,
and a result's echo of the command is dropped. Every value stays text for the template's
autoescaping.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

#: keys whose value is the command a shell tool runs
COMMAND_KEYS = ("command", "cmd", "bash", "script", "shell_command")
#: keys whose value may be a patch (drawn as a diff when it looks like one)
PATCH_KEYS = ("patch", "diff", "input")
#: keys naming the file an edit or a write is about
PATH_KEYS = ("file_path", "path", "absolute_path", "filename", "file")
#: the most lines of one argument drawn (the rest is counted)
MAX_LINES = 400


@dataclass
class CallView:
    """One tool call for a page: ``kind`` is command, patch, edit, write or fields."""

    name: str
    kind: str
    command: str | None = None
    path: str | None = None
    lines: list[dict[str, str]] = field(default_factory=list)  # {"cls", "text"}, a diff
    fields: list[tuple[str, str]] = field(default_factory=list)  # the other keys, as text


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                          sort_keys=True)


def _capped(lines: list[dict[str, str]]) -> list[dict[str, str]]:
    if len(lines) <= MAX_LINES:
        return lines
    return lines[:MAX_LINES] + [{"cls": "hunk", "text": f"… {len(lines) - MAX_LINES} more "
                                                        "lines"}]


def diff_lines(diff: str, *, capped: bool = True) -> list[dict[str, str]]:
    """A unified diff (or an ``*** Begin Patch`` block) as classed lines (at most
    ``MAX_LINES`` unless ``capped`` is False: a trial's own change is capped where it is read)."""
    out = []
    for line in diff.splitlines():
        cls = ("hunk" if line.startswith(("@@", "*** ")) else "head"
               if line.startswith(("+++", "---", "diff --git")) else "add"
               if line.startswith("+") else "del" if line.startswith("-") else "")
        out.append({"cls": cls, "text": line})
    return _capped(out) if capped else out


def _looks_like_patch(text: str) -> bool:
    head = text.lstrip()[:200]
    return head.startswith(("*** Begin Patch", "diff --git", "--- ", "@@")) or "\n@@ " in text


def call_view(name: str, arguments: str) -> CallView:
    """Parse ``arguments`` (the call's JSON text) and pick how to draw it."""
    try:
        args = json.loads(arguments)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return CallView(name, "fields", fields=[("arguments", arguments)] if arguments else [])
    rest = dict(args)
    path = next((str(rest.pop(k)) for k in PATH_KEYS if isinstance(rest.get(k), str)), None)
    for key in COMMAND_KEYS:
        value = rest.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = shlex.join(value)
        if isinstance(value, str):
            del rest[key]
            return CallView(name, "command", command=value.rstrip("\n"), path=path,
                            fields=[(k, _text(v)) for k, v in rest.items()])
    for key in PATCH_KEYS:
        value = rest.get(key)
        if isinstance(value, str) and _looks_like_patch(value):
            del rest[key]
            return CallView(name, "patch", path=path, lines=diff_lines(value),
                            fields=[(k, _text(v)) for k, v in rest.items()])
    old, new = rest.get("old_string", rest.get("old_str")), rest.get("new_string",
                                                                     rest.get("new_str"))
    if isinstance(old, str) and isinstance(new, str):
        for k in ("old_string", "old_str", "new_string", "new_str"):
            rest.pop(k, None)
        lines = ([{"cls": "del", "text": "-" + ln} for ln in old.splitlines()]
                 + [{"cls": "add", "text": "+" + ln} for ln in new.splitlines()])
        return CallView(name, "edit", path=path, lines=_capped(lines),
                        fields=[(k, _text(v)) for k, v in rest.items()])
    content = rest.get("content")
    if isinstance(content, str) and path is not None:
        del rest["content"]
        return CallView(name, "write", path=path,
                        lines=_capped([{"cls": "add", "text": "+" + ln}
                                       for ln in content.splitlines()]),
                        fields=[(k, _text(v)) for k, v in rest.items()])
    return CallView(name, "fields", path=path, fields=[(k, _text(v)) for k, v in rest.items()])


def without_echo(result: str, calls: list[CallView]) -> str:
    """A tool result less its first line when that line only repeats the command it ran
    (``Command: pytest -q``, ``$ pytest -q``, or the command itself)."""
    commands = {c.command.strip() for c in calls if c.command}
    if not commands:
        return result
    first, _, rest = result.partition("\n")
    said = first.strip()
    for prefix in ("Command:", "$"):
        if said.startswith(prefix):
            said = said[len(prefix):].strip()
    return rest if said in commands else result


def call_lines(view: CallView) -> list[tuple[str, str]]:
    """A tool call as lines of text for a terminal (``trial show``), each with its kind for
    the colour: ``tool`` (the tool's name and the file), ``cmd`` (``$ command``, a multi-line
    command's other lines indented under it), the diff classes of :func:`diff_lines`, ``key``
    (another argument, ``key: value``, a multi-line value indented under it). The same
    shapes the pages draw, so the terminal never shows JSON with ``\\n`` escapes either."""
    head = f"tool {view.name}" + (f" {view.path}" if view.path else "")
    out = [("tool", head + ("" if view.kind == "fields" and not view.fields else ":"))]
    if view.kind == "command" and view.command is not None:
        first, *more = view.command.splitlines() or [""]
        out.append(("cmd", "$ " + first))
        out += [("cmd", "  " + line) for line in more]
    out += [(line["cls"], line["text"]) for line in view.lines]
    for key, value in view.fields:
        first, *more = value.splitlines() or [""]
        out.append(("key", f"{key}: {first}" if not more else f"{key}:"))
        if more:
            out += [("key", "  " + line) for line in [first, *more]]
    return out


__all__ = ["CallView", "call_lines", "call_view", "diff_lines", "without_echo"]
