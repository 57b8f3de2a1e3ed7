"""``assay agents check``: is each agent CLI installed here, and does it work through assay?

For each adapter the check finds (or installs, with the project's own script under
``scripts/agents/``) its pinned CLI, then runs **one real trial** of it through the whole path a
team's experiment takes: the runner, the per-run gateway speaking the agent's protocol, the
sandbox with the model proxy as its only network, and the verifier. The model is
``builtin/replay``, scripted to make the one tool call (in the agent's own tool name) that fixes
a trivial task, so no key and no network are needed and "ok" means the trial was accepted. A CLI
that is not installed and cannot be installed is reported as such, with the reason, never as a
failure of the agent.

The recipes below are the adapters' facts the check needs: the agent spec, its wire protocol,
its install script, and the tool name and argument its model answers with.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
# An edit in Python rather than ``sed -i``: Qwen Code refuses to let a shell command edit a file
# its own read tool has not read.
FIX = ("python3 -c \"import pathlib; p = pathlib.Path('calc.py'); "
       "p.write_text(p.read_text().replace('a - b', 'a + b'))\"")


@dataclass(frozen=True)
class Recipe:
    """What checking one adapter takes."""

    agent: str
    protocol: str
    install: str | None
    """Install script relative to the project root; it prints the CLI's path last."""
    tool: str
    argument: str = "command"
    extra_turns: tuple[dict[str, Any], ...] = ()
    """Turns after the fix (an agent that ends on a command of its own, e.g. mini-swe-agent)."""
    env_bin: str | None = None
    """The environment variable the adapter reads the CLI's path from."""


