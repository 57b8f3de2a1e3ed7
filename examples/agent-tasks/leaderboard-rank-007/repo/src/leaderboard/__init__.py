"""A small leaderboard kept sorted with sortedcontainers (Debian: python3-sortedcontainers)."""

from leaderboard.board import Board

__all__ = ["Board"]
