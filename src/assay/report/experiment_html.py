"""The experiment report as one self-contained HTML page: inline CSS and SVG, no script, nothing
fetched, so it can be attached to a review, opened offline and printed.

Drawn from the report dict (schema ``assay.experiment.report/2``) and nothing else: a page that
read the run directory could disagree with report.json. The order follows what a reviewer asks
first: the decision and the bar it was held to, then how sure (the forest plot of per-task
differences beside the overall interval), then what it costs, how long it takes, what broke and
how much of the plan the estimate rests on, then every task with links to its trials' records.

Every string from the run (task, arm and family names, failure codes, reasons, notes) is data
and reaches the page through Jinja2 autoescaping; links are built only from the report's own
``trials/<task>/<arm>/<rep>/<attempt>`` shape, percent-encoded segment by segment, and refused
when a segment would walk out of that folder. Unknown figures print "n/a", never 0.

The module runs past 400 lines because it holds one small view function per section of the
page, in page order; split up, they would only hand the same report dict between files. The
plots' geometry, which has arithmetic worth its own tests, lives in ``experiment_plots``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from assay.records.io import atomic_write_text
from assay.report.experiment_plots import forest, short, strip
from assay.report.holdout import reused_banner
from assay.report.methods import METHOD_WORDS, if_it_fails
from assay.report.noise_floor import noise_floor_markdown
from assay.report.render import NA, count, interval_bar, pct, pct_ci, pts, pts_ci, render, usd
from assay.report.render.numbers import secs

SCHEMA = "assay.experiment.report/2"
BAR_W = 220  # pass-rate interval bar, the 0-100% axis in px
METHODS = METHOD_WORDS
COST_STATUS = {"ok": "complete", "lower_bound": "lower bound: some usage was not reported",
               "not_computable": "not computable: no accepted trial",
               "unknown": "unknown: no usage recorded"}
_SEGMENT = re.compile(r"^(?!\.{1,2}$)[^/\\]+$")


# --------------------------------------------------------------------------- formatting


def version(v: Any) -> str:
    """The manifest's ``assay`` entry: a version string, or {version, git_commit, ...}."""
    if isinstance(v, dict):
        out = str(v.get("version") or NA)
        if v.get("git_commit"):
            out += f" ({str(v['git_commit'])[:12]}{', dirty' if v.get('git_dirty') else ''})"
        return out
    return NA if v is None else str(v)


def trial_href(link: str | None) -> str | None:
    """``trials/<task>/<arm>/<rep>/<attempt>`` → its record, percent-encoded; anything of
    another shape (or a segment such as ``..``) gets no link rather than a wrong one."""
    if not link:
        return None
    parts = str(link).split("/")
    if len(parts) != 5 or parts[0] != "trials" or not all(_SEGMENT.match(p) for p in parts):
        return None
    return "/".join(quote(p, safe="") for p in parts) + "/trial.json"


def attempt_link(trial: dict[str, Any], attempt: str) -> str:
    return f"trials/{trial['task']}/{trial['arm']}/{trial['rep']}/{attempt}"


# --------------------------------------------------------------------------- sections


def _verdict(rep: dict[str, Any]) -> dict[str, Any]:
    v = rep.get("verdict")
    if v is None:
        why = ("no bar in the experiment file" if rep.get("bar") is None else
               "the arms to compare are not known" if rep.get("comparison") is None else
               "no decision was recorded")
        return {"decision": None, "why": why}
    checks = [{"name": c.get("name") or NA, "if_it_fails": if_it_fails(bool(c.get("hard"))),
               "want": c.get("want") or NA, "observed": c.get("observed") or NA,
               "ok": c.get("ok"),
               "mark": "n/a" if c.get("ok") is None else "ok" if c["ok"] else "fails"}
              for c in v.get("checks") or []]
    return {"decision": v.get("decision") or NA, "reasons": list(v.get("reasons") or []),
            "checks": checks, "note": v.get("note"),
            "settle": v.get("tasks_to_settle")}


def _bar(rep: dict[str, Any]) -> list[dict[str, str]] | None:
    b = rep.get("bar")
    if b is None:
        return None

    def rel(x: float | None) -> str:
        return "not set" if x is None else f"+{100 * x:.0f}% at most"

    rows = [("primary", str(b.get("primary") or NA)),
            ("hoped improvement", pts(b.get("hoped_improvement"))),
            ("largest regression allowed (lower bound above)",
             pts(None if b.get("max_regression") is None else -b["max_regression"])),
            ("cost per completed task", rel(b.get("max_cost_increase"))),
            ("integrity violations in the candidate",
             count(b.get("integrity_violations"))),
            ("new failures allowed",
             "not set" if b.get("max_new_failures") is None else str(b["max_new_failures"])),
            ("bar sha256", str(b.get("sha256") or NA))]
    return [{"name": k, "value": v} for k, v in rows]


