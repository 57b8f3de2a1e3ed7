"""The Claude Code adapter: ``claude -p`` headless, its stream-json read into the record.

It only launches, reads, stops and collects: tool scheduling, retries and compaction stay with
the CLI, because they are what is under test. Per attempt the CLI gets a fresh HOME (its
``~/.claude.json`` and ``~/.claude/settings.json`` written from one template, so their digest
stands in the arm's identity), the gateway as ``ANTHROPIC_BASE_URL`` with the attempt's scoped
token as ``ANTHROPIC_API_KEY`` (from the environment only, never on disk), every outbound
switch the reference names turned off, the task's step budget as ``--max-turns``, and a time
limit below the runner's watchdog (coreutils ``timeout``: the CLI has no flag of its own, so
exit 124 is the agent's own timeout). Its native binary runs without Node; the directory that
holds it is bind-mounted read-only. ``IS_SANDBOX=1``, because inside bubblewrap the CLI runs
as root and refuses ``--dangerously-skip-permissions`` as root otherwise.

Which binary: ``claude:<path>``, else ``$ASSAY_CLAUDE_BIN``, else the pinned install of
``scripts/agents/claude.sh`` under ``$ASSAY_AGENTS_DIR`` (default ``~/.cache/assay/agents``).
The ``result`` line maps onto the failure taxonomy (``_status``); usage and cost claims go
beside the gateway's ledger (``reconcile``); stream departures are named
(``claude_stream.ANOMALIES``) and make ``evidence_gap`` true.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.agents import cli_collect, cli_common
from assay.agents.base import AGENT_HOME, AgentContext, AgentRun, run_in_agent_sandbox
from assay.agents.claude.stream import ClaudeStream, read_stream, usage_check
from assay.agents.cli_common import sha256_file, tail, timeout_seconds
from assay.records.statuses import ExecutionStatus
from assay.sandbox import Mount

ADAPTER = "assay.claude/1"
BIN_ENV = "ASSAY_CLAUDE_BIN"
PINNED_VERSION = "2.1.332"
BIN_DIR_MOUNT = "/assay/agent/claude-code"
#: the flags every attempt gets besides the budget; permissions skipped because nobody is there
#: to approve a tool call (the sandbox is what confines it)
FIXED_FLAGS = ("-p", "--output-format", "stream-json", "--verbose",
               "--dangerously-skip-permissions")
#: the outbound switches (shared/ref/agent-clis.md): telemetry, error reports, the autoupdater
#: and the ``HEAD /api/hello`` reachability probe
OFFLINE_ENV = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
               "DISABLE_BUG_COMMAND": "1", "IS_SANDBOX": "1"}
#: written into the attempt's HOME: no onboarding, no update checks, the same switches again in
#: settings (the CLI reads both), nothing kept past the attempt
CONFIG_TEMPLATE: dict[str, dict[str, Any]] = {
    ".claude.json": {"hasCompletedOnboarding": True, "autoUpdates": False,
                     "bypassPermissionsModeAccepted": True},
    ".claude/settings.json": {"env": {k: v for k, v in OFFLINE_ENV.items() if k != "IS_SANDBOX"},
                              "includeCoAuthoredBy": False, "cleanupPeriodDays": 1},
}
#: API errors before any tool call that mean the arm is misconfigured (key, model, URL): ours
AUTH_OR_CONFIG_STATUSES = (401, 403, 404)


def default_bin() -> Path:
    """Where ``scripts/agents/claude.sh`` puts the pinned native binary."""
    root = Path(os.environ.get("ASSAY_AGENTS_DIR") or Path.home() / ".cache/assay/agents")
    return (root / f"claude-code-{PINNED_VERSION}" / "node_modules" / "@anthropic-ai"
            / "claude-code-linux-x64" / "claude")


#: the CLI's own time limit (claude has no flag of its own: ``timeout`` enforces it)
time_limit = timeout_seconds


def config_files() -> dict[str, str]:
    return {rel: json.dumps(body, indent=2, sort_keys=True) + "\n"
            for rel, body in CONFIG_TEMPLATE.items()}


@dataclass
class ClaudeCode:
    """``agent: claude`` (or ``claude:<path to the CLI>``)."""

    bin: Path
    name: str = "claude"
    _version: str | None = field(default=None, repr=False)

    @classmethod
    def from_spec(cls, spec: str) -> ClaudeCode:
        hint = f"install it with scripts/agents/claude.sh, give claude:<path> or set {BIN_ENV}"
        path = cli_common.find_cli("claude", spec, BIN_ENV, default_bin, hint)
        return cls(path.absolute(), name=spec)

    def version(self) -> str | None:
        """``claude --version``, run once per adapter (the identity and every record use it)."""
        if self._version is None:
            try:
                proc = subprocess.run([str(self.bin), "--version"], capture_output=True,
                                      text=True, timeout=60, stdin=subprocess.DEVNULL,
                                      env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                           "HOME": "/nonexistent", **OFFLINE_ENV})
                self._version = proc.stdout.strip() or None
            except (OSError, subprocess.TimeoutExpired):
                return None
        return self._version

    def describe(self) -> dict[str, Any]:
        """The adapter's part of the arm identity: CLI version, path and digest, the flags and
        the digest of the config written into each attempt's HOME."""
        template = json.dumps(config_files(), sort_keys=True)
        return {"adapter": ADAPTER, "cli_version": self.version(), "bin": str(self.bin),
                "bin_sha256": sha256_file(self.bin.resolve()), "flags": list(FIXED_FLAGS),
                "offline_env": dict(OFFLINE_ENV),
                "config_template_sha256": hashlib.sha256(template.encode()).hexdigest()}

    def run(self, ctx: AgentContext) -> AgentRun:
        model = ctx.model_env.get("ANTHROPIC_MODEL")
        if not ctx.model_env.get("ANTHROPIC_BASE_URL") or not model or \
                "ANTHROPIC_API_KEY" not in ctx.model_env:
            return AgentRun(status="infra_error",
                            detail="claude needs a model: run it in an experiment arm with a "
                                   "model whose protocol is anthropic")
        files = config_files()
        for rel, text in files.items():
            target = ctx.home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        spec = ctx.bundle.spec
        limit = time_limit(spec.budget.agent_wall_seconds)
        real = self.bin.resolve()
        exe = f"{BIN_DIR_MOUNT}/{real.name}"
        flags = list(FIXED_FLAGS)
        if spec.budget.assistant_steps is not None:
            flags += ["--max-turns", str(spec.budget.assistant_steps)]
        prompt = ctx.instruction_text()
        # "--": an instruction that starts with a dash is the prompt, not a flag
        argv = ["timeout", "-k", "2", f"{limit:g}", exe, *flags, "--", prompt]
        env = {**OFFLINE_ENV, "ANTHROPIC_SMALL_FAST_MODEL": model,
               "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "CLAUDE_CONFIG_DIR": f"{AGENT_HOME}/.claude"}
        run = run_in_agent_sandbox(ctx, argv, [Mount(real.parent, BIN_DIR_MOUNT)], env=env)
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        (ctx.record_dir / "claude-config.json").write_text(
            json.dumps(files, indent=2, sort_keys=True) + "\n")  # no secret in it
        report: dict[str, Any] = {
            "adapter": ADAPTER, "cli_version": self.version(),
            "argv": [*argv[:-1], "<instruction.md>"],
            "config_sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode())
            .hexdigest(),
            "time_limit_seconds": limit, "max_turns": spec.budget.assistant_steps,
            "stderr_tail": tail(ctx.record_dir / "stderr.log")}
        return _collect(run, ctx.record_dir / "stdout.log", report)

    def reconcile(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The result line's usage claim against the gateway's ledger (``model_usage``)."""
        claim = cli_collect.claimed_usage(execution)
        return cli_collect.reconcile_usage(execution, usage_check, claim)


def _collect(run: AgentRun, stdout: Path, report: dict[str, Any]) -> AgentRun:
    """The ``result`` line fills the report and the usage claim; claude alone also names why
    its status stands when the sandbox gave no detail (``judged``, and the detail itself)."""
    reading = cli_collect.kept_stream(stdout, report, read_stream)
    result = reading.result
    if result is not None:
        report.update(agent_status=result.get("subtype"), is_error=result.get("is_error"),
                      num_turns=result.get("num_turns"), duration_ms=result.get("duration_ms"),
                      duration_api_ms=result.get("duration_api_ms"),
                      result_text=str(result.get("result") or "")[:2000] or None,
                      permission_denials=result.get("permission_denials"))
    status, why = _status(run, reading)
    report["judged"] = why
    cli_collect.settle(
        run, report, dict(reading.anomalies), status, why,
        # the agent's own claims, as reported; None when it made none (never a zero)
        agent_usage={"usage": result.get("usage"), "total_cost_usd": result.get("total_cost_usd"),
                     "model_usage": result.get("modelUsage"),
                     "num_turns": result.get("num_turns")} if result else None)
    if run.detail is None:  # an unchanged status still says why (the sandbox gave no detail)
        run.detail = why
    return run


def _api_status(reading: ClaudeStream) -> int | None:
    """The HTTP status of the API error the CLI ended on: the result's ``api_error_status``,
    else the status its ``API Error: NNN`` text names."""
    code = (reading.result or {}).get("api_error_status")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    texts = [*reading.api_errors, str((reading.result or {}).get("result") or "")]
    for text in texts:
        words = text.replace(":", " ").split()
        for i, word in enumerate(words[:-1]):
            if word == "Error" and words[i + 1].isdigit():
                return int(words[i + 1])
    return None


def _status(run: AgentRun, reading: ClaudeStream) -> tuple[ExecutionStatus, str]:
    """The result line (or, without one, the exit code) onto the taxonomy: the turn limit is
    the step budget, an auth or config refusal before any tool ran is ours (infrastructure),
    any other failure leaves the verdict to the verifier."""
    if cli_collect.ended_by_sandbox(run):
        return run.status, cli_collect.SANDBOX_DECIDED
    result = reading.result
    retried = {r.get("error_status") for r in reading.api_retries}
    if result is None and not reading.tool_calls and retried and \
            retried <= set(AUTH_OR_CONFIG_STATUSES):
        # it retries a refused key for minutes: no work was possible, the arm is misconfigured
        shown = sorted(s for s in retried if s is not None)
        return "infra_error", (f"claude retried API errors {shown} (auth/config) "
                               f"until it stopped (exit {run.exit_code}); no tool ran")
    if result is None:
        if run.exit_code in (124, 137):
            return "agent_timeout", f"claude's own time limit (timeout exited {run.exit_code})"
        return "exited_nonzero", f"claude exited {run.exit_code} without a result line"
    subtype = result.get("subtype")
    if subtype in ("error_max_turns", "error_max_budget_usd"):
        return "budget_exhausted", f"claude: {subtype} (--max-turns)"
    if result.get("is_error"):
        code = _api_status(reading)
        if not reading.tool_calls and code in AUTH_OR_CONFIG_STATUSES:
            return "infra_error", f"claude: API error {code} before any tool call (auth/config)"
        return "exited_nonzero", f"claude: {subtype}, is_error" + (
            f" (API error {code})" if code else "")
    if subtype == "success":
        return ("succeeded" if run.exit_code == 0 else "exited_nonzero"), "claude succeeded"
    return "exited_nonzero", f"claude: {subtype}"


__all__ = ["ADAPTER", "BIN_ENV", "PINNED_VERSION", "ClaudeCode", "default_bin", "time_limit"]
