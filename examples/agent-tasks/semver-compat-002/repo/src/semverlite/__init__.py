"""Semantic versions: parsing, precedence and npm-style ranges."""

from semverlite.ranges import max_satisfying, satisfies
from semverlite.version import Version, compare, parse

__all__ = ["Version", "compare", "max_satisfying", "parse", "satisfies"]
