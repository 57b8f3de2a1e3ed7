"""The ``claude`` adapter with the real, pinned Claude Code CLI (``@anthropic-ai/claude-code``).

The CLI is installed by ``scripts/agents/claude.sh`` (a subprocess, as CI on a clean clone runs
it): 23 s measured with Node 22 cached, 8 s when npm's own cache holds both packages,
~384 MB (+185 MB for Node 22) under
``$ASSAY_AGENTS_DIR`` (default ``~/.cache/assay/agents/claude-code-<version>``), once per
version. The full form is ``bash scripts/agents/claude.sh``; its last line is the executable.
If the registry cannot be reached the tests skip and print why.

Real parts otherwise: builtin/replay as the scripted upstream (or a scripted server answering
errors), the run's gateway with scoped tokens, bubblewrap sandboxes with the model-proxy
network, the real verifier.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli
from support import agent_cli
from support.bundles import make_bundle
from support.protocol_server import ProtocolServer, Turn
from support.scripted_server import RecordedRequest, Status

from assay.agents import parse_agent
from assay.agents.claude.adapter import ClaudeCode, time_limit
from assay.agents.claude.stream import ANOMALIES, read_stream, usage_check

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

INSTALL = agent_cli.SCRIPTS / "claude.sh"
PINNED = "2.1.332"
#: the pinned CLI, installed through the project's script (cached after the first run)
claude_bin = agent_cli.install_fixture(INSTALL, "claude-code")


def test_the_install_script_gives_the_pinned_cli(claude_bin: Path) -> None:
    proc = subprocess.run([str(claude_bin), "--version"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == PINNED
    # a second run installs nothing and names the same executable
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(claude_bin)


# --------------------------------------------------------------- the agent spec


def test_the_cli_is_found_or_the_spec_is_refused(tmp_path: Path, claude_bin: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_CLAUDE_BIN", raising=False)
    monkeypatch.setenv("ASSAY_AGENTS_DIR", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="install it with scripts/agents/claude.sh"):
        parse_agent("claude")
    with pytest.raises(ValueError, match="not an executable"):
        parse_agent(f"claude:{tmp_path / 'nothing'}")
    monkeypatch.setenv("ASSAY_CLAUDE_BIN", str(claude_bin))
    agent = parse_agent("claude")
    assert isinstance(agent, ClaudeCode) and agent.bin == claude_bin
    ident = agent.describe()
    assert ident["cli_version"].startswith(PINNED)
    assert ident["bin_sha256"] == hashlib.sha256(claude_bin.read_bytes()).hexdigest()
    assert "stream-json" in ident["flags"] and ident["offline_env"]["DISABLE_TELEMETRY"] == "1"
    assert time_limit(30) == 27 and time_limit(600) == 570
    # at experiment load, a missing CLI is a readable refusal, not a crash mid-run
    make_bundle(tmp_path / "tasks" / "calc")
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"name: x\ntasks: [tasks]\narms:\n  a:\n    agent: \"claude:{tmp_path}/no\"\n"
                   "    model: {name: builtin/replay, script: s.yaml, protocol: anthropic}\n")
    (tmp_path / "s.yaml").write_text("turns: [{message: hi}]\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    # read unwrapped: the CLI wraps its message at the console width, where the paths put it
    assert res.code == 2 and "not an executable" in " ".join((res.stdout + res.stderr).split())


def test_stream_reader_names_what_a_broken_stream_does() -> None:
    init = {"type": "system", "subtype": "init", "session_id": "s"}
    use = {"type": "assistant", "session_id": "s", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}}
    stray = {"type": "user", "session_id": "other", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}}
    result = {"type": "result", "subtype": "success", "session_id": "s"}
    lines = [init, use, stray, result, result, {"type": "mystery"}]
    raw = b"".join(json.dumps(x).encode() + b"\n" for x in lines) + b'{"type": "res'
    reading = read_stream(raw)
    assert set(reading.anomalies) == {"session_id_inconsistent", "tool_result_without_call",
                                      "duplicate_result", "result_not_last",
                                      "unknown_message_type", "truncated_last_line"}
    assert set(reading.anomalies) <= set(ANOMALIES)
    assert [c["name"] for c in reading.tool_calls] == ["Bash"]
    assert set(read_stream(b"").anomalies) == {"missing_init", "missing_result"}
    gw = {"input": 10, "cached_input": 0, "output": 4, "calls": 2, "usage_missing_calls": 0}
    assert usage_check({"input_tokens": 10, "output_tokens": 4}, gw)["exact"] is True
    assert usage_check({"input_tokens": 11, "output_tokens": 4}, gw)["agrees"] is False
    assert usage_check(None, gw)["comparable"] is False


# --------------------------------------------------------------- through the runner

FIX_CMD = "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"
FIX = f"""turns:
  - message: I will fix the sign.
    tool_call:
      name: Bash
      arguments: {{command: "{FIX_CMD}", description: fix the sign}}
  - message: Fixed add().
