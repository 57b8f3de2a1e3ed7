"""Coding answers are graded from the record: a run grades into revision v1, ``assay regrade``
grades the same recorded answers into a new revision beside it, and ``assay report`` says which
revision its figures come from. Real CLI, real scripted server, real bubblewrap sandboxes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.scripted_server import Answer, ScriptedServer, by_input

from assay.records.coding import GradeRow, SampleRow
from assay.sandbox import bwrap_available
from assay.suites.coding import load_coding_suite
from assay.suites.prompts import user_prompt

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

TESTS = "assert add(2, 3) == 5\n"
GOOD = "```python\ndef add(a, b):\n    return a + b\n```\n"
BAD = "```python\ndef add(a, b):\n    return a - b\n```\n"


def _tasks(path: Path) -> Path:
    objs = [{"id": f"py-{n}", "type": "unit", "prompt": f"Write add(a, b), take {n}.",
             "tests": TESTS} for n in (1, 2)]
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def _run(tmp_path: Path, server: ScriptedServer) -> Path:
    """py-1 answered right twice, py-2 wrong twice: pass@1 1/2."""
    tasks = _tasks(tmp_path / "tasks.jsonl")
    prompts = {t.id: user_prompt(t) for t in load_coding_suite(tasks).tasks}
    server.handler = by_input({prompts["py-1"]: Answer(GOOD), prompts["py-2"]: Answer(BAD)})
    run = tmp_path / "run"
    res = run_cli(["run", str(tasks), "--samples", "2", "--out", str(run)])
    assert res.code == 0, res.stderr
    return run


def _report(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text())


def _figures(rep: dict[str, Any]) -> dict[str, Any]:
    return {k: rep[k] for k in ("pass_at_1", "pass_all", "pass_at_k", "failure_reasons",
                                "infra_errors", "tasks", "mixed_tasks")}


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and not p.name.startswith("report.")}


def test_regrade_writes_a_new_revision_beside_the_old(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    run = _run(tmp_path, server)
    first = _report(run)
    assert first["grade_revision"] == "v1" and first["pass_at_1"]["mean"] == pytest.approx(0.5)
    assert first["failure_reasons"] == {"nonzero_exit": 2}
    v1_meta = json.loads((run / "grades" / "v1.meta.json").read_text())
    assert v1_meta["schema"] == "assay.coding.grades/1" and v1_meta["source"] == "run"
    assert v1_meta["graders"].keys() == {"unit", "diff", "rubric"}
    assert v1_meta["sandbox"]["isolation"] == "bwrap"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["record_schemas"]["samples.jsonl"] == "assay.coding.sample/3"
    before = _snapshot(run)
    requests = len(server.chat_requests())

    res = run_cli(["regrade", str(run), "--verifier-revision", "v2"])
    assert res.code == 0, res.stderr
    assert "revision v2" in res.stderr
    assert len(server.chat_requests()) == requests  # no model was asked again
    after = _snapshot(run)
    assert {k: v for k, v in after.items() if k in before} == before  # every old file intact
    new = sorted(set(after) - set(before))
    assert "grades/v2.jsonl" in new and "grades/v2.meta.json" in new
    assert all(k.startswith("grades/v2") for k in new)  # exec logs go beside the revision
    v2 = [GradeRow.read(json.loads(line), "v2") for line in
          (run / "grades" / "v2.jsonl").read_text().splitlines()]
    assert sorted((g.id, g.sample, g.passed, g.reason) for g in v2) == [
        ("py-1", 0, True, "ok"), ("py-1", 1, True, "ok"),
        ("py-2", 0, False, "nonzero_exit"), ("py-2", 1, False, "nonzero_exit")]
    assert json.loads((run / "grades" / "v2.meta.json").read_text())["source"] == "regrade"

    # the report now reads v2, says so, and (same grader, same answers) shows the same figures
    second = _report(run)
    assert second["grade_revision"] == "v2"
    assert _figures(second) == _figures(first)
    assert "| grade revision | v2 |" in (run / "report.md").read_text()
    # a chosen revision
    res = run_cli(["report", str(run), "--grade-revision", "v1"])
    assert res.code == 0, res.stderr
    assert _report(run)["grade_revision"] == "v1"
    assert _figures(_report(run)) == _figures(first)


def test_regrade_into_an_existing_revision_is_refused(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    run = _run(tmp_path, server)
    assert run_cli(["regrade", str(run), "--verifier-revision", "v2"]).code == 0
    before = _snapshot(run)
    for name in ("v1", "v2"):
        res = run_cli(["regrade", str(run), "--verifier-revision", name])
        assert res.code == 2, res.stderr
        assert "never overwritten" in res.stderr
    assert _snapshot(run) == before
    res = run_cli(["regrade", str(run), "--verifier-revision", "../x"])
    assert res.code == 2 and "letters, digits" in res.stderr


def test_a_fixed_grader_regrades_old_answers(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """Revision v1 was written by a grader that passed everything (simulated by rewriting its
    rows); a re-grade with today's grader puts the right verdicts beside it, and either
    revision can still be reported."""
    run = _run(tmp_path, server)
    grades = run / "grades" / "v1.jsonl"
    rows = [GradeRow.read(json.loads(line), grades) for line in grades.read_text().splitlines()]
    grades.write_text("".join(json.dumps(r.model_copy(update={"passed": True, "reason": "ok"})
                                         .to_json()) + "\n" for r in rows))
    assert run_cli(["report", str(run)]).code == 0
    assert _report(run)["pass_at_1"]["mean"] == pytest.approx(1.0)
    assert run_cli(["regrade", str(run), "--verifier-revision", "fixed"]).code == 0
    rep = _report(run)
    assert rep["grade_revision"] == "fixed" and rep["pass_at_1"]["mean"] == pytest.approx(0.5)
    assert run_cli(["report", str(run), "--grade-revision", "v1"]).code == 0
    assert _report(run)["pass_at_1"]["mean"] == pytest.approx(1.0)


def test_run_from_before_the_split_reads_as_inline_revision(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """A run written when grades lived inside samples.jsonl (manifest schema 1) still reports,
    with the same figures, as revision ``inline``; and it can be re-graded."""
    run = _run(tmp_path, server)
    first = _report(run)
    legacy = tmp_path / "legacy"
    shutil.copytree(run, legacy)
    grades = {(g["id"], g["sample"]): g for g in map(
        json.loads, (legacy / "grades" / "v1.jsonl").read_text().splitlines())}
    old_rows = []
    for line in (legacy / "samples.jsonl").read_text().splitlines():
        answer = SampleRow.read(json.loads(line), "samples.jsonl").to_row()
        g = grades[(answer["id"], answer["sample"])]
        old_rows.append({**answer, "passed": g["passed"], "reason": g["reason"],
                         "exec": g["exec"]})
    (legacy / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old_rows))
    shutil.rmtree(legacy / "grades")
    manifest = json.loads((legacy / "manifest.json").read_text())
    manifest["schema"] = "assay.coding.manifest/1"
    del manifest["record_schemas"]
    (legacy / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli(["report", str(legacy)]).code == 0
    rep = _report(legacy)
    assert rep["grade_revision"] == "inline" and _figures(rep) == _figures(first)
    assert run_cli(["regrade", str(legacy), "--verifier-revision", "v2"]).code == 0
    rep = _report(legacy)
    assert rep["grade_revision"] == "v2" and _figures(rep) == _figures(first)


def test_resume_grades_answers_an_interrupted_session_left_ungraded(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """Answers on disk without a grade (the process died between the two) are graded by the
    next session of the same run, without asking the model again."""
    run = _run(tmp_path, server)
    grades = run / "grades" / "v1.jsonl"
    kept = grades.read_text().splitlines()[:1]
    grades.write_text("".join(line + "\n" for line in kept))
    assert run_cli(["report", str(run)]).code == 0
    assert _report(run)["ungraded"] == 3
    requests = len(server.chat_requests())
    res = run_cli(["run", str(tmp_path / "tasks.jsonl"), "--samples", "2", "--out", str(run)])
    assert res.code == 0, res.stderr
    assert len(server.chat_requests()) == requests
    rep = _report(run)
    assert rep["ungraded"] == 0 and rep["pass_at_1"]["mean"] == pytest.approx(0.5)
    assert len(grades.read_text().splitlines()) == 4  # the kept grade plus three new ones