def _interval_bar(mean: float | None, iv: list[float | None] | None) -> dict[str, Any] | None:
    lo, hi = (iv[0], iv[1]) if iv else (None, None)
    return interval_bar(mean, lo, hi, width=BAR_W)


def _arms(rep: dict[str, Any]) -> list[dict[str, Any]]:
    cmp = rep.get("comparison") or {}
    out = []
    for name, a in rep["arms"].items():
        cost = (cmp.get("cost") or {}).get(name)
        lat = (cmp.get("latency") or {}).get(name)
        role = "A (baseline)" if cmp.get("a") == name else \
            "B (candidate)" if cmp.get("b") == name else ""
        total = a.get("cost_usd") if cost is None else cost.get("total_usd")
        complete = a.get("cost_complete") if cost is None else cost.get("complete")
        status = None if cost is None else cost.get("status")
        per = None if cost is None else cost.get("per_completed_usd")
        per_text = NA if per is None else usd(per)
        if status == "lower_bound" and per is not None:
            per_text = f"≥ {usd(per)}"
        elif status == "not_computable":
            per_text = "not computable"
        tokens = a.get("tokens") or {}
        out.append({
            "name": name, "role": role,
            "planned": count(a.get("planned")), "graded": count(a.get("graded")),
            "accepted": count(a.get("accepted")),
            "of_graded": pct(a.get("pass_rate_of_graded")),
            **_rate(name, a),
            "coverage": pct(a.get("coverage")),
            "attempts": count(a.get("attempts")),
            "infra": count(a.get("infra_error_attempts")),
            "infra_rate": pct(a.get("infra_error_rate")),
            "interrupted": count(a.get("interrupted_attempts")),
            "failure_codes": [{"code": k, "n": v} for k, v in
                              sorted((a.get("failure_codes") or {}).items(),
                                     key=lambda kv: (kv[0] == "accepted", -kv[1], kv[0]))
                              if k != "accepted"],
            "integrity": count((cmp.get("integrity") or {}).get(name,
                                                                a.get("integrity_violations"))),
            "interventions": count((cmp.get("interventions") or {}).get(
                name, a.get("interventions"))),
            "total_usd": (a["cost_note"] if a.get("unpriced_model") else usd(total)),
            "complete": complete,
            "per_completed": per_text,
            "cost_status": (COST_STATUS.get(status, status)
                            + (f" ({a['cost_note']})" if a.get("cost_note") else "")
                            if status else
                            ("complete" if complete else a.get("cost_note") or
                             "lower bound: some usage was not reported")
                            if total is not None else "no usage recorded"),
            "cost_bad": status in ("lower_bound", "not_computable", "unknown") or
                        (status is None and not complete),
            "calls": count(a.get("calls")), "usage_missing": a.get("usage_missing_calls") or 0,
            "tokens_in": count(tokens.get("input")), "tokens_out": count(tokens.get("output")),
            "latency": _latency(lat),
            "judge": _judge_text(a.get("judge")),
        })
    return out


def _judge_text(j: dict[str, Any] | None) -> str | None:
    """One line of an arm's ``acceptance.judge`` checks, with each judge's calibration (or
    "uncalibrated"); None when its tasks have no judge check."""
    if not j:
        return None
    mean = NA if j.get("mean_score") is None else f"{j['mean_score']:.2f}"
    cal = ", ".join(f"judge {r}: {c}" for r, c in (j.get("calibration") or {}).items())
    can = "can reject" if True in (j.get("required") or []) else "recorded, rejects nothing"
    return (f"{j.get('checked')} checked: {j.get('pass')} pass, {j.get('fail')} fail, "
            f"{j.get('error')} error; mean score {mean}; {can}; {cal}")


