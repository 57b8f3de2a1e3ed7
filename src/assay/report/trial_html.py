"""A page per trial, and a side-by-side page per task where the arms disagree: one offline HTML
file each beside the experiment report (``pages/``), inline CSS, no script, nothing fetched.

A trial page shows what ``assay trial show`` prints (``trial_view``): the instruction, the
change against the starting tree as a coloured diff (binary and excluded files listed), each
check with its command and output tail, the steps with tokens and latency, the ledger and the
timings. A side-by-side page puts one trial of each of the two compared arms next to each other,
step against step, and marks the first step where what they did differs
(``trial_view.first_divergence``), so a reviewer can go from the verdict to the step where a
trial went wrong without untarring anything.

Layout under the run directory (links are relative, percent-encoded segment by segment)::

    pages/trials/<task>/<arm>/<rep>/<attempt>.html
    pages/compare/<task>.html

Every string from the run is data and reaches the page through Jinja2 autoescaping.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from assay.records.io import atomic_write_text
from assay.report.experiment_html import trial_href
from assay.report.render import NA, count, render
from assay.report.tool_calls import call_view, diff_lines, without_echo
from assay.report.trial_view import Step, TrialView, first_divergence, load_trial_view
from assay.version import __version__

PAGES = "pages"
#: each page's generator names the version: a page written by another version is drawn again
_GENERATOR = f"assay {__version__}"
_STAMP = f'<meta name="generator" content="{_GENERATOR}">'


def page_rel(task: str, arm: str, rep: int | str, attempt: str) -> str:
    """The trial page's path from the run directory, percent-encoded for an href."""
    return "/".join(quote(str(p), safe="") for p in
                    (PAGES, "trials", task, arm, rep, f"{attempt}.html"))


def compare_rel(task: str) -> str:
    return "/".join(quote(p, safe="") for p in (PAGES, "compare", f"{task}.html"))


def _diff_lines(diff: str) -> list[dict[str, str]]:
    return diff_lines(diff, capped=False)


def _step(s: Step | None) -> dict[str, Any] | None:
    if s is None:
        return None
    calls = [call_view(t.name, t.arguments) for t in s.tool_calls]
    return {"n": s.n, "text": s.text, "reasoning": s.reasoning, "tools": calls,
            "results": [without_echo(r, calls) for r in s.results], "error": s.error,
            "figures": f"in {count(s.input_tokens)} · out {count(s.output_tokens)} tokens · "
                       + (NA if s.latency_ms is None else f"{round(s.latency_ms)} ms")}


#: the most failed test ids named per check on a page (the rest are counted)
MAX_FAILED_SHOWN = 25


def failed_tests(grade: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per test check, the task's own tests that failed (the verifier's ``failed_ids``, from
    trusted expected ids: canaries are not among them), for naming them on a page."""
    details = (grade or {}).get("details") or {}
    out = []
    for check in ("behavior", "regression"):
        rec = details.get(check)
        if not isinstance(rec, dict):
            continue
        ids = (rec.get("tamper_evident") or {}).get("failed_ids")
        if not isinstance(ids, list):
            continue
        names = [str(i) for i in ids]
        out.append({"check": check, "ids": names[:MAX_FAILED_SHOWN],
                    "more": max(0, len(names) - MAX_FAILED_SHOWN),
                    "status": str(rec.get("status") or ""), "reason": rec.get("reason")})
    return out


def _view(v: TrialView, up: str) -> dict[str, Any]:
    """The template's data for one trial; ``up`` leads from the page to the run directory."""
    t = v.trial
    led = v.ledger
    if led is None:
        ledger = [("model calls", "none (no ledger: the arm had no model)")]
    else:
        cost = ("unknown (no price)" if led["unpriced_calls"] and not led["cost_usd"]
                else f"${led['cost_usd']:.4f}" + (" (lower bound)" if led["unpriced_calls"]
                                                  or led["usage_missing_calls"] else ""))
        ledger = [("model calls", str(led["calls"])),
                  ("input tokens", f"{led['input']} (cached {led['cached_input']})"),
                  ("output tokens", str(led["output"])), ("cost", cost)]
    ledger.append(("transcript", v.transcript_state))
    if v.refusals:
        ledger.append(("refused", v.refusals))
    rel = v.attempt_dir.parts[-5:]
    record = "/".join(quote(p, safe="") for p in rel) + "/trial.json"
    return {
        "title": v.title, "attempt": t.get("attempt"), "outcome": v.outcome,
        "accepted": bool(v.grade and v.grade.get("accepted")),
        "agent": str(t.get("agent")), "task": str((t.get("task") or {}).get("id")),
        "error": t.get("error"), "instruction": v.instruction,
        "changes": [{"path": c.path, "how": c.how, "note": c.note,
                     "lines": _diff_lines(c.diff) if c.diff is not None else None}
                    for c in v.changes],
        "change_note": v.change_note, "grade_revision": v.grade_revision or NA,
        "checks": [{"name": c.name, "outcome": c.outcome, "required": c.required,
                    "command": c.command, "reason": c.reason,
                    "exit": count(c.exit_code), "tail": c.output_tail,
                    "summary": list(c.summary)} for c in v.checks],
        "failed_tests": failed_tests(v.grade),
        "steps": [_step(s) for s in v.steps], "steps_source": v.steps_source,
        "steps_note": v.steps_note, "ledger": ledger,
        "timings": [(n, count(s, " s"), st) for n, s, st in v.timings],
        "report_href": f"{up}report.html",
        "record_href": f"{up}{record}" if len(rel) == 5 and rel[0] == "trials" else None,
    }


