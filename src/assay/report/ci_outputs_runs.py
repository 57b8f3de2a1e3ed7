"""What a CI system reads from a narrow or coding run: JUnit XML, the GitHub step summary, and
the ``--fail-under`` gate with its exit code.

JUnit: a narrow run has one test case per case (it fails when any repeat was answered wrongly
or invalidly, with the expected label, the answers and the reasons; it is skipped when no
repeat got an answer, endpoint trouble being no verdict); a coding run has one per task (it
fails when any sample failed, with the failure reasons; skipped when nothing was graded). A
rubric task is judged by its human grades as of the grading round the report used: it fails
when a graded answer scored below 2 on the 0-3 scale, passes when every answer is graded 2 or
more, and is skipped while answers are ungraded (the message counts them, and says the round).
Case ids, labels and reasons are run data: the XML is built with ``xml.etree`` after characters
XML 1.0 cannot carry are replaced.

The gate compares one figure with a threshold: narrow accuracy, coding pass@1; with
``use_ci`` the lower bound of its 95% interval, so a small or noisy run cannot pass by luck.
An unknown figure never passes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.records.layout import RAW_PREDICTIONS
from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
from assay.report.ci_outputs import md, xml_text
from assay.report.narrow import SlimRow, final_rows
from assay.report.narrow_cases import answered_value, show_value, verdict
from assay.report.render.numbers import NA, pct


def _is_coding(report: dict[str, Any]) -> bool:
    return str(report.get("schema", "")).startswith("assay.coding.")


def _finish(suites: ET.Element, suite: ET.Element, tests: int, failures: int,
            skipped: int) -> str:
    for el in (suites, suite):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("skipped", str(skipped))
        el.set("errors", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def narrow_junit(run_dir: Path, report: dict[str, Any]) -> str:
    """One ``<testcase>`` per case of a narrow run (see the module docstring)."""
    manifest = read_narrow_manifest(run_dir)
    by_case: dict[str, list[SlimRow]] = defaultdict(list)
    if (run_dir / RAW_PREDICTIONS).exists():
        for row in final_rows(iter_narrow_rows(run_dir, manifest)).values():
            by_case[str(row["id"])].append(row)
    # the raw answers of the wrong cases, as the report lists them (cut to a readable length)
    detail = {str(c["id"]): c.get("answers") or [] for c in report.get("wrong_cases") or []}
    name = str(report.get("suite") or "narrow")
    suites = ET.Element("testsuites", name=xml_text(f"assay {name}"))
    suite = ET.SubElement(suites, "testsuite", name=xml_text(name))
    tests = failures = skipped = 0
    for cid in sorted(by_case):
        rows = sorted(by_case[cid], key=lambda r: r.get("repeat", 0))
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=xml_text(name), name=xml_text(cid))
        ms = [r["latency_ms"] for r in rows if r.get("latency_ms") is not None]
        if ms:
            case.set("time", f"{sum(ms) / 1000:.3f}")
        answered = [r for r in rows if not r.get("error")]
        bad = [r for r in answered if not r.get("correct")]
        if bad:
            failures += 1
            answers = ", ".join(
                (show_value(answered_value(r))[:200] if verdict(r) == "wrong"
                 else f"invalid ({r.get('invalid_reason') or 'unknown'})")
                for r in answered)
            el = ET.SubElement(case, "failure", type="wrong" if all(
                verdict(r) == "wrong" for r in bad) else "invalid", message=xml_text(
                f"{len(bad)} of {len(answered)} answers wrong or invalid; expected "
                f"{show_value(rows[0].get('expected'))[:500]}, answered {answers}"))
            listed = {a.get("repeat"): a for a in detail.get(cid, [])}
            el.text = xml_text("\n".join(
                f"repeat {r.get('repeat', 0)}: "
                + _answer_line(listed.get(r.get("repeat", 0))) for r in bad))
        elif not answered:
            skipped += 1
            ET.SubElement(case, "skipped", message=xml_text(
                "no answer (endpoint trouble, not a wrong answer): "
                + "; ".join(str(r.get("error"))[:200] for r in rows)))
    return _finish(suites, suite, tests, failures, skipped)


def _answer_line(answer: dict[str, Any] | None) -> str:
    if answer is None:
        return "(the report lists no detail for this answer)"
    texts = [t.get("text") or "" for t in answer.get("answers") or []]
    return f"{answer.get('reason') or answer.get('verdict')}; raw: " + " | ".join(texts)


def coding_junit(report: dict[str, Any]) -> str:
    """One ``<testcase>`` per task of a coding run (see the module docstring)."""
    name = str(report.get("suite") or "coding")
    suites = ET.Element("testsuites", name=xml_text(f"assay {name}"))
    suite = ET.SubElement(suites, "testsuite", name=xml_text(name))
    tests = failures = skipped = 0
    rubric = report.get("rubric") or {}
    for task in report.get("tasks") or []:
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=xml_text(task.get("type") or name),
                             name=xml_text(task["id"]))
        if task.get("type") == "rubric" and task.get("rubric_answers"):
            outcome = _rubric_case(case, task, rubric)
            failures += outcome == "failure"
            skipped += outcome == "skipped"
            continue
        graded, passes = int(task.get("samples") or 0), int(task.get("passes") or 0)
        if graded and passes < graded:
            failures += 1
            reasons = ", ".join(str(r) for r in task.get("failures") or []) or "failed"
            el = ET.SubElement(case, "failure", type="failed", message=xml_text(
                f"{graded - passes} of {graded} samples failed: {reasons}"))
            el.text = xml_text(reasons)
        elif not graded:
            skipped += 1
            why = ("waiting for a human rubric grade" if task.get("rubric_answers") else
                   f"no graded sample ({task.get('infra_errors') or 0} infra errors)")
            ET.SubElement(case, "skipped", message=xml_text(why))
    return _finish(suites, suite, tests, failures, skipped)


def _rubric_case(case: ET.Element, task: dict[str, Any], rubric: dict[str, Any]) -> str:
    """A rubric task's test case from its human grades: ``failure``, ``skipped`` or ``pass``."""
    bar = int(rubric.get("pass_score", 2))
    where = f"grading round {rubric.get('round') or 'none'}"
    n, graded = int(task["rubric_answers"]), int(task.get("rubric_graded") or 0)
    mine = [g for g in rubric.get("grades") or []
            if g.get("id") == task["id"] and g.get("score") is not None]
    low = [g for g in mine if g["score"] < bar]
    if low:
        scores = ", ".join(f"#{g['sample']}: {g['score']}" for g in low)
        el = ET.SubElement(case, "failure", type="rubric_score", message=xml_text(
            f"{len(low)} of {graded} graded answers scored below {bar} of 0-3 ({scores}; "
            f"{where}; {n - graded} ungraded)"))
        el.text = xml_text("\n".join(f"#{g['sample']}: {g['score']} by {g.get('grader')}: "
                                      f"{g.get('note') or ''}" for g in low))
        return "failure"
    if graded < n:
        ET.SubElement(case, "skipped", message=xml_text(
            f"waiting for a human rubric grade: {n - graded} of {n} answers ungraded "
            f"({where})"))
        return "skipped"
    ET.SubElement(case, "system-out").text = xml_text(
        f"{graded} of {n} answers graded {bar} or more of 0-3 ({where})")
    return "pass"


