"""Durations as written by people in config files: "90s", "1h30m", "2d 4h"."""

import re

# Seconds per unit, largest first (format_duration relies on the order).
UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_COMPONENT = re.compile(r"(\d+)\s*([dhms])")


def parse_duration(text):
    """Return the number of seconds in ``text`` as a float.

    ``text`` is one or more ``<number><unit>`` components ("1h30m", "2d 4h")
    or a bare number of seconds ("45"). Ints and floats are passed through.
    """
    if isinstance(text, (int, float)):
        return float(text)
    cleaned = text.strip().lower()
    if not cleaned:
        raise ValueError("empty duration")
    if _BARE_NUMBER.fullmatch(cleaned):
        return float(cleaned)
    total = 0
    for number, unit in _COMPONENT.findall(cleaned):
        total += int(number) * UNITS[unit]
    return float(total)


def format_duration(seconds):
    """Format a number of seconds as compact components, e.g. 5400 -> "1h30m"."""
    remaining = int(round(seconds))
    if remaining < 0:
        raise ValueError("negative duration: %r" % (seconds,))
    if remaining == 0:
        return "0s"
    parts = []
    for unit, size in UNITS.items():
        count, remaining = divmod(remaining, size)
        if count:
            parts.append("%d%s" % (count, unit))
    return "".join(parts)