def _rate(name: str, a: dict[str, Any]) -> dict[str, Any]:
    """The arm's headline pass rate: task-weighted over the compared tasks with its interval
    over clusters when the report has it (``pass_rate``), else over graded trials (Wilson)."""
    weighted = "pass_rate" in a
    rate = a.get("pass_rate") if weighted else a.get("pass_rate_of_graded")
    iv = a.get("pass_rate_ci")
    # the plain words beside the figure; how its interval was made goes to the footnote
    how = "each compared task weighted the same" if weighted else "over graded trials"
    method = ("a t interval over the tasks (or their groups)" if weighted else
              "a Wilson interval")
    return {"rate": pct(rate), "ci": pct_ci(iv), "bar": _interval_bar(rate, iv),
            "rate_how": how, "rate_method": method, "weighted": weighted,
            "aria": f"{name}: pass rate {pct(rate)}, 95% interval {pct_ci(iv)} ({how}; "
                    f"{method})"}


def _percentiles(p: dict[str, Any]) -> str:
    """p50 / p90 / max; one that falls on a killed attempt is censored, not a runtime."""
    censored = set(p.get("censored") or [])
    return " / ".join("censored" if k in censored else secs(p.get(k))
                      for k in ("p50", "p90", "max"))


def _latency(lat: dict[str, Any] | None) -> dict[str, Any] | None:
    if lat is None:
        return None
    al, acc = lat.get("all") or {}, lat.get("accepted") or {}
    return {"attempts": count(lat.get("attempts")), "timeouts": count(lat.get("timeouts")),
            "timeout_rate": pct(lat.get("timeout_rate")),
            "all": _percentiles(al), "accepted": _percentiles(acc),
            "censored": bool(al.get("censored") or acc.get("censored"))}


def _runtimes(rep: dict[str, Any]) -> dict[str, Any]:
    """Every attempt's runtime per arm: the comparison's lists when it has them, else read off
    the trials' attempts (the same figures, for a report without a comparison)."""
    lat = (rep.get("comparison") or {}).get("latency") or {}
    arms = []
    for name in rep["arms"]:
        if name in lat:
            seconds = list(lat[name].get("seconds") or [])
            killed = list(lat[name].get("timed_out") or [False] * len(seconds))
        else:
            atts = [a for t in rep["trials"] if t["arm"] == name for a in t["attempts"]]
            seconds = [a.get("seconds") for a in atts]
            killed = [bool(a.get("timed_out")) for a in atts]
        arms.append({"arm": name, "seconds": seconds, "timed_out": killed[:len(seconds)] +
                     [False] * (len(seconds) - len(killed))})
    plot = strip(arms)
    for row in plot["rows"]:
        row["timeouts"] = sum(1 for m in row["marks"] if m["timed_out"])
        row["n"] = len(row["marks"]) + row["unknown"]
    return plot


def _comparison(rep: dict[str, Any]) -> dict[str, Any] | None:
    cmp = rep.get("comparison")
    if cmp is None:
        return None
    bar = rep.get("bar") or {}
    marks = []
    if bar.get("hoped_improvement") is not None:
        marks.append((f"hoped {pts(bar['hoped_improvement'])}",
                      float(bar["hoped_improvement"])))
    if bar.get("max_regression") is not None:
        marks.append((f"largest regression {pts(-bar['max_regression'])}",
                      -float(bar["max_regression"])))
    per_task = list(cmp.get("per_task") or [])
    plot = forest(per_task, cmp.get("delta"), cmp.get("ci"), marks)
    for row, t in zip(plot["rows"], per_task, strict=True):
        row["note"] = f"{pct(t.get('p_a'))} → {pct(t.get('p_b'))}"
        row["n_text"] = f"n {count(t.get('n_a'))}/{count(t.get('n_b'))}"
        row["title"] = (f"{t['task']} ({t.get('cluster') or NA}): Δ {pts(t.get('diff'))}, "
                        f"A {t.get('passed_a')}/{t.get('n_a')}, B {t.get('passed_b')}/"
                        f"{t.get('n_b')}")
    cov = cmp.get("coverage") or {}
    new = cmp.get("new_failures") or {}
    mc = cmp.get("mcnemar")
    trig = cmp.get("triggered") or {}
    return {
        "a": cmp.get("a"), "b": cmp.get("b"),
        "delta": pts(cmp.get("delta")), "ci": pts_ci(cmp.get("ci")),
        "level": f"{100 * float(cmp.get('level') or 0.95):g}%",
        "method": cmp.get("method") or NA,
        "method_text": METHODS.get(cmp.get("method") or "", cmp.get("method") or NA),
        "n_tasks": count(cmp.get("n_tasks")), "n_clusters": count(cmp.get("n_clusters")),
        "cluster_by": cmp.get("cluster_by") or NA,
        "se": NA if cmp.get("se") is None else f"{100 * cmp['se']:.1f} pts",
        "df": count(cmp.get("df")),
        "plot": plot,
        "aria": (f"forest plot: {len(per_task)} tasks, overall Δ {pts(cmp.get('delta'))}, "
                 f"interval {pts_ci(cmp.get('ci'))}"),
        "left_out": [{"task": lo["task"], "cluster": lo.get("cluster") or NA,
                      "missing": ", ".join(lo.get("missing_arms") or []) or NA}
                     for lo in cmp.get("left_out") or []],
        "coverage": {"compared": count(cov.get("compared")), "planned": count(cov.get("planned")),
                     "fraction": pct(cov.get("fraction"))},
        "new_failures": [{"cluster": c, "tasks": list(ts)} for c, ts in new.items() if ts],
        # clustered by task, each group is one task named after itself: list them flat
        "new_flat": all(list(ts) == [c] for c, ts in new.items() if ts),
        "subgroup": cmp.get("subgroup"),
        "new_failures_n": sum(len(ts) for ts in new.values()),
        "mcnemar": None if mc is None else
        {"b": mc.get("b"), "c": mc.get("c"),
         "p": NA if mc.get("p_value") is None else f"{mc['p_value']:.3g}"},
        # drawn only for a run that watches for a mechanism (an arm's trigger_event): without
        # one every trial is "unknown" and the table would say nothing about the run
        "triggered": [{"arm": k, "triggered": count(v.get("triggered")),
                       "not_triggered": count(v.get("not_triggered")),
                       "unknown": count(v.get("unknown"))} for k, v in trig.items()]
        if any(v.get("triggered") or v.get("not_triggered") for v in trig.values()) else [],
        "by_task": cmp.get("cluster_by") in (None, "task"),
        "notes": list(cmp.get("notes") or []),
    }


