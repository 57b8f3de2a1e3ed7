"""A broken arm is not a losing arm: an agent that never starts, and a model that never
answers, end as failures of their own codes, through the CLI with real sandboxes, the real
gateway and the scripted upstream.

- an arm whose agent cannot start (its script missing in the sandbox) is ``agent_start_failed``
  with the stderr tail, and the run stops after that arm's first attempts with exit 2;
- an upstream that answers 500 to every call makes each attempt ``model_unavailable``:
  retried per ``retries.infra``, in the infra error rate, each ledger row with the upstream's
  status and the first bytes of its error body, and no secret anywhere in the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.bundles import make_bundle
from support.scripted_server import ASK_THROUGH_GATEWAY, ScriptedServer, Status

from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

# asks three times, as an agent with its own retries would, then gives up
ASKS = "import urllib.error\nfor i in range(3):\n    try:\n" + "".join(
    "        " + line + "\n" for line in ASK_THROUGH_GATEWAY.strip().splitlines()) + (
    "        break\n    except urllib.error.HTTPError as exc:\n"
    "        print('model error', exc.code, file=sys.stderr)\nelse:\n    sys.exit(1)\n")


def _experiment(root: Path, arms: str, *, reps: int, infra: int = 2) -> Path:
    bundle = make_bundle(root / "tasks" / "calc")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", "network_policy: model-proxy-only"))
    from assay.suites.bundle import set_fixture_digest, tree_digest

    set_fixture_digest(bundle, tree_digest(bundle / "repo"))
    exp = root / "experiment.yaml"
    exp.write_text(f"""name: broken
tasks: [tasks]
repetitions: {reps}
seed: 3
concurrency: 1
arms:
{arms}
prices:
  scripted-model: {{input: 1, output: 2}}
retries: {{infra: {infra}}}
""")
    return exp


def _no_secret(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


@needs_bwrap
def test_an_arm_that_cannot_start_stops_the_run_after_its_first_attempts(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    # the script is there (the load check passes); what it runs is not
    (tmp_path / "agents" / "start.sh").write_text("exec python3 /assay/agent/agents/gone.py\n")
    exp = _experiment(tmp_path, """  broken:
    agent: "command:sh agents/start.sh"
    agent_files: [agents]
  idle:
    agent: nop
""", reps=6)
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 2, res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    assert ("arm 'broken': its agent could not start in its first 3 attempts "
            "(agent_start_failed: exit 2 before doing anything: python3: can't open file "
            "'/assay/agent/agents/gone.py'") in err
    assert "stopped before spending the run on it" in err
    attempts = sorted(out.glob("trials/calc-001/broken/*/a*/trial.json"))
    assert len(attempts) == 3  # -j 1: not one attempt more than the three that decided
    for path in attempts:
        rec = json.loads(path.read_text())
        assert rec["status"] == "infra_error" and rec["failure_code"] == "agent_start_failed"
        assert rec["error"].startswith("agent_start_failed: exit 2 before doing anything")
        assert "can't open file" in rec["execution"]["stderr_tail"]
        assert not (path.parent / "artifact.tar").exists()  # never graded as the agent's work
    rep = json.loads((out / "report.json").read_text())
    arm = rep["arms"]["broken"]
    assert arm["graded"] == 0 and arm["coverage"] == 0.0 and arm["infra_error_rate"] == 1.0
    assert arm["infra_failure_codes"] == {"agent_start_failed": 3}
    assert "attempts agent\\_start\\_failed: 3" in (out / "report.md").read_text()


@needs_bwrap
def test_an_upstream_failing_every_call_is_model_unavailable(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    body = json.dumps({"error": {"message": "tools[3] has no 'parameters' (request had "
                                 f"Authorization: Bearer {SECRET})", "type": "server_error"}})
    with ScriptedServer(lambda req, n: Status(500, body=body)) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "ask.py").write_text(ASKS)
        exp = _experiment(tmp_path, """  asks:
    agent: "command:python3 agents/ask.py"
    agent_files: [agents]
    model: {name: scripted-model, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}
  idle:
    agent: nop
""", reps=2, infra=1)
        out = tmp_path / "run"
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
        calls = len(srv.chat_requests())
    assert res.code == 3, res.stdout + res.stderr  # infra errors: resumable
    # exp run says so while it runs, one line a trial
    assert "model_unavailable: the model's upstream failed all 3 calls (HTTP 500 x3)" in \
        " ".join(res.stderr.split())
    attempts = sorted(out.glob("trials/calc-001/asks/*/a*/trial.json"))
    assert len(attempts) == 4 and calls == 12  # 2 trials x (1 + retries.infra 1) x 3 calls
    for path in attempts:
        rec = json.loads(path.read_text())
        assert rec["failure_code"] == "model_unavailable", rec
        rows = [json.loads(x) for x in (path.parent / "model_calls.jsonl").read_text()
                .splitlines()]
        assert len(rows) == 3
        for row in rows:
            assert row["upstream_status"] == 500 and row["status"] == 500
            assert row["error"].startswith("upstream HTTP 500: {\"error\": {\"message\": "
                                           "\"tools[3] has no 'parameters'")
            assert "Bearer ***" in row["error"]
    status = json.loads(run_cli(["exp", "status", str(out), "--json"]).stdout)
    codes = {t["arm"]: t.get("failure_code") for t in status["trials"]}
    assert codes["asks"] == "model_unavailable"
    rep = json.loads((out / "report.json").read_text())
    arm = rep["arms"]["asks"]
    assert arm["infra_error_rate"] == 1.0 and arm["graded"] == 0 and arm["coverage"] == 0.0
    assert arm["infra_failure_codes"] == {"model_unavailable": 4}
    assert rep["arms"]["idle"]["graded"] == 2
    _no_secret(out)


FIX = "import subprocess\nsubprocess.run(['sed', '-i', 's/return a - b/return a + b/', " \
      "'src/calc/__init__.py'], check=True)\n"


@needs_bwrap
def test_an_unpriced_model_and_an_arm_that_never_asks_its_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.scripted_server import Answer

    with ScriptedServer(lambda req, n: Answer("fix it", model="house-model")) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "asks.py").write_text(ASK_THROUGH_GATEWAY + FIX)
        (tmp_path / "agents" / "silent.py").write_text("import sys\n" + FIX)
        model = "model: {name: house-model, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}"
        exp = _experiment(tmp_path, f"""  asks:
    agent: "command:python3 agents/asks.py"
    agent_files: [agents]
    {model}
  silent:
    agent: "command:python3 agents/silent.py"
    agent_files: [agents]
    {model}