def render_trial_page(view: TrialView, up: str = "../../../../../") -> str:
    return render("trial.html.j2", t=_view(view, up), generator=_GENERATOR)


def render_compare_page(task: str, left: tuple[str, TrialView], right: tuple[str, TrialView],
                        links: tuple[str, str], up: str = "../../") -> str:
    a, b = left[1].steps, right[1].steps
    div = first_divergence(a, b)
    rows = []
    for i in range(max(len(a), len(b))):
        rows.append({"n": i + 1, "a": _step(a[i] if i < len(a) else None),
                     "b": _step(b[i] if i < len(b) else None),
                     "diverge": div == i + 1})
    if div is not None and div > len(rows):
        rows.append({"n": div, "a": None, "b": None, "diverge": True})
    sides = [{"arm": arm, "view": _view(v, up), "href": href}
             for (arm, v), href in zip((left, right), links, strict=True)]
    return render("trial_compare.html.j2", task=task, sides=sides, rows=rows, diverge=div,
                  report_href=f"{up}report.html", generator=_GENERATOR)


def _compared_arms(rep: dict[str, Any]) -> tuple[str, str] | None:
    cmp = rep.get("comparison") or {}
    if cmp.get("a") and cmp.get("b"):
        return str(cmp["a"]), str(cmp["b"])
    arms = list(rep.get("arms") or [])
    return (arms[0], arms[1]) if len(arms) >= 2 else None


#: what a trial page is drawn from: a page newer than all of them (and written by this version
#: of assay) is current and is not drawn again, so a report of a large run costs little when
#: few trials changed since the last one
_INPUTS = ("trial.json", "artifact.json", "model_calls.jsonl", "transcript.jsonl",
           "agent/stdout.log", "agent/trajectory.json")


def _current(dest: Path, adir: Path) -> bool:
    try:
        made = dest.stat().st_mtime
        with dest.open("rb") as fh:
            head = fh.read(600)
    except OSError:
        return False
    if _STAMP.encode() not in head:
        return False
    inputs = [adir / name for name in _INPUTS] + list((adir / "grades").glob("*.json"))
    return all(made > q.stat().st_mtime for q in inputs if q.exists())


def write_trial_pages(run_dir: Path, rep: dict[str, Any],
                      progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write a page for every attempt with a ``trial.json`` (unless its page is current) and a
    side-by-side page for every task where the two compared arms have graded trials with
    different outcomes. Returns what the experiment page links: ``{"pages": {link: href},
    "compare": {task: href}}``. ``progress`` is told how far (``trial pages 120/3000``), once
    an attempt: a large run's pages take a while the first time."""
    run_dir = Path(run_dir)
    say = progress or (lambda _text: None)
    total = sum(len(t.get("attempts") or []) for t in rep.get("trials") or [])
    seen = 0
    pages: dict[str, str] = {}
    views: dict[str, TrialView] = {}

    def view_of(link: str) -> TrialView | None:
        if link not in views:
            try:
                views[link] = load_trial_view(run_dir / link)
            except (OSError, ValueError):  # one unreadable trial costs its page only
                return None
        return views[link]

    for t in rep.get("trials") or []:
        for a in t.get("attempts") or []:
            seen += 1
            say(f"trial pages {seen}/{total}")
            link = f"trials/{t['task']}/{t['arm']}/{t['rep']}/{a['attempt']}"
            adir = run_dir / link
            if trial_href(link) is None or not (adir / "trial.json").is_file():
                continue  # a name that is not one plain path segment gets no page
            dest = run_dir / PAGES / "trials" / t["task"] / t["arm"] / str(t["rep"]) / \
                f"{a['attempt']}.html"
            if not _current(dest, adir):
                view = view_of(link)
                if view is None:
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(dest, render_trial_page(view))
            pages[link] = page_rel(t["task"], t["arm"], t["rep"], a["attempt"])
    compare: dict[str, str] = {}
    arms = _compared_arms(rep)
    if arms is not None:
        graded: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda:
                                                                         defaultdict(list))
        for t in rep.get("trials") or []:
            if t.get("state") == "graded" and t.get("link") in pages:
                graded[t["task"]][t["arm"]].append(t)
        for task, by_arm in graded.items():
            pair = next(((x, y) for x in sorted(by_arm.get(arms[0], []), key=lambda t: t["rep"])
                         for y in sorted(by_arm.get(arms[1], []), key=lambda t: t["rep"])
                         if bool(x.get("accepted")) != bool(y.get("accepted"))), None)
            if pair is None:
                continue
            x, y = pair
            vx, vy = view_of(x["link"]), view_of(y["link"])
            if vx is None or vy is None:
                continue
            dest = run_dir / PAGES / "compare" / f"{task}.html"
            dest.parent.mkdir(parents=True, exist_ok=True)
            links = ("../trials/" + pages[x["link"]].split("/trials/", 1)[1],
                     "../trials/" + pages[y["link"]].split("/trials/", 1)[1])
            atomic_write_text(dest, render_compare_page(task, (arms[0], vx), (arms[1], vy),
                                                        links))
            compare[task] = compare_rel(task)
    return {"pages": pages, "compare": compare}


__all__ = ["compare_rel", "page_rel", "render_compare_page", "render_trial_page",
           "write_trial_pages"]