"""


def _tasks(root: Path, **kw: Any) -> None:
    agent_cli.proxy_bundle(root / "tasks" / "calc", **kw)
    (root / "scripts").mkdir()
    (root / "scripts" / "calc-001.yaml").write_text(FIX)


def _execution(attempt: Path) -> dict[str, Any]:
    return json.loads((attempt / "trial.json").read_text())["execution"]


def _outcomes(out: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(x) for x in (out / "outcomes.jsonl").read_text().splitlines()]
    return {r["arm"]: r for r in rows}


@agent_cli.needs_bwrap
def test_the_real_cli_fixes_the_task_through_the_gateway(tmp_path: Path, claude_bin: Path) -> None:
    _tasks(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: claude-e2e
tasks: [tasks]
arms:
  claude:
    agent: "claude:{claude_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: anthropic}}
limits: {{cost_usd: 1.0}}
prices:
  builtin/replay: {{input: 1.0, output: 2.0}}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["arms"]["claude"]["accepted"] == 1, rep["arms"]["claude"]
    attempt = agent_cli.attempt_dir(out, "claude")
    ex = _execution(attempt)
    report = ex["agent_report"]
    assert ex["status"] == "succeeded" and ex["anomalies"] == {} and ex["evidence_gap"] is False
    assert report["agent_status"] == "success" and report["is_error"] is False
    assert report["cli_version"].startswith(PINNED)
    assert report["stream"]["init"]["permission_mode"] == "bypassPermissions"
    assert report["stream"]["init"]["api_key_source"] == "ANTHROPIC_API_KEY"
    assert [(c["name"], c["is_error"]) for c in report["stream"]["tool_calls"]] == [
        ("Bash", False)]
    assert "--max-turns" in report["argv"] and report["max_turns"] == 10
    assert report["argv"][-2:] == ["--", "<instruction.md>"]
    # the ledger is the calls the agent made: two assistant steps, as the CLI counts its turns
    rows = agent_cli.ledger(attempt)
    assert [(r.protocol, r.status, r.stream, r.assistant_step) for r in rows] == [
        ("anthropic", 200, True, True)] * 2
    assert ex["agent_usage"]["num_turns"] == len(rows) == ex["model_usage"]["calls"]
    claim = ex["agent_usage"]["usage"]
    assert claim["input_tokens"] == sum(r.input_tokens or 0 for r in rows)
    assert claim["output_tokens"] == sum(r.output_tokens or 0 for r in rows)
    assert ex["usage_check"]["agrees"] is True and ex["usage_check"]["exact"] is True
    # the CLI's own cost claim is kept as reported (its price list, not ours)
    assert isinstance(ex["agent_usage"]["total_cost_usd"], float)
    ident = json.loads((attempt / "trial.json").read_text())["agent_identity"]
    assert ident["adapter"] == "assay.claude/1" and len(ident["bin_sha256"]) == 64
    stream = (attempt / "agent" / "stdout.log").read_text()
    assert json.loads(stream.splitlines()[-1])["type"] == "result"  # kept as received
    config = json.loads((attempt / "agent" / "claude-config.json").read_text())
    assert json.loads(config[".claude/settings.json"])["env"]["DISABLE_AUTOUPDATER"] == "1"
    agent_cli.assert_no_secret(out)


def _errors(req: RecordedRequest, n: int) -> Status | Turn:
    """The arm's model name says which status every call gets."""
    code = int(str((req.body or {}).get("model", "m-500")).split("-")[1])
    kind = {400: "invalid_request_error", 401: "authentication_error"}[code]
    return Status(code, body=json.dumps({"type": "error", "error": {
        "type": kind, "message": f"scripted {code}"}}))


