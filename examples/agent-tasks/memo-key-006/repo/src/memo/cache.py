"""Memoize a function's results, optionally for ``ttl`` seconds."""

import functools
import time
from typing import NamedTuple


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int


def memoize(ttl=None, clock=time.monotonic):
    """Decorator: cache results per argument list, for ``ttl`` seconds (None: forever).

    The wrapped function gains ``invalidate(...)``, ``clear()`` and ``cache_info()``.
    """

    def decorate(func):
        store = {}  # key -> (value, expires_at or None)
        stats = {"hits": 0, "misses": 0}

        def make_key(args):
            return args

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = make_key(args)
            now = clock()
            entry = store.get(key)
            if entry is not None and (entry[1] is None or now < entry[1]):
                stats["hits"] += 1
                return entry[0]
            stats["misses"] += 1
            value = func(*args, **kwargs)
            store[key] = (value, None if ttl is None else now + ttl)
            return value

        def invalidate(*args):
            """Evict the entry for these arguments, if there is one."""
            store.pop(make_key(args), None)

        def clear():
            """Evict every entry."""
            store.clear()

        def cache_info():
            return CacheInfo(stats["hits"], stats["misses"], len(store))

        wrapper.invalidate = invalidate
        wrapper.clear = clear
        wrapper.cache_info = cache_info
        return wrapper

    return decorate