RECIPES: dict[str, Recipe] = {
    "mcode": Recipe("mcode", "chat", None, "shell", env_bin="ASSAY_MCODE_BIN"),
    "codex": Recipe("codex", "responses", "scripts/agents/codex.sh", "exec_command", "cmd",
                    env_bin="ASSAY_CODEX_BIN"),
    "claude-code": Recipe("claude-code", "anthropic", "scripts/agents/claude.sh", "Bash",
                          env_bin="ASSAY_CLAUDE_BIN"),
    "qwen-code": Recipe("qwen-code", "chat", "scripts/agents/qwen.sh",
                        "run_shell_command", env_bin="ASSAY_QWEN_BIN"),
    "mini-swe-agent": Recipe("mini-swe-agent", "chat", "scripts/agents/mini-swe-agent.sh",
                             "bash", extra_turns=({"tool_call": {"name": "bash", "arguments": {
                                 "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}},),
                             env_bin="ASSAY_MINI_SWE_AGENT_BIN"),
}


@dataclass
class CheckResult:
    """One row of the table."""

    agent: str
    protocol: str
    ok: bool | None
    """True accepted, False ran and failed, None could not be run (not installed)."""
    seconds: float | None = None
    version: str | None = None
    detail: str = ""
    run_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "protocol": self.protocol, "ok": self.ok,
                "seconds": self.seconds, "version": self.version, "detail": self.detail,
                "run_dir": self.run_dir}


def known_agents() -> list[str]:
    """The recipes whose adapter is registered in this build (``parse_agent`` knows it)."""
    from assay.agents import parse_agent

    out = []
    for name, r in RECIPES.items():
        try:
            parse_agent(r.agent)
        except ValueError as exc:
            if "unknown agent" in str(exc):
                continue
        out.append(name)
    return out


def _install(recipe: Recipe, env: dict[str, str]) -> tuple[str | None, str]:
    """(CLI path, why not): the path the install script printed last."""
    if recipe.env_bin and env.get(recipe.env_bin):
        return env[recipe.env_bin], ""
    if recipe.install is None:
        return None, f"no registry serves it: set {recipe.env_bin} to its CLI"
    script = REPO_ROOT / recipe.install
    if not script.is_file():
        return None, f"{recipe.install} is missing"
    try:
        res = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                             timeout=1800, env=env)
    except subprocess.TimeoutExpired:
        return None, f"{recipe.install} took over 30 minutes"
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"install failed ({recipe.install}, exit {res.returncode}): {tail[:300]}"
    return lines[-1].strip(), ""


def _task(root: Path) -> Path:
    """The trivial task: ``calc.add`` subtracts; a hidden test wants it to add."""
    from assay.suites.bundle import set_fixture_digest, tree_digest

    b = root / "tasks" / "agent-check"
    (b / "repo").mkdir(parents=True)
    (b / "tests").mkdir()
    (b / "repo" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (b / "tests" / "test_add.py").write_text("from calc import add\n\n\ndef test_add():\n"
                                             "    assert add(2, 3) == 5\n")
    (b / "instruction.md").write_text("Make `add` in calc.py return the sum of its "
                                      "arguments.\n")
    (b / "task.yaml").write_text(yaml.safe_dump({
        "id": "agent-check", "revision": 1, "instruction": "instruction.md",
        "initial_state": {"repository": "repo", "fixture_digest": None,
                          "network_policy": "model-proxy-only",
                          "environment": {"requires": ["python3", "pytest"]}},
        "resources": {"cpu_cores": 1, "memory_limit_mib": 2048, "pids": 512},
        "budget": {"agent_wall_seconds": 180, "assistant_steps": 10,
                   "verifier_wall_seconds": 60},
        "acceptance": {"verifier_revision": "v1", "required": ["behavior", "integrity"],
                       "behavior": {"command": "python3 -m pytest -q -p no:cacheprovider "
                                               "$ASSAY_TESTS"}}}, sort_keys=False))
    set_fixture_digest(b, tree_digest(b / "repo"))
    return b


def _experiment(root: Path, recipe: Recipe, cli: str) -> Path:
    turns = [{"message": "I will fix add.",
              "tool_call": {"name": recipe.tool, "arguments": {recipe.argument: FIX}}},
             *recipe.extra_turns]
    (root / "replay.yaml").write_text(yaml.safe_dump({"turns": turns, "final": "Done."}))
    agent = f"{recipe.agent}:{cli}"
    exp = root / "experiment.yaml"
    exp.write_text(yaml.safe_dump({
        "name": f"agents-check-{recipe.agent}", "tasks": ["tasks"],
        "arms": {"check": {"agent": agent, "model": {"name": "builtin/replay",
                                                     "script": "replay.yaml",
                                                     "protocol": recipe.protocol}}}},
        sort_keys=False))
    return exp


def check_agent(name: str, *, work: Path | None = None,
                env: dict[str, str] | None = None) -> CheckResult:
    """Install or find the agent's CLI and run one trial of it (see the module docstring)."""
    import os

    from assay.errors import AssayError
    from assay.records.trial import read_trial
    from assay.runner.experiment import run_experiment

    recipe = RECIPES[name]
    env = dict(os.environ if env is None else env)
    row = CheckResult(name, recipe.protocol, None)
    cli, why = _install(recipe, env)
    if cli is None:
        row.detail = why
        return row
    root = Path(tempfile.mkdtemp(prefix=f"assay-agents-check-{name}-", dir=work))
    _task(root)
    exp = _experiment(root, recipe, cli)
    t0 = time.monotonic()
    try:
        res = run_experiment(exp, root / "run")
    except AssayError as exc:
        row.ok, row.detail = False, str(exc)[:500]
        return row
    row.seconds = round(time.monotonic() - t0, 1)
    row.run_dir = str(root / "run")
    trials = sorted((root / "run").glob("trials/*/*/*/a*/trial.json"))
    rec = read_trial(trials[-1].parent) if trials else None
    ident = (rec.agent_identity if rec else None) or {}
    report = ((rec.execution if rec else None) or {}).get("agent_report") or {}
    row.version = ident.get("version") or ident.get("cli_version") or report.get("cli_version")
    grade = rec.grade if rec else None
    row.ok = bool(grade and grade.accepted)
    failed: str | None = (grade.failure_code if grade else None) or (rec.error if rec else None)
    row.detail = ("accepted" if row.ok else f"{res.status}: {failed or 'not graded'}"
                  f" ({trials[-1].parent if trials else root / 'run'})")
    return row


__all__ = ["RECIPES", "CheckResult", "Recipe", "check_agent", "known_agents"]