@agent_cli.needs_bwrap
def test_errors_and_a_turn_budget_end_with_the_right_failure(tmp_path: Path, claude_bin: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """400: the CLI gives up at once, nothing changed (the verifier decides: no_change); 401:
    it retries until its own time limit, no tool ran, so the arm is misconfigured
    (infra_error, not retried here); ``assistant_steps: 1``: ``--max-turns 1`` ends it after
    the tool call (budget_exhausted)."""
    _tasks(tmp_path, agent_seconds=8)
    y = tmp_path / "tasks" / "calc" / "task.yaml"
    y.write_text(y.read_text().replace("assistant_steps: 10", "assistant_steps: 1"))
    exp = tmp_path / "experiment.yaml"
    up_arm = "    model: {{name: m-{code}, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY, " \
             "protocol: anthropic}}\n"
    exp.write_text(f"""name: claude-failures
tasks: [tasks]
concurrency: 3
retries: {{infra: 0}}
arms:
  e400:
    agent: "claude:{claude_bin}"
{up_arm.format(code=400)}  e401:
    agent: "claude:{claude_bin}"
{up_arm.format(code=401)}  steps:
    agent: "claude:{claude_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: anthropic}}
""")
    out = tmp_path / "run"
    with ProtocolServer(_errors) as up:
        monkeypatch.setenv("TEST_UPSTREAM", up.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
        sent = {c: [r for r in up.model_requests() if (r.body or {}).get("model") == f"m-{c}"]
                for c in (400, 401)}
    assert res.code in (0, 3), res.stdout + res.stderr
    outcomes = _outcomes(out)
    e400 = _execution(agent_cli.attempt_dir(out, "e400"))
    assert e400["status"] == "exited_nonzero" and "API error 400" in e400["detail"]
    assert e400["agent_report"]["is_error"] is True
    assert outcomes["e400"]["failure_code"] == "no_change", outcomes["e400"]
    e401 = _execution(agent_cli.attempt_dir(out, "e401"))
    assert e401["status"] == "infra_error" and "auth/config" in e401["detail"]
    assert {r["error_status"] for r in e401["agent_report"]["stream"]["api_retries"]} == {401}
    steps = _execution(agent_cli.attempt_dir(out, "steps"))
    assert steps["status"] == "budget_exhausted", steps
    assert steps["agent_report"]["max_turns"] == 1
    assert steps["agent_report"]["agent_status"] == "error_max_turns"
    assert outcomes["steps"]["failure_code"] == "budget_exhausted", outcomes["steps"]
    # every call the CLI made went through the gateway and is in the ledger, as sent upstream
    for code, arm in ((400, "e400"), (401, "e401")):
        rows = agent_cli.ledger(agent_cli.attempt_dir(out, arm))
        assert len(rows) == len(sent[code]) >= 1
        assert {r.status for r in rows} == {code}
        assert all("beta=true" in r.path for r in sent[code])
    agent_cli.assert_no_secret(out)


@agent_cli.needs_bwrap
def test_a_token_budget_that_runs_out_mid_task(tmp_path: Path, claude_bin: Path) -> None:
    """The first call (~3.7k tokens of Claude Code's system prompt) spends the 3000 tokens:
    the fix is applied, the next call is refused by the gateway, the trial fails."""
    _tasks(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: claude-tokens
tasks: [tasks]
arms:
  claude:
    agent: "claude:{claude_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: anthropic}}
limits: {{tokens: 3000}}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code in (0, 3), res.stdout + res.stderr
    attempt = agent_cli.attempt_dir(out, "claude")
    ex = _execution(attempt)
    assert ex["status"] == "budget_exhausted" and ex["model_usage"]["exhausted"], ex["detail"]
    assert [c["name"] for c in ex["agent_report"]["stream"]["tool_calls"]] == ["Bash"]
    rows = agent_cli.ledger(attempt)
    assert [r.status for r in rows][:1] == [200] and rows[-1].status == 403
    assert _outcomes(out)["claude"]["failure_code"] == "budget_exhausted"
