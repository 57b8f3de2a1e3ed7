"""The OpenAI Codex CLI adapter: ``codex exec --json`` headless, its JSONL read into the record.

It only launches, reads, stops and collects: tool scheduling, retries and compaction stay with
the CLI, because they are what is under test. Per attempt the CLI gets a fresh ``CODEX_HOME``
(``$HOME/.codex``, inside the attempt's HOME) holding a ``config.toml`` that points a
``responses`` provider at the run's gateway (Codex 0.171 speaks only the Responses API), never
asks for approval and runs commands unconfined (``danger-full-access``: our sandbox is what
confines it), with every outbound switch off (plugins, remote plugins, apps, the update check,
web search, analytics). The provider names the scoped token by its variable (``env_key``), so
the token is never on disk and the config's digest is the same for every attempt of an arm.

Which binary: ``codex:<path>``, else ``$ASSAY_CODEX_BIN``, else the pinned install of
``scripts/agents/codex.sh`` (the native musl binary, so neither Node nor the npm shim is needed
at run time). The folder above the binary's ``bin/`` is bind-mounted read-only at
``/assay/opt/codex``; a binary under /usr is used where it is.

Codex has no step flag: the task's ``assistant_steps`` is enforced by the gateway, which
answers 403 ``budget_exhausted``. Nor has it a time limit of its own, so coreutils ``timeout``
ends it a margin below the runner's watchdog (exit 124 -> ``agent_timeout``). The end of the
run is judged from the stream (``codex_stream``), not the exit code alone: ``turn.completed``
succeeded, ``turn.failed`` is read for a budget refusal or an auth/config failure, anything
else leaves the verdict to the verifier.
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
from assay.agents.base import (
    AGENT_HOME,
    AgentContext,
    AgentRun,
    run_in_agent_sandbox,
    sandbox_workspace,
)
from assay.agents.cli_common import sha256_file, tail, timeout_seconds
from assay.agents.codex.stream import read_codex_stream, usage_check
from assay.records.statuses import ExecutionStatus
from assay.sandbox import Mount

ADAPTER = "assay.codex/1"
VERSION = "0.171.0"
BIN_ENV = "ASSAY_CODEX_BIN"
MOUNT = "/assay/opt/codex"
PROVIDER = "assay-gateway"
HOME_REL = ".codex"
#: where ``scripts/agents/codex.sh`` puts the pinned CLI under ``$ASSAY_AGENTS_DIR``
INSTALL_REL = (f"codex-{VERSION}/node_modules/@openai/codex-linux-x64/vendor/"
               "x86_64-unknown-linux-musl/bin/codex")
#: every attempt's flags besides the working directory and the prompt
FIXED_FLAGS = ("exec", "--json", "--skip-git-repo-check", "--color", "never")
#: coreutils ``timeout`` exits 124 when it ended the CLI
TIMEOUT_EXIT = 124
# a refusal that means the run never got to work: ours to fix, so infrastructure
_AUTH_MARKERS = ("401", "unauthorized", "invalid api key", "incorrect api key",
                 "authentication", "missing environment variable", "not logged in")

CONFIG_TEMPLATE = """\
# written by assay for one attempt; the token is read from $OPENAI_API_KEY, never stored here
model = {model}
model_provider = "{provider}"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.{provider}]
name = "{provider}"
base_url = {base_url}
env_key = "OPENAI_API_KEY"
wire_api = "responses"

[features]
plugins = false
remote_plugin = false
apps = false

[analytics]
enabled = false
"""


def _toml_str(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for what a URL or model name holds)."""
    return json.dumps(text)


def codex_config(model: str, base_url: str) -> str:
    """The attempt's ``config.toml``: the gateway as a Responses provider, everything else off."""
    return CONFIG_TEMPLATE.format(model=_toml_str(model), base_url=_toml_str(base_url),
                                  provider=PROVIDER)


def default_bin() -> Path:
    """The pinned install's binary under ``$ASSAY_AGENTS_DIR`` (as ``codex.sh`` lays it out)."""
    root = os.environ.get("ASSAY_AGENTS_DIR") or str(Path.home() / ".cache/assay/agents")
    return Path(root) / INSTALL_REL


#: (path, size, mtime) -> sha256: the pinned binary is ~300 MB, so it is hashed once per
#: process and build, not once per experiment load