bar: {{baseline: asks, candidate: silent, hoped_improvement: 0.1, max_regression: 0.1}}
""", reps=2)
        out = tmp_path / "run"
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    # the model has no price: its cost is unknown, never $0.0000
    err = " ".join(res.stderr.split())
    assert "spent: no price for house-model; report:" in err and "$0.0000" not in err
    rep = json.loads((out / "report.json").read_text())
    asks = rep["arms"]["asks"]
    assert asks["calls"] == 2 and asks["cost_usd"] is None
    assert asks["cost_note"] == "no price for house-model"
    assert "| no price for house-model |" in (out / "report.md").read_text()
    # every graded trial of the candidate made no model call: named, and no verdict
    assert rep["arms"]["silent"]["graded"] == 2 and rep["arms"]["silent"]["accepted"] == 2
    assert rep["arms"]["silent"]["graded_without_model_calls"] == 2
    assert rep["verdict"] is None
    named = ("arm silent made no model calls in 2 of 2 trials: it has a model (house-model) "
             "but never asked it, so no verdict is drawn from it")
    assert named in rep["notes"]
    verdict = run_cli(["exp", "verdict", str(out)])
    assert verdict.code == 2 and named in " ".join(verdict.stderr.split())


def test_what_counts_as_an_agent_that_never_started() -> None:
    from assay.records.failures import start_failure

    def ran(code: int) -> dict:
        return {"status": "exited_nonzero", "exit_code": code}

    tail = "sh: 1: my-agent: not found\n"
    assert start_failure(ran(127), tail, model_calls=None, unchanged=True) == \
        "exit 127 (the program could not be run): sh: 1: my-agent: not found"
    # 126/127 even after a change: the shell could not run what it was given
    assert start_failure(ran(126), "x: Permission denied", model_calls=0, unchanged=False)
    traceback = ("Traceback (most recent call last):\n  File \"/assay/agent/a.py\", line 1\n"
                 "ModuleNotFoundError: No module named 'openai'\n")
    assert start_failure(ran(1), traceback, model_calls=0, unchanged=True) == \
        "exit 1 before doing anything: ModuleNotFoundError: No module named 'openai'"
    # a crash before the first model call that left the tree untouched, with a model
    assert start_failure(ran(1), "KeyError: 'X'", model_calls=0, unchanged=True) == \
        "exit 1 before its first model call, with the workspace unchanged: KeyError: 'X'"
    # the agent's work, whatever it is worth: it changed something, or it talked to its model,
    # or it has no model and failed for a reason of its own
    assert start_failure(ran(1), traceback, model_calls=0, unchanged=False) is None
    assert start_failure(ran(1), traceback, model_calls=2, unchanged=True) is None
    assert start_failure(ran(1), "assert failed", model_calls=None, unchanged=True) is None
    assert start_failure({"status": "agent_timeout", "exit_code": None}, traceback,
                         model_calls=0, unchanged=True) is None


def test_an_upstream_error_body_is_bounded_and_redacted() -> None:
    from assay.models.upstream_error import EXCERPT_BYTES, error_excerpt

    body = (b'{"error": "bad key sk-live-0123456789abcdef for Bearer abcdefgh12345678 and '
            + SECRET.encode() + b'\n\x00"}' + b"x" * 2000)
    text = error_excerpt(502, body, (SECRET,))
    assert text.startswith('upstream HTTP 502: {"error": "bad key *** for Bearer *** and ***')
    assert SECRET not in text and "sk-live" not in text and "\x00" not in text
    assert text.endswith("…") and len(text) < EXCERPT_BYTES + 40


@needs_bwrap
def test_a_solution_that_fails_on_a_missing_file_is_the_tasks_failure(tmp_path: Path) -> None:
    """The oracle's ``solve.sh`` failing at once on a missing file ("No such file or
    directory", workspace unchanged: the signs of an agent that never started) is the task's
    own failure, and ``task check`` calls the task broken. It was ``infra_error:
    agent_start_failed`` for a public Harbor task whose build-time log was missing."""
    bundle = make_bundle(tmp_path / "tasks" / "calc")
    (bundle / "solution" / "solve.patch").unlink()
    (bundle / "solution" / "solve.sh").write_text("set -e\nawk 1 logs/service.log\n")
    out = tmp_path / "check"
    res = run_cli(["task", "check", str(bundle), "--reruns", "1", "--out", str(out)])
    assert res.code == 1, res.stdout + res.stderr
    [report] = json.loads((out / "task-check.json").read_text())
    assert (report["status"], report["oracle"]) == ("broken", "0/1"), report
    trial = json.loads((out / "calc-001" / "oracle" / "0" / "trial.json").read_text())
    ex = trial["execution"]
    assert ex["status"] == "exited_nonzero" and ex.get("failure_code") is None, ex
    assert trial["grade"]["accepted"] is False
