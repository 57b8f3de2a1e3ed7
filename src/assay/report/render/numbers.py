"""How every HTML page (and the Markdown and terminal reports) writes a number: one function per
kind of figure, each printing "n/a" for an unknown figure, never 0, so a page cannot suggest a
measurement that was never made.

The views turn report dicts into strings with these functions; the Jinja environment
(:mod:`assay.report.render.env`) registers the same functions as filters, so a template that
formats a figure itself formats it the same way.
"""

from __future__ import annotations

from typing import Any

#: What an unknown figure prints as.
NA = "n/a"
#: What every view says beside units of work not asked yet: the run directory is the report's
#: own, whichever of ``--out`` or ``--out-root`` made it (the CLI prints the whole command).
RESUME_NOTE = "resume: run again with --out set to this run directory"


def pct(x: float | None, missing: str = NA) -> str:
    """A rate as a percentage with one decimal: ``42.5%``."""
    return missing if x is None else f"{100 * x:.1f}%"


def num(x: float | None, digits: int = 0) -> str:
    """A count or a measurement with thousands separators: ``12,345``."""
    if x is None:
        return NA
    return f"{x:,.{digits}f}"


def ci(interval: list[float] | None) -> str:
    """A 95% interval of rates: ``[31.2%, 55.0%]``."""
    return NA if not interval else f"[{pct(interval[0])}, {pct(interval[1])}]"


def pct_ci(iv: list[float | None] | None) -> str:
    """An interval of rates whose ends may be unknown: n/a unless both are known."""
    if not iv or iv[0] is None or iv[1] is None:
        return NA
    return f"[{pct(iv[0])}, {pct(iv[1])}]"


def pts(x: float | None) -> str:
    """A difference of pass rates in percentage points, always signed: ``+12.5 pts``."""
    return NA if x is None else f"{100 * x:+.1f} pts"


def pts_ci(iv: list[float | None] | None) -> str:
    if not iv or iv[0] is None or iv[1] is None:
        return NA
    return f"[{pts(iv[0])}, {pts(iv[1])}]"


def usd(x: float | None) -> str:
    """Dollars: cents for large sums, four decimals for the small sums of one trial."""
    if x is None:
        return NA
    return f"${x:,.2f}" if abs(x) >= 10 else f"${x:.4f}"


def secs(x: float | None) -> str:
    """A duration: milliseconds under a second, minutes past two."""
    if x is None:
        return NA
    if x < 1:
        return f"{1000 * x:.0f} ms"
    return f"{x:.1f} s" if x < 120 else f"{x / 60:.1f} min"


def count(x: Any, unit: str = "", missing: str = NA) -> str:
    """A figure as recorded (an exit code, a number of trials), with an optional unit."""
    return missing if x is None else f"{x}{unit}"


__all__ = ["NA", "ci", "count", "num", "pct", "pct_ci", "pts", "pts_ci", "secs", "usd"]
