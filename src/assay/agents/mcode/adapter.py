"""The MiniMax Code adapter: ``mcode exec`` headless, its stream-json read into the record.

It only launches, reads, stops and collects: tool scheduling, compaction and model retries stay
with the CLI, because they are what is under test. Per attempt the CLI gets a fresh
``MINIMAX_DATA_DIR``, ``HOME`` and ``XDG_*`` (all inside the attempt's HOME, deleted after the
freeze), a ``custom_provider`` config that points at the run's gateway, the instruction on
stdin (then closed), the task's step budget as ``--max-steps`` and a ``--timeout`` below the
runner's watchdog. The config names the scoped token as ``${OPENAI_API_KEY}``, which the CLI
expands from its environment: the token is never written to disk, and the config's digest is
the same for every attempt of an arm, so it can stand in the arm's identity.

Which binary: ``mcode:<path>``, else ``$ASSAY_MCODE_BIN``, else ``mcode`` on the host's PATH. A
binary under /usr is used where it is (the sandbox sees /usr); any other file is bind-mounted
read-only at ``/assay/bin/mcode`` (a single-file program such as the project's contract fixture,
``tests/support/mcode_fixture.py``; a real CLI that is a tree of node modules must be installed
under /usr). The config is JSON, which is YAML: the CLI reads it as its ``config.yaml`` schema.

The status the contract reports maps onto the failure taxonomy (``_status``); usage claims go
beside the gateway's ledger and a disagreement is flagged (``reconcile``); every way the stream
broke the contract is named (``mcode_stream.ANOMALIES``) and makes ``evidence_gap`` true.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.agents import cli_collect, cli_common
from assay.agents.base import (
    AGENT_HOME,
    AgentContext,
    AgentRun,
    run_in_agent_sandbox,
    sandbox_workspace,
)
from assay.agents.cli_common import sha256_file, tail, timeout_seconds
from assay.agents.mcode.stream import EXIT_CODES, expected_exit_code, read_stream, usage_check
from assay.records.statuses import ExecutionStatus
from assay.sandbox import Mount

ADAPTER = "assay.mcode/1"
BIN_ENV = "ASSAY_MCODE_BIN"
BIN_MOUNT = "/assay/bin/mcode"
PROVIDER = "assay-gateway"
CONFIG_REL = ".config/assay-mcode/config.yaml"
DATA_REL = ".minimax"
VERSION_REL = ".assay-mcode-version"
#: the flags every attempt gets besides paths and budgets; ``full`` permission because nobody
#: is there to approve a tool call (the sandbox is what confines it)
FIXED_FLAGS = ("exec", "--input", "-", "--output-format", "stream-json", "--permission", "full")
# Record the CLI's version in HOME, then become the CLI (stdin, signals and exit code its own).
_LAUNCH = '"$0" --version >"$HOME/' + VERSION_REL + '" 2>&1 </dev/null; exec "$0" "$@"'


def provider_config(model: str, base_url: str) -> dict[str, Any]:
    """The ``custom_provider`` config (contract §4, from the repo's byok test): OpenAI chat
    completions at the gateway, the key expanded by the CLI from ``$OPENAI_API_KEY``."""
    return {"custom_provider": {PROVIDER: {
        "name": PROVIDER, "kind": "custom", "enabled": True, "api": "openai-completions",
        "options": {"apiKey": "${OPENAI_API_KEY}", "baseURL": base_url,
                    "authMode": "api-key", "headers": {}},
        "models": {model: {"limit": {"context": 200000, "output": 16384}}}}},
        "defaultModel": f"custom_provider:{PROVIDER}/{model}"}


@dataclass
class MCode:
    """``agent: mcode`` (or ``mcode:<path to the CLI>``)."""

    bin: Path
    name: str = "mcode"

    @classmethod
    def from_spec(cls, spec: str) -> MCode:
        given = spec.split(":", 1)[1].strip() if ":" in spec else ""
        raw = given or os.environ.get(BIN_ENV, "") or shutil.which("mcode") or ""
        if not raw:
            raise ValueError(f"mcode: no CLI found (give mcode:<path>, set {BIN_ENV}, or put "
                             "mcode on PATH)")
        path = Path(raw).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ValueError(f"mcode: {path} is not an executable file")
        return cls(path.absolute(), name=spec)

    def _sandbox_bin(self) -> tuple[str, list[Mount]]:
        real = self.bin.resolve()
        if real.is_relative_to("/usr"):
            return str(real), []
        return BIN_MOUNT, [Mount(real, BIN_MOUNT)]

    def describe(self) -> dict[str, Any]:
        """The adapter's part of the arm identity: the CLI (path and digest), the flags and the
        config's shape (its digest for a given model is in each attempt's record)."""
        template = json.dumps(provider_config("<model>", "<gateway>/v1"), sort_keys=True)
        return {"adapter": ADAPTER, "bin": str(self.bin), "bin_sha256": sha256_file(self.bin),
                "flags": list(FIXED_FLAGS),
                "config_template_sha256": hashlib.sha256(template.encode()).hexdigest()}

    def run(self, ctx: AgentContext) -> AgentRun:
        if (found := cli_common.gateway_model(ctx.model_env)) is None:
            return cli_common.needs_model("mcode")
        base, model = found
        config = json.dumps(provider_config(model, base), indent=2, sort_keys=True) + "\n"
        cfg_path = ctx.home / CONFIG_REL
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        cfg_path.write_text(config)
        (ctx.home / DATA_REL).mkdir(exist_ok=True)
        spec = ctx.bundle.spec
        timeout = timeout_seconds(spec.budget.agent_wall_seconds)
        argv_flags = [*FIXED_FLAGS[:1], "--cwd", sandbox_workspace(ctx), "--config",
                      f"{AGENT_HOME}/{CONFIG_REL}", *FIXED_FLAGS[1:],
                      "--timeout", f"{int(timeout * 1000)}ms"]
        if spec.budget.assistant_steps is not None:
            argv_flags += ["--max-steps", str(spec.budget.assistant_steps)]
        exe, mounts = self._sandbox_bin()
        env = {"MINIMAX_DATA_DIR": f"{AGENT_HOME}/{DATA_REL}", "MCODE_DISABLE_TELEMETRY": "1"}
        run = run_in_agent_sandbox(ctx, ["sh", "-c", _LAUNCH, exe, *argv_flags], mounts,
                                   env=env, stdin=ctx.instruction_text().encode())
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        (ctx.record_dir / "mcode-config.yaml").write_text(config)  # no secret in it
        version = tail(ctx.home / VERSION_REL, 500).strip() or None
        report: dict[str, Any] = {
            "adapter": ADAPTER, "cli_version": version, "argv": [exe, *argv_flags],
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "timeout_seconds": timeout, "max_steps": spec.budget.assistant_steps,
            "exit_meaning": EXIT_CODES.get(run.exit_code) if run.exit_code is not None
            else None,
            "stderr_tail": tail(ctx.record_dir / "stderr.log")}
        return _collect(run, ctx.record_dir / "stdout.log", report)

    def reconcile(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The agent's usage claim against the gateway's ledger (``model_usage``)."""
        claim = execution.get("agent_usage") or {}
        return cli_collect.reconcile_usage(execution, usage_check, claim.get("usage"),
                                           claim.get("usageIncomplete"))


