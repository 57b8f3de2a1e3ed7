"""Report and compare figures checked against numbers worked out by hand."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_rows, run_cli, write_suite
from support.ctrl_c import interruptible
from support.rows import U1, U2
from support.rows import narrow_row as _row
from support.scripted_server import Answer, RecordedRequest, ScriptedServer

LABELS = ("bug", "feature", "question")




def test_report_figures_by_hand(tmp_path: Path) -> None:
    cases = [(f"k{i}", f"text {i}", e) for i, e in enumerate(
        ["bug", "bug", "bug", "feature", "feature", "question", "question", "question", "bug"],
        start=1)]
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    rows = [
        _row("k1", "bug", "bug", 100, U1),
        _row("k2", "bug", "bug", 200, U1),
        _row("k3", "bug", "feature", 300, U1),
        _row("k4", "feature", "feature", 400, None),
        _row("k5", "feature", "", 500, U2, attempts=2, first="not_json", invalid="not_json"),
        _row("k6", "question", "question", 600, U1),
        _row("k7", "question", "bug", 700, U1),
        _row("k8", "question", "question", 800, U2, attempts=2, first="no_object"),
        _row("k9", "bug", "", None, None,
             error="no usable answer after 5 tries (last: http_503)"),
    ]
    (run / "raw_predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_cli(["report", str(run)])
    assert res.code == 0
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == 8  # the infra error is out of the denominator
    assert rep["correct"] == 5  # k1 k2 k4 k6 k8
    assert rep["accuracy"] == 5 / 8
    # Wilson 5/8, z=1.96: centre (0.625 + 1.9207/8... ) worked out as 0.5845 ± 0.2787
    lo, hi = rep["accuracy_ci95"]
    assert lo == pytest.approx(0.3057, abs=1e-3) and hi == pytest.approx(0.8632, abs=1e-3)
    assert rep["invalid_remaining"] == 1 and rep["invalid_first_try"] == 2
    assert rep["retried"] == 2 and rep["infra_errors"] == 1 and rep["infra_error_ids"] == ["k9"]
    # nearest rank over 100..800: p50 = 4th value, p95 = ceil(7.6) = 8th value, p90 =
    # ceil(7.2) = 8th, p99 = 8th; the histogram: span 700 / 30 bins = 23.3 -> round width 50,
    # from 100: (800 - 100) / 50 + 1 = 15 bins, one answer in every other bin
    assert rep["latency_ms"] == {"p50": 400, "p95": 800, "max": 800, "p90": 800, "p99": 800,
                                 "histogram": {"start_ms": 100.0, "bin_ms": 50.0, "n": 8,
                                               "counts": [1, 0] * 7 + [1]}}
    assert rep["confusion"] == {
        "bug": {"bug": 2, "feature": 1, "question": 0, "(invalid)": 0},
        "feature": {"bug": 0, "feature": 1, "question": 0, "(invalid)": 1},
        "question": {"bug": 1, "feature": 0, "question": 2, "(invalid)": 0},
    }
    pl = rep["per_label"]
    assert pl["bug"]["precision"] == pytest.approx(2 / 3) and pl["bug"]["recall"] == \
        pytest.approx(2 / 3) and pl["bug"]["f1"] == pytest.approx(2 / 3)
    assert pl["feature"]["precision"] == 0.5 and pl["feature"]["recall"] == 0.5
    assert pl["question"]["precision"] == 1.0 and pl["question"]["recall"] == pytest.approx(2 / 3)
    assert pl["question"]["f1"] == pytest.approx(0.8) and pl["question"]["support"] == 3
    # usage: 5 rows × U1 + 2 rows × U2; k4 had none, so the totals say incomplete
    assert rep["usage"] == {"prompt_tokens": 90, "completion_tokens": 18, "total_tokens": 108,
                            "incomplete": True, "rows_missing_usage": 1}
    md = (run / "report.md").read_text()
    assert "62.5% [30.6%, 86.3%]" in md and "incomplete" in md


def test_report_never_fills_missing_usage_with_zero(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite", [("a", "x", "bug")])
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    (run / "raw_predictions.jsonl").write_text(json.dumps(_row("a", "bug", "bug", 5, None)) + "\n")
    assert run_cli(["report", str(run)]).code == 0
    rep = json.loads((run / "report.json").read_text())
    assert rep["usage"]["total_tokens"] is None and rep["usage"]["incomplete"] is True
    assert "n/a" in (run / "report.md").read_text()


def test_compare_by_hand(tmp_path: Path, server: ScriptedServer,
                         endpoint_env: dict[str, str]) -> None:
    cases = [(f"c{i}", f"case text {i}", "bug") for i in range(1, 11)]
    a_right = {f"case text {i}" for i in range(1, 9)}  # A right on 1..8
    b_right = {f"case text {i}" for i in range(1, 3)}  # B right on 1..2

    def handler(req: RecordedRequest, n: int) -> Answer:
        right = a_right if req.body["model"] == "model-a" else b_right
        return Answer(json.dumps({"label": "bug" if req.case_input in right else "feature"}))

    server.handler = handler
    suite = write_suite(tmp_path / "suite", cases)
    ra, rb = tmp_path / "a", tmp_path / "b"
    assert run_cli(["run", str(suite), "--model", "model-a", "--out", str(ra)]).code == 0
    assert run_cli(["run", str(suite), "--model", "model-b", "--out", str(rb)]).code == 0
    res = run_cli(["compare", str(ra), str(rb), "--json", str(tmp_path / "c.json")])
    assert res.code == 0, res.stderr
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["table"] == {"both_right": 2, "only_a": 6, "only_b": 0, "both_wrong": 2,
                          "same_partial": 0}
    # exact McNemar, b=6, c=0: 2 * P(X <= 0 | n=6) = 2/64
    assert c["mcnemar_p"] == pytest.approx(0.03125)
    assert c["accuracy_diff_b_minus_a"] == pytest.approx(0.2 - 0.8)
    lo, hi = c["diff_ci95"]
    assert lo <= -0.6 <= hi < 0
    assert c["a_right_b_wrong"] == [f"c{i}" for i in range(3, 9)]
    assert c["b_right_a_wrong"] == []
    # seeded: the same call gives the same interval
    res2 = run_cli(["compare", str(ra), str(rb), "--json", str(tmp_path / "c2.json")])
    assert res2.code == 0
    assert json.loads((tmp_path / "c2.json").read_text())["diff_ci95"] == c["diff_ci95"]


def test_compare_refuses_different_suites(tmp_path: Path) -> None:
    s1 = write_suite(tmp_path / "s1", [("a", "x", "bug")])
    s2 = write_suite(tmp_path / "s2", [("a", "y", "bug")])
    for s, r in ((s1, "r1"), (s2, "r2")):
        assert run_cli(["run", str(s), "--model", "builtin/oracle",
                        "--out", str(tmp_path / r)]).code == 0
    res = run_cli(["compare", str(tmp_path / "r1"), str(tmp_path / "r2")])
    assert res.code == 2 and "not of the same suite" in res.stderr


def _settled(server: ScriptedServer, timeout: float = 30.0) -> int:
    """The chat requests the server holds once a killed client's connections are all closed
    and none arrived for half a second."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(server.chat_requests())
        if count != last:
            last, since = count, time.monotonic()
        elif server.open_connections() == 0 and time.monotonic() - since >= 0.5:
            return count
        time.sleep(0.05)
    raise AssertionError(f"the server did not settle in {timeout} s: {last} requests, "
                         f"{server.open_connections()} connections open")


