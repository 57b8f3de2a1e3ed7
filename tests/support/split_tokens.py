"""Whether a command's output at 80 columns split a token across lines.

A token is what lies between spaces once the table rules are taken out: a run name, a path,
a number with its sign or percent, a digest. The reference is the same command's output at a
width nothing needs to wrap at: every token printed at 80 columns must be one of the tokens
printed there. A token folded across lines (``triag`` / ``e-bui`` / ``ltin_``) leaves pieces
that the wide output never prints; a line that breaks between two tokens leaves none.
"""

from __future__ import annotations

import re

#: box drawing and the rules rich draws tables with: cell borders, not text
_RULES = re.compile(r"[\u2500-\u257f]")


def tokens(text: str) -> list[str]:
    """The tokens of ``text``, table rules taken out."""
    return _RULES.sub(" ", text).split()


def split_tokens(narrow: str, wide: str) -> list[str]:
    """Tokens of ``narrow`` that ``wide`` never prints (pieces of a split token), in order."""
    known = set(tokens(wide))
    return [t for t in tokens(narrow) if t not in known]
