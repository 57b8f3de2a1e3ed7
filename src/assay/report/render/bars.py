"""The geometry of the one chart every report page shares: a 0-100% bar with the mean filled
and its interval as a whisker. Computed here as plain numbers; the ``interval_bar`` macro
(``templates/macros.html.j2``) only draws it."""

from __future__ import annotations

from typing import Any


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def interval_bar(mean: float | None, lo: float | None = None, hi: float | None = None,
                 width: int = 240) -> dict[str, Any] | None:
    """``{w, x, lo, hi}`` in px for a bar ``width`` wide; ``lo``/``hi`` None when the interval
    is not known (no whisker is drawn); None when the mean is not known (the page says n/a)."""
    if mean is None:
        return None
    bar: dict[str, Any] = {"w": width, "x": round(_clip(mean) * width, 1), "lo": None,
                           "hi": None}
    if lo is not None and hi is not None:
        bar.update(lo=round(_clip(lo) * width, 1), hi=round(_clip(hi) * width, 1))
    return bar


__all__ = ["interval_bar"]
