"""Geometry of the experiment report's inline SVG plots: the forest plot of per-task differences
and the runtime strip of every attempt.

Kept apart from the page's view so each plot is a plain function of numbers to coordinates that
a test can check by hand, and so the template only draws what it is given (no arithmetic in
Jinja2). Coordinates are rounded to 0.1 px; every label a plot carries is run data and is
escaped by the template like any other text.
"""

from __future__ import annotations

import math
from typing import Any

# Forest plot layout, in px.
FOREST_LABEL_W = 200  # task names, left of the plot
FOREST_PLOT_W = 420  # the Δ axis
FOREST_NOTE_W = 230  # "p_a → p_b" and n, right of the plot
FOREST_ROW_H = 22
FOREST_TOP = 26  # room for the axis labels above the first row
FOREST_LABEL_CHARS = 30

# Runtime strip layout, in px.
STRIP_LABEL_W = 120
STRIP_PLOT_W = 560
STRIP_ROW_H = 46
STRIP_TOP = 8
STRIP_AXIS_H = 26


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis; the full text goes in a title."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def forest(per_task: list[dict[str, Any]], delta: float | None,
           ci: list[float] | None, marks: list[tuple[str, float]]) -> dict[str, Any]:
    """One row per task (its difference as a square sized by its number of trials), a dashed
    zero line, reference lines from the bar (``marks``: label, x) and the overall Δ as a
    diamond spanning its interval."""
    # The Δ axis is always [-1, 1]: every per-task difference, Δ and its interval (clipped
    # there by ``stats``) lie in it; a bar's mark past ±1 is drawn at the edge, never by
    # stretching the axis past what a difference of two rates can be.
    d_lo, d_hi = -1.0, 1.0

    def x(v: float) -> float:
        v = min(d_hi, max(d_lo, v))
        return round(FOREST_LABEL_W + (v - d_lo) / (d_hi - d_lo) * FOREST_PLOT_W, 1)

    n_max = max((int(t.get("n_a") or 0) + int(t.get("n_b") or 0) for t in per_task), default=1)
    rows = []
    for i, t in enumerate(per_task):
        n = int(t.get("n_a") or 0) + int(t.get("n_b") or 0)
        side = round(5 + 9 * math.sqrt(n / n_max), 1) if n_max else 5.0
        cy = FOREST_TOP + i * FOREST_ROW_H + FOREST_ROW_H / 2
        diff = t.get("diff")
        rows.append({
            "task": str(t["task"]), "label": short(str(t["task"]), FOREST_LABEL_CHARS),
            "cy": cy, "ty": cy + 4, "n": n, "side": side,
            "x": None if diff is None else x(diff),
            "sx": None if diff is None else round(x(diff) - side / 2, 1),
            "sy": round(cy - side / 2, 1), "diff": diff,
        })
    overall_y = FOREST_TOP + len(per_task) * FOREST_ROW_H + FOREST_ROW_H
    height = overall_y + FOREST_ROW_H
    diamond = None
    if delta is not None:
        cx = x(delta)
        if ci and ci[0] is not None and ci[1] is not None:
            lo, hi = x(ci[0]), x(ci[1])
        else:
            lo, hi = cx - 3, cx + 3
        diamond = {"points": f"{lo},{overall_y} {cx},{overall_y - 8} {hi},{overall_y} "
                             f"{cx},{overall_y + 8}",
                   "cx": cx, "x_lo": lo, "x_hi": hi, "has_ci": bool(ci)}
    step = 0.5 if d_hi - d_lo <= 3 else 1.0
    ticks = [{"x": x(k * step), "label": f"{100 * k * step:+.0f}" if k else "0"}
             for k in range(math.ceil(d_lo / step), math.floor(d_hi / step) + 1)]
    return {
        "w": FOREST_LABEL_W + FOREST_PLOT_W + FOREST_NOTE_W, "h": height,
        "plot_x0": FOREST_LABEL_W, "plot_x1": FOREST_LABEL_W + FOREST_PLOT_W,
        "note_x": FOREST_LABEL_W + FOREST_PLOT_W + 10,
        "zero_x": x(0.0), "top": FOREST_TOP - 6, "bottom": overall_y + FOREST_ROW_H / 2 + 4,
        "rows": rows, "overall_y": overall_y, "overall_ty": overall_y + 4, "diamond": diamond,
        "ticks": ticks, "tick_y": FOREST_TOP - 12, "axis_y": height - 4,
        "marks": [{"label": lab, "x": x(v)} for lab, v in marks],
    }


