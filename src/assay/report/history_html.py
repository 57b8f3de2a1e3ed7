"""``assay history --html FILE``: one self-contained page, a trend plot per group.

Each group's plot puts its runs in time order on the x axis (one slot per run, so a nightly
series and a burst of runs in one afternoon read alike) and the headline on a 0–100% y axis:
the interval as a shaded band per series (a new series breaks the band: its runs are not
comparable with the ones before), the point estimate as a dot, a vertical marker where a
fingerprint changed (its names in the marker's title), a diamond where the served model changed
under the same name, and a red ring on a run flagged as drift. Geometry is computed here, as
plain numbers; the template only draws, with autoescape on (every label is run data).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_text
from assay.report.history_series import Group, History
from assay.report.history_words import (
    drift_rule,
    drift_text,
    headline_text,
    series_caption,
    served_text,
    served_words,
)
from assay.report.render import pct, render

PLOT_LEFT = 48
PLOT_W = 760
PLOT_TOP = 14
PLOT_H = 180
SLOT_MAX = 80


def _y(v: float) -> float:
    return round(PLOT_TOP + (1.0 - max(0.0, min(1.0, v))) * PLOT_H, 1)


def _pct(v: float | None) -> str:
    return pct(v, missing="—")


def _pts(x: float | None) -> str:
    """A difference of rates in signed points (n/a: unknown)."""
    return "n/a" if x is None else f"{100 * x:+.1f}"


def _interval(ci: list[float] | None) -> str:
    return "n/a" if not ci else f"{_pts(ci[0])}, {_pts(ci[1])}"


def plot(group: Group) -> dict[str, Any]:
    """The SVG geometry of one group's trend plot."""
    runs = [r for s in group["series"] for r in s["runs"]]
    n = len(runs)
    slot = min(SLOT_MAX, PLOT_W / max(n, 1))

    def x(i: int) -> float:
        return round(PLOT_LEFT + slot * (i + 0.5), 1)

    points, bands, markers, served, drifts = [], [], [], [], []
    i = 0
    for s in group["series"]:
        upper, lower = [], []
        for r in s["runs"]:
            h = r.get("headline")
            v, ci = (h["value"], h["ci"]) if h else (None, None)
            label = f"{r.get('started_at')} {Path(r['dir']).name}: {_pct(v)}"
            if ci:
                label += f" [{_pct(ci[0])}, {_pct(ci[1])}]"
                upper.append(f"{x(i)},{_y(ci[1])}")
                lower.append(f"{x(i)},{_y(ci[0])}")
            if v is not None:
                points.append({"x": x(i), "y": _y(v), "title": label})
            if r.get("changed"):
                markers.append({"x": x(i) - slot / 2, "title": "changed: "
                                + ", ".join(r["changed"])})
            sc = r.get("served_change")
            if sc and not sc.get("new_series"):
                what = "; ".join(f"{k}: {', '.join(d['before'])} → {', '.join(d['after'])}"
                                 for k, d in sc.items() if isinstance(d, dict))
                served.append({"x": x(i) - slot / 2, "y": PLOT_TOP + 4,
                               "title": f"served model changed under {sc.get('requested')}: "
                               + what})
            d = r.get("drift")
            if d and d.get("flagged") and v is not None:
                drifts.append({"x": x(i), "y": _y(v), "title":
                               f"drift {_pts(d.get('delta'))} pts, 95% CI "
                               f"[{_interval(d.get('ci'))}]"})
            i += 1
        if len(upper) == 1:  # one run: a band of one slot's width
            xs, (hi, lo) = float(upper[0].split(",")[0]), (upper[0], lower[0])
            yh, yl = hi.split(",")[1], lo.split(",")[1]
            w = slot * 0.3
            upper = [f"{xs - w},{yh}", f"{xs + w},{yh}"]
            lower = [f"{xs - w},{yl}", f"{xs + w},{yl}"]
        if upper:
            of = f"series {s['index'] + 1} of {len(group['series'])}"
            bands.append({"points": " ".join(upper + lower[::-1]),
                          "title": f"{of}: 95% interval"})
    line = " ".join(f"{p['x']},{p['y']}" for p in points)
    return {"w": PLOT_LEFT + PLOT_W + 10, "h": PLOT_TOP + PLOT_H + 24, "left": PLOT_LEFT,
            "right": PLOT_LEFT + PLOT_W, "top": PLOT_TOP, "bottom": PLOT_TOP + PLOT_H,
            "grid": [{"y": _y(v), "label": f"{int(v * 100)}%"} for v in (0, .25, .5, .75, 1)],
            "points": points, "bands": bands, "markers": markers, "served": served,
            "drifts": drifts, "line": line}


def tokens(text: str) -> list[str]:
    """``text`` as the pieces a line may break between: words, and a bracketed interval as
    one piece (the page draws each ``.whole``, so a name like ``acme-large-2026-02`` or an
    interval ``[69.2, 100.0]`` is never split at a hyphen or inside)."""
    return re.findall(r"\[[^\]]*\]|\S+", text)


def _series(group: Group) -> list[dict[str, Any]]:
    """Each series as a caption (what its runs share, why it began) and its runs: the narrow
    row the terminal prints (run, headline with interval, served model, drift) and the rest
    of the figures for the page's "more figures" table."""
    out = []
    for s in group["series"]:
        head, cells = series_caption(group, s)
        rows = []
        for r in s["runs"]:
            d = r.get("drift")
            rows.append({
                "dir": r["dir"], "name": Path(r["dir"]).name,
                "headline": tokens(headline_text(r)), "served": tokens(served_text(r)),
                "served_changed": bool(r.get("served_change")),
                "drift": tokens(drift_text(r)), "flagged": bool(d and d.get("flagged")),
                "when": r.get("started_at") or "?",
                "invalid": _pct(r.get("invalid_rate")), "infra": _pct(r.get("infra_rate")),
                "cost": (f"${r['cost_usd']:.4f}" if r.get("cost_usd") is not None
                         else f"{r['tokens']} tokens" if r.get("tokens") is not None
                         else "unknown"),
                "asked": r.get("model") or "—",
                "fingerprints": {k: v for k, v in (r.get("fingerprints") or {}).items() if v},
                "changed": r.get("changed") or []})
        began = cells.pop() if s["started_because"] else None  # words: may wrap between them
        out.append({"head": head, "cells": cells, "began": began, "runs": rows})
    return out


def render_history_html(h: History) -> str:
    groups = [{"title": f"{g['kind']} · {g['suite']} · {g['who']}", "runs": g["runs"],
               "plot": plot(g), "series": _series(g)} for g in h["groups"]]
    pairs = sum(r.get("drift") is not None for g in h["groups"] for s in g["series"]
                for r in s["runs"])
    changes = [{"words": tokens(served_words(dict(c))), "run": Path(c["dir"]).name, "dir": c["dir"]}
               for c in h.get("served_model_changes") or []]
    return render("history.html.j2", h=h, groups=groups, pairs=pairs, changes=changes,
                  rule=drift_rule(h.get("drift_threshold") or 0.0))


def write_history_html(path: Path, h: History) -> Path:
    """Write the page atomically (derived data: replaced at will)."""
    path = Path(path)
    atomic_write_text(path, render_history_html(h))
    return path
