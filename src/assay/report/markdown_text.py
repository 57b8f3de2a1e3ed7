"""Text from a run, put into Markdown so that it stays text.

Model output, candidate code, output tails, endpoint messages and even case ids are data: in
``report.md`` they go into code spans and fenced code blocks that the text itself cannot close
(the fence is longer than any backtick run in it), never into plain Markdown where ``*``, ``[``
or ``<script>`` would be read as markup. In a table a ``|`` is escaped and a line break shown as
``⏎``, so a cell cannot become two cells or end its row.
"""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
NEWLINE_MARK = "⏎"


def longest_backtick_run(text: str) -> int:
    return max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)


def md_code(text: str | None, empty: str = "(empty)") -> str:
    """An inline code span of ``text`` on one line; a backtick run inside cannot end it."""
    if text is None or text == "":
        return f"*{empty}*"
    one_line = _LINE_BREAK.sub(f" {NEWLINE_MARK} ", text)
    fence = "`" * (longest_backtick_run(one_line) + 1)
    pad = " " if one_line[0] in "` " or one_line[-1] in "` " else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def md_cell(text: str | None, empty: str = "(empty)") -> str:
    """A code span safe in a table cell: pipes escaped (a backslash right before a pipe gets a
    space, as GFM would otherwise read ``\\\\|`` as a cell break)."""
    return md_code(text, empty).replace("\\|", "\\ |").replace("|", "\\|")


def md_block(text: str | None, info: str = "text", empty: str = "(empty)") -> list[str]:
    """A fenced code block of ``text`` (lines of Markdown), fenced longer than any backtick
    run in it, so no line of the text can close it."""
    if text is None or text == "":
        return [f"*{empty}*"]
    fence = "`" * max(3, longest_backtick_run(text) + 1)
    safe_info = re.sub(r"[^A-Za-z0-9_+-]", "", info)
    body = _LINE_BREAK.sub("\n", text).removesuffix("\n")
    return [f"{fence}{safe_info}", *body.split("\n"), fence]
