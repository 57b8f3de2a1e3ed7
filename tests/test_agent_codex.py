"""The real OpenAI Codex CLI (``@openai/codex@0.171.0``), installed by ``scripts/agents/codex.sh``.

Install: the script puts the npm package under ``$ASSAY_AGENTS_DIR`` (default
``~/.cache/assay/agents/codex-0.171.0``, ~424 MB, about 25 s cold, nothing when warm) and prints
the native musl binary's path on its last line. Full form:
``scripts/agents/codex.sh`` → ``…/node_modules/@openai/codex-linux-x64/vendor/
x86_64-unknown-linux-musl/bin/codex``. If the registry cannot be reached the tests skip, saying
why.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support import agent_cli
from support.bundles import make_bundle
from support.codex_upstream import ErrorUpstream

from assay.agents import parse_agent

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

ROOT = agent_cli.ROOT
INSTALL = agent_cli.SCRIPTS / "codex.sh"
VERSION = "0.171.0"
#: the pinned CLI, installed through the project's script exactly as CI would
codex_bin = agent_cli.install_fixture(INSTALL, "codex")


def test_install_script_gives_the_pinned_cli(codex_bin: Path) -> None:
    assert codex_bin.name == "codex" and "x86_64-unknown-linux-musl" in str(codex_bin)
    out = subprocess.run([str(codex_bin), "--version"], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0 and out.stdout.strip() == f"codex-cli {VERSION}"
    # a second run is warm: the stamp is there and the same path comes back
    assert (codex_bin.parents[6] / ".complete").is_file()
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(codex_bin)


# ------------------------------------------------------------------ end to end: assay exp run

FIX = """turns:
  - message: I will fix the sign.
    tool_call:
      name: exec_command
      arguments: {cmd: "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"}
  - message: Fixed add().
"""
# a harmless look first, then the fix: with assistant_steps 1 the fix is never reached
SLOW_FIX = """turns:
  - tool_call: {name: exec_command, arguments: {cmd: "ls src/calc"}}
  - tool_call:
      name: exec_command
      arguments: {cmd: "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"}
  - message: Fixed add().
"""


@agent_cli.needs_bwrap
def test_codex_fixes_the_task_through_gateway_and_sandbox(tmp_path: Path, codex_bin: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Accepted on replay; a 400 from the upstream ends as exited_nonzero and no_change."""
    agent_cli.proxy_bundle(tmp_path / "tasks" / "calc")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "calc-001.yaml").write_text(FIX)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: codex-e2e
tasks: [tasks]
arms:
  replay:
    agent: "codex:{codex_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: responses}}
  refused:
    agent: "codex:{codex_bin}"
    model: {{name: status-400, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY,
             protocol: responses}}