def _nice_ceiling(v: float) -> float:
    """The next 1, 2 or 5 × 10^k at or above ``v`` (an axis end a person reads easily)."""
    if v <= 0:
        return 1.0
    exp = math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= v:
            return float(m * 10 ** exp)
    return float(10 ** (exp + 1))


def _nice_floor(v: float) -> float:
    return float(10 ** math.floor(math.log10(v)))


def strip(arms: list[dict[str, Any]]) -> dict[str, Any]:
    """Every attempt's runtime as a tick per arm row, timeouts as red crosses at the time they
    were killed (never as finishing there), jittered up and down so equal times stay visible.

    The axis is logarithmic when the runtimes span more than a factor of 20 (a few timeouts at
    a ten-minute limit would otherwise squeeze every finished attempt into one corner), linear
    otherwise. ``arms``: ``{"arm", "seconds": [float|None], "timed_out": [bool]}``; an attempt
    with no known runtime is counted under the row, not drawn.
    """
    known = [s for a in arms for s in a["seconds"] if s is not None]
    top = _nice_ceiling(max(known, default=1.0))
    positive = [s for s in known if s > 0]
    low = _nice_floor(min(positive)) if positive else top
    log = bool(positive) and top / low > 20

    def x(v: float) -> float:
        if log:
            frac = (math.log10(max(v, low)) - math.log10(low)) / (math.log10(top) -
                                                                  math.log10(low))
        else:
            frac = max(0.0, v) / top
        return round(STRIP_LABEL_W + frac * STRIP_PLOT_W, 1)

    rows = []
    for i, a in enumerate(arms):
        y0 = STRIP_TOP + i * STRIP_ROW_H
        cy = y0 + STRIP_ROW_H / 2
        marks, unknown = [], 0
        for j, (s, killed) in enumerate(zip(a["seconds"], a["timed_out"], strict=True)):
            if s is None:
                unknown += 1
                continue
            jitter = ((j * 7) % 9 - 4) * 3  # deterministic, -12..12 px
            marks.append({"x": x(s), "y": round(cy + jitter, 1), "timed_out": bool(killed),
                          "seconds": s})
        rows.append({"arm": a["arm"], "label": short(a["arm"], 16), "cy": cy, "ty": cy + 4,
                     "y0": y0, "y1": y0 + STRIP_ROW_H, "marks": marks, "unknown": unknown,
                     "band": i % 2 == 0})
    h = STRIP_TOP + len(arms) * STRIP_ROW_H + STRIP_AXIS_H
    axis_y = STRIP_TOP + len(arms) * STRIP_ROW_H
    if log:
        values = [low * 10 ** k for k in range(round(math.log10(top / low)) + 1)]
    else:
        values = [top * q for q in (0, .25, .5, .75, 1)]
    ticks = [{"x": x(v), "label": f"{v:g} s" if log else _seconds_label(v)} for v in values]
    return {"log": log, "w": STRIP_LABEL_W + STRIP_PLOT_W + 40, "h": h, "rows": rows,
            "axis_y": axis_y, "ticks": ticks, "tick_y": axis_y + 16, "x0": STRIP_LABEL_W,
            "x1": STRIP_LABEL_W + STRIP_PLOT_W, "top": top}


def _seconds_label(s: float) -> str:
    if s >= 120:
        return f"{s / 60:.3g} min"
    return f"{s:.3g} s"


__all__ = ["forest", "short", "strip"]
