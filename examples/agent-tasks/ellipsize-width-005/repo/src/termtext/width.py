"""Measure, pad and shorten text by terminal columns rather than code points."""

import unicodedata


def char_width(char):
    """Columns taken by one code point: 0 for combining and format marks,
    2 for wide and full-width East Asian characters, 1 otherwise."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 2
    return 1


def display_width(text):
    """Columns taken by ``text`` in a terminal."""
    return sum(char_width(char) for char in text)


def pad(text, width):
    """Pad ``text`` with spaces on the right to ``width`` columns."""
    return text + " " * max(0, width - display_width(text))


def ellipsize(text, width, placeholder="…"):
    """Shorten ``text`` to fit in ``width`` columns, ending with ``placeholder``."""
    if len(text) <= width:
        return text
    return text[:width] + placeholder
