"""Capped exponential backoff."""

import time


def backoff_delays(attempts, base=0.5, factor=2.0, max_delay=8.0):
    """Yield the delays slept between ``attempts`` calls (``attempts - 1`` values)."""
    delay = base
    for _ in range(attempts - 1):
        yield min(delay, max_delay)
        delay *= factor


def retry(func, *, attempts=3, retry_on=(Exception,), base=0.5, factor=2.0,
          max_delay=8.0, sleep=time.sleep):
    """Call ``func()`` until it returns, at most ``attempts`` times.

    Exceptions listed in ``retry_on`` trigger another attempt after a delay of
    ``base * factor**n`` seconds, capped at ``max_delay``; any other exception
    propagates at once. Returns what ``func()`` returns.
    """
    delay = base
    for _ in range(attempts):
        try:
            return func()
        except retry_on:
            sleep(min(delay, max_delay))
            delay *= factor
    return None
