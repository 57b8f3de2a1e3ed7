"""A small memoizing decorator with optional expiry."""

from memo.cache import CacheInfo, memoize

__all__ = ["CacheInfo", "memoize"]
