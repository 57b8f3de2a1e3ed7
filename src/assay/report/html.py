"""A single-file HTML report for a narrow-task or coding run: one page, inline CSS and inline SVG,
no script, no font, no image, no external URL, so it opens anywhere and prints.

The page is drawn from the same report dict as report.json and report.md
(``build_report`` / ``build_coding_report``); nothing here reads a run directory. This module
turns the dict into a small view of preformatted strings and plot geometry, and the template
only lays that view out. Every string that came from a run (case and task ids, model names,
failure reasons, warnings) is data and reaches the page through Jinja2 autoescaping, never as
markup. Unknown figures print as "n/a", never as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from assay.report.coding_markdown import rubric_round_words
from assay.report.html_cases import failures_view, latency_plot, wrong_view
from assay.report.narrow import INVALID_COLUMN
from assay.report.render import NA, ci, num, pct, render
from assay.report.render.bars import interval_bar
from assay.report.render.numbers import RESUME_NOTE
from assay.report.render_narrow import agreement_basis, by_label, scorer_words

Kind = Literal["narrow", "coding"]
KINDS = ("narrow", "coding")
SCHEMAS = {"narrow": "assay.narrow.report/1", "coding": "assay.coding.report/1"}

# Long id lists are cut here: the full lists are in report.json.
MAX_IDS = 200
# Sample squares per line in the per-task table before they wrap.
SQUARES_PER_LINE = 25

BAR_W = 240  # interval bar width in px (the 0-100% axis)
MINI_W = 110  # per-label metric bar width in px


# --------------------------------------------------------------------------- formatting


def _when(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp) if stamp else None
    except ValueError:
        return None


def _window(started: str | None, ended: str | None) -> dict[str, str]:
    """Start, end and duration as text a person reads; a run without an end says so."""
    t0, t1 = _when(started), _when(ended)
    out = {"started": started or NA, "ended": ended or "not finished", "duration": "",
           "raw": f"{started or NA} → {ended or 'not finished'}"}
    if t0 is not None:
        out["started"] = t0.strftime("%Y-%m-%d %H:%M:%S") + _zone(t0)
    if t1 is not None:
        same_day = t0 is not None and t0.date() == t1.date() and t0.tzinfo == t1.tzinfo
        out["ended"] = t1.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S") + _zone(t1)
        if t0 is not None:
            try:
                out["duration"] = _duration((t1 - t0).total_seconds())
            except TypeError:  # one stamp has a zone, the other has not
                pass
    return out


def _zone(t: datetime) -> str:
    if t.tzinfo is None:
        return ""
    return " UTC" if t.utcoffset() == timedelta(0) else t.strftime(" %z")


def _duration(s: float) -> str:
    if s < 0:
        return ""
    if s < 60:
        return f"{s:.1f} s"
    m, s = divmod(round(s), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def _interval_bar(mean: float | None, lo: float | None = None,
                  hi: float | None = None) -> dict[str, Any] | None:
    """Geometry of a 0-100% bar with the mean filled and the 95% interval as a whisker."""
    return interval_bar(mean, lo, hi, width=BAR_W)


def _figure(label: str, iv: dict[str, Any] | None, note: str = "") -> dict[str, Any]:
    """A coding suite figure ({mean, ci95, tasks} from build_coding_report) for the page."""
    if not iv:
        return {"label": label, "value": NA, "interval": "", "bar": None, "note": note,
                "aria": f"{label}: {NA}"}
    lo, hi = iv["ci95"]
    return {"label": label, "value": pct(iv["mean"]), "interval": ci([lo, hi]),
            "bar": _interval_bar(iv["mean"], lo, hi), "note": note,
            "aria": f"{label}: {pct(iv['mean'])}, 95% interval {ci([lo, hi])}"}


def _served(served: dict[str, int]) -> list[dict[str, Any]]:
    return [{"name": k, "count": v} for k, v in served.items()]


def _capped(ids: Sequence[object]) -> dict[str, Any]:
    return {"shown": list(ids[:MAX_IDS]), "more": max(0, len(ids) - MAX_IDS), "total": len(ids)}


def _counts(d: dict[str, int]) -> list[dict[str, Any]]:
    return [{"name": k, "count": v} for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))]


# --------------------------------------------------------------------------- narrow


def _shade(count: int, top: int) -> float:
    """Cell opacity: visible at 1, full at the largest count in the table."""
    if not count or not top:
        return 0.0
    return round(0.12 + 0.68 * count / top, 3)


def _confusion(rep: dict[str, Any]) -> dict[str, Any]:
    labels: list[str] = list(rep["labels"])
    conf: dict[str, dict[str, int]] = rep["confusion"]
    rows = labels + [e for e in conf if e not in labels]
    cols = [*labels, INVALID_COLUMN]
    for e in rows:
        cols += [c for c in conf.get(e, {}) if c not in cols]
    top = max((v for e in rows for v in conf.get(e, {}).values()), default=0)
    out_rows = []
    for e in rows:
        row = conf.get(e, {})
        cells: list[dict[str, Any]] = []
        for c in cols:
            v = int(row.get(c, 0))
            tone = "hit" if c == e else "miss"
            cells.append({"count": v, "tone": tone if v else "zero", "alpha": _shade(v, top),
                          "dark": _shade(v, top) > 0.5,
                          "title": f"expected {e}, answered {c}: {v}"})
        out_rows.append({"expected": e, "cells": cells, "total": sum(c["count"] for c in cells)})
    col_totals = [sum(r["cells"][i]["count"] for r in out_rows) for i in range(len(cols))]
    return {"cols": cols, "rows": out_rows, "col_totals": col_totals,
            "total": sum(col_totals), "invalid": INVALID_COLUMN}


def _per_label(rep: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for label, m in rep["per_label"].items():
        metrics = []
        for key in ("precision", "recall", "f1"):
            v = m.get(key)
            metrics.append({"value": pct(v),
                            "bar": None if v is None else
                            {"w": MINI_W, "x": round(_clip(v) * MINI_W, 1)}})
        out.append({"label": label, "metrics": metrics, "support": m.get("support"),
                    "predicted": m.get("predicted")})
    return out


def _narrow_view(rep: dict[str, Any]) -> dict[str, Any]:
    lat = rep["latency_ms"]
    usage = rep["usage"]
    ci95 = rep["accuracy_ci95"]
    acc_bar = _interval_bar(rep["accuracy"], *(ci95 or (None, None)))
    figures = [
        ("cases × repeats answered", f"{rep['n']} of {rep['expected_rows']}", ""),
        ("correct", str(rep["correct"]), ""),
        ("invalid on first try", str(rep["invalid_first_try"]),
         "before the format retry" if rep["invalid_first_try"] else ""),
        ("format retries sent", str(rep["retried"]), ""),
    ]
    if rep["missing_rows"]:
        figures.insert(1, ("not yet answered", str(rep["missing_rows"]),
                           RESUME_NOTE))
    agreement = None
    if rep.get("agreement"):
        ag = rep["agreement"]
        agreement = {
            "rate": pct(ag["rate"]),
            "bar": _interval_bar(ag["rate"]),
            "consistent": ag["consistent_cases"], "full": ag["cases_with_all_repeats"],
            "words": agreement_basis(ag),
            "unstable": _capped(ag["unstable_cases"]),
        }
    tokens = {
        "total": num(usage.get("total_tokens")), "prompt": num(usage.get("prompt_tokens")),
        "completion": num(usage.get("completion_tokens")),
        "incomplete": bool(usage.get("incomplete")),
        "rows_missing": usage.get("rows_missing_usage", 0),
    }
    params = rep.get("parameters") or {}
    shown_params = [(k, v) for k, v in params.items()
                    if v is None or isinstance(v, str | int | float | bool)]
    return {
        "accuracy": {"value": pct(rep["accuracy"]), "interval": ci(ci95), "bar": acc_bar,
                     "correct": rep["correct"], "n": rep["n"],
                     "aria": f"accuracy {pct(rep['accuracy'])}, 95% Wilson interval {ci(ci95)}"},
        "figures": [{"label": a, "value": b, "note": c} for a, b, c in figures],
        "invalid_remaining": rep["invalid_remaining"],
        "infra_errors": rep["infra_errors"],
        "latency": {"p50": num(lat.get("p50")), "p95": num(lat.get("p95")),
                    "max": num(lat.get("max"))},
        "tokens": tokens,
        "invalid_reasons": _counts(rep.get("invalid_reasons") or {}),
        "confusion": _confusion(rep),
        "per_label": _per_label(rep),
        "agreement": agreement,
        "infra_ids": _capped(rep.get("infra_error_ids") or []),
        "labels_source": rep.get("labels_source") or NA,
        "fingerprints": list(rep.get("system_fingerprints") or []),
        "params": [{"name": k, "value": "not set" if v is None else str(v)}
                   for k, v in shown_params],
        "wrong": wrong_view(rep),
        "latency_plot": latency_plot(lat, "answer"),
        "by_label": by_label(rep),
        "scorer": scorer_words(rep),
        "per_field": _per_field(rep),
    }


def _per_field(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """Each field of a json_fields run: its accuracy as a bar with the Wilson interval."""
    out = []
    for path, f in (rep.get("per_field") or {}).items():
        iv = f.get("accuracy_ci95")
        out.append({"field": path, "right": f["correct"], "n": f["n"],
                    "value": pct(f["accuracy"]), "interval": ci(iv),
                    "bar": _interval_bar(f["accuracy"], *(iv or (None, None))),
                    "aria": f"{path}: {pct(f['accuracy'])}, 95% Wilson interval {ci(iv)}"})
    return out


# --------------------------------------------------------------------------- coding


def _squares(passes: int, fails: int, infra: int) -> dict[str, Any]:
    """Passes, then failures, then infra errors, as squares that wrap every SQUARES_PER_LINE."""
    kinds = ["pass"] * passes + ["fail"] * fails + ["infra"] * infra
    size, gap = 11, 3
    cells = [{"kind": k, "x": (i % SQUARES_PER_LINE) * (size + gap),
              "y": (i // SQUARES_PER_LINE) * (size + gap)} for i, k in enumerate(kinds)]
    per_line = min(len(kinds), SQUARES_PER_LINE)
    lines = -(-len(kinds) // SQUARES_PER_LINE)
    return {"cells": cells, "size": size, "w": max(0, per_line * (size + gap) - gap),
            "h": max(0, lines * (size + gap) - gap)}


def _rubric_outcome(t: dict[str, Any]) -> str:
    """A rubric task's cell: graded answers that pass, or how many wait for a grade."""
    n, graded = t["rubric_answers"], t.get("rubric_graded", 0)
    if not graded:
        return f"{n} answer{'' if n == 1 else 's'} for grading"
    return (f"{t.get('rubric_passes', 0)} of {graded} graded pass"
            + (f", {n - graded} ungraded" if n > graded else ""))


