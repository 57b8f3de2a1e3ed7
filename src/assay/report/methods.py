"""The statistical methods behind an interval, in words a reader can follow.

A headline says what a number is ("95% paired interval by case"); how the interval was made
is a footnote, so the method's short name (``wilson_mover``) is never the first thing a reader
meets, and every view says it the same way.
"""

from __future__ import annotations

#: each interval method (``stats.abtest.METHODS``), as the views explain it
METHOD_WORDS = {
    "wilson_mover": "the arms' clustered Wilson intervals combined (MOVER), moderated",
    "moderated_t": "moderated t on cluster means (prior worth two clusters)",
    "cluster_t": "t interval on cluster means",
    "bootstrap_percentile": "paired cluster bootstrap (percentile)",
    "bootstrap_studentized": "paired cluster bootstrap (studentized)",
}


def method_footnote(method: str, mark: str = "¹") -> str:
    """The footnote line naming how an interval marked ``mark`` was made."""
    words = METHOD_WORDS.get(method, method)
    return f"{mark} How the interval was made: {words} (`{method}`; docs/statistics.md)."


def if_it_fails(hard: bool) -> str:
    """What a failed verdict check does, in the words the verdict table uses (not a "hard"
    column): a hard check rejects the candidate, any other keeps it from being accepted."""
    return "reject" if hard else "not accepted"
