"""What a CI system reads from an experiment report: JUnit XML (one test case per task and arm)
and a Markdown summary for GitHub's job page (``GITHUB_STEP_SUMMARY``).

Both come from the report dict alone, like the HTML page. Task, arm and failure names are run
data: the XML is built with ``xml.etree`` (so quoting is the library's job, never string
concatenation) after characters XML 1.0 cannot carry are replaced, and the Markdown escapes
what would otherwise become markup (GitHub renders HTML inside Markdown). A trial without a
grade is ``<skipped>``, never a pass or a failure; unknown figures print "n/a".
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.report.holdout import reused_banner
from assay.report.render.numbers import NA, pct, pts

# Everything outside XML 1.0's Char production (control characters, lone surrogates, U+FFFE/F).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Inline markup only: run text never starts a line here, so "#", "-" or "1." cannot open a block.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def xml_text(x: object) -> str:
    return _NOT_XML.sub("\ufffd", str(x))


def _cases(report: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(task, arm, trials) in the report's order: tasks as they first appear, then arms."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in report["trials"]:
        grouped[(str(t["task"]), str(t["arm"]))].append(t)
    return [(task, arm, sorted(ts, key=lambda t: t["rep"])) for (task, arm), ts in
            grouped.items()]


def junit_xml(report: dict[str, Any]) -> str:
    """A ``<testsuites>`` document: one ``<testsuite>`` per arm, one ``<testcase>`` per task
    in it (classname = arm, name = task). A case fails when any graded trial of it failed (the
    message names the failure codes), is skipped when none was graded, passes otherwise."""
    suites = ET.Element("testsuites", name=xml_text(report.get("name") or "assay experiment"))
    by_arm: dict[str, ET.Element] = {}
    tallies: dict[str, Counter[str]] = defaultdict(Counter)
    for task, arm, trials in _cases(report):
        if arm not in by_arm:
            by_arm[arm] = ET.SubElement(suites, "testsuite", name=xml_text(arm))
        case = ET.SubElement(by_arm[arm], "testcase", classname=xml_text(arm),
                             name=xml_text(task))
        seconds = [a["seconds"] for t in trials for a in t["attempts"]
                   if a.get("seconds") is not None]
        if seconds:
            case.set("time", f"{sum(seconds):.3f}")
        graded = [t for t in trials if t["state"] == "graded"]
        failed = [t for t in graded if not t.get("accepted")]
        tally = tallies[arm]
        tally["tests"] += 1
        if failed:
            tally["failures"] += 1
            codes = Counter(str(t.get("failure_code") or "rejected") for t in failed)
            code_text = ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in sorted(codes.items()))
            el = ET.SubElement(case, "failure",
                               message=xml_text(f"{len(failed)} of {len(graded)} graded "
                                                 f"trials failed: {code_text}"),
                               type=xml_text(sorted(codes)[0] if len(codes) == 1 else
                                              "several"))
            el.text = xml_text("\n".join(
                f"rep {t['rep']}: {t.get('failure_code') or 'rejected'}"
                + (f" ({t['link']}/trial.json)" if t.get("link") else "")
                # the task's real tests first, the canaries on a line apart
                + "".join(f"\n  {name}: {line}" for name, lines in
                          (t.get("check_lines") or {}).items() for line in lines)
                for t in failed))
        elif not graded:
            tally["skipped"] += 1
            states = Counter(a.get("status") or "unknown" for t in trials for a in t["attempts"])
            why = ", ".join(f"{s} ×{n}" for s, n in sorted(states.items())) or "not run"
            ET.SubElement(case, "skipped",
                          message=xml_text(f"not graded ({len(trials)} trials; attempts: "
                                            f"{why})"))
    total: Counter[str] = Counter()
    for arm, el in by_arm.items():
        t = tallies[arm]
        total.update(t)
        el.set("tests", str(t["tests"]))
        el.set("failures", str(t["failures"]))
        el.set("skipped", str(t["skipped"]))
        el.set("errors", "0")
    for key in ("tests", "failures", "skipped"):
        suites.set(key, str(total[key]))
    suites.set("errors", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


# --------------------------------------------------------------------------- Markdown


def md(x: object) -> str:
    """Run text as literal Markdown text: HTML-escaped, markup characters backslashed, on one
    line (a newline would end a table row)."""
    s = " ".join(str(x).split())
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def _ci(iv: list[float | None] | None, fmt: Any) -> str:
    if not iv or iv[0] is None or iv[1] is None:
        return NA
    return f"[{fmt(iv[0])}, {fmt(iv[1])}]"


def _cost(cost: dict[str, Any] | None) -> str:
    if cost is None:
        return NA
    status, per = cost.get("status"), cost.get("per_completed_usd")
    if status == "not_computable":
        return "not computable (no accepted trial)"
    if per is None:
        return NA
    text = f"${per:.4f}"
    return f"≥ {text} (lower bound)" if status == "lower_bound" else text


def step_summary_markdown(report: dict[str, Any]) -> str:
    """The verdict, a headline table per arm and Δ with its interval and method."""
    banner = reused_banner(report.get("holdout"))
    out = [*([f"**{banner}**", ""] if banner else []),
           f"## assay experiment: {md(report.get('name') or '(unnamed)')}", ""]
    v = report.get("verdict")
    if v is None:
        why = "no bar in the experiment file" if report.get("bar") is None else \
            "no decision was recorded"
        out.append(f"**No verdict**: {why}.")
    else:
        out.append(f"**Verdict: {md(str(v.get('decision') or NA).upper())}**")
        out += [f"- {md(r)}" for r in v.get("reasons") or []]
        if v.get("note"):
            out.append(f"- {md(v['note'])}")
    cmp = report.get("comparison") or {}
    out += ["", "| arm | pass rate | 95% CI | cost per completed task | coverage |",
            "|---|---:|---|---:|---:|"]
    for name, a in report["arms"].items():
        # task-weighted over the compared tasks when the report has it, else over graded trials
        rate = a.get("pass_rate") if "pass_rate" in a else a.get("pass_rate_of_graded")
        out.append(f"| {md(name)} | {pct(rate)} "
                   f"({a.get('accepted', NA)}/{a.get('graded', NA)} trials) | "
                   f"{_ci(a.get('pass_rate_ci'), pct)} | "
                   f"{_cost((cmp.get('cost') or {}).get(name))} | {pct(a.get('coverage'))} |")
    out.append("")
    if report.get("comparison") is None:
        out.append("Δ: n/a (the arms to compare are not known).")
    else:
        cov = cmp.get("coverage") or {}
        out.append(f"Δ ({md(cmp.get('b'))} − {md(cmp.get('a'))}) = **{pts(cmp.get('delta'))}**, "
                   f"{100 * float(cmp.get('level') or 0.95):g}% CI "
                   f"{_ci(cmp.get('ci'), pts)} ({md(cmp.get('method') or NA)}, "
                   f"{cmp.get('n_clusters', NA)} clusters by {md(cmp.get('cluster_by') or NA)}, "
                   f"{cmp.get('n_tasks', NA)} tasks; {cov.get('compared', NA)} of "
                   f"{cov.get('planned', NA)} planned tasks compared).")
        new = cmp.get("new_failures") or {}
        n_new = sum(len(ts) for ts in new.values())
        if n_new:
            out.append("")
            out.append(f"New failures ({n_new}): " + "; ".join(
                f"{md(c)}: " + ", ".join(md(t) for t in ts) for c, ts in new.items() if ts))
    h = report.get("holdout")
    if h is not None:
        out += ["", f"Holdout looked at {h.get('looks', NA)} times"
                    + (" (**reused**)." if h.get("reused") else ".")]
    return "\n".join(out) + "\n"


def append_step_summary(report: dict[str, Any],
                        env: Mapping[str, str] = os.environ) -> Path | None:
    """Append the summary to the file ``GITHUB_STEP_SUMMARY`` names; nothing when it is unset
    or empty (not on GitHub Actions). Appending, not replacing: other steps write there too."""
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(step_summary_markdown(report) + "\n")
    return path


__all__ = ["append_step_summary", "junit_xml", "md", "step_summary_markdown"]
