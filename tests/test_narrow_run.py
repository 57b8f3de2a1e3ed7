"""Narrow runs end to end: the real CLI, the real openai client, a real local HTTP server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import SECRET, assert_no_secret, read_rows, run_cli, write_suite
from support.scripted_server import (
    Answer,
    Drop,
    Garbage,
    RecordedRequest,
    Reply,
    ScriptedServer,
    Status,
    by_input,
    echo_label,
)

CASES = [
    ("c1", "Title: crash on start\nBody: segfault", "bug"),
    ("c2", "Title: add dark mode\nBody: please", "feature"),
    ("c3", "Title: how to configure?\nBody: docs unclear", "question"),
    ("c4", "Title: wrong total\nBody: off by one", "bug"),
]
TRUTH = {text: label for _, text, label in CASES}


def j(label: str) -> Answer:
    return Answer(json.dumps({"label": label}))


def test_end_to_end_records_and_manifest(tmp_path: Path, server: ScriptedServer,
                                         endpoint_env: dict[str, str]) -> None:
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 0, res.stderr
    rows = read_rows(run)
    assert sorted(r["id"] for r in rows) == ["c1", "c2", "c3", "c4"]
    for r in rows:
        assert r["correct"] is True and r["attempts"] == 1 and r["error"] is None
        assert r["raws"] == [r["raw"]] and r["served_model"] == "scripted-model"
        assert set(r) >= {"id", "repeat", "expected", "raw", "raws", "label", "correct",
                          "attempts", "invalid_reason", "latency_ms", "usage", "served_model",
                          "error"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"]["requested"] == "test-model"
    assert manifest["model"]["served_models"] == ["scripted-model"]
    assert manifest["model"]["base_url"] == server.base_url
    assert len(manifest["suite"]["cases_sha256"]) == 64
    assert len(manifest["suite"]["prompt_sha256"]) == 64
    assert manifest["assay"]["version"]
    assert manifest["sessions"][0]["status"] == "complete"
    assert manifest["ended_at"]
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 4 and rep["correct"] == 4 and rep["accuracy"] == 1.0
    assert (run / "report.md").read_text().startswith("# assay report")
    # every request: system prompt + case input, temperature 0 by default
    for req in server.chat_requests():
        assert req.messages[0]["role"] == "system"
        assert req.body["temperature"] == 0
        assert req.headers["authorization"] == f"Bearer {SECRET}"
    assert_no_secret(run)


def test_format_retry_carries_original_input(tmp_path: Path, server: ScriptedServer,
                                             endpoint_env: dict[str, str]) -> None:
    text = CASES[0][1]
    server.handler = by_input({text: [Answer("It is a bug."), j("bug")]},
                              default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--out", str(run)]).code == 0
    row = next(r for r in read_rows(run) if r["id"] == "c1")
    assert row["attempts"] == 2
    assert row["raws"] == ["It is a bug.", '{"label": "bug"}']
    assert row["first_invalid_reason"] == "no_object"
    assert row["invalid_reason"] is None and row["correct"] is True
    first, second = server.requests_for(text)
    assert second.messages[:2] == first.messages  # same system prompt and original input
    assert second.messages[2] == {"role": "assistant", "content": "It is a bug."}
    assert "JSON object" in second.messages[3]["content"]
    rep = json.loads((run / "report.json").read_text())
    assert rep["invalid_first_try"] == 1 and rep["retried"] == 1
    assert rep["invalid_remaining"] == 0


def test_still_invalid_after_retry(tmp_path: Path, server: ScriptedServer,
                                   endpoint_env: dict[str, str]) -> None:
    text = CASES[1][1]
    server.handler = by_input({text: [Answer("{'label': 'feature'}"),
                                      Answer('{"label": "enhancement"}')]},
                              default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--out", str(run)]).code == 0
    row = next(r for r in read_rows(run) if r["id"] == "c2")
    assert row["label"] == "" and row["correct"] is False
    assert row["first_invalid_reason"] == "not_json"
    assert row["invalid_reason"] == "label_not_allowed"
    assert len(server.requests_for(text)) == 2  # exactly one format retry
    rep = json.loads((run / "report.json").read_text())
    assert rep["invalid_remaining"] == 1 and rep["n"] == 4 and rep["correct"] == 3
    assert rep["confusion"]["feature"]["(invalid)"] == 1


def test_refusal_is_an_invalid_reason(tmp_path: Path, server: ScriptedServer,
                                      endpoint_env: dict[str, str]) -> None:
    text = CASES[2][1]
    server.handler = by_input({text: Answer(None, refusal="I cannot help with that.")},
                              default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--out", str(run)]).code == 0
    row = next(r for r in read_rows(run) if r["id"] == "c3")
    assert row["first_invalid_reason"] == "refusal" and row["invalid_reason"] == "refusal"


@pytest.mark.parametrize("fault", [
    Status(429, headers={"Retry-After": "0.3"}),
    Status(500),
    Status(503),
    Drop(),
    Garbage(),
], ids=["429", "500", "503", "drop", "garbage"])
def test_transport_faults_are_retried_without_using_the_format_retry(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str], fault) -> None:
    text = CASES[0][1]
    server.handler = by_input({text: [fault, fault, j("bug")]},
                              default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 0, res.stderr
    row = next(r for r in read_rows(run) if r["id"] == "c1")
    assert row["attempts"] == 1 and row["correct"] is True and row["error"] is None
    assert len(row["tries"]) == 3
    assert row["tries"][-1]["status"] == 200
    assert all(t.get("error") for t in row["tries"][:2])
    if isinstance(fault, Status) and fault.code == 429:
        assert [t["wait_s"] for t in row["tries"][:2]] == [0.3, 0.3]  # Retry-After honoured
        reqs = server.requests_for(text)
        assert reqs[1].received_at - reqs[0].received_at >= 0.29


def test_infra_error_then_resume(tmp_path: Path, server: ScriptedServer,
                                 endpoint_env: dict[str, str]) -> None:
    text = CASES[3][1]
    server.handler = by_input({text: Status(503)}, default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "--max-tries", "2"])
    assert res.code == 3
    assert "resume" in res.stderr
    rows = read_rows(run)
    bad = [r for r in rows if r["id"] == "c4"]
    assert len(bad) == 1 and bad[0]["error"] and bad[0]["correct"] is None
    assert len(bad[0]["tries"]) == 2
    rep = json.loads((run / "report.json").read_text())
    assert rep["infra_errors"] == 1 and rep["n"] == 3 and rep["accuracy"] == 1.0
    # the endpoint recovers; resuming asks only for the missing case
    server.handler = echo_label(labels_by_input=TRUTH)
    before = len(server.chat_requests())
    res = run_cli(["run", str(suite), "--out", str(run), "--max-tries", "2"])
    assert res.code == 0, res.stderr
    assert len(server.chat_requests()) == before + 1
    rows = read_rows(run)
    assert len(rows) == 5  # the error row stays as history; nothing duplicated
    answered = [r for r in rows if not r["error"]]
    assert sorted(r["id"] for r in answered) == ["c1", "c2", "c3", "c4"]
    rep = json.loads((run / "report.json").read_text())
    assert rep["infra_errors"] == 0 and rep["n"] == 4
    manifest = json.loads((run / "manifest.json").read_text())
    assert [s["status"] for s in manifest["sessions"]] == ["infra_errors", "complete"]


def test_slow_answers_time_out_and_are_retried(tmp_path: Path, server: ScriptedServer,
                                               endpoint_env: dict[str, str]) -> None:
    text = CASES[0][1]
    server.handler = by_input({text: [Answer('{"label": "bug"}', delay=2.0), j("bug")]},
                              default=echo_label(labels_by_input=TRUTH))
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--out", str(run), "--timeout", "0.5"]).code == 0
    row = next(r for r in read_rows(run) if r["id"] == "c1")
    assert row["tries"][0]["error"] == "timeout" and row["correct"] is True


def test_auth_error_stops_the_run(tmp_path: Path, server: ScriptedServer,
                                  endpoint_env: dict[str, str]) -> None:
    server.handler = lambda req, n: Status(401, body='{"error": {"message": "bad key"}}')
    cases = [(f"c{i}", f"text {i}", "bug") for i in range(40)]
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "-j", "2"])
    assert res.code == 3
    assert "HTTP 401" in res.stderr and "bad key" in res.stderr
    assert len(server.chat_requests()) < 40  # stopped instead of burning every case
    assert_no_secret(run)


def test_resume_refuses_changed_suite(tmp_path: Path, server: ScriptedServer,
                                      endpoint_env: dict[str, str]) -> None:
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--out", str(run)]).code == 0
    write_suite(tmp_path / "suite", CASES, prompt="A different prompt.")
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 2 and "prompt_sha256" in res.stderr
    write_suite(tmp_path / "suite", CASES[:3])
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 2 and "cases_sha256" in res.stderr
    assert len(read_rows(run)) == 4


def test_served_model_change_is_warned(tmp_path: Path, server: ScriptedServer,
                                       endpoint_env: dict[str, str]) -> None:
    def handler(req: RecordedRequest, n: int) -> Answer:
        model = "model-v1" if req.case_input in (CASES[0][1], CASES[1][1]) else "model-v2"
        return Answer(json.dumps({"label": TRUTH[req.case_input]}), model=model)

    server.handler = handler
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "-j", "1"])
    assert res.code == 0
    assert "served model changed mid-run" in res.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"]["served_models"] == ["model-v1", "model-v2"]
    assert manifest["warnings"]


def test_repeats_and_agreement(tmp_path: Path, server: ScriptedServer,
                               endpoint_env: dict[str, str]) -> None:
    flaky = CASES[2][1]

    def handler(req: RecordedRequest, n: int) -> Answer:
        if req.case_input == flaky:
            return j("question" if n % 2 == 0 else "bug")
        return j(TRUTH[req.case_input])

    server.handler = handler
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "--repeats", "2",
                   "--temperature", "0.7"])
    assert res.code == 0
    rows = read_rows(run)
    assert sorted((r["id"], r["repeat"]) for r in rows) == [
        (c, r) for c in ("c1", "c2", "c3", "c4") for r in (0, 1)]
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 8 and rep["correct"] == 7
    assert rep["agreement"] == {"cases_with_all_repeats": 4, "cases_compared": 4,
                                "consistent_cases": 3, "rate": 0.75, "unstable_cases": ["c3"],
                                "answers": 8, "invalid_answers": 0}
    assert all(req.body["temperature"] == 0.7 for req in server.chat_requests())


def test_agreement_counts_valid_answers_only(tmp_path: Path, server: ScriptedServer,
                                             endpoint_env: dict[str, str]) -> None:
    """A small local model that never answers in the format: every answer invalid, each with
    its own text (and the format retry invalid too). The repeats agree on nothing: the figure
    is "n/a" with the 12 invalid answers said, never 100%. Then one case answers validly and
    consistently beside the invalid ones: it alone is compared."""
    calls = {"n": 0}

    def rambling(req: RecordedRequest, n: int) -> Answer:
        calls["n"] += 1
        return Answer(f"Hmm, maybe it is about {req.case_input[:12]}? (thought {calls['n']})")

    server.handler = rambling
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "--repeats", "3", "-j", "1"])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 12 and rep["invalid_remaining"] == 12
    ag = rep["agreement"]
    assert ag["rate"] is None and ag["cases_compared"] == 0 and ag["consistent_cases"] == 0
    assert ag["answers"] == 12 and ag["invalid_answers"] == 12
    md = (run / "report.md").read_text()
    assert "no case has two valid answers; 12 of 12 answers invalid" in md
    assert "100" not in next(line for line in md.splitlines() if "agreement across" in line)
    assert "no case has two valid answers" in (run / "report.html").read_text()

    def mostly_rambling(req: RecordedRequest, n: int) -> Answer:
        if req.case_input == CASES[0][1]:
            return j("bug")
        return rambling(req, n)

    server.handler = mostly_rambling
    run2 = tmp_path / "run2"
    assert run_cli(["run", str(suite), "--out", str(run2), "--repeats", "3", "-j", "1"]).code == 0
    ag = json.loads((run2 / "report.json").read_text())["agreement"]
    assert ag["cases_compared"] == 1 and ag["consistent_cases"] == 1 and ag["rate"] == 1.0
    assert ag["invalid_answers"] == 9 and ag["answers"] == 12
    assert "1 of 1 cases with two or more valid answers identical; 9 of 12 answers invalid" in (
        run2 / "report.md").read_text()


def test_compare_runs_with_different_repeats_uses_every_answer(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """A 1-repeat run against a 3-repeat run: four cases paired, each on its rate (B's c3 is
    right once in three), no answer "answered in only one run"."""
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES)
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    assert run_cli(["run", str(suite), "--out", str(run_a)]).code == 0
    seen = {"n": 0}

    def c3_unsure(req: RecordedRequest, n: int) -> Answer:
        if req.case_input == CASES[2][1]:
            seen["n"] += 1
            return j("question" if seen["n"] == 1 else "bug")
        return j(TRUTH[req.case_input])

    server.handler = c3_unsure
    assert run_cli(["run", str(suite), "--out", str(run_b), "--repeats", "3", "-j", "1"]).code == 0
    out = tmp_path / "c.json"
    res = run_cli(["compare", str(run_a), str(run_b), "--json", str(out)])
    assert res.code == 0, res.stderr
    c = json.loads(out.read_text())
    assert c["paired"] == 4 and c["only_in_one_run"] == 0
    assert c["repeats"] == {"a": 1, "b": 3} and c["answers"] == {"a": 4, "b": 12}
    assert c["run_a"]["accuracy"] == 1.0
    assert c["run_b"]["accuracy"] == pytest.approx((3 + 1 / 3) / 4)
    assert c["accuracy_diff_b_minus_a"] == pytest.approx(-(2 / 3) / 4)
    assert c["table"] == {"both_right": 3, "only_a": 1, "only_b": 0, "both_wrong": 0,
                          "same_partial": 0}
    assert c["a_right_b_wrong"] == ["c3"]
    assert any("repetitions differ (1 in A, 3 in B)" in w for w in c["warnings"])
    md = run_cli(["compare", str(run_a), str(run_b)])
    assert md.code == 0 and "answered in only one run: 0" in md.stdout
    assert "answers used A 4, B 12" in md.stdout


def test_builtin_oracle_scores_everything(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    assert rep["accuracy"] == 1.0 and rep["served_models"] == {"builtin/oracle": 4}


def test_a_folder_left_by_a_start_killed_mid_manifest_is_started_again(
        tmp_path: Path) -> None:
    """A kill -9 while the manifest is written leaves only its temporary file: the same
    command starts the run. Anything else in the folder is someone else's: refused."""
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    run.mkdir()
    (run / ".manifest.json.q1w2e3.tmp").write_text('{"schema": "as')
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)])
    assert res.code == 0, res.stderr
    assert (run / "manifest.json").is_file() and not list(run.glob(".manifest.json.*"))
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "draft.md").write_text("mine\n")
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out",
                   str(tmp_path / "kept")])
    assert res.code == 2, res.stderr
    assert "is not empty and has no manifest.json" in " ".join(res.stderr.split())
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["draft.md"]