def _coding_view(rep: dict[str, Any]) -> dict[str, Any]:
    n_all = rep["pass_all_k"]
    at_least = [_figure("pass@1", rep["pass_at_1"], "mean pass rate over samples")]
    at_least += [_figure(f"pass@{k}", iv, f"at least one of {k} samples passes (unbiased)")
                 for k, iv in rep["pass_at_k"].items() if k != "1"]
    every = [_figure(f"pass^{k}", iv, f"all of {k} samples pass (unbiased)")
             for k, iv in rep["pass_hat_k"].items() if k not in ("1", str(n_all))]
    every.append(_figure(f"pass^{n_all or 'n'}", rep["pass_all"],
                         "every sample of the task passes"))
    groups = [{"title": "pass@k: at least one of k samples passes", "figures": at_least},
              {"title": "pass^k: every one of k samples passes", "figures": every}]
    mixed = set(rep["mixed_tasks"])
    tasks = []
    for t in rep["tasks"]:
        rubric = t["type"] == "rubric"
        fails = t["samples"] - t["passes"]
        tasks.append({
            "id": t["id"], "type": t["type"] or NA, "rubric": rubric,
            "mixed": t["id"] in mixed or bool(t.get("mixed")),
            "outcome": (_rubric_outcome(t) if rubric else f"{t['passes']} of {t['samples']}"),
            "squares": None if rubric else _squares(t["passes"], fails, t["infra_errors"]),
            "failures": list(t["failures"]), "infra_errors": t["infra_errors"],
            "state": ("rubric" if rubric else "none" if not t["samples"] else
                      "pass" if t["passes"] == t["samples"] else
                      "fail" if t["passes"] == 0 else "mixed"),
        })
    rub = rep["rubric"]
    mean = rub.get("mean_score")
    rubric = None
    if rub["answers"]:
        rubric = {"answers": rub["answers"], "graded": rub["graded"],
                  "ungraded": rub["ungraded"], "scale": rub.get("scale", "0-3"),
                  "pass_score": rub.get("pass_score", 2), "passed": rub.get("passed", 0),
                  "round_words": rubric_round_words(rub), "grades": rub.get("grades") or [],
                  "mean": NA if mean is None else f"{mean:.2f}",
                  "bar": None if mean is None else _interval_bar(mean / 3)}
    counts = {s: sum(1 for t in tasks if t["state"] == s) for s in ("pass", "mixed", "fail")}
    failures = failures_view(rep)
    details = {f["id"]: f["anchor"] for f in (failures or {}).get("tasks", []) if f["detailed"]}
    for t in tasks:
        t["details"] = details.get(t["id"])
    lat = rep.get("latency_ms") or {}
    return {
        "groups": groups,
        "summary": [
            {"label": "tasks auto-graded", "value": str(rep["auto_graded_tasks"]), "note": ""},
            {"label": "samples per task", "value": str(rep["samples_per_task"]), "note": ""},
            {"label": "tasks: all pass / mixed / all fail",
             "value": f"{counts['pass']} / {counts['mixed']} / {counts['fail']}", "note": ""},
            {"label": "infra errors", "value": str(rep["infra_errors"]),
             "note": "excluded from the pass rates"},
            {"label": "latency p50 / p95 / max",
             "value": f"{num(lat.get('p50'))} / {num(lat.get('p95'))} / {num(lat.get('max'))} ms",
             "note": "each sample's request"},
        ] + ([{"label": "not yet answered", "value": str(rep["missing_rows"]),
               "note": RESUME_NOTE}] if rep["missing_rows"] else []),
        "failure_reasons": _counts(rep.get("failure_reasons") or {}),
        "mixed": _capped([{"id": t["id"], "anchor": f"task-{i}"}
                          for i, t in enumerate(tasks, start=1) if t["mixed"]]),
        "tasks": tasks,
        "rubric": rubric,
        "failures": failures,
        "latency_plot": latency_plot(rep.get("latency_ms"), "sample"),
    }


