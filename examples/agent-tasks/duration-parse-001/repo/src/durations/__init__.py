"""Parse and format human-written durations such as "1h30m" or "45s"."""

from durations.parse import UNITS, format_duration, parse_duration

__all__ = ["UNITS", "format_duration", "parse_duration"]
