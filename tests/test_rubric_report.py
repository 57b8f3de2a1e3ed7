"""Human rubric grades count: two real coding runs (the real CLI, a scripted OpenAI-compatible
server on 127.0.0.1, bubblewrap for the unit task), graded blind through ``assay grade --export``
and ``--import`` (and once in a terminal sitting), then read back by ``assay report``
(report.json, report.md, report.html, ``--junit``) and ``assay compare``; a second grading round
is used by default, the first stays on disk byte for byte and is chosen with
``--rubric-round``."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.scripted_server import Answer, RecordedRequest, Reply, ScriptedServer

from assay.runner.coding import user_prompt
from assay.sandbox import bwrap_available
from assay.suites.coding import load_coding_suite

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

ADD = "def add(a, b):\n    return a + b\n"
TASKS = [
    {"id": "py-add", "type": "unit", "prompt": "Write add(a, b).",
     "tests": "assert add(2, 3) == 5\n"},
    {"id": "sql-rank", "type": "rubric", "prompt": "Rank orders per customer.",
     "rubric": "3: window function partitioned by customer"},
    {"id": "sql-dedup", "type": "rubric", "prompt": "Deduplicate events.",
     "rubric": "3: keeps the newest row of each event id"},
]


def _handler(tasks: Path, label: str) -> Any:
    """Unit task: correct code. Rubric tasks: SQL whose text names the run and a serial, so
    the test can tell which answer a blind CSV line is (the grader cannot: no model named)."""
    ids = {user_prompt(t): t.id for t in load_coding_suite(tasks).tasks}
    serial = itertools.count()

    def handler(req: RecordedRequest, attempt: int) -> Reply:
        if ids.get(req.case_input or "") == "py-add":
            return Answer(f"```python\n{ADD}```\n")
        return Answer(f"```sql\nSELECT 'answer-{label}-{next(serial)}';\n```\n")

    return handler


def _samples(run: Path) -> dict[str, tuple[str, int]]:
    """The code of each rubric answer -> (task, sample)."""
    out = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "rubric" and row.get("code"):
            out[row["code"].strip()] = (row["id"], int(row["sample"]))
    return out


def _grade_sheet(sheet: Path, scores: dict[tuple[str, str, int], int | str],
                 runs: dict[str, Path]) -> int:
    """Fill the exported CSV as a grader would: a score for the answers in ``scores`` (by run
    label, task, sample), the rest left blank. Returns the number of scores written."""
    where = {code: (label, *key) for label, run in runs.items()
             for code, key in _samples(run).items()}
    text = sheet.read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(text.splitlines()))
    written = 0
    for row in rows:
        key = where[row["answer"].strip()]
        if key in scores:
            row["score"] = str(scores[key])
            row["note"] = f"graded | {key[1]}"
            written += 1
    with sheet.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return written


def _report(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text())


def _junit(path: Path) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}


def _round_files(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((run / "grades" / "rubric").iterdir())}


def test_imported_rubric_grades_reach_report_junit_html_and_compare(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = tmp_path / "suite" / "tasks.jsonl"
    tasks.parent.mkdir()
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    runs = {"A": tmp_path / "run-a", "B": tmp_path / "run-b"}
    for label, run in runs.items():
        server.handler = _handler(tasks, label)
        res = run_cli(["run", str(tasks), "--samples", "2", "--out", str(run)])
        assert res.code == 0, res.stderr
    a, b = runs["A"], runs["B"]
    before = _report(a)
    assert before["rubric"]["graded"] == 0 and before["rubric"]["round"] is None
    assert "| sql-rank | rubric | 2 answers for human grading |" in (a / "report.md").read_text()
    junit = tmp_path / "junit.xml"
    assert run_cli(["report", str(a), "--junit", str(junit)]).code == 0
    assert "2 of 2 answers ungraded" in _junit(junit)["sql-rank"].find("skipped").get("message")

    # round 1: one blind sheet over both runs; A is weak on sql-rank, one A answer left blank
    sheet = tmp_path / "round1.csv"
    res = run_cli(["grade", str(a), str(b), "--export", str(sheet), "--seed", "5"])
    assert res.code == 0 and "answers: 8" in res.stdout, res.stderr
    round1 = {("A", "sql-rank", 0): 1, ("A", "sql-rank", 1): 2, ("A", "sql-dedup", 0): 3,
              ("B", "sql-rank", 0): 3, ("B", "sql-rank", 1): 3,
              ("B", "sql-dedup", 0): 2, ("B", "sql-dedup", 1): 3}
    assert _grade_sheet(sheet, round1, runs) == 7
    res = run_cli(["grade", str(a), str(b), "--import", str(sheet), "--grader", "ann"])
    assert res.code == 0, res.stderr
    assert "graded: 7" in res.stdout and "report rebuilt" in res.stdout

    # the import alone rebuilt report.json: the grades count, the round is named
    rep = _report(a)
    rub = rep["rubric"]
    (first,) = [r["name"] for r in rub["rounds"]]
    assert first.endswith("-ann") and rub["round"] == first and rub["round_chosen"] is False
    assert (rub["answers"], rub["graded"], rub["ungraded"], rub["passed"]) == (4, 3, 1, 2)
    assert rub["mean_score"] == pytest.approx(2.0) and rub["pass_score"] == 2
    assert [(g["id"], g["sample"], g["score"], g["round"]) for g in rub["grades"]] == [
        ("sql-dedup", 0, 3, first), ("sql-dedup", 1, None, None),
        ("sql-rank", 0, 1, first), ("sql-rank", 1, 2, first)]
    assert rub["rounds"][0]["grader"] == "ann" and rub["rounds"][0]["source"] == "csv"
    assert (rub["rounds"][0]["grades"], rub["rounds"][0]["counted"]) == (3, 3)  # A's own
    by_task = {t["id"]: t for t in rep["tasks"]}
    assert (by_task["sql-rank"]["rubric_graded"], by_task["sql-rank"]["rubric_passes"],
            by_task["sql-rank"]["rubric_mean_score"]) == (2, 1, 1.5)
    assert by_task["sql-dedup"]["rubric_graded"] == 1
    assert by_task["py-add"]["passes"] == 2  # the auto-graded task is as it was

    md = (a / "report.md").read_text()
    assert "answers for human grading" not in md
    assert "| sql-rank | rubric | 1 of 2 graded pass (score ≥ 2), mean 1.50 / 3 |" in md
    assert "| sql-dedup | rubric | 1 of 1 graded pass (score ≥ 2), mean 3.00 / 3; 1 ungraded |" \
        in md
    assert f"round {first} (latest)" in md and "1 answer still ungraded" in md
    assert f"| sql-rank | 0 | 1 | {first} | `ann` | `graded \\| sql-rank` |" in md
    assert "| sql-dedup | 1 | ungraded |" in md

    html = (a / "report.html").read_text()
    assert f"round {first} (latest)" in html and 'class="rubric-grades"' in html
    assert '<tr data-task="sql-dedup" data-sample="1" class="ungraded">' in html
    assert "1 of 2 graded pass" in html and "answers for grading" not in html

    # JUnit: a graded answer below 2 fails its task; ungraded answers keep it skipped, counted
    summary = tmp_path / "step-summary.md"
    res = run_cli(["report", str(a), "--junit", str(junit)],
                  env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 0, res.stderr
    assert f"| rubric mean (0-3) | 2.00 | n/a | 3 of 4 answers graded, round {first} |" \
        in summary.read_text()
    cases = _junit(junit)
    failure = cases["sql-rank"].find("failure")
    assert failure is not None and failure.get("type") == "rubric_score"
    assert "1 of 2 graded answers scored below 2 of 0-3 (#0: 1" in failure.get("message")
    assert first in failure.get("message")
    skipped = cases["sql-dedup"].find("skipped")
    assert skipped is not None and "1 of 2 answers ungraded" in skipped.get("message")
    assert cases["py-add"].find("failure") is None and cases["py-add"].find("skipped") is None
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    junit_b = tmp_path / "junit-b.xml"
    assert run_cli(["report", str(b), "--junit", str(junit_b)]).code == 0
    cases_b = _junit(junit_b)
    assert all(c.find("failure") is None and c.find("skipped") is None
               for c in cases_b.values())  # every B answer graded 2 or more: all pass

    # compare: the rubric grades are compared task by task, each side's round named
    out = tmp_path / "cmp.json"
    res = run_cli(["compare", str(a), str(b), "--json", str(out)])
    assert res.code == 0, res.stderr
    c = json.loads(out.read_text())
    assert c["run_a"]["rubric_round"] == c["run_b"]["rubric_round"] == first
    assert (c["run_a"]["rubric_ungraded"], c["run_b"]["rubric_ungraded"]) == (1, 0)
    cr = c["rubric"]
    assert cr["tasks"] == 2
    # A: rank 1.5, dedup 3 -> 2.25; B: rank 3, dedup 2.5 -> 2.75
    assert (cr["mean_score_a"], cr["mean_score_b"]) == pytest.approx((2.25, 2.75))
    assert cr["mean_score_diff_b_minus_a"] == pytest.approx(0.5)
    assert [(t["id"], t["a"], t["b"]) for t in cr["per_task"]] == [
        ("sql-rank", "2/2", "2/2"), ("sql-dedup", "1/2", "2/2")]
    assert any("1 rubric answer(s) of A are not graded" in w for w in c["warnings"])
    assert c["tasks"] == 1 and c["pass_at_1_diff_b_minus_a"] == 0  # py-add: 2/2 in both
    said = "".join(res.stdout.split())
    assert "".join(f"rubric grades as of round A {first}".split()) in said
    assert "meangradeA2.25,B2.75" in said

    # round 2: a second grader regrades one answer of A only; the first round is untouched
    files_before = _round_files(a)
    sheet2 = tmp_path / "round2.csv"
    assert run_cli(["grade", str(a), "--export", str(sheet2), "--regrade", "--seed", "6"]
                   ).code == 0
    assert _grade_sheet(sheet2, {("A", "sql-rank", 0): 3}, {"A": a}) == 1
    res = run_cli(["grade", str(a), "--import", str(sheet2), "--grader", "bob"])
    assert res.code == 0, res.stderr
    files_after = _round_files(a)
    assert {k: v for k, v in files_after.items() if k in files_before} == files_before
    assert len(files_after) == len(files_before) + 2  # the new round's rows and its meta

    res = run_cli(["report", str(a), "--junit", str(junit)])
    assert res.code == 0, res.stderr
    rub = _report(a)["rubric"]
    second = rub["rounds"][-1]["name"]
    assert second.endswith("-bob") and second > first
    assert rub["round"] == second and not rub["round_chosen"]  # the latest by default
    grades = {(g["id"], g["sample"]): g for g in rub["grades"]}
    assert (grades[("sql-rank", 0)]["score"], grades[("sql-rank", 0)]["round"]) == (3, second)
    assert grades[("sql-rank", 1)]["round"] == first  # not regraded: round 1's grade stands
    assert [r["counted"] for r in rub["rounds"]] == [2, 1]
    assert _junit(junit)["sql-rank"].find("failure") is None  # 3 and 2: both pass now
    assert f"round {second} (latest)" in (a / "report.md").read_text()

    # the older round, chosen with the flag
    res = run_cli(["report", str(a), "--rubric-round", first, "--junit", str(junit)])
    assert res.code == 0, res.stderr
    rub = _report(a)["rubric"]
    assert rub["round"] == first and rub["round_chosen"] is True
    assert {(g["id"], g["sample"]): g["score"] for g in rub["grades"]}[("sql-rank", 0)] == 1
    assert _junit(junit)["sql-rank"].find("failure") is not None
    md = (a / "report.md").read_text()
    assert f"round {first} (chosen with --rubric-round; 1 newer round not counted)" in md
    assert f"round {first} (chosen with --rubric-round" in (a / "report.html").read_text()
    res = run_cli(["compare", str(a), str(b), "--rubric-round", first, "--json", str(out)])
    assert res.code == 0, res.stderr
    c = json.loads(out.read_text())
    assert c["run_a"]["rubric_round"] == first
    assert c["rubric"]["mean_score_a"] == pytest.approx(2.25)
    res = run_cli(["compare", str(a), str(b), "--json", str(out)])
    # the latest: A's rank is now (3 + 2) / 2, dedup 3 -> 2.75
    assert json.loads(out.read_text())["rubric"]["mean_score_a"] == pytest.approx(2.75)

    # a sitting in the terminal is a round too: B's first shown answer graded 0, then quit
    ask = iter(["0", "too vague", "q"])
    monkeypatch.setattr("assay.cli.grading.ask_grader", lambda prompt: next(ask))
    res = run_cli(["grade", str(b), "--regrade", "--grader", "carol", "--seed", "9"])
    assert res.code == 0 and "graded: 1" in res.stdout, res.stderr
    shown = re.search(r"answer 1 of 4 · task (\S+)", res.stdout)
    assert shown is not None
    rub_b = _report(b)["rubric"]  # rebuilt by the sitting itself
    third = rub_b["rounds"][-1]
    assert third["name"].endswith("-carol") and third["source"] == "interactive"
    assert rub_b["round"] == third["name"] and third["counted"] == 1
    (zero,) = [g for g in rub_b["grades"] if g["round"] == third["name"]]
    assert (zero["id"], zero["score"], zero["note"]) == (shown[1], 0, "too vague")
    assert run_cli(["report", str(b), "--junit", str(junit_b)]).code == 0
    assert _junit(junit_b)[shown[1]].find("failure") is not None

    # a round that does not exist: one line naming the rounds there are, exit 2
    res = run_cli(["report", str(a), "--rubric-round", "20990101T000000.000Z-nobody"])
    said = " ".join(res.stderr.split())  # the terminal wraps long lines
    assert res.code == 2 and "no grading round '20990101T000000.000Z-nobody'" in said
    assert f"the run has: {first}, {second}" in said and "Traceback" not in said
    res = run_cli(["compare", str(a), str(b), "--rubric-round", "../../etc/passwd"])
    assert res.code == 2 and "no grading round" in res.stderr
    assert _round_files(a) == files_after  # reading never writes a grade