def test_builtin_baseline_on_example_suite(tmp_path: Path) -> None:
    run = tmp_path / "run"
    example = Path(__file__).parent.parent / "examples" / "triage"
    res = run_cli(["run", str(example), "--model", "builtin/baseline", "--out", str(run)])
    assert res.code == 0, res.stderr
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == rep["expected_rows"] >= 60
    assert rep["invalid_remaining"] == 0
    # an honest baseline: clearly better than chance, clearly not perfect
    assert 0.4 < rep["accuracy"] < 1.0


def test_unreachable_endpoint_stops_the_run_at_once(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listening at the base URL: one request before the first case finds it, exit 3
    within seconds with the cause on the first line, no report of zeros, no run directory
    (so `assay history` has nothing to plot), for --out and for --out-root alike."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MODEL_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("MODEL_NAME", "m")
    monkeypatch.setenv("MODEL_API_KEY", SECRET)
    cases = [(f"c{i}", f"text {i}", "bug") for i in range(60)]
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    started = time.monotonic()
    res = run_cli(["run", str(suite), "--out", str(run), "--max-tries", "5", "-j", "2"])
    assert res.code == 3, res.stderr
    assert time.monotonic() - started < 30  # one refused connection, no backoff per case
    first = res.stderr.splitlines()[0]
    assert first.startswith("assay: cannot connect to http://127.0.0.1:") and "running" in first
    assert res.stdout == "" and "accuracy" not in res.stderr  # no report of zeros
    assert not run.exists()
    root = tmp_path / "nightly"
    res = run_cli(["run", str(suite), "--out-root", str(root)])
    assert res.code == 3 and res.stderr.startswith("assay: cannot connect"), res.stderr
    assert list(root.iterdir()) == []  # the claimed directory was released
    hist = run_cli(["history", str(root)])
    assert hist.code == 0 and hist.stdout == "no run with an answer found\n", hist


def test_odd_typed_fields_from_a_gateway_are_recorded_as_text(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """A gateway that sends a number where the API has a string must not fail the row (rows
    are validated as they are written): the value is kept as its JSON text."""
    body = json.dumps({"model": 7, "system_fingerprint": {"build": 3}, "choices": [
        {"message": {"role": "assistant", "content": '{"label": "bug"}'}, "finish_reason": 1}]})
    server.handler = lambda req, n: Garbage(body=body, content_type="application/json")
    suite = write_suite(tmp_path / "suite", CASES[:1])
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run)])
    assert res.code == 0, res.stderr
    [row] = read_rows(run)
    assert row["correct"] is True and row["error"] is None
    assert (row["served_model"], row["system_fingerprint"], row["finish_reason"]) == (
        "7", '{"build": 3}', "1")