""")
    out = tmp_path / "run"
    with ErrorUpstream() as upstream:
        monkeypatch.setenv("TEST_UPSTREAM", upstream.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr

    adir, trial = agent_cli.trial_of(out, "replay")
    ex = trial["execution"]
    assert trial["grade"]["accepted"] is True, (trial["grade"], ex)
    assert ex["status"] == "succeeded" and ex["ended_by"] == "agent", ex
    report = ex["agent_report"]
    assert report["agent_status"] == "turn.completed"
    assert report["cli_version"] == f"codex-cli {VERSION}"
    assert report["argv"][-2:] == ["--", "<prompt>"] and "--skip-git-repo-check" in report["argv"]
    assert report["timeout_seconds"] < agent_cli.AGENT_SECONDS  # below the watchdog
    [tool] = report["stream"]["items"]["tool_calls"]
    assert "sed -i" in tool["command"] and tool["exit_code"] == 0
    assert report["stream"]["items"]["final_message"] == "Fixed add()."
    assert ex["turns"] == 1 and ex["tool_calls"] == 1
    assert ex["anomalies"] == {} and ex["evidence_gap"] is False, ex["anomalies"]
    # the raw stream is kept as received; the config names the token's variable only
    raw = (adir / "agent" / "stdout.log").read_bytes()
    assert raw and hashlib.sha256(raw).hexdigest() == report["stream_sha256"]
    cfg = (adir / "agent" / "codex-config.toml").read_text()
    assert 'env_key = "OPENAI_API_KEY"' in cfg and 'wire_api = "responses"' in cfg
    assert "plugins = false" in cfg and 'web_search = "disabled"' in cfg
    assert hashlib.sha256(cfg.encode()).hexdigest() == report["config_sha256"]
    # the ledger holds the calls codex made: one per assistant answer, over the Responses API
    rows = agent_cli.ledger(adir)
    assert [(r.protocol, r.status, r.stream) for r in rows] == [("responses", 200, True)] * 2
    assert ex["model_usage"]["calls"] == 2
    claim = ex["agent_usage"]["usage"]
    assert claim["output_tokens"] == sum(r.output_tokens or 0 for r in rows)
    assert ex["usage_check"]["comparable"] is True, ex["usage_check"]
    assert ex["usage_check"]["agrees"] is True, ex["usage_check"]
    # the CLI's identity is frozen in the manifest
    ident = json.loads((out / "manifest.json").read_text())["arms"]["replay"]["agent_identity"]
    assert ident["adapter"] == "assay.codex/1" and ident["cli_version"] == f"codex-cli {VERSION}"
    assert len(ident["bin_sha256"]) == 64 and "--json" in ident["flags"]

    adir, trial = agent_cli.trial_of(out, "refused")
    ex = trial["execution"]
    assert ex["status"] == "exited_nonzero", ex
    assert ex["agent_report"]["agent_status"] == "turn.failed"
    assert "scripted refusal 400" in ex["agent_report"]["stream"]["failure"]
    assert trial["grade"]["failure_code"] == "no_change", trial["grade"]
    assert ex["agent_usage"] is None  # no claim, never a zero
    rows = agent_cli.ledger(adir)
    assert rows and {r.status for r in rows} == {400}
    assert len(rows) == len(upstream.requests)  # the ledger saw every call that went out
    assert {r.headers.get("authorization") for r in upstream.requests} == {f"Bearer {SECRET}"}
    agent_cli.assert_no_secret(out)


@agent_cli.needs_bwrap
def test_codex_out_of_steps_is_budget_exhausted(tmp_path: Path, codex_bin: Path) -> None:
    agent_cli.proxy_bundle(tmp_path / "tasks" / "calc", steps=1)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "calc-001.yaml").write_text(SLOW_FIX)
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: codex-steps
tasks: [tasks]
arms:
  replay:
    agent: "codex:{codex_bin}"
    model: {{name: builtin/replay, script: scripts, protocol: responses}}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    adir, trial = agent_cli.trial_of(out, "replay")
    ex = trial["execution"]
    assert ex["status"] == "budget_exhausted", ex
    assert ex["agent_report"]["agent_status"] == "turn.failed"
    assert "budget" in ex["agent_report"]["stream"]["failure"]
    assert trial["grade"]["failure_code"] == "budget_exhausted", trial["grade"]
    rows = agent_cli.ledger(adir)
    # one step, then the gateway's refusal, which codex retries (5 reconnects) before it stops
    assert rows[0].status == 200 and {r.status for r in rows[1:]} == {403}
    reconnects = ex["agent_report"]["stream"]["reconnects"]
    assert reconnects >= 1 and len(rows) == 1 + reconnects + 1
    assert ex["model_usage"]["exhausted"] == "assistant_steps"


def test_unknown_or_missing_cli_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an executable file"):
        parse_agent(f"codex:{tmp_path / 'nope'}")
    exp = tmp_path / "experiment.yaml"
    make_bundle(tmp_path / "tasks" / "calc")
    exp.write_text(f"""name: codex-missing
tasks: [tasks]
arms:
  a:
    agent: "codex:{tmp_path / 'nope'}"
    model: {{name: m, protocol: responses}}
""")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    # read unwrapped: the CLI wraps its message at the console width, where the paths put it
    assert res.code == 2 and "not an executable file" in " ".join((res.stdout + res.stderr).split())


@agent_cli.needs_bwrap
def test_auth_failure_and_the_agents_own_time_limit(tmp_path: Path, codex_bin: Path) -> None:
    """Straight at an upstream (no gateway, so nothing but codex decides): a 401 before any work
    is infrastructure; an upstream slower than the budget ends by codex's own time limit,
    below the runner's watchdog."""
    from assay.runner.trial import TrialHooks, run_trial
    from assay.sandbox import ProxyTarget
    from assay.suites.bundle import load_bundle

    quick = load_bundle(agent_cli.proxy_bundle(tmp_path / "quick"))
    slow = load_bundle(make_bundle(tmp_path / "slow", agent_seconds=6))
    agent = parse_agent(f"codex:{codex_bin}")
    want = {"status-401": (quick, "infra_error"), "slow-30": (slow, "agent_timeout")}
    with ErrorUpstream() as upstream:
        for model, (bundle, status) in want.items():
            hooks = TrialHooks()
            hooks.proxy = ProxyTarget(tcp=("127.0.0.1", upstream.port))
            hooks.model_env = {"OPENAI_BASE_URL": hooks.proxy.base_url + "/v1",
                               "OPENAI_API_KEY": "scoped-token", "ASSAY_MODEL": model,
                               "ASSAY_MODEL_PROTOCOL": "responses"}
            res = run_trial(bundle, agent, tmp_path / model, hooks=hooks)
            ex = res.record.execution
            assert ex["status"] == status, (model, ex)
            assert ex["ended_by"] == "agent", (model, ex)  # not the watchdog
            if status == "agent_timeout":
                assert ex["exit_code"] == 124 and ex["agent_report"]["timeout_seconds"] == 4
                assert ex["wall_seconds"] < 6
            else:
                assert ex["agent_report"]["agent_status"] == "turn.failed"
                assert "401" in ex["agent_report"]["stream"]["failure"]
            assert ex["usage_check"] == {"comparable": False,
                                         "reason": "no gateway ledger for this attempt"}
        # and a chat arm is refused with a readable reason, before codex starts
        hooks = TrialHooks()
        hooks.model_env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "t",
                           "ASSAY_MODEL": "m", "ASSAY_MODEL_PROTOCOL": "chat"}
        ex = run_trial(quick, agent, tmp_path / "chat", hooks=hooks).record.execution
        assert ex["status"] == "infra_error" and "protocol to responses" in ex["detail"]
    assert {r.headers.get("authorization") for r in upstream.requests} == {"Bearer scoped-token"}