def _holdout(rep: dict[str, Any]) -> dict[str, Any] | None:
    h = rep.get("holdout")
    if h is None:
        return None
    looks = h.get("looks")
    return {"looks": count(looks),
            "times": NA if looks is None else f"{looks} time{'' if looks == 1 else 's'}",
            "max_looks": count(h.get("max_looks")), "tasks": count(h.get("tasks")),
            "reused": bool(h.get("reused")), "ledger": h.get("ledger") or NA,
            "by": [{k: str(b.get(k) if b.get(k) is not None else NA)
                    for k in ("when", "who", "experiment")} |
                   {"arms": ", ".join(map(str, b.get("arms") or [])) or NA}
                   for b in h.get("by") or []]}


def _tasks(rep: dict[str, Any], pages: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row per task, a cell per arm with each trial's outcome linked to its record and,
    when ``pages`` (``trial_html.write_trial_pages``) has them, to its trial page; a task
    where the compared arms disagree links to its side-by-side page."""
    page_of = (pages or {}).get("pages") or {}
    compare = (pages or {}).get("compare") or {}
    arms = list(rep["arms"])
    cmp = rep.get("comparison") or {}
    diffs = {t["task"]: t for t in cmp.get("per_task") or []}
    left = {t["task"]: t for t in cmp.get("left_out") or []}
    by_task: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    order: list[str] = []
    for t in rep["trials"]:
        if t["task"] not in by_task:
            order.append(t["task"])
        by_task[t["task"]][t["arm"]].append(t)
    rows = []
    for task in order:
        cells = []
        for arm in arms:
            trials = sorted(by_task[task].get(arm, []), key=lambda t: t["rep"])
            items = []
            for t in trials:
                links = [t["link"]] if t.get("link") else \
                    [attempt_link(t, a["attempt"]) for a in t["attempts"]]
                kind = ("pass" if t.get("accepted") else "fail") if t["state"] == "graded" \
                    else "none"
                label = ("passed" if kind == "pass" else
                         f"failed: {t.get('failure_code') or NA}" if kind == "fail" else
                         t["state"])
                checks = [f"{name}: {line}" for name, lines in (t.get("check_lines") or {}).items()
                          for line in lines] if kind == "fail" else []
                items.append({"rep": t["rep"], "kind": kind, "label": label, "checks": checks,
                              "links": [{"href": trial_href(li), "text": li.split("/")[-1],
                                         "page": page_of.get(li)} for li in links],
                              "attempts": len(t["attempts"])})
            graded = [t for t in trials if t["state"] == "graded"]
            cells.append({"arm": arm, "trials": items,
                          "summary": (f"{sum(bool(t.get('accepted')) for t in graded)} of "
                                      f"{len(graded)}" if graded else NA)})
        d = diffs.get(task)
        cluster = (d or left.get(task) or {}).get("cluster")
        rows.append({"task": task, "cluster": NA if cluster is None else str(cluster),
                     "cells": cells, "compare": compare.get(task),
                     "diff": pts(None if d is None else d.get("diff")),
                     "left_out": task in left, "sign": _sign(None if d is None else
                                                             d.get("diff"))})
    # Clustered by task, the cluster column would only repeat the task's name.
    show = any(r["cluster"] not in (NA, r["task"]) for r in rows)
    return {"arms": arms, "rows": rows, "show_cluster": show}


def _sign(x: float | None) -> str:
    if x is None:
        return "na"
    return "up" if x > 0 else "down" if x < 0 else "zero"


# --------------------------------------------------------------------------- entry points


def _preference_line(report: dict[str, Any]) -> list[str]:
    """The judge preference (the experiment's pairwise check) as one line among the notes;
    the full section is in report.md and report.json."""
    jp = report.get("judge_preference")
    if not jp:
        return []
    if jp.get("preference") is None:
        return [f"Judge preference: {jp.get('error') or 'no pair valid in both orders'}"]
    bias = (jp.get("position_bias") or {}).get("rate")
    ci = jp.get("ci")
    ci_s = f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci and None not in ci else "none"
    cal = (jp.get("judge") or {}).get("calibration")
    return [f"Judge preference of B over A: {jp['preference']:+.2f} (interval {ci_s}) over "
            f"{jp.get('n_tasks')} "
            f"task(s); position bias {NA if bias is None else f'{bias:.0%}'}; judge "
            f"{'uncalibrated' if not isinstance(cal, dict) else 'calibrated'}"
            + (f"; last session: {jp['error']}" if jp.get("error") else "")]


def _looks(report: dict[str, Any]) -> dict[str, Any] | None:
    """A sequential bar's looks: the table's lines and the plot of the narrowing interval."""
    seq = report.get("sequential")
    if not seq:
        return None
    from assay.report.sequential import looks_markdown, looks_plot

    lines = looks_markdown(seq)
    return {"plot": looks_plot(seq), "caption": lines[2].replace("`", ""),
            "rows": [{"look": f"look {lk['index'] + 1}", "tasks": lk["tasks"],
                      "level": f"{100 * lk['level']:.2f}%",
                      "delta": NA if lk.get("delta") is None else pts(lk["delta"]),
                      "ci": NA if lk.get("ci") is None else
                      f"[{pts(lk['ci'][0])}, {pts(lk['ci'][1])}]",
                      "decision": lk["decision"]} for lk in seq["looks"]],
            "stop": lines[-2] if seq.get("stopped_at_look") is not None else None}


def render_experiment_html(report: dict[str, Any], pages: dict[str, Any] | None = None) -> str:
    """The experiment report dict as one self-contained HTML page; ``pages``: the trial and
    side-by-side pages written beside it (``trial_html.write_trial_pages``), to link."""
    schema = report.get("schema")
    if schema != SCHEMA:
        raise ValueError(f"an experiment report of schema {SCHEMA!r} is needed, not {schema!r}")
    man = report.get("manifest") or {}
    name = str(report.get("name") or "(unnamed experiment)")
    page = {"name": name, "title": short(name, 80), "run_dir": report.get("run_dir") or NA,
            "created": man.get("created_at") or NA, "assay": version(man.get("assay")),
            "identity": man.get("identity_sha256") or NA, "schema": schema,
            "notes": [str(n) for n in report.get("notes") or []] + _preference_line(report),
            "reused": reused_banner(report.get("holdout")),
            "noise": " ".join(noise_floor_markdown(report["noise_floor"])).replace("**", "")
            .replace("`", "")
            if report.get("noise_floor") else None}
    view = {"verdict": _verdict(report), "bar": _bar(report), "cmp": _comparison(report),
            "arms": _arms(report), "runtime": _runtimes(report), "holdout": _holdout(report),
            "tasks": _tasks(report, pages), "looks": _looks(report)}
    return render("experiment.html.j2", page=page, v=view)


def write_experiment_html(run_dir: Path, report: dict[str, Any],
                          pages: dict[str, Any] | None = None) -> Path:
    """Write ``run_dir/report.html`` atomically (a report is derived data, replaced at will)."""
    path = Path(run_dir) / "report.html"
    atomic_write_text(path, render_experiment_html(report, pages))
    return path


__all__ = ["render_experiment_html", "trial_href", "write_experiment_html"]
