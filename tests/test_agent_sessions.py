"""Real agent CLIs doing what real agents do, and accepted for it.

For each CLI the project runs (Claude Code, Codex, Qwen Code, mini-swe-agent; installed by the
project's scripts through ``support.agent_cli``, skipped with the reason when they cannot be),
a scripted upstream (the built-in replay model, through the run's gateway) drives the real CLI
through a realistic session on ``examples/agent-tasks/duration-parse-001`` with the CLI's own
shell tool: read the source, make a virtualenv in the workspace and run the public tests with it,
reproduce the bug (failing), apply the fix, run the tests again (and ``git status`` / ``git
diff``: the workspace is a repository) and the reproduction (passing), run the code once. Every
run of a test leaves bytecode and ``.pytest_cache`` behind; the attempt is accepted and
``artifact.json`` lists those caches, the virtualenv and ``.git`` as excluded.

Each CLI's test is one ``assay exp run`` (about 10-30 s once the CLI is installed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support import agent_cli

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent-tasks" / "duration-parse-001"
TASK = "duration-parse-001"

REPRO = ("PYTHONPATH=src python3 -c 'from durations import parse_duration as p; "
         "assert p(\"1.5h\") == 5400, p(\"1.5h\")'")


def _session() -> list[str]:
    patch = (EXAMPLE / "solution" / "solve.patch").read_text()
    return [
        "cat src/durations/parse.py",
        # a virtual environment in the workspace, used to run the tests (issue 32): its
        # interpreter links leave the workspace; it is inert, left out, listed
        "python3 -m venv --without-pip --system-site-packages .venv && "
        "PYTHONPATH=src .venv/bin/python -m pytest -q tests",
        REPRO,  # fails on the buggy tree: 1.5h is read as 5h
        f"git apply --whitespace=nowarn <<'ASSAYPATCH'\n{patch}ASSAYPATCH",
        # the workspace is a repository of one commit: review the change as in any checkout
        "PYTHONPATH=src .venv/bin/python -m pytest -q tests && git status --short && "
        "git diff --stat",
        REPRO,
        "PYTHONPATH=src python3 -c 'import durations; print(durations.parse_duration(\"2d 4h\"))'",
    ]


def _turns(tool: str, arg: str, extra: dict[str, Any] | None = None,
           final: dict[str, Any] | None = None) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [
        {"message": f"Step {i + 1}.",
         "tool_call": {"name": tool, "arguments": {arg: cmd, **(extra or {})}}}
        for i, cmd in enumerate(_session())]
    turns.append(final or {"message": "Fixed parse_duration; the tests pass."})
    return {"turns": turns}


def _experiment(root: Path, agent: str, protocol: str, script: dict[str, Any]) -> Path:
    tasks = root / "tasks"
    tasks.mkdir()
    shutil.copytree(EXAMPLE, tasks / TASK)
    (root / "scripts").mkdir()
    (root / "scripts" / f"{TASK}.yaml").write_text(json.dumps(script))
    exp = root / "experiment.yaml"
    exp.write_text(f"""name: sessions
tasks: [tasks]
arms:
  agent:
    agent: "{agent}"
    model: {{name: builtin/replay, script: scripts, protocol: {protocol}}}
""")
    return exp


def _accepted_with_caches(root: Path, exp: Path) -> dict[str, Any]:
    out = root / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stdout + res.stderr
    [adir] = sorted(out.glob(f"trials/{TASK}/agent/*/a1"))
    trial = json.loads((adir / "trial.json").read_text())
    grade = json.loads(next((adir / "grades").glob("*.json")).read_text())
    assert trial["grade"]["accepted"] is True, (grade["failure_code"],
                                                grade["details"].get("integrity"),
                                                trial["execution"])
    assert grade["details"]["integrity"]["changes"] == {
        "added": [], "deleted": [], "modified": ["src/durations/parse.py"]}
    # every model answer was asked for: the CLI ran the whole session
    rows = agent_cli.ledger(adir)
    assert len(rows) == len(_session()) + 1, len(rows)
    excluded = json.loads((adir / "artifact.json").read_text())["excluded"]
    paths = {r["path"] for r in excluded["paths"]}
    assert {".pytest_cache", "tests/__pycache__", "src/durations/__pycache__", ".venv",
            ".git"} <= paths, paths
    assert excluded["files"] > 0 and excluded["bytes"] > 0
    return trial


claude_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "claude.sh", "claude-code")
codex_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "codex.sh", "codex")
qwen_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "qwen.sh", "qwen-code")
mini_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "mini-swe-agent.sh", "mini-swe-agent")


@agent_cli.needs_bwrap
def test_claude_code_session_is_accepted(tmp_path: Path, claude_bin: Path) -> None:
    script = _turns("Bash", "command", {"description": "run a command"})
    trial = _accepted_with_caches(tmp_path, _experiment(
        tmp_path, f"claude:{claude_bin}", "anthropic", script))
    calls = trial["execution"]["agent_report"]["stream"]["tool_calls"]
    assert [c["name"] for c in calls] == ["Bash"] * len(_session())
    # the reproduction failed before the fix and passed after it, in the CLI's own tool
    assert [c["is_error"] for c in calls] == [False, False, True, False, False, False, False]


@agent_cli.needs_bwrap
def test_codex_session_is_accepted(tmp_path: Path, codex_bin: Path) -> None:
    trial = _accepted_with_caches(tmp_path, _experiment(
        tmp_path, f"codex:{codex_bin}", "responses", _turns("exec_command", "cmd")))
    assert trial["execution"]["tool_calls"] == len(_session())


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@agent_cli.needs_bwrap
def test_qwen_code_session_is_accepted(tmp_path: Path, qwen_bin: Path) -> None:
    trial = _accepted_with_caches(tmp_path, _experiment(
        tmp_path, f"qwen:{qwen_bin}", "chat", _turns("run_shell_command", "command")))
    assert trial["execution"]["agent_report"]["stream"]["tool_calls"] == {
        "run_shell_command": len(_session())}


@agent_cli.needs_bwrap
def test_mini_swe_agent_session_is_accepted(tmp_path: Path, mini_bin: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_MINI_SWE_AGENT_BIN", str(mini_bin))
    submit = {"message": "Fixed; submitting.", "tool_call": {
        "name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}}
    trial = _accepted_with_caches(tmp_path, _experiment(
        tmp_path, "mini-swe-agent", "chat", _turns("bash", "command", final=submit)))
    commands = trial["execution"]["agent_report"]["trajectory"]["commands"]
    assert commands[:len(_session())] == _session()
