"""CI outputs for narrow and coding runs through the real CLI: JUnit XML (a case per case or
task), the GitHub step summary, and the ``--fail-under`` gate's exit codes; on real runs of the
example suites with the built-in models (the baseline classifier gets 62 of 75 triage cases
right, 82.7%, Wilson 95% [72.6%, 89.6%]; the coding oracle passes every auto-graded task)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_cli

from assay.report.ci_outputs_runs import coding_junit, gate
from assay.sandbox import bwrap_available

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def narrow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("narrow") / "run"
    res = run_cli(["run", str(ROOT / "examples" / "triage"), "--model", "builtin/baseline",
                   "--out", str(out)])
    assert res.code == 0, res.stderr
    return out


def test_narrow_junit_has_a_case_per_case_and_the_wrong_ones_fail(narrow_run: Path,
                                                                   tmp_path: Path) -> None:
    res = run_cli(["report", str(narrow_run), "--junit", str(tmp_path / "j.xml")])
    assert res.code == 0, res.stderr
    rep = json.loads((narrow_run / "report.json").read_text())
    root = ET.parse(tmp_path / "j.xml").getroot()
    cases = list(root.iter("testcase"))
    assert len(cases) == 75 == rep["n"]
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {c["id"] for c in rep["wrong_cases"]} and len(failed) == 13
    assert root.get("failures") == "13" and root.get("skipped") == "0"
    one = next(c for c in cases if c.get("name") == "issue-001").find("failure")
    assert "expected bug" in one.get("message") and '{"label": "question"}' in one.text


def test_fail_under_gates_on_accuracy_or_its_lower_bound(narrow_run: Path,
                                                          tmp_path: Path) -> None:
    res = run_cli(["report", str(narrow_run), "--fail-under", "0.85"])
    assert res.code == 1 and "accuracy 0.8267 is below --fail-under 0.85" in res.stderr
    assert run_cli(["report", str(narrow_run), "--fail-under", "0.8"]).code == 0
    # 0.80 is below the accuracy but above the interval's lower bound (0.7257)
    res = run_cli(["report", str(narrow_run), "--fail-under", "0.8", "--fail-under-ci"])
    assert res.code == 1 and "95% lower bound" in res.stderr
    assert run_cli(["report", str(narrow_run), "--fail-under-ci"]).code == 2
    summary = tmp_path / "summary.md"
    res = run_cli(["report", str(narrow_run), "--fail-under", "0.7", "--fail-under-ci"],
                  env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 0
    text = summary.read_text()
    assert "**PASS**" in text and "82.7%" in text and "[72.6%, 89.6%]" in text
    assert "Wrong or failed (13)" in text


def test_the_gate_never_passes_an_unknown_figure() -> None:
    g = gate({"schema": "assay.narrow.report/1", "accuracy": None}, 0.0)
    assert not g.passed and "unknown" in g.message
    g = gate({"schema": "assay.coding.report/1", "pass_at_1": {"mean": 0.5,
                                                                "ci95": [0.2, 0.8]}}, 0.3,
             use_ci=True)
    assert not g.passed and g.value == 0.2


def test_coding_junit_fails_and_skips_by_task() -> None:
    rep = {"schema": "assay.coding.report/1", "suite": "s", "tasks": [
        {"id": "ok", "type": "unit", "samples": 2, "passes": 2, "failures": []},
        {"id": "bad", "type": "unit", "samples": 2, "passes": 1, "failures": ["tests_failed"]},
        {"id": "rub", "type": "rubric", "samples": 0, "passes": 0, "failures": [],
         "rubric_answers": 2}]}
    root = ET.fromstring(coding_junit(rep).split("\n", 1)[1])
    by = {c.get("name"): c for c in root.iter("testcase")}
    assert by["bad"].find("failure").get("message") == "1 of 2 samples failed: tests_failed"
    assert "human rubric grade" in by["rub"].find("skipped").get("message")
    assert by["ok"].find("failure") is None and root.get("tests") == "3"


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_coding_run_gate_and_junit(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_cli(["run", str(ROOT / "examples" / "coding"), "--model", "builtin/oracle",
                   "--samples", "1", "--out", str(out), "--junit", str(tmp_path / "j.xml"),
                   "--fail-under", "1.0"])
    assert res.code == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert int(root.get("tests")) == len(rep["tasks"]) and root.get("failures") == "0"
    rubric = [t["id"] for t in rep["tasks"] if t["type"] == "rubric"]
    assert int(root.get("skipped")) == len(rubric) > 0


def test_repeats_of_the_same_answers_are_not_new_evidence_for_the_gate(tmp_path: Path) -> None:
    # builtin/oracle answers every one of the 75 triage cases right, the same way each time.
    # Clustered by case, five repeats are still 75 cases: the lower bound is Wilson's for 75
    # of 75 (.951) both times, below 0.97, so the gate fails both times (before clustering
    # --repeats 5 counted 375 answers, [.990, 1.0], and passed by repeating).
    seen = []
    for repeats in ("1", "5"):
        out = tmp_path / f"r{repeats}"
        res = run_cli(["run", str(ROOT / "examples" / "triage"), "--model", "builtin/oracle",
                       "--repeats", repeats, "--out", str(out), "--fail-under", "0.97",
                       "--fail-under-ci"])
        rep = json.loads((out / "report.json").read_text())
        assert rep["accuracy"] == 1.0 and rep["n"] == 75 * int(repeats)
        assert res.code == 1 and "95% lower bound" in res.stderr, res.stderr
        seen.append(rep["accuracy_ci95"])
    assert seen[0] == pytest.approx(seen[1]) and seen[0][0] == pytest.approx(0.9513, abs=1e-4)