def test_resume_after_kill_9(tmp_path: Path, server: ScriptedServer) -> None:
    """A real `assay run` process killed with SIGKILL mid-run, a torn line added as a crash in
    mid-write would leave it, then resumed: no row lost, none duplicated."""
    n = 240
    cases = [(f"c{i:03d}", f"slow case {i}", "bug") for i in range(n)]
    server.handler = lambda req, k: Answer('{"label": "bug"}', delay=0.03)
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    env = {**os.environ, "MODEL_BASE_URL": server.base_url, "MODEL_NAME": "m",
           "MODEL_API_KEY": "k"}
    cmd = [sys.executable, "-m", "assay", "run", str(suite), "--out", str(run), "-j", "8"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    raw = run / "raw_predictions.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if raw.exists() and raw.read_bytes().count(b"\n") >= 60:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    killed_rows = read_rows(run)
    assert 60 <= len(killed_rows) < n
    with open(raw, "ab") as fh:  # a write cut short by the crash
        fh.write(b'{"id":"c999","repeat":0,"expected":"bu')
    # the requests the killed process had sent may still be read by the server after the kill
    # (a loaded machine once counted eight of them against the resumed run)
    asked_before = _settled(server)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torn last line" in done.stderr
    # the cut row is kept beside the rows, never silently dropped
    kept = (run / "raw_predictions.jsonl.torn.jsonl").read_text().splitlines()
    assert [json.loads(x)["text"] for x in kept] == ['{"id":"c999","repeat":0,"expected":"bu']
    rows = read_rows(run)
    keys = [(r["id"], r["repeat"]) for r in rows]
    assert len(keys) == len(set(keys)) == n
    assert rows[: len(killed_rows)] == killed_rows  # append-only: history untouched
    # only what was missing was asked again; at most the 8 answers in flight were lost
    assert len(server.chat_requests()) - asked_before == n - len(killed_rows)
    assert asked_before - len(killed_rows) <= 8
    rep = json.loads((run / "report.json").read_text())
    assert rep["n"] == n and rep["accuracy"] == 1.0 and rep["torn_tail_bytes"] == 0


def test_sigint_exits_130_and_resumes(tmp_path: Path, server: ScriptedServer) -> None:
    cases = [(f"c{i:03d}", f"case {i}", "bug") for i in range(200)]
    # the first answers come at once, the rest slowly: the SIGINT lands mid-run even when a
    # loaded machine wakes this test late (all at 0.05 s, the run could end first)
    served = itertools.count()
    server.handler = lambda req, k: Answer('{"label": "bug"}',
                                           delay=0.0 if next(served) < 30 else 0.15)
    suite = write_suite(tmp_path / "suite", cases)
    run = tmp_path / "run"
    env = {**os.environ, "MODEL_BASE_URL": server.base_url, "MODEL_NAME": "m"}
    cmd = [sys.executable, "-m", "assay", "run", str(suite), "--out", str(run), "-j", "4"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=interruptible)
    raw = run / "raw_predictions.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (raw.exists() and raw.stat().st_size > 2000):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "resume with" in stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sessions"][-1]["status"] == "interrupted"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    keys = [(r["id"], r["repeat"]) for r in read_rows(run)]
    assert len(keys) == len(set(keys)) == 200