def run_junit(run_dir: Path, report: dict[str, Any]) -> str:
    return coding_junit(report) if _is_coding(report) else narrow_junit(run_dir, report)


@dataclass(frozen=True)
class Gate:
    """The ``--fail-under`` check: which figure, its value, the bar, and whether it held."""

    figure: str
    value: float | None
    threshold: float
    passed: bool

    @property
    def message(self) -> str:
        shown = NA if self.value is None else f"{self.value:.4f}"
        verb = "meets" if self.passed else "is below" if self.value is not None else \
            "is unknown, so it cannot meet"
        return f"{self.figure} {shown} {verb} --fail-under {self.threshold:g}"


def gate(report: dict[str, Any], threshold: float, *, use_ci: bool = False) -> Gate:
    """Narrow accuracy or coding pass@1 (or their interval's lower bound) against a bar."""
    if _is_coding(report):
        p1 = report.get("pass_at_1") or {}
        value = (p1.get("ci95") or [None])[0] if use_ci else p1.get("mean")
        figure = "pass@1" + (" (95% lower bound)" if use_ci else "")
    else:
        value = (report.get("accuracy_ci95") or [None])[0] if use_ci else report.get("accuracy")
        figure = "accuracy" + (" (95% lower bound)" if use_ci else "")
    return Gate(figure, value, threshold, value is not None and value >= threshold)


def run_step_summary(report: dict[str, Any], gate_result: Gate | None = None) -> str:
    """The headline of a narrow or coding run for ``GITHUB_STEP_SUMMARY``."""
    if _is_coding(report):
        p1 = report.get("pass_at_1") or {}
        ci = p1.get("ci95")
        rows = [("pass@1", pct(p1.get("mean")), NA if not ci else f"[{pct(ci[0])}, {pct(ci[1])}]",
                 f"{p1.get('tasks', NA)} tasks")]
        rub = report.get("rubric") or {}
        if rub.get("answers"):
            mean = rub.get("mean_score")
            rows.append(("rubric mean (0-3)", NA if mean is None else f"{mean:.2f}", NA,
                         f"{rub.get('graded', 0)} of {rub['answers']} answers graded, round "
                         f"{rub.get('round') or 'none'}"))
        failed = [t["id"] for t in report.get("tasks") or []
                  if t.get("samples") and t.get("passes", 0) < t["samples"]]
        title = "coding"
    else:
        ci = report.get("accuracy_ci95")
        rows = [("accuracy", pct(report.get("accuracy")),
                 NA if not ci else f"[{pct(ci[0])}, {pct(ci[1])}]",
                 f"{report.get('n', NA)} answers, {report.get('invalid_remaining', NA)} "
                 f"invalid")]
        failed = [c["id"] for c in report.get("wrong_cases") or []]
        title = "narrow"
    out = [f"## assay {title} run: {md(report.get('suite') or '')} · "
           f"{md(report.get('model') or '')}", ""]
    if gate_result is not None:
        out += [("**PASS**: " if gate_result.passed else "**FAIL**: ") + md(gate_result.message),
                ""]
    out += ["| figure | value | 95% CI | over |", "|---|---:|---|---|"]
    out += [f"| {a} | {b} | {c} | {md(d)} |" for a, b, c, d in rows]
    infra = report.get("infra_errors")
    if infra:
        out += ["", f"{infra} infra error(s): the run is incomplete; resume it."]
    if failed:
        shown = ", ".join(md(x) for x in failed[:30]) + (" …" if len(failed) > 30 else "")
        out += ["", f"Wrong or failed ({len(failed)}): {shown}"]
    return "\n".join(out) + "\n"


def append_run_step_summary(report: dict[str, Any], gate_result: Gate | None = None,
                            env: Mapping[str, str] | None = None) -> Path | None:
    """Append to the file ``GITHUB_STEP_SUMMARY`` names; nothing when it is unset."""
    import os

    target = (os.environ if env is None else env).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(run_step_summary(report, gate_result) + "\n")
    return path


__all__ = ["Gate", "append_run_step_summary", "coding_junit", "gate", "narrow_junit",
           "run_junit", "run_step_summary"]
