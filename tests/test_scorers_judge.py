"""The judge scorer end to end: the model under test on the scripted server, the judge on the
scripted judge server, the real CLI in between; the suite checks of its pass rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SECRET, assert_no_secret, read_rows, run_cli
from support.judge_server import JudgeServer, verdict
from support.scripted_server import Answer, ScriptedServer, by_input

from assay.suites.cases import load_suite
from assay.suites.errors import SuiteError

RUBRIC = """\
- id: correct
  question: Does the answer answer the question correctly?
  scale: [0, 3]
- id: tone
  question: Is the answer polite?
  scale: [polite, rude]
"""
JUDGE_KEY = "judge-key-not-the-model-key"
CASES = [("g1", "Capital of France?", "Paris"), ("b1", "Capital of Spain?", "Madrid"),
         ("x1", "Capital of Italy?", None)]


def judge_suite(root: Path, judge_url: str, scorer: str = "{criterion: correct, at_least: 2}",
                extra: str = "") -> Path:
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(exist_ok=True)
    (root / "judge").mkdir(exist_ok=True)
    (root / "judge" / "rubric.yaml").write_text(RUBRIC)
    (root / "judge" / "judge.yaml").write_text(
        f"model: judge-model\nbase_url: {judge_url}\nrubric: rubric.yaml\n"
        "api_key_env: JUDGE_KEY\n")
    lines = []
    for cid, text, ref in CASES:
        obj = {"id": cid, "input": text}
        if ref is not None:
            obj["expected"] = ref
        lines.append(json.dumps(obj))
    (root / "data" / "cases.jsonl").write_text("\n".join(lines) + "\n")
    (root / "prompts" / "system.txt").write_text("Answer the question in one sentence.")
    (root / "suite.yaml").write_text(
        f"scorer:\n  type: judge\n  judge: judge/judge.yaml\n  pass: {scorer}\n{extra}")
    return root


GOOD = verdict({"correct": 3, "tone": "polite"}, ["answer.txt:1"],
               {"correct": "names Paris", "tone": "fine"})
BAD = verdict({"correct": 1, "tone": "polite"}, ["answer.txt:1"],
              {"correct": "Barcelona is not the capital", "tone": "fine"})


def test_judge_scorer_run(tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    server.handler = by_input({
        "Capital of France?": Answer("<think>easy</think>ANSWER-GOOD: it is Paris."),
        "Capital of Spain?": [Answer(""), Answer("ANSWER-BAD: Barcelona.")],
        "Capital of Italy?": Answer("ANSWER-BROKEN: Rome."),
    })
    with JudgeServer({"ANSWER-GOOD": GOOD, "ANSWER-BAD": BAD,
                      "ANSWER-BROKEN": "{not json"}) as judge:
        suite = judge_suite(tmp_path / "s", judge.base_url)
        run = tmp_path / "run"
        res = run_cli(["run", str(suite), "--out", str(run)])
        assert res.code == 3, res.stderr  # the unjudgeable answer is an error to resume
        rows = {r["id"]: r for r in read_rows(run)}
        g1, b1, x1 = rows["g1"], rows["b1"], rows["x1"]
        assert g1["correct"] is True and g1["answer"] == "ANSWER-GOOD: it is Paris."
        assert g1["score_detail"]["score"] == 3 and g1["score_detail"]["criterion"] == "correct"
        assert g1["score_detail"]["citations"] == ["answer.txt:1"]
        # the empty reply got the format retry; the answer then was judged wrong
        assert b1["attempts"] == 2 and b1["first_invalid_reason"] == "empty"
        assert b1["correct"] is False and b1["score_detail"]["score"] == 1
        assert x1["error"].startswith("judge: the judge's reply was unusable")
        assert x1["correct"] is None
        # the judge saw the answer as material and the question and reference as context,
        # with its own key; the endpoint under test saw none of the judge's requests
        [seen] = judge.requests_matching("ANSWER-GOOD")
        quoted = seen.case_input or ""
        assert "Capital of France?" in quoted and "Reference answer" in quoted
        assert "Paris" in quoted and "easy" not in quoted  # reasoning is not judged
        assert seen.headers["authorization"] == f"Bearer {JUDGE_KEY}"
        assert all("ANSWER" not in (r.case_input or "") for r in server.chat_requests())
        assert len(judge.requests_matching("ANSWER-BROKEN")) == 2  # the judge's one retry
        judgements = [json.loads(line) for line in
                      (run / "judgements.jsonl").read_text().splitlines()]
        assert [j["status"] for j in judgements].count("invalid") == 1
        assert {j["subject"]["case"] for j in judgements} == {"g1", "b1", "x1"}
        manifest = json.loads((run / "manifest.json").read_text())
        rec = manifest["suite"]["scorer"]
        assert rec["type"] == "judge" and rec["pass"] == {"criterion": "correct", "at_least": 2}
        assert rec["calibration"] == "uncalibrated" and rec["pin"]["model"] == "judge-model"
        assert manifest["comparable"]["scorer"]["judge_revision"] == rec["pin"]["revision"]
        assert "calibration" not in manifest["comparable"]["scorer"]
        rep = json.loads((run / "report.json").read_text())
        assert rep["n"] == 2 and rep["correct"] == 1 and rep["infra_errors"] == 1
        assert "uncalibrated" in rep["scorer"]["description"]
        [wrong] = [c for c in rep["wrong_cases"] if c["id"] == "b1"]
        assert wrong["answers"][0]["reason"].startswith(
            "judged wrong: correct scored 1, needs at least 2 (Barcelona is not the capital)")
        assert "uncalibrated" in (run / "report.md").read_text()
        # the judge recovers: the resume asks the model and the judge for x1 only
        judge.script["ANSWER-BROKEN"] = [GOOD]
        before = len(server.chat_requests())
        res = run_cli(["run", str(suite), "--out", str(run)])
        assert res.code == 0, res.stderr
        assert len(server.chat_requests()) == before + 1
        rep = json.loads((run / "report.json").read_text())
        assert rep["n"] == 3 and rep["correct"] == 2 and rep["infra_errors"] == 0
    assert_no_secret(run)
    assert SECRET not in (run / "judgements.jsonl").read_text()


def test_one_of_for_a_label_scale(tmp_path: Path, server: ScriptedServer,
                                  endpoint_env: dict[str, str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    server.handler = by_input({"Capital of France?": Answer('{"label": "ANSWER-GOOD Paris"}'),
                               "Capital of Spain?": Answer('{"label": "ANSWER-BAD"}'),
                               "Capital of Italy?": Answer('{"label": 3}')})
    rude = verdict({"correct": 3, "tone": "rude"}, ["answer.txt:1"])
    with JudgeServer({"ANSWER-GOOD": GOOD, "ANSWER-BAD": rude}) as judge:
        suite = judge_suite(tmp_path / "s", judge.base_url,
                            "{criterion: tone, one_of: [Polite]}", extra="  reads: json\n")
        run = tmp_path / "run"
        res = run_cli(["run", str(suite), "--out", str(run)])
        assert res.code == 0, res.stderr
    rows = {r["id"]: r for r in read_rows(run)}
    assert rows["g1"]["correct"] is True and rows["b1"]["correct"] is False
    assert rows["x1"]["invalid_reason"] == "missing_field"  # not text at the field: retried
    assert rows["x1"]["attempts"] == 2
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["suite"]["scorer"]["pass"]["one_of"] == ["polite"]


def test_a_judge_without_an_endpoint_stops_before_any_call(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    suite = judge_suite(tmp_path / "s", "x")
    (suite / "judge" / "judge.yaml").write_text(
        "model: judge-model\nbase_url_env: NO_SUCH_JUDGE_URL\nrubric: rubric.yaml\n")
    res = run_cli(["run", str(suite), "--out", str(tmp_path / "run")])
    assert res.code == 2 and "NO_SUCH_JUDGE_URL is not set" in " ".join(res.stderr.split())
    assert server.chat_requests() == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("rule, field, msg", [
    ("{criterion: helpful, at_least: 2}", "scorer.pass.criterion",
     "'helpful' is not a criterion of the judge's rubric (correct, tone)"),
    ("{criterion: correct, at_least: 4}", "scorer.pass.at_least",
     "must be an integer on the scale of correct (an integer from 0 to 3)"),
    ("{criterion: tone, at_least: 1}", "scorer.pass.at_least", "a label scale takes one_of"),
    ("{criterion: tone, one_of: [nice]}", "scorer.pass.one_of",
     "must be a list of scores of tone"),
    ("{criterion: correct}", "scorer.pass", "must be {criterion: <id>, at_least"),
    ("{criterion: correct, at_least: 2, one_of: [3]}", "scorer.pass", "must be {criterion"),
])
def test_pass_rule_is_checked_against_the_rubric(tmp_path: Path, rule: str, field: str,
                                                 msg: str) -> None:
    suite = judge_suite(tmp_path / "s", "http://127.0.0.1:9/v1", rule)
    with pytest.raises(SuiteError) as info:
        load_suite(suite)
    found = [str(p) for p in info.value.problems]
    assert any(f"suite.yaml:4: field '{field}'" in p and msg in p for p in found), found


def test_a_broken_rubric_is_a_suite_error(tmp_path: Path) -> None:
    suite = judge_suite(tmp_path / "s", "http://127.0.0.1:9/v1")
    (suite / "judge" / "rubric.yaml").write_text("- id: correct\n  question: ok?\n  scale: 3\n")
    with pytest.raises(SuiteError) as info:
        load_suite(suite)
    [p] = [str(p) for p in info.value.problems]
    assert "suite.yaml:3: field 'scorer.judge'" in p and "rubric.yaml:3" in p


def test_judge_expected_must_be_text_or_absent(tmp_path: Path) -> None:
    suite = judge_suite(tmp_path / "s", "http://127.0.0.1:9/v1")
    with open(suite / "data" / "cases.jsonl", "a") as fh:
        fh.write(json.dumps({"id": "n", "input": "q", "expected": {"a": 1}}) + "\n")
    with pytest.raises(SuiteError) as info:
        load_suite(suite)
    assert any("cases.jsonl:4: field 'expected': must be a string" in str(p)
               for p in info.value.problems)