def test_stream_reader_names_what_a_healthy_cli_does_not_write() -> None:
    """Breaks codex has no reason to make, built by hand from the shape the real CLI wrote."""
    from assay.agents.codex.stream import ANOMALIES, read_codex_stream

    good = [{"type": "thread.started", "thread_id": "t1"}, {"type": "turn.started"},
            {"type": "item.started", "item": {"id": "i0", "type": "command_execution",
                                               "command": "ls", "exit_code": None}},
            {"type": "item.completed", "item": {"id": "i0", "type": "command_execution",
                                                 "command": "ls", "exit_code": 0}},
            {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 2}}]
    lines = [json.dumps(e).encode() for e in good]
    ok = read_codex_stream(b"\n".join(lines) + b"\n")
    assert ok.anomalies == {} and ok.usage == {"input_tokens": 5, "output_tokens": 2}
    assert ok.to_record()["items"]["tool_calls"] == [
        {"id": "i0", "command": "ls", "exit_code": 0, "status": None}]
    extra = [json.dumps({"type": "mystery"}).encode(), b"not json",
             json.dumps({"type": "turn.failed", "error": {"message": "x"}}).encode(),
             json.dumps({"type": "item.started", "item": {"id": "i9", "type": "reasoning"}})
             .encode()]
    bad = read_codex_stream(b"\n".join(lines[1:] + extra) + b"\n{\"type\": \"tur")
    assert set(bad.anomalies) == {"missing_thread_started", "unknown_event_type",
                                  "invalid_json_line", "duplicate_terminal_event",
                                  "events_after_terminal", "item_not_completed",
                                  "truncated_last_line"}, bad.notes
    assert set(bad.anomalies) <= set(ANOMALIES)
    guide = (ROOT / "docs" / "guide" / "agents.md").read_text()
    section = guide[guide.index("## Codex (`agent: codex`)"):]
    section = section[:section.index("\n## ", 1)]
    assert all(f"`{name}`" in section for name in ANOMALIES)  # the agents guide names each one
    killed = read_codex_stream(b"\n".join(lines[:3]) + b"\n")
    assert "missing_terminal_event" in killed.anomalies and killed.usage is None


def test_which_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``codex:<path>``, else ``$ASSAY_CODEX_BIN``, else the pinned install under
    ``$ASSAY_AGENTS_DIR``; a missing one says how to install it."""
    from assay.agents.codex.adapter import INSTALL_REL, Codex

    fake = tmp_path / "agents" / INSTALL_REL
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho codex-cli 0.0.0\n")
    fake.chmod(0o755)
    other = tmp_path / "other-codex"
    other.write_bytes(fake.read_bytes())
    other.chmod(0o755)
    monkeypatch.delenv("ASSAY_CODEX_BIN", raising=False)
    monkeypatch.setenv("ASSAY_AGENTS_DIR", str(tmp_path / "agents"))
    agent = parse_agent("codex")
    assert isinstance(agent, Codex) and agent.bin == fake
    ident = agent.describe()
    assert ident["cli_version"] == "codex-cli 0.0.0"
    assert ident["bin_sha256"] == hashlib.sha256(fake.read_bytes()).hexdigest()
    # the binary's folder above bin/ is what the sandbox sees, read-only
    exe, [mount] = agent._sandbox_bin()
    assert exe == "/assay/opt/codex/bin/codex" and mount.source == fake.parent.parent
    monkeypatch.setenv("ASSAY_CODEX_BIN", str(other))
    assert parse_agent("codex").bin == other  # type: ignore[attr-defined]
    assert parse_agent(f"codex:{fake}").bin == fake  # type: ignore[attr-defined]
    monkeypatch.delenv("ASSAY_CODEX_BIN")
    monkeypatch.setenv("ASSAY_AGENTS_DIR", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="run scripts/agents/codex.sh"):
        parse_agent("codex")
