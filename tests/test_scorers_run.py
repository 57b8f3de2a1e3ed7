"""Suites scored by normalized_text, numeric and json_fields, end to end: the real CLI against
the scripted HTTP server (or builtin/oracle), then the rows, the manifest and every report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import read_rows, run_cli
from support.htmldom import parse
from support.scripted_server import Answer, ScriptedServer, by_input

EXTRACT = Path(__file__).resolve().parents[1] / "examples" / "extract"


def suite_of(root: Path, yaml_text: str, cases: list[tuple[str, str, Any]]) -> Path:
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "prompts").mkdir(exist_ok=True)
    (root / "data" / "cases.jsonl").write_text("".join(
        json.dumps({"id": i, "input": t, "expected": e}) + "\n" for i, t, e in cases))
    (root / "prompts" / "system.txt").write_text("Answer with JSON.")
    (root / "suite.yaml").write_text(yaml_text)
    return root


NUMERIC = "scorer: {type: numeric, abs_tol: 0.01}\noutput_field: value\n"
NUM_CASES = [("n1", "what is 6 * 2?", 12), ("n2", "a thousand", 1000), ("n3", "7 / 2", 4)]


def test_numeric_run_retries_the_format_and_records_the_difference(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    server.handler = by_input({
        "what is 6 * 2?": [Answer("about twelve"), Answer('{"value": 12.004}')],
        "a thousand": Answer('{"value": "1,000"}'),
        "7 / 2": Answer('{"value": 3.5}'),
    })
    suite = suite_of(tmp_path / "s", NUMERIC, NUM_CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "--junit", str(tmp_path / "j.xml")])
    assert res.code == 0, res.stderr
    junit = (tmp_path / "j.xml").read_text()
    assert "expected 4, answered 3.5" in junit and 'type="invalid"' in junit
    rows = {r["id"]: r for r in read_rows(run)}
    n1, n2, n3 = rows["n1"], rows["n2"], rows["n3"]
    assert n1["attempts"] == 2 and n1["first_invalid_reason"] == "no_object"
    assert n1["correct"] is True and n1["answer"] == 12.004 and n1["label"] == ""
    assert n1["score_detail"]["tolerance"] == 0.01
    first, second = server.requests_for("what is 6 * 2?")
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": "about twelve"}
    assert '{"value": <a JSON number' in second.messages[3]["content"]
    assert len(server.requests_for("a thousand")) == 2  # one format retry, then invalid
    assert n2["invalid_reason"] == "not_a_number" and n2["correct"] is False
    assert "answer" not in n2 and "score_detail" not in n2
    assert n3["correct"] is False and n3["attempts"] == 1 and n3["expected"] == 4
    assert n3["score_detail"]["abs_diff"] == 0.5
    manifest = json.loads((run / "manifest.json").read_text())
    record = {"type": "numeric", "reads": "json", "abs_tol": 0.01, "rel_tol": 0.0}
    assert manifest["suite"]["scorer"] == record
    assert manifest["comparable"]["scorer"] == record and manifest["suite"]["labels"] == []
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 3 and rep["correct"] == 1 and rep["invalid_reasons"] == {"not_a_number": 1}
    assert rep["confusion"] == {} and rep["per_label"] == {} and rep["per_field"] is None
    assert rep["scorer"]["type"] == "numeric" and "abs_tol 0.01" in rep["scorer"]["description"]
    wrong = {c["id"]: c for c in rep["wrong_cases"]}
    assert wrong["n3"]["expected"] == "4" and wrong["n3"]["answers"][0]["parsed"] == "3.5"
    assert wrong["n3"]["answers"][0]["reason"].startswith(
        "wrong number: answered 3.5, expected 4, |difference| 0.5 > tolerance 0.01")
    assert wrong["n2"]["answers"][0]["verdict"] == "invalid"
    md = (run / "report.md").read_text()
    assert "Scorer: `numeric (reads the answer's JSON)" in md
    assert "Confusion matrix" not in md and "Labels from" not in md
    page = (run / "report.html").read_text()
    assert 'id="scorer"' in page and "Confusion matrix" not in page


def test_a_changed_scorer_is_refused_on_resume(tmp_path: Path) -> None:
    suite = suite_of(tmp_path / "s", NUMERIC, NUM_CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    (suite / "suite.yaml").write_text(NUMERIC.replace("0.01", "0.5"))
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)])
    assert res.code == 2 and "scorer" in res.stderr
    assert len(read_rows(run)) == 3


def test_runs_scored_differently_are_not_compared(tmp_path: Path) -> None:
    a = suite_of(tmp_path / "a", NUMERIC, NUM_CASES)
    b = suite_of(tmp_path / "b", NUMERIC.replace("abs_tol: 0.01", "rel_tol: 0.1"), NUM_CASES)
    for s in (a, b):
        res = run_cli(["run", str(s), "--model", "builtin/oracle", "--out",
                       str(tmp_path / f"run-{s.name}")])
        assert res.code == 0, res.stderr
    res = run_cli(["compare", str(tmp_path / "run-a"), str(tmp_path / "run-b")])
    assert res.code == 2 and "scored differently" in res.stderr
    res = run_cli(["compare", str(tmp_path / "run-a"), str(tmp_path / "run-a")])
    assert res.code == 0, res.stderr


def test_normalized_text_reading_text(tmp_path: Path, server: ScriptedServer,
                                      endpoint_env: dict[str, str]) -> None:
    server.handler = by_input({
        "street?": Answer("<think>German</think>STRASSE"),
        "word?": [Answer(""), Answer("The ﬁnal Word!")],
        "json?": Answer('{"answer": "yes"}'),
    })
    suite = suite_of(tmp_path / "s", "scorer: {type: normalized_text, reads: text}\n",
                     [("t1", "street?", "Straße"), ("t2", "word?", "the final word"),
                      ("t3", "json?", "yes")])
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 0, res.stderr
    rows = {r["id"]: r for r in read_rows(run)}
    assert rows["t1"]["correct"] is True and rows["t1"]["attempts"] == 1
    assert rows["t1"]["score_detail"] == {"answer": "strasse", "expected": "strasse"}
    assert rows["t2"]["attempts"] == 2 and rows["t2"]["first_invalid_reason"] == "empty"
    assert rows["t2"]["correct"] is True
    retry = server.requests_for("word?")[1].messages[-1]["content"]
    assert "Reply with only the answer" in retry and "JSON" not in retry
    # a free-text scorer reads the JSON as text: not invalid, just not the expected text
    assert rows["t3"]["invalid_reason"] is None and rows["t3"]["correct"] is False
    rep = json.loads((run / "report.json").read_text())
    assert rep["correct"] == 2 and rep["invalid_remaining"] == 0
    assert "reads the whole reply as text" in rep["scorer"]["description"]
    assert "NFKC" in rep["scorer"]["description"]
    [t3] = rep["wrong_cases"][:1] if rep["wrong_cases"][0]["id"] == "t3" else [
        c for c in rep["wrong_cases"] if c["id"] == "t3"]
    assert t3["answers"][0]["reason"].startswith("wrong text: normalised 'answer yes', "
                                                 "expected 'yes'")
    assert "NFKC" in (run / "report.md").read_text()


def _invoice(case: dict[str, Any], **changes: Any) -> str:
    obj = json.loads(json.dumps(case["expected"]))
    obj.update(changes)
    return json.dumps(obj, ensure_ascii=False)


def test_extract_example_reports_per_field_accuracy(tmp_path: Path, server: ScriptedServer,
                                                    endpoint_env: dict[str, str]) -> None:
    cases = [json.loads(line) for line in
             (EXTRACT / "data" / "cases.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(cases) == 8
    script: dict[str, Any] = {c["input"]: Answer(_invoice(c)) for c in cases}
    c1, c2, c3, c4 = cases[:4]
    script[c1["input"]] = [Answer("Vendor: ACME"), Answer(_invoice(c1, vendor="acme tools gmbh"))]
    script[c2["input"]] = Answer(_invoice(c2, total=1368.5))  # total wrong
    script[c3["input"]] = Answer(_invoice(c3, customer={"name": "Fabrikam", "country": "CA"}))
    script[c4["input"]] = Answer(_invoice(c4, total="73,85", date="05/04/2024"))
    server.handler = by_input(script)
    run = tmp_path / "run"
    res = run_cli(["run", str(EXTRACT), "--out", str(run)])
    assert res.code == 0, res.stderr
    rows = {r["id"]: r for r in read_rows(run)}
    assert rows["inv-001"]["attempts"] == 2 and rows["inv-001"]["correct"] is True
    retry = server.requests_for(c1["input"])[1].messages[-1]["content"]
    assert '"vendor": ...' in retry and '"customer": ...' in retry
    assert rows["inv-003"]["score_detail"]["fields"]["customer.name"]["correct"] is False
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 8 and rep["correct"] == 5
    pf = rep["per_field"]
    assert list(pf) == ["vendor", "invoice_number", "date", "total", "currency", "customer",
                        "customer.name", "customer.country"]
    assert {k: v["correct"] for k, v in pf.items()} == {
        "vendor": 8, "invoice_number": 8, "date": 7, "total": 6, "currency": 8, "customer": 7,
        "customer.name": 7, "customer.country": 8}
    lo, hi = pf["total"]["accuracy_ci95"]
    assert pf["total"]["accuracy"] == 0.75 and 0.40 < lo < 0.42 and 0.92 < hi < 0.93
    wrong = {c["id"]: c for c in rep["wrong_cases"]}
    assert set(wrong) == {"inv-001", "inv-002", "inv-003", "inv-004"}  # inv-001: format retry
    reason = wrong["inv-004"]["answers"][0]["reason"]
    assert reason.startswith("wrong fields: date (differs); total (") and "locale" in reason
    assert wrong["inv-002"]["answers"][0]["score_detail"]["fields"]["total"]["correct"] is False
    assert json.loads(wrong["inv-002"]["expected"])["total"] == 1368.0
    md = (run / "report.md").read_text()
    assert "## Per field (95% Wilson intervals)" in md
    assert "| `total` | 6 of 8 | 75.0% | [40.9%, 92.9%] |" in md
    assert "Confusion matrix" not in md
    dom = parse((run / "report.html").read_text())
    fields = [tr.attrs.get("data-field") for tr in dom.find_all("tr") if tr.attrs.get("data-field")]
    assert fields == list(pf)
    res = run_cli(["report", str(run)])
    assert res.code == 0 and "customer.country" in res.stdout


def test_builtin_oracle_scores_the_extract_example_fully(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = run_cli(["run", str(EXTRACT), "--model", "builtin/oracle", "--out", str(run)])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    assert rep["accuracy"] == 1.0 and rep["n"] == 8
    assert all(f["accuracy"] == 1.0 for f in rep["per_field"].values())
    res = run_cli(["run", str(EXTRACT), "--model", "builtin/baseline", "--out",
                   str(tmp_path / "b")])
    assert res.code == 2 and "label" in res.stderr


def test_a_bad_expected_value_stops_before_any_call(tmp_path: Path, server: ScriptedServer,
                                                    endpoint_env: dict[str, str]) -> None:
    suite = suite_of(tmp_path / "s", NUMERIC, [("a", "x", 1), ("b", "y", "twelve")])
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 2
    err = " ".join(res.stderr.split())  # the terminal wraps long lines
    assert "cases.jsonl:2: field 'expected': must be a JSON number, got str 'twelve'" in err
    assert not run.exists() and server.chat_requests() == []


def test_report_on_a_run_from_before_scorers(tmp_path: Path) -> None:
    """A run written before scorers: no scorer in the manifest, no answer or score_detail in
    the rows. Its report reads as label, with the confusion matrix, as it always did."""
    suite = suite_of(tmp_path / "s", "labels: [bug, feature]\n",
                     [("a", "crash", "bug"), ("b", "dark mode", "feature")])
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["suite"]["scorer"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    for path in (run / "report.json", run / "report.md", run / "report.html"):
        path.unlink()
    res = run_cli(["report", str(run)])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    assert rep["accuracy"] == 1.0 and rep["scorer"]["config"] is None
    assert rep["scorer"]["type"] == "label" and rep["confusion"]["bug"]["bug"] == 1
    assert "Confusion matrix" in (run / "report.md").read_text()
