"""``assay agents check`` through the real CLI: one real trial per agent through the runner,
gateway (builtin/replay scripted in the agent's tool name), sandbox and verifier.

Reduced form: only the MiniMax Code adapter, through its contract fixture (no registry we reach
serves the real ``mcode``; the fixture behaves as the documented headless contract says, see
tests/support/mcode_fixture.py). The real CLIs (codex, claude-code, qwen-code, mini-swe-agent)
are checked by their own test files; the full form is ``assay agents check`` on a machine
where their installs are cached (``scripts/agents/*.sh``; minutes and about 2 GB the first time).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from assay.sandbox import bwrap_available

FIXTURE = Path(__file__).parent / "support" / "mcode_fixture.py"


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_mcode_contract_fixture_is_checked_end_to_end(tmp_path: Path) -> None:
    res = run_cli(["agents", "check", "mcode", "--json"],
                  env={"ASSAY_MCODE_BIN": str(FIXTURE)})
    assert res.code == 0, res.stderr
    [row] = json.loads(res.stdout)
    assert row["agent"] == "mcode" and row["protocol"] == "chat" and row["ok"] is True
    assert row["version"].startswith("mcode-contract-fixture") and row["seconds"] > 0
    run = Path(row["run_dir"])
    calls = [json.loads(x) for x in next(run.glob("trials/*/*/*/a*/model_calls.jsonl"))
             .read_text().splitlines()]
    assert len(calls) == 2  # the tool call that fixed the task, then the final message
    shutil.rmtree(run.parent)


def test_an_agent_that_cannot_be_installed_is_said_so_not_failed() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ASSAY_MCODE_BIN"}
    res = run_cli(["agents", "check", "mcode"], env={**env, "ASSAY_MCODE_BIN": ""})
    assert res.code == 0
    text = " ".join(res.stdout.split())
    assert "not installed" in text and "no registry serves it" in text


def test_unknown_agents_are_refused() -> None:
    res = run_cli(["agents", "check", "cursor"])
    assert res.code == 2 and "unknown agent" in res.stderr


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_trial_run_with_a_model_goes_through_the_gateway(tmp_path: Path) -> None:
    """``trial run --agent <CLI> --model builtin/replay``: one trial, as a one-arm experiment."""
    from support.bundles import make_bundle

    bundle = make_bundle(tmp_path / "calc")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", "network_policy: model-proxy-only"))
    script = tmp_path / "replay.yaml"
    script.write_text(json.dumps({"turns": [{"tool_call": {"name": "shell", "arguments": {
        "command": "sed -i 's/a - b/a + b/' src/calc/__init__.py"}}}], "final": "Done."}))
    out = tmp_path / "trial"
    args = ["trial", "run", str(bundle), "--agent", f"mcode:{FIXTURE}", "--model",
            "builtin/replay", "--script", str(script), "--out", str(out)]
    res = run_cli(args)
    assert res.code == 0, res.stderr
    assert "ACCEPTED" in res.stdout
    [ledger] = out.glob("run/trials/calc-001/agent/0/a1/model_calls.jsonl")
    assert len(ledger.read_text().splitlines()) == 2
    again = run_cli(args)  # the same command resumes: nothing runs twice
    assert again.code == 0 and "ACCEPTED" in again.stdout
    assert not (out / "run" / "trials" / "calc-001" / "agent" / "0" / "a2").exists()