def _collect(run: AgentRun, stdout: Path, report: dict[str, Any]) -> AgentRun:
    """``exec.completed`` fills the report and the usage claim and must agree with the exit
    code (else ``exit_code_mismatch``); the stream's own anomaly list gives way to the
    execution's."""
    reading = cli_collect.kept_stream(stdout, report, read_stream)
    result = reading.result if reading.interpreted else None
    if result is not None:
        report.update(agent_status=result.get("status"), error=result.get("error"),
                      model=result.get("model"), duration_ms=result.get("durationMs"))
        want = expected_exit_code(result)
        if not cli_collect.ended_by_sandbox(run) and want is not None and want != run.exit_code:
            reading.flag("exit_code_mismatch", f"result {result.get('status')!r} wants exit "
                                               f"{want}, got {run.exit_code}")
    status, why = _status(run, result)
    anomalies = dict(reading.anomalies)
    del report["stream"]["anomalies"]  # one list: the execution's (reconcile adds to it)
    return cli_collect.settle(
        run, report, anomalies, status, why, compaction_events=reading.compaction_events,
        # the agent's own claim, as reported; None when it made none (never a zero)
        agent_usage={"usage": result.get("usage"), "usageSource": result.get("usageSource"),
                     "usageIncomplete": result.get("usageIncomplete")} if result else None)


def _status(run: AgentRun, result: dict[str, Any] | None) -> tuple[ExecutionStatus, str]:
    """Contract status (or, without ``exec.completed``, the exit code) onto the taxonomy:
    ``timeout`` is the agent's timeout, ``limit_exceeded`` its step budget, a ``config`` error
    or an invocation error is ours (infrastructure: retried), a runtime or internal failure
    leaves the verdict to the verifier."""
    if cli_collect.ended_by_sandbox(run):
        return run.status, cli_collect.SANDBOX_DECIDED
    if result is not None:
        status = result.get("status")
        category = (result.get("error") or {}).get("category") if isinstance(
            result.get("error"), dict) else None
        if status == "succeeded":
            return ("succeeded" if run.exit_code == 0 else "exited_nonzero"), "mcode succeeded"
        if status == "timeout":
            return "agent_timeout", "mcode: timeout"
        if status == "limit_exceeded":
            return "budget_exhausted", "mcode: limit_exceeded (--max-steps)"
        if status == "failed" and category == "config":
            return "infra_error", "mcode: config error"
        return "exited_nonzero", f"mcode: {status} ({category or 'no category'})"
    code = run.exit_code
    meaning = EXIT_CODES.get(code) if code is not None else None
    if code in (2, 3):
        return "infra_error", f"mcode exited {code} ({meaning}) without exec.completed"
    if code == 6:
        return "agent_timeout", "mcode exited 6 (timeout) without exec.completed"
    if code == 7:
        return "budget_exhausted", "mcode exited 7 (limit_exceeded) without exec.completed"
    if code == 0:  # the artifact decides; the missing events are an evidence gap
        return run.status, "mcode exited 0 without exec.completed"
    return "exited_nonzero", f"mcode exited {code} ({meaning or 'unknown'}) without " \
                             "exec.completed"


__all__ = ["ADAPTER", "BIN_ENV", "MCode", "provider_config", "timeout_seconds"]
