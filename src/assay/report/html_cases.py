"""The page view of the wrong answers and of the latency distribution, for ``report.html``.

Split from ``html`` (the rest of the page) to keep each module one screenful of purpose. As
there, this only turns the report dict into preformatted strings and plot geometry; every
string from the run reaches the page through Jinja2 autoescaping, inside ``<pre>`` or
``<code>``, never as markup.
"""

from __future__ import annotations

from typing import Any

from assay.report.cases_markdown import (
    MAX_DETAILED,
    MAX_TABLE,
    SHOW_CHARS,
    SHOW_TAIL,
    no_failed_tasks_sentence,
    shown,
)
from assay.report.coding_cases import PATTERN_WORDS as TASK_WORDS
from assay.report.narrow_cases import pattern_words, short_answer
from assay.report.render.numbers import NA, num

PLOT_W, PLOT_H = 600, 120  # plot area of the latency histogram, px
PAD_L, PAD_T, PAD_B = 44, 44, 28  # room for the count axis, the marker labels, the ms axis
MARKS = ("p50", "p90", "p99")


def _text(cut: dict[str, Any], tail: bool = False) -> dict[str, Any]:
    text, note = shown(cut, SHOW_TAIL if tail else SHOW_CHARS, tail=tail)
    return {"text": text, "note": note}


def wrong_view(rep: dict[str, Any]) -> dict[str, Any] | None:
    """The narrow report's listed cases; None for a report written before they were listed."""
    cases = rep.get("wrong_cases")
    if cases is None:
        return None
    by_label = (rep.get("scorer") or {}).get("type", "label") == "label"
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["pattern"]] = counts.get(c["pattern"], 0) + 1
    out = []
    for i, c in enumerate(cases[:MAX_TABLE], start=1):
        out.append({
            "n": i, "anchor": f"wrong-{i}", "detailed": i <= MAX_DETAILED,
            "id": c["id"], "expected": c["expected"], "pattern": c["pattern"],
            "words": pattern_words(c["pattern"], by_label),
            "right": c["right"], "repeats": c["repeats"],
            "parsed": ", ".join(short_answer(a) for a in c["answers"]),
            "input": _text(c["input"]),
            "answers": [{"repeat": a["repeat"], "verdict": a["verdict"], "reason": a["reason"],
                         "parsed": a["parsed"], "finish": a["finish_reason"],
                         "latency": num(a["latency_ms"]),
                         "raws": [_text(r) for r in a["answers"]]} for a in c["answers"]],
        })
    return {"total": len(cases), "cases": out, "more_table": max(0, len(cases) - MAX_TABLE),
            "more_detail": max(0, min(len(cases), MAX_TABLE) - MAX_DETAILED),
            "counts": [{"name": pattern_words(k, by_label), "count": v}
                       for k, v in counts.items()],
            "noun": "label" if by_label else "answer",
            "inputs_source": rep.get("inputs_source")}


def failures_view(rep: dict[str, Any]) -> dict[str, Any] | None:
    """The coding report's listed tasks; None for a report written before they were listed."""
    tasks = rep.get("failed_tasks")
    if tasks is None:
        return None
    out = []
    for i, t in enumerate(tasks[:MAX_TABLE], start=1):
        samples = []
        for s in t["failed"]:
            code = _text(s["code"])
            if not (code["text"] or "").strip():
                code = {**_text(s["raw"]), "label": "raw answer (no code extracted)"}
            else:
                code["label"] = "code graded"
            samples.append({
                "sample": s["sample"], "verdict": s["verdict"], "reason": s["reason"],
                "explanation": s["explanation"], "failing": list(s["failing_tests"]),
                "exit_code": NA if s["exit_code"] is None else str(s["exit_code"]),
                "wall": NA if s["wall_seconds"] is None else f"{s['wall_seconds']:.2f} s",
                "code": code, "stderr": _text(s["stderr_tail"], tail=True),
                "stdout": _text(s["stdout_tail"], tail=True),
            })
        out.append({"n": i, "anchor": f"failed-{i}", "detailed": i <= MAX_DETAILED,
                    "id": t["id"], "type": t["type"] or NA, "pattern": t["pattern"],
                    "words": TASK_WORDS.get(t["pattern"], t["pattern"]),
                    "passes": t["passes"], "samples": t["samples"],
                    "infra": t["infra_errors"], "failed": samples})
    return {"total": len(tasks), "tasks": out, "none": no_failed_tasks_sentence(rep),
            "more_table": max(0, len(tasks) - MAX_TABLE),
            "more_detail": max(0, min(len(tasks), MAX_TABLE) - MAX_DETAILED)}


def _ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 or x == int(x) else f"{x:,.2f}".rstrip("0").rstrip(".")


def latency_plot(lat: dict[str, Any] | None, unit: str) -> dict[str, Any] | None:
    """Geometry of the latency histogram with p50 / p90 / p99 marked; None when the report has
    no histogram (nothing measured, or a report written before it was computed)."""
    hist = (lat or {}).get("histogram")
    if not hist or not hist.get("n"):
        return None
    counts: list[int] = hist["counts"]
    start, width = float(hist["start_ms"]), float(hist["bin_ms"])
    span = width * len(counts)
    top = max(counts)
    bw = PLOT_W / len(counts)
    bars = []
    for i, c in enumerate(counts):
        if not c:
            continue
        h = round(c / top * PLOT_H, 1)
        lo, hi = start + i * width, start + (i + 1) * width
        bars.append({"x": round(PAD_L + i * bw, 2), "w": round(max(1.0, bw - 1), 2),
                     "y": round(PAD_T + PLOT_H - h, 1), "h": h, "count": c,
                     "title": f"{_ms(lo)}–{_ms(hi)} ms: {c} {unit}{'s' if c != 1 else ''}"})
    marks: list[dict[str, Any]] = []
    for row, key in enumerate(MARKS):
        v = lat.get(key) if lat else None
        if v is None:
            continue
        x = round(PAD_L + min(1.0, max(0.0, (float(v) - start) / span)) * PLOT_W, 1)
        marks.append({"key": key, "x": x, "label": f"{key} {_ms(float(v))} ms",
                      "label_y": 12 + row * 13, "anchor": "end" if x > PAD_L + PLOT_W * 0.8
                      else "start"})
    shown_marks = ", ".join(m["label"] for m in marks)
    return {
        "w": PAD_L + PLOT_W + 8, "h": PAD_T + PLOT_H + PAD_B, "x0": PAD_L, "y0": PAD_T,
        "pw": PLOT_W, "ph": PLOT_H, "bars": bars, "marks": marks, "n": hist["n"],
        "top": top, "axis": [{"x": PAD_L, "label": _ms(start), "anchor": "start"},
                             {"x": PAD_L + PLOT_W / 2, "label": _ms(start + span / 2),
                              "anchor": "middle"},
                             {"x": PAD_L + PLOT_W, "label": f"{_ms(start + span)} ms",
                              "anchor": "end"}],
        "bin": _ms(width), "unit": unit,
        "aria": f"latency of {hist['n']} {unit}s in bins of {_ms(width)} ms"
                + (f"; {shown_marks}" if shown_marks else ""),
        "figures": " · ".join(f"{k} {num(lat.get(k)) if lat else NA}"
                              for k in ("p50", "p90", "p95", "p99", "max")) + " ms",
    }