def test_a_run_stopped_early_says_why_first_and_counts_alike(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    """Three answers, then the endpoint refuses the key (401, fatal): the cause is said before
    any table (after the progress line's last count); the progress line, the report and the
    resume hint count the same units (asked = answered + infra errors; the rest not asked
    yet)."""
    answered = {"n": 0}

    def three_then_refuse(request: RecordedRequest, attempt: int) -> Reply:
        answered["n"] += 1
        if answered["n"] > 3:
            return Status(401, body='{"error": {"message": "bad key"}}')
        return Answer('{"label": "bug"}')

    server.handler = three_then_refuse
    cases = [(f"c{i}", f"text {i}", "bug") for i in range(10)]
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    res = run_cli(["run", str(suite), "--out", str(run), "-j", "1"])
    assert res.code == 3, res.stderr
    lines = res.stderr.splitlines()
    # the progress line says what was asked, whole; the cause follows it, before any table
    assert lines[:2] == ["assay: 4/10 asked (invalid 0 · infra errors 1)",
                         "assay: run stopped early: HTTP 401: bad key"], lines
    rep = json.loads((run / "report.json").read_text())
    assert (rep["n"], rep["infra_errors"], rep["missing_rows"]) == (3, 1, 6)
    assert "3 of 10" in res.stdout and "wrong and invalid" not in res.stdout
    assert lines[-1].startswith("1 ended in infra errors and 6 not asked yet; resume with: ")
    assert lines[-1].endswith(f"--out {run}")
