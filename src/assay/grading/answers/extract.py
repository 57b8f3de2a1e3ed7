"""Pulling the code (or diff) out of a model's answer, by the suite's fixed rule."""

from __future__ import annotations

import re

from assay.grading.model_text import strip_reasoning

_FENCE = re.compile(r"^```[ \t]*([^\n`]*)\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_REASONING = re.compile(r"</?think(ing)?>", re.IGNORECASE)
_TAGS = {
    "python": {"python", "py", "python3"},
    "javascript": {"javascript", "js", "node", "nodejs", "mjs", "cjs"},
    "diff": {"diff", "patch", "udiff"},
}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, content) of every fenced block, in order."""
    return [(m.group(1).strip().lower().split()[0] if m.group(1).strip() else "", m.group(2))
            for m in _FENCE.finditer(text)]


def extract_code(answer: str | None, language: str | None) -> str:
    """The first fenced block tagged with the task's language, else the first fenced block,
    else the whole answer. Reasoning blocks are dropped first: they are not the answer."""
    if not answer:
        return ""
    text = answer.replace("\r\n", "\n")
    if _REASONING.search(text):
        text = strip_reasoning(text)
    blocks = fenced_blocks(text)
    if not blocks:
        # Only blank lines go: trailing spaces can be content (a diff's last context line " ").
        lines = text.split("\n")
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip() and lines[-1] != " ":
            lines.pop()
        return "\n".join(lines) + "\n" if lines else ""
    tags = _TAGS.get(language or "", set())
    for tag, content in blocks:
        if tag in tags:
            return content
    return blocks[0][1]
