"""mini-swe-agent, the real pinned CLI (``mini-swe-agent==2.4.6`` from PyPI), end to end.

The CLI is installed by the project's own script, ``scripts/agents/mini-swe-agent.sh``, into its
own venv of the system Python under ``$ASSAY_AGENTS_DIR`` (default ~/.cache/assay/agents),
outside the clone: the first run takes about 45-100 s and ~754 MB (litellm), later runs find the
stamp and install nothing. The full form by hand: ``bash scripts/agents/mini-swe-agent.sh``
prints the path of ``mini`` on its last line. Where the registry cannot be reached the install
fails and every test here that needs the CLI skips, printing why.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from assay.sandbox import bwrap_available

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "scripts" / "agents" / "mini-swe-agent.sh"
PIN = "2.4.6"
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


@pytest.fixture(scope="module")
def mini_bin() -> Path:
    """The pinned CLI, installed through the project's script (a subprocess, as CI does)."""
    proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        pytest.skip(f"mini-swe-agent {PIN} could not be installed (registry unreachable?): "
                    f"{proc.stderr.strip()[-800:]}")
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.name == "mini" and os.access(path, os.X_OK), proc.stdout
    return path


def test_the_script_installs_the_pin_once_and_mini_runs(mini_bin: Path, tmp_path: Path) -> None:
    prefix = mini_bin.parents[1]
    assert prefix.name == f"mini-swe-agent-{PIN}" and (prefix / ".complete").is_file()
    # the venv is of the system interpreter, which the sandbox sees under /usr
    cfg = (prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg, cfg
    # a second run finds the stamp and prints the same path
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(mini_bin)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MSWEA_CONFIGURED": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([str(mini_bin), "--help"], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert f"mini-swe-agent version {PIN}" in proc.stdout
    assert "--exit-immediately" in proc.stdout and "--task" in proc.stdout


# --------------------------------------------------------------- end to end through exp run

FIX_CMD = "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"
# mini wants a bash tool call in every answer, and ends on the submit command
FIX_SCRIPT = f"""turns:
  - message: The sign in add() is wrong; I will fix it.
    tool_call: {{name: bash, arguments: {{command: "{FIX_CMD}"}}}}
  - message: Fixed; submitting.
    tool_call: {{name: bash, arguments: {{command: "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}}}
"""


def _bundle(root: Path, *, agent_seconds: float = 60, steps: int = 10) -> Path:
    from support.bundles import make_bundle

    bundle = make_bundle(root / "tasks" / "calc", agent_seconds=agent_seconds)
    y = bundle / "task.yaml"
    text = y.read_text().replace("network_policy: none", "network_policy: model-proxy-only")
    y.write_text(text.replace("assistant_steps: 10", f"assistant_steps: {steps}"))
    return bundle


def _attempt(out: Path, arm: str) -> Path:
    [a] = sorted(out.glob(f"trials/calc-001/{arm}/*/a1"))
    return a


def _no_secret(out: Path) -> None:
    from conftest import SECRET

    for p in out.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p


@needs_bwrap
def test_mini_fixes_the_task_through_gateway_and_sandbox(mini_bin: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import run_cli

    from assay.records.io import iter_rows
    from assay.records.ledger import ModelCall

    monkeypatch.setenv("ASSAY_MINI_SWE_AGENT_BIN", str(mini_bin))
    _bundle(tmp_path)
    (tmp_path / "fix.yaml").write_text(FIX_SCRIPT)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("""name: mini-e2e
tasks: [tasks]
arms:
  mini:
    agent: mini-swe-agent
    model: {name: builtin/replay, script: fix.yaml, protocol: chat}
limits: {cost_usd: 1.0}
prices:
  builtin/replay: {input: 1.0, output: 2.0}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    adir = _attempt(out, "mini")
    trial = json.loads((adir / "trial.json").read_text())
    ex = trial["execution"]
    assert trial["grade"]["accepted"] is True, (trial["grade"], ex)
    assert ex["status"] == "succeeded" and ex["ended_by"] == "agent", ex
    report = ex["agent_report"]
    assert report["agent_status"] == "Submitted" and report["cli_version"] == PIN
    assert report["trajectory"]["commands"] == [FIX_CMD,
                                                "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert ex["turns"] == 2 and ex["tool_calls"] == 2 and ex["anomalies"] == {}
    # the step budget and a time limit below the watchdog went to mini's own config
    cfg = json.loads((adir / "agent" / "mini-config.yaml").read_text())
    assert cfg["agent"]["step_limit"] == 10
    assert 0 < cfg["agent"]["wall_time_limit_seconds"] < 60
    assert hashlib.sha256((adir / "agent" / "mini-config.yaml").read_bytes()).hexdigest() \
        == report["config_sha256"]
    # the trajectory is kept as mini wrote it
    raw = (adir / "agent" / "trajectory.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == report["trajectory_sha256"]
    assert json.loads(raw)["info"]["exit_status"] == "Submitted"
    # the ledger holds exactly the calls mini made, and their usage is what mini was told
    rows = [ModelCall.read(r, adir / "model_calls.jsonl")
            for r in iter_rows(adir / "model_calls.jsonl")]
    assert [(r.protocol, r.status) for r in rows] == [("chat", 200)] * 2
    assert ex["agent_usage"]["api_calls"] == 2 == ex["model_usage"]["calls"]
    assert ex["usage_check"]["comparable"] and ex["usage_check"]["agrees"], ex["usage_check"]
    # the adapter's identity (CLI digest, version, flags) is frozen in the manifest
    ident = json.loads((out / "manifest.json").read_text())["arms"]["mini"]["agent_identity"]
    assert ident["adapter"] == "assay.mini-swe-agent/1" and ident["cli_version"] == PIN
    assert ident["bin_sha256"] == hashlib.sha256(mini_bin.read_bytes()).hexdigest()
    _no_secret(out)