@dataclass
class Codex:
    """``agent: codex`` (or ``codex:<path to the CLI>``)."""

    bin: Path
    name: str = "codex"
    _identity: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_spec(cls, spec: str) -> Codex:
        hint = ("the pinned install is missing: run scripts/agents/codex.sh, give codex:<path> "
                f"or set {BIN_ENV}")
        path = cli_common.find_cli("codex", spec, BIN_ENV, default_bin, hint)
        return cls(path.absolute(), name=spec)

    def _sandbox_bin(self) -> tuple[str, list[Mount]]:
        real = self.bin.resolve()
        if real.is_relative_to("/usr"):
            return str(real), []
        top = real.parent.parent if real.parent.name == "bin" else real.parent
        return f"{MOUNT}/{real.relative_to(top)}", [Mount(top, MOUNT)]

    def version(self) -> str | None:
        """``codex --version``, run once per adapter (the binary is pinned by its digest)."""
        if "cli_version" not in self._identity:
            try:
                out = subprocess.run([str(self.bin), "--version"], capture_output=True,
                                     text=True, timeout=60, stdin=subprocess.DEVNULL)
                self._identity["cli_version"] = out.stdout.strip() or None
            except (OSError, subprocess.TimeoutExpired):
                self._identity["cli_version"] = None
        return self._identity["cli_version"]

    def describe(self) -> dict[str, Any]:
        """The adapter's part of the arm identity: the CLI (path, version, digest), the flags
        and the config template's digest (each attempt's own config digest is in its record)."""
        if "bin_sha256" not in self._identity:
            self._identity["bin_sha256"] = sha256_file(self.bin)
        template = codex_config("<model>", "<gateway>/v1")
        return {"adapter": ADAPTER, "bin": str(self.bin), "cli_version": self.version(),
                "bin_sha256": self._identity["bin_sha256"], "flags": list(FIXED_FLAGS),
                "config_template_sha256": hashlib.sha256(template.encode()).hexdigest()}

    def run(self, ctx: AgentContext) -> AgentRun:
        if (found := cli_common.gateway_model(ctx.model_env)) is None:
            return cli_common.needs_model("codex")
        base, model = found
        protocol = ctx.model_env.get("ASSAY_MODEL_PROTOCOL", "chat")
        if protocol != "responses":
            return AgentRun(status="infra_error",
                            detail=f"codex speaks only the Responses API: set the arm's "
                                   f"model.protocol to responses (it is {protocol!r})")
        config = codex_config(model, base)
        codex_home = ctx.home / HOME_REL
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(config)
        spec = ctx.bundle.spec
        timeout = timeout_seconds(spec.budget.agent_wall_seconds)
        exe, mounts = self._sandbox_bin()
        prompt = ctx.instruction_text()
        flags = [*FIXED_FLAGS, "-C", sandbox_workspace(ctx)]
        # "--": an instruction that starts with a dash is still the prompt
        argv = ["timeout", "--signal=TERM", "--kill-after=2", f"{timeout:g}", exe, *flags,
                "--", prompt]
        env = {"CODEX_HOME": f"{AGENT_HOME}/{HOME_REL}", "NO_COLOR": "1", "RUST_LOG": "warn"}
        run = run_in_agent_sandbox(ctx, argv, mounts, env=env)
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        (ctx.record_dir / "codex-config.toml").write_text(config)  # no secret in it
        report: dict[str, Any] = {
            "adapter": ADAPTER, "cli_version": self.version(),
            "argv": [exe, *flags, "--", "<prompt>"],
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "timeout_seconds": timeout,
            # codex has no step flag: the gateway counts and refuses
            "max_steps": None, "assistant_steps_budget": spec.budget.assistant_steps,
            "stderr_tail": tail(ctx.record_dir / "stderr.log")}
        return _collect(run, ctx.record_dir / "stdout.log", report)

    def reconcile(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The agent's usage claim against the gateway's ledger (``model_usage``)."""
        claim = cli_collect.claimed_usage(execution)
        return cli_collect.reconcile_usage(execution, usage_check, claim)


def _collect(run: AgentRun, stdout: Path, report: dict[str, Any]) -> AgentRun:
    """The last turn event is the agent's status; codex's own timeout (exit 124) expects no
    terminal event, so its absence is no anomaly then."""
    reading = cli_collect.kept_stream(stdout, report, read_codex_stream)
    record = report["stream"]
    report["agent_status"] = record["terminal"]
    status, why = _status(run, reading)
    anomalies = dict(reading.anomalies)
    if run.exit_code == TIMEOUT_EXIT:  # our timeout ended it: no terminal event is expected
        anomalies.pop("missing_terminal_event", None)
    return cli_collect.settle(
        run, report, anomalies, status, why,
        turns=record["turns"], tool_calls=len(record["items"]["tool_calls"]),
        # the agent's own claim, as reported; None when it made none (never a zero)
        agent_usage={"usage": reading.usage, "cost_usd": None} if reading.usage else None)


def _status(run: AgentRun, reading: Any) -> tuple[ExecutionStatus, str]:
    """The stream's end onto the failure taxonomy; see the module docstring."""
    if cli_collect.ended_by_sandbox(run):
        return run.status, cli_collect.SANDBOX_DECIDED
    if run.exit_code == TIMEOUT_EXIT:
        return "agent_timeout", "codex: ended by its time limit (timeout exited 124)"
    if reading.terminal is not None and reading.terminal.get("type") == "turn.completed":
        return ("succeeded" if run.exit_code == 0 else "exited_nonzero"), "codex: turn.completed"
    failure = reading.failure
    if failure is not None:
        low = failure.lower()
        if "budget_exhausted" in low or "budget exhausted" in low:
            return "budget_exhausted", "codex: turn.failed on the gateway's budget refusal"
        worked = reading.to_record()["items"]["tool_calls"]
        if not worked and any(m in low for m in _AUTH_MARKERS):
            return "infra_error", f"codex: turn.failed before any work ({failure[:200]})"
        return "exited_nonzero", f"codex: turn.failed ({failure[:200]})"
    if run.exit_code == 0:  # the artifact decides; the missing end is an evidence gap
        return run.status, "codex exited 0 without turn.completed"
    return "exited_nonzero", f"codex exited {run.exit_code} without turn.completed/failed"


__all__ = ["ADAPTER", "BIN_ENV", "Codex", "codex_config", "default_bin"]
