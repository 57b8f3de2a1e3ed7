"""JUnit XML and the GitHub step summary, from the hand-written report dict in
``support/experiment_report.py``: the XML parses, has one test case per task and arm with the
counts worked out there, carries hostile names intact; the Markdown has the verdict, the
headline table and Δ with its method, escaped; the summary is appended only when
``GITHUB_STEP_SUMMARY`` is set."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from support.experiment_report import TASKS, XSS, experiment_report

from assay.report.ci_outputs import append_step_summary, junit_xml, md, step_summary_markdown


def cases(xml: str) -> dict[tuple[str, str], ET.Element]:
    root = ET.fromstring(xml.encode())
    assert root.tag == "testsuites"
    return {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def test_junit_counts_and_outcomes() -> None:
    xml = junit_xml(experiment_report())
    assert xml.startswith("<?xml version='1.0' encoding='utf-8'?>")
    root = ET.fromstring(xml.encode())
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) \
        == ("10", "4", "1", "0")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["base", "cand"]
    # base fails XSS (2 of 2), parse-date and slow-io (1 of 2 each); cand fails tz-shift and
    # skips slow-io (no graded trial)
    assert [(s.get("tests"), s.get("failures"), s.get("skipped")) for s in suites.values()] == \
        [("5", "3", "0"), ("5", "1", "1")]
    got = cases(xml)
    assert sorted(got) == sorted((arm, t) for arm in ("base", "cand") for t in TASKS)
    assert all(len(s.findall("testcase")) == 5 for s in suites.values())

    def outcome(arm: str, task: str) -> tuple[str, str | None]:
        kids = list(got[(arm, task)])
        if not kids:
            return ("pass", None)
        (el,) = kids
        return (el.tag, el.get("message"))

    assert outcome("base", XSS) == ("failure", "2 of 2 graded trials failed: tests_failed ×2")
    assert outcome("base", "parse-date") == \
        ("failure", "1 of 2 graded trials failed: tests_failed")
    assert outcome("cand", "tz-shift") == \
        ("failure", "2 of 2 graded trials failed: agent_timeout ×2")
    assert outcome("cand", "slow-io") == \
        ("skipped", "not graded (2 trials; attempts: infra_error ×3)")
    for passing in (("base", "fmt-money"), ("base", "tz-shift"), ("cand", XSS),
                    ("cand", "fmt-money"), ("cand", "parse-date")):
        assert outcome(*passing) == ("pass", None), passing
    failure = got[("base", "parse-date")].find("failure")
    assert failure.get("type") == "tests_failed"
    assert failure.text == "rep 1: tests_failed (trials/parse-date/base/1/a0/trial.json)"
    # time: the sum of every attempt's known runtime (12.0 + 30.5); slow-io in cand 1.2 + 0.9
    assert got[("base", "parse-date")].get("time") == "42.500"
    assert got[("cand", "slow-io")].get("time") == "2.100"


def test_junit_carries_hostile_names_as_text() -> None:
    rep = experiment_report()
    nasty = 'a"b\'c<d>&e]]>\x00\x1b\ud800f'
    for t in rep["trials"]:
        if t["task"] == XSS:
            t["task"] = nasty
            t["arm"] = t["arm"] + "<&>"
            if t["failure_code"]:
                t["failure_code"] = "</failure><x>"
    xml = junit_xml(rep)
    got = cases(xml)
    cleaned = 'a"b\'c<d>&e]]>\ufffd\ufffd\ufffdf'  # what XML 1.0 cannot carry is replaced
    assert ("base<&>", cleaned) in got and ("cand<&>", cleaned) in got
    assert got[("base<&>", cleaned)].find("failure").get("message") == \
        "2 of 2 graded trials failed: </failure><x> ×2"
    assert "<x>" not in xml


def test_step_summary_content() -> None:
    text = step_summary_markdown(experiment_report())
    lines = text.splitlines()
    # the holdout was reused: said on the first line, before anything else
    assert lines[0].startswith("**HOLDOUT REUSED: this rests on a holdout looked at 2 times")
    assert lines[2] == "## assay experiment: retry-prompt vs baseline"
    assert "**Verdict: INCONCLUSIVE**" in lines
    assert "- no violation observed in this batch is not proof there are none" in lines
    head = lines.index("| arm | pass rate | 95% CI | cost per completed task | coverage |")
    assert lines[head + 2] == "| base | 60.0% (6/10 trials) | [31.3%, 83.2%] | $0.2000 | 100.0% |"
    assert lines[head + 3] == \
        "| cand | 75.0% (6/8 trials) | [40.9%, 92.9%] | ≥ $0.1500 (lower bound) | 80.0% |"
    delta = next(line for line in lines if line.startswith("Δ"))
    assert delta == ("Δ (cand − base) = **+12.5 pts**, 95% CI [-140.2 pts, +165.2 pts] "
                     "(cluster\\_t, 3 clusters by family, 4 tasks; 4 of 5 planned tasks "
                     "compared).")
    assert "New failures (1): dates: tz-shift" in lines
    assert "Holdout looked at 2 times (**reused**)." in lines


def test_step_summary_unknowns_and_escaping() -> None:
    rep = experiment_report()
    rep["arms"]["x|<script>*y*"] = {**rep["arms"].pop("cand"), "pass_rate_of_graded": None,
                                    "pass_rate_ci": None, "coverage": None}
    rep.update(comparison=None, verdict=None, bar=None, holdout=None)
    text = step_summary_markdown(rep)
    assert "**No verdict**: no bar in the experiment file." in text
    row = next(line for line in text.splitlines() if line.startswith("| x"))
    assert row == "| x\\|&lt;script&gt;\\*y\\* | n/a (6/8 trials) | n/a | n/a | n/a |"
    assert row.count(" | ") == 4  # the pipe in the name did not add a column
    assert "Δ: n/a (the arms to compare are not known)." in text
    assert md("a\nb `c` [l](u)") == "a b \\`c\\` \\[l\\](u)"
    # the task-weighted rate (exp report's own field) wins over the rate of graded trials
    rep = experiment_report()
    rep["arms"]["base"].update(pass_rate=0.625, pass_rate_ci=[0.0, 1.0])
    row = next(line for line in step_summary_markdown(rep).splitlines()
               if line.startswith("| base"))
    assert row == "| base | 62.5% (6/10 trials) | [0.0%, 100.0%] | $0.2000 | 100.0% |"


def test_append_only_when_the_variable_is_set(tmp_path: Path) -> None:
    rep = experiment_report()
    target = tmp_path / "summary.md"
    assert append_step_summary(rep, env={}) is None
    assert append_step_summary(rep, env={"GITHUB_STEP_SUMMARY": ""}) is None
    assert not target.exists()
    target.write_text("earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(target)}
    assert append_step_summary(rep, env=env) == target
    assert append_step_summary(rep, env=env) == target
    body = target.read_text()
    assert body.startswith("earlier step\n")
    assert body.count("## assay experiment: retry-prompt vs baseline") == 2
    assert body == "earlier step\n" + 2 * (step_summary_markdown(rep) + "\n")


def test_a_failed_trials_checks_lead_with_the_real_tests_then_the_canaries() -> None:
    """Issue 34, point 1: JUnit carries each rejected trial's check lines (``check_lines``,
    from ``report/check_summary.py``) under its failure code."""
    rep = experiment_report()
    lines = {"behavior": ["task tests: 2 passed, 1 failed (failed: test_fix.py::test_add_small)",
                          "first failure: test_fix.py::test_add_small: assert -1 == 5",
                          "12 canaries planted, all failed as they must"]}
    failed = next(t for t in rep["trials"] if t["task"] == "parse-date" and t["arm"] == "base"
                  and t["accepted"] is False)
    failed["check_lines"] = lines
    text = cases(junit_xml(rep))[("base", "parse-date")].find("failure").text
    assert text is not None
    shown = text.splitlines()
    assert shown[0] == "rep 1: tests_failed (trials/parse-date/base/1/a0/trial.json)"
    assert shown[1:] == [f"  behavior: {line}" for line in lines["behavior"]]
