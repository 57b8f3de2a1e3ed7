"""Scores kept in a SortedList, highest first."""

from sortedcontainers import SortedList


class Board:
    def __init__(self):
        self._scores = SortedList(key=lambda entry: (-entry[0], entry[1]))
        self._by_name = {}

    def submit(self, name, score):
        """Record ``score`` for ``name``; a player keeps their best score."""
        old = self._by_name.get(name)
        if old is not None and old >= score:
            return
        if old is not None:
            self._scores.remove((old, name))
        self._by_name[name] = score
        self._scores.add((score, name))

    def top(self, n):
        """The ``n`` best (name, score) pairs, best first."""
        return [(name, score) for score, name in self._scores[:n]]

    def rank(self, name):
        """1-based competition rank of ``name``: players with equal scores share a rank."""
        score = self._by_name[name]
        return self._scores.index((score, name)) + 1
