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
import subprocess
from pathlib import Path

import pytest
from support import agent_cli
from support.scripted_server import RecordedRequest, ScriptedServer, Status

from assay.records.io import iter_rows
from assay.records.ledger import ModelCall

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

INSTALL = agent_cli.SCRIPTS / "mini-swe-agent.sh"
PIN = "2.4.6"
#: the pinned CLI, installed through the project's script (a subprocess, as CI does)
mini_bin = agent_cli.install_fixture(INSTALL, f"mini-swe-agent {PIN}")


def test_the_script_installs_the_pin_once_and_mini_runs(mini_bin: Path, tmp_path: Path) -> None:
    assert mini_bin.name == "mini", mini_bin
    prefix = mini_bin.parents[1]
    assert prefix.name == f"mini-swe-agent-{PIN}" and (prefix / ".complete").is_file()
    # the venv is of the system interpreter, which the sandbox sees under /usr
    cfg = (prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg, cfg
    # a second run finds the stamp and prints the same path
    again = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == str(mini_bin)
    # the whole venv is what the sandbox must see, read-only, at its own path
    from assay.agents.mini_swe_agent.adapter import MiniSweAgent

    [mount] = MiniSweAgent(mini_bin)._mounts()
    assert mount.source == prefix and mount.target == str(prefix) and not mount.writable
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
    return agent_cli.proxy_bundle(root / "tasks" / "calc", steps=steps, agent_seconds=agent_seconds)


@agent_cli.needs_bwrap
def test_mini_fixes_the_task_through_gateway_and_sandbox(mini_bin: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import run_cli

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
    adir = agent_cli.attempt_dir(out, "mini")
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
    rows = agent_cli.ledger(adir)
    assert [(r.protocol, r.status) for r in rows] == [("chat", 200)] * 2
    assert ex["agent_usage"]["api_calls"] == 2 == ex["model_usage"]["calls"]
    assert ex["usage_check"]["comparable"] and ex["usage_check"]["agrees"], ex["usage_check"]
    # the adapter's identity (CLI digest, version, flags) is frozen in the manifest
    ident = json.loads((out / "manifest.json").read_text())["arms"]["mini"]["agent_identity"]
    assert ident["adapter"] == "assay.mini-swe-agent/1" and ident["cli_version"] == PIN
    assert ident["bin_sha256"] == hashlib.sha256(mini_bin.read_bytes()).hexdigest()
    [record] = mini_bin.parents[1].glob("lib/python3*/site-packages/mini_swe_agent-*/RECORD")
    assert ident["dist_record_sha256"] == hashlib.sha256(record.read_bytes()).hexdigest()
    agent_cli.assert_no_secret(out)


# --------------------------------------------------------------- failures onto the taxonomy


def _refusing(req: RecordedRequest, n: int) -> Status:
    """``mini-401``: the upstream refuses the key (mini gives up at once); ``mini-400``: it
    refuses the request, which mini retries with backoff until the watchdog ends it."""
    model = (req.body or {}).get("model", "")
    if model == "mini-401":
        return Status(401, body='{"error": {"message": "scripted: bad key", '
                                '"type": "invalid_request_error"}}')
    return Status(400, body='{"error": {"message": "scripted: bad request", '
                            '"type": "invalid_request_error"}}')


@agent_cli.needs_bwrap
def test_an_upstream_that_refuses_ends_with_the_right_codes(
        mini_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import SECRET, run_cli

    monkeypatch.setenv("ASSAY_MINI_SWE_AGENT_BIN", str(mini_bin))
    # 40 s: mini must start, be refused and exit before it on a loaded machine (20 s was not
    # always enough); the 400 arm waits it out
    _bundle(tmp_path, agent_seconds=40)
    exp = tmp_path / "experiment.yaml"
    arms = "".join(f"  {m}:\n    agent: mini-swe-agent\n    model: {{name: {m}, "
                   "base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}\n"
                   for m in ("mini-401", "mini-400"))
    # one infrastructure retry shows the retry (each attempt of mini costs 3 CPU-s of
    # importing litellm; the default two made a third)
    exp.write_text(f"name: mini-errors\ntasks: [tasks]\nconcurrency: 2\n"
                   f"retries: {{infra: 1}}\narms:\n{arms}")
    out = tmp_path / "run"
    with ScriptedServer(_refusing) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        res = run_cli(["exp", "run", str(exp), "--out", str(out)])
        seen = {m: len([r for r in srv.chat_requests() if (r.body or {}).get("model") == m])
                for m in ("mini-401", "mini-400")}
    # a refused key before any command is ours to fix, not the agent's failure: retried as
    # infrastructure, and the run ends with exit 3
    assert res.code == 3 and "infra_error" in res.stderr, res.stdout + res.stderr
    auth = json.loads((agent_cli.attempt_dir(out, "mini-401") / "trial.json").read_text())
    ex = auth["execution"]
    assert ex["status"] == "infra_error" and ex["ended_by"] == "agent", ex
    assert ex["agent_report"]["agent_status"] == "AuthenticationError"
    assert ex["turns"] == 0 and ex["agent_report"]["trajectory"]["commands"] == []
    # a 400 mini retries: the runner's watchdog ends it, within the wall budget
    retried = json.loads((agent_cli.attempt_dir(out, "mini-400") / "trial.json").read_text())
    ex4 = retried["execution"]
    assert ex4["status"] == "agent_timeout" and ex4["ended_by"] == "watchdog", ex4
    assert retried["grade"]["failure_code"] == "agent_timeout"
    assert ex4["wall_seconds"] < 40 + 15
    # the ledger holds every call mini made, each as the upstream answered it
    for arm, code in (("mini-401", 401), ("mini-400", 400)):
        ledgers = sorted(out.glob(f"trials/calc-001/{arm}/*/a*/model_calls.jsonl"))
        rows = [ModelCall.read(r, ledger) for ledger in ledgers for r in iter_rows(ledger)]
        assert rows and {r.status for r in rows} == {code}, (arm, rows)
        assert len(rows) == seen[arm], arm
    # one call per attempt on a refused key; a refused request is retried by mini
    attempts_401 = len(list(out.glob("trials/calc-001/mini-401/*/a*/trial.json")))
    assert attempts_401 == 2 and seen["mini-401"] == attempts_401  # the first and its retry
    assert seen["mini-400"] >= 2
    agent_cli.assert_no_secret(out)


@agent_cli.needs_bwrap
def test_budgets_that_run_out_mid_task_end_as_budget_exhausted(
        mini_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task's ``assistant_steps`` as mini's own ``step_limit`` (it stops itself), and an
    experiment's ``limits.tokens`` that the first answer spends: the gateway refuses every
    later call with a 403, which litellm maps to a retryable APIError, so mini backs off and
    retries until the runner's watchdog ends it. The wall budget must let mini start, take the
    first answer, run the fix and save its trajectory before the watchdog fires: 12 s was too
    short on a loaded CI machine (the trajectory was never saved), and 30 s once too among
    eight xdist workers, so it is 45 s (in the quiet pass: the Makefile)."""
    from conftest import run_cli

    monkeypatch.setenv("ASSAY_MINI_SWE_AGENT_BIN", str(mini_bin))
    (tmp_path / "fix.yaml").write_text(FIX_SCRIPT)
    runs = {}
    tokens_wall = 45
    for kind, steps, limits, wall in (("steps", 1, "cost_usd: 1.0", 60),
                                      ("tokens", 10, "tokens: 50", tokens_wall)):
        root = tmp_path / kind
        _bundle(root, steps=steps, agent_seconds=wall)
        exp = root / "experiment.yaml"
        exp.write_text(f"""name: mini-{kind}
tasks: [tasks]
arms:
  mini:
    agent: mini-swe-agent
    model: {{name: builtin/replay, script: ../fix.yaml, protocol: chat}}
limits: {{{limits}}}
prices:
  builtin/replay: {{input: 1.0, output: 2.0}}
""")
        res = run_cli(["exp", "run", str(exp), "--out", str(root / "run")])
        assert res.code in (0, 1), res.stdout + res.stderr
        runs[kind] = agent_cli.attempt_dir(root / "run", "mini")
    for kind, adir in runs.items():
        trial = json.loads((adir / "trial.json").read_text())
        ex = trial["execution"]
        assert ex["status"] == "budget_exhausted", (kind, ex)
        assert trial["grade"]["failure_code"] == "budget_exhausted", kind
        # mid-task: the fix was applied, the submit never came
        assert ex["agent_report"]["trajectory"]["commands"] == [FIX_CMD], kind
        rows = agent_cli.ledger(adir)
        if kind == "steps":
            assert [r.status for r in rows] == [200], rows
        else:
            assert rows[0].status == 200 and len(rows) >= 2, rows
            assert {(r.status, r.exhausted) for r in rows[1:]} == {(403, "tokens")}, rows
        agent_cli.assert_no_secret(adir)
    steps = json.loads((runs["steps"] / "trial.json").read_text())["execution"]
    assert steps["agent_report"]["agent_status"] == "LimitsExceeded"
    # mini stopped itself at its step_limit: the gateway counted the step but refused nothing
    assert steps["model_usage"]["exhausted"] == "assistant_steps" and steps["ended_by"] == "agent"
    tokens = json.loads((runs["tokens"] / "trial.json").read_text())["execution"]
    assert tokens["model_usage"]["exhausted"] == "tokens"
    assert tokens["ended_by"] == "watchdog" and tokens["wall_seconds"] < tokens_wall + 15


# --------------------------------------------------------------- without the CLI


def test_a_missing_cli_is_refused_at_load_with_the_install_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import run_cli

    from assay.agents import MiniSweAgent, parse_agent
    from assay.agents.mini_swe_agent.adapter import default_bin

    monkeypatch.delenv("ASSAY_MINI_SWE_AGENT_BIN", raising=False)
    monkeypatch.setenv("ASSAY_AGENTS_DIR", str(tmp_path / "agents"))
    assert default_bin() == tmp_path / "agents" / f"mini-swe-agent-{PIN}" / "bin" / "mini"
    with pytest.raises(ValueError, match="scripts/agents/mini-swe-agent.sh"):
        parse_agent("mini-swe-agent")
    with pytest.raises(ValueError, match="not an executable"):
        parse_agent(f"mini-swe-agent:{tmp_path / 'nothing'}")
    # the env variable names one; a program under /usr needs no mount (the sandbox sees /usr)
    monkeypatch.setenv("ASSAY_MINI_SWE_AGENT_BIN", "/bin/true")
    usr = parse_agent("mini-swe-agent")
    assert isinstance(usr, MiniSweAgent) and usr.bin == Path("/bin/true")
    assert usr._mounts() == []
    # the experiment names the arm and why, before any trial starts
    _bundle(tmp_path)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: mini-missing\ntasks: [tasks]\narms:\n  mini:\n    agent: "
                   f"\"mini-swe-agent:{tmp_path / 'nothing'}\"\n    model: {{name: builtin/replay,"
                   " script: fix.yaml}\n")
    (tmp_path / "fix.yaml").write_text(FIX_SCRIPT)
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 2, res.stdout + res.stderr
    flat = " ".join(res.stderr.split())  # unwrapped: the console width cuts where the paths put it
    assert "arms.mini.agent" in flat and "not an executable" in flat
    assert not (tmp_path / "run" / "trials").exists()


def _traj(exit_status: str, *, commands: tuple[str, ...] = (), calls: int | None = None,
          exception: str | None = None) -> bytes:
    msgs: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for i, cmd in enumerate(commands):
        msgs.append({"role": "assistant", "content": "x", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}],
            "extra": {"actions": [{"command": cmd, "tool_call_id": f"c{i}"}], "cost": 0.0,
                      "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 3,
                                             "total_tokens": 13}}}})
        msgs.append({"role": "tool", "content": "{}", "tool_call_id": f"c{i}"})
    extra: dict = {"exit_status": exit_status, "submission": ""}
    if exception:
        extra["exception_str"] = exception
    msgs.append({"role": "exit", "content": exit_status, "extra": extra})
    return json.dumps({"info": {"exit_status": exit_status, "submission": "",
                                "mini_version": PIN,
                                "model_stats": {"instance_cost": 0.0,
                                                "api_calls": len(commands) if calls is None
                                                else calls}},
                       "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}).encode()


def test_the_trajectory_decides_how_the_run_ended() -> None:
    """Each exit status onto the taxonomy, and a sandbox verdict outranking all of them."""
    from assay.agents.base import AgentRun
    from assay.agents.mini_swe_agent.adapter import _collect

    def status(raw: bytes | None, code: int | None = 1, reason: str = "nonzero_exit",
               sandbox: str = "exited_nonzero") -> AgentRun:
        return _collect(AgentRun(status=sandbox, exit_code=code, reason=reason), raw, {})

    ok = status(_traj("Submitted", commands=("ls", "echo done")), 0, "ok", "succeeded")
    assert ok.status == "succeeded" and ok.extra["turns"] == 2 and ok.extra["tool_calls"] == 2
    assert ok.extra["agent_usage"]["usage"] == {"input": 20, "output": 6, "total": 26}
    assert ok.extra["anomalies"] == {} and ok.extra["evidence_gap"] is False
    want = {"LimitsExceeded": "budget_exhausted", "TimeExceeded": "agent_timeout",
            "RepeatedFormatError": "exited_nonzero", "BadRequestError": "exited_nonzero"}
    for end, expected in want.items():
        assert status(_traj(end, commands=("ls",)), 0).status == expected, end
    # a refused key or model before any command is ours; after work began, the verifier's
    auth = status(_traj("AuthenticationError", exception="bad key"))
    assert auth.status == "infra_error" and "bad key" in (auth.detail or "")
    assert status(_traj("AuthenticationError", commands=("ls",))).status == "exited_nonzero"
    # no trajectory at all: a startup failure, and no usage claim (None, not zeros)
    none = status(None)
    assert none.status == "infra_error" and none.extra["agent_usage"] is None
    assert none.extra["anomalies"] == {"trajectory_missing": 1} and none.extra["turns"] is None
    bad = status(b"{not json", 0, "ok", "succeeded")
    assert bad.status == "succeeded" and bad.extra["anomalies"] == {"trajectory_unreadable": 1}
    cut = status(_traj("", commands=("ls",)), 0, "ok", "succeeded")
    assert cut.extra["anomalies"] == {"exit_status_missing": 1} and cut.extra["evidence_gap"]
    odd = status(_traj("Submitted", commands=("ls",), calls=3), 0, "ok", "succeeded")
    assert odd.extra["anomalies"] == {"calls_disagree_with_turns": 1}
    # the watchdog's kill outranks a trajectory that says it submitted
    killed = status(_traj("Submitted"), None, "timeout", "agent_timeout")
    assert killed.status == "agent_timeout"


def test_usage_is_checked_against_the_gateway() -> None:
    from assay.agents.mini_swe_agent.adapter import MiniSweAgent

    agent = MiniSweAgent(Path("/bin/true"))
    claim = {"usage": {"input": 20, "output": 6}, "usage_missing_turns": 0}
    same = agent.reconcile({"agent_usage": claim, "anomalies": {},
                            "model_usage": {"input": 20, "output": 6, "calls": 2}})
    assert same["usage_check"]["agrees"] is True and same["anomalies"] == {}
    other = agent.reconcile({"agent_usage": claim, "anomalies": {},
                             "model_usage": {"input": 25, "output": 6, "calls": 2}})
    assert other["usage_check"]["agrees"] is False and other["evidence_gap"] is True
    assert other["anomalies"] == {"usage_disagrees_with_gateway": 1}
    assert agent.reconcile({"agent_usage": None})["usage_check"]["comparable"] is False
    partial = {"usage": {"input": 20}, "usage_missing_turns": 1}
    assert agent.reconcile({"agent_usage": partial, "model_usage": {"input": 20}})[
        "usage_check"]["comparable"] is False
