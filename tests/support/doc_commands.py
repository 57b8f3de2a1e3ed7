"""The ``assay`` command lines the documentation shows, read out of its shell blocks.

Used by tests/test_docs_commands.py. A "shell block" is a fenced block whose info string is
empty, ``sh``, ``bash``, ``shell`` or ``console``; a command is a segment of a logical line (a
trailing backslash, or an indented ``[...]`` line under a command, continues it) that starts with
``assay`` or ``.venv/bin/assay``, split at ``&&``, ``||``, ``;`` and ``|``, with its comment and
redirections dropped (``a|b`` without spaces is a choice the page shows, not a pipe). YAML and
cron blocks (a CI workflow's ``run:`` lines, a crontab) are not shell blocks and are not read.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_INFOS = {"", "sh", "bash", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|"}
ALTERNATIVE = "\x00"
REDIRECTS = {">", ">>", "<", "2>", "2>&1", "&>"}


def doc_pages() -> list[Path]:
    """README.md and every page of docs/guide/, found afresh, so a new page is read too."""
    return [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]


@dataclass(frozen=True)
class DocCommand:
    """One ``assay`` command as a page shows it."""

    page: str  # relative to the repository
    line: int  # where its logical line starts
    shown: str  # the logical line's text, comment included
    words: tuple[str, ...]  # the words after ``assay``, as the shell would split them

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: assay {' '.join(self.words)}"


def _logical_lines(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    joined: list[tuple[int, str]] = []
    for lineno, raw in block:
        text = raw.rstrip()
        if text.startswith("$ "):
            text = text[2:]
        continues = joined and (joined[-1][1].endswith("\\") or (
            raw[:1].isspace() and text.lstrip().startswith("[")
            and re.match(r"(\.venv/bin/)?assay ", joined[-1][1].lstrip()) is not None))
        if continues:
            start, before = joined[-1]
            before = before[:-1] if before.endswith("\\") else _strip_comment(before)
            joined[-1] = (start, f"{before.rstrip()} {text.strip()}")
        else:
            joined.append((lineno, text))
    return joined


def _strip_comment(text: str) -> str:
    """The line without its trailing ``# comment`` (a ``#`` inside quotes stays)."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def _segments(text: str) -> list[list[str]]:
    # ``task|family|FIELD`` (no spaces) is the docs' way of writing alternatives, not a pipe
    text = re.sub(r"(?<=[^\s|])\|(?=[^\s|])", ALTERNATIVE, _strip_comment(text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    segments: list[list[str]] = [[]]
    skip = False
    for token in lexer:
        if skip:
            skip = False
        elif token in SEPARATORS:
            segments.append([])
        elif token in REDIRECTS:
            skip = True  # the redirection's target goes with it
        else:
            segments[-1].append(token.replace(ALTERNATIVE, "|"))
    return [s for s in segments if s]


def commands_in(page: Path) -> list[DocCommand]:
    """Every ``assay`` command the page's shell blocks show, in page order."""
    found: list[DocCommand] = []
    block: list[tuple[int, str]] = []
    fence, shell = "", False
    rel = page.relative_to(REPO).as_posix()
    for lineno, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = raw.strip()
        if not fence:
            match = re.fullmatch(r"(`{3,}|~{3,})\s*([\w+-]*).*", stripped)
            if match:
                fence, shell, block = match.group(1), match.group(2).lower() in SHELL_INFOS, []
            continue
        if re.fullmatch(re.escape(fence[0]) + f"{{{len(fence)},}}", stripped):
            if shell:
                for start, text in _logical_lines(block):
                    for seg in _segments(text):
                        if seg[0] in ("assay", ".venv/bin/assay"):
                            found.append(DocCommand(rel, start, text, tuple(seg[1:])))
            fence = ""
            continue
        block.append((lineno, raw))
    return found


def all_commands() -> list[DocCommand]:
    return [cmd for page in doc_pages() for cmd in commands_in(page)]


def code_blocks(page: Path, info: str) -> list[tuple[int, str]]:
    """The fenced blocks of one language on a page: (first line, text)."""
    blocks: list[tuple[int, str]] = []
    fence, start = "", 0
    lines: list[str] | None = None
    for lineno, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = raw.strip()
        if not fence:
            match = re.fullmatch(r"(`{3,}|~{3,})\s*([\w+-]*).*", stripped)
            if match:
                fence = match.group(1)
                lines, start = ([] if match.group(2).lower() == info else None), lineno + 1
            continue
        if re.fullmatch(re.escape(fence[0]) + f"{{{len(fence)},}}", stripped):
            if lines is not None:
                blocks.append((start, "\n".join(lines) + "\n"))
            fence = ""
        elif lines is not None:
            lines.append(raw)
    return blocks