# --------------------------------------------------------------------------- entry points


def render_html(report: dict[str, Any], kind: Kind) -> str:
    """The whole report as one self-contained HTML page.

    ``report`` is the dict from ``build_report`` (kind ``"narrow"``) or ``build_coding_report``
    (kind ``"coding"``).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be 'narrow' or 'coding', not {kind!r}")
    schema = report.get("schema")
    if schema is not None and schema != SCHEMAS[kind]:
        raise ValueError(f"a {schema!r} report cannot be drawn as kind {kind!r}")
    page = {
        "kind": kind,
        "title": f"{report['suite'] or '(unnamed suite)'} × {report['model']}",
        "suite": report["suite"] or "(unnamed suite)",
        "model": report["model"],
        "run_id": report["run_id"],
        "window": _window(report.get("started_at"), report.get("ended_at")),
        "warnings": list(report.get("warnings") or []),
        "not_isolated": bool(report.get("not_isolated")),
        "served": _served(report.get("served_models") or {}),
        "schema": schema or NA,
    }
    if report.get("isolation_note"):
        page["warnings"].append(str(report["isolation_note"]))
    if report.get("torn_tail_bytes"):
        page["warnings"].append(f"The rows file ends in a torn line ({report['torn_tail_bytes']} "
                                "bytes, an interrupted write) that was not counted.")
    view = _narrow_view(report) if kind == "narrow" else _coding_view(report)
    return render("report.html.j2", page=page, v=view)


def write_html(run_dir: Path, report: dict[str, Any], kind: Kind) -> Path:
    """Write ``run_dir/report.html`` atomically (reports are derived data, replaced at will)."""
    from assay.records.io import atomic_write_text

    path = run_dir / "report.html"
    atomic_write_text(path, render_html(report, kind))
    return path
