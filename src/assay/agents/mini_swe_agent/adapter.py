"""The mini-swe-agent adapter: ``mini`` headless, its trajectory read into the record.

It only launches, reads, stops and collects: the agent loop, its retries and its prompts are
mini's own, because they are what is under test. Per attempt mini gets a fresh HOME and XDG
dirs (so its global ``.env`` and trajectories start empty), stdin closed, the builtin
``mini.yaml`` plus an override file written into that HOME (the gateway as ``api_base``, the
task's ``assistant_steps`` as ``agent.step_limit``, ``agent.wall_time_limit_seconds`` below the
runner's watchdog, no cost limit of its own: the gateway holds the budget), and the three
switches the reference found: ``LITELLM_LOCAL_MODEL_COST_MAP`` (no price list download),
``MSWEA_CONFIGURED`` (no first-run wizard) and ``MSWEA_COST_TRACKING=ignore_errors`` (an
unpriced model is not a crash). The key is ``OPENAI_API_KEY`` from the environment (the
attempt's scoped token), never written anywhere.

Which CLI: ``mini-swe-agent:<path>``, else ``$ASSAY_MINI_SWE_AGENT_BIN``, else the pinned
install of ``scripts/agents/mini-swe-agent.sh`` under ``$ASSAY_AGENTS_DIR``. It is a venv of
the system Python, so the venv prefix is bind-mounted read-only at its own path and its
interpreter resolves to /usr, which the sandbox sees.

How a run ends (``_status``): the trajectory's ``exit_status`` decides, not the exit code:
``Submitted`` succeeded, ``LimitsExceeded`` is the step budget, ``TimeExceeded`` the agent's
own time limit, a refused key or model before any command ran is ours (infrastructure); any
other end leaves the verdict to the verifier. A 400 mini retries (ten times, backing off up to
a minute), so an upstream that keeps refusing ends at the runner's watchdog.
"""

from __future__ import annotations

import hashlib
import json
import os
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
from assay.agents.mini_swe_agent.trajectory import (
    CONFIG_ERRORS,
    Trajectory,
    read_trajectory,
    usage_check,
)
from assay.records.statuses import ExecutionStatus
from assay.sandbox import SANDBOX_WORKDIR, Mount

ADAPTER = "assay.mini-swe-agent/1"
NAME = "mini-swe-agent"
PIN = "2.4.6"
BIN_ENV = "ASSAY_MINI_SWE_AGENT_BIN"
CONFIG_REL = ".config/assay-mini/assay.yaml"
TRAJ_REL = "mini.traj.json"
#: switches every attempt gets (the reference's offline switches, see the module docstring)
FIXED_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_CONFIGURED": "1",
             "MSWEA_COST_TRACKING": "ignore_errors", "NO_COLOR": "1", "TERM": "dumb",
             "PYTHONUNBUFFERED": "1",
             # a plain traceback: typer's rich one of litellm's frames takes ~10 s of CPU, which
             # a refused key would otherwise spend after the run is over
             "_TYPER_STANDARD_TRACEBACK": "1"}
#: flags besides model, config, task and output path: no confirmation, no exit prompt
FIXED_FLAGS = ("-y", "--exit-immediately")


def default_bin() -> Path:
    """Where ``scripts/agents/mini-swe-agent.sh`` installs the pinned CLI."""
    root = os.environ.get("ASSAY_AGENTS_DIR") or str(Path.home() / ".cache/assay/agents")
    return Path(root) / f"{NAME}-{PIN}" / "bin" / "mini"


def override_config(base_url: str, steps: int | None, wall_limit: int,
                    cwd: str = SANDBOX_WORKDIR) -> dict[str, Any]:
    """What the adapter sets on top of the builtin ``mini.yaml`` (JSON is YAML)."""
    return {"agent": {"step_limit": steps or 0, "cost_limit": 0,
                      "wall_time_limit_seconds": wall_limit, "mode": "yolo",
                      "confirm_exit": False},
            "environment": {"cwd": cwd},
            "model": {"model_kwargs": {"api_base": base_url}}}


def _prefix_of(exe: Path) -> Path | None:
    """The venv holding ``exe`` (``<prefix>/bin/mini`` with a ``pyvenv.cfg``), if any."""
    prefix = exe.parent.parent
    return prefix if (prefix / "pyvenv.cfg").is_file() else None


def _dist_file(prefix: Path | None, name: str) -> Path | None:
    if prefix is None:
        return None
    return next(iter(sorted(prefix.glob(
        f"lib/python3*/site-packages/mini_swe_agent-*.dist-info/{name}"))), None)


def _version_of(prefix: Path | None) -> str | None:
    """The installed distribution's version, from its metadata: mini has no ``--version``, and
    reading the file needs no interpreter start."""
    meta = _dist_file(prefix, "METADATA")
    for line in meta.read_text(errors="replace").splitlines() if meta else []:
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass
class MiniSweAgent:
    """``agent: mini-swe-agent`` (or ``mini-swe-agent:<path to mini>``)."""

    bin: Path
    name: str = NAME

    @classmethod
    def from_spec(cls, spec: str) -> MiniSweAgent:
        hint = f"install it with scripts/agents/{NAME}.sh, or give {NAME}:<path> or set {BIN_ENV}"
        path = cli_common.find_cli(NAME, spec, BIN_ENV, default_bin, hint).absolute()
        prefix = _prefix_of(path)
        for inner in (SANDBOX_WORKDIR, AGENT_HOME, "/assay"):
            if (prefix or path).is_relative_to(inner):
                raise ValueError(f"{NAME}: {prefix or path} lies under {inner}, which the "
                                 "sandbox uses itself; install it elsewhere (ASSAY_AGENTS_DIR)")
        return cls(path, name=spec)

    def _mounts(self) -> list[Mount]:
        prefix = _prefix_of(self.bin)
        if prefix is not None and not prefix.resolve().is_relative_to("/usr"):
            return [Mount(prefix, str(prefix))]
        if not self.bin.resolve().is_relative_to("/usr"):
            return [Mount(self.bin.parent, str(self.bin.parent))]
        return []

    def describe(self) -> dict[str, Any]:
        """The adapter's part of the arm identity: CLI path, version and digest, the flags, the
        switches and the override config's shape (its digest per attempt is in the record)."""
        template = json.dumps(override_config("<gateway>/v1", 0, 0), sort_keys=True)
        prefix = _prefix_of(self.bin)
        mini_yaml = next(iter(sorted(prefix.glob(
            "lib/python3*/site-packages/minisweagent/config/mini.yaml"))), None) if prefix \
            else None
        record = _dist_file(prefix, "RECORD")
        return {"adapter": ADAPTER, "bin": str(self.bin), "bin_sha256": sha256_file(self.bin),
                # ``mini`` is a shim: the package's RECORD (every file with its hash) is the build
                "dist_record_sha256": sha256_file(record) if record else None,
                "cli_version": _version_of(prefix), "flags": list(FIXED_FLAGS),
                "env": dict(FIXED_ENV),
                "builtin_config_sha256": sha256_file(mini_yaml) if mini_yaml else None,
                "config_template_sha256": hashlib.sha256(template.encode()).hexdigest()}

    def run(self, ctx: AgentContext) -> AgentRun:
        if (found := cli_common.gateway_model(ctx.model_env)) is None:
            return cli_common.needs_model(NAME)
        base, model = found
        spec = ctx.bundle.spec
        wall_limit = int(timeout_seconds(spec.budget.agent_wall_seconds))
        config = json.dumps(override_config(base, spec.budget.assistant_steps, wall_limit,
                                             sandbox_workspace(ctx)),
                            indent=2, sort_keys=True) + "\n"
        cfg_path = ctx.home / CONFIG_REL
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        cfg_path.write_text(config)
        traj_host = ctx.home / TRAJ_REL
        traj_host.unlink(missing_ok=True)
        task = ctx.instruction_text()
        argv = [str(self.bin), "-m", f"openai/{model}", "-c", "mini.yaml",
                "-c", f"{AGENT_HOME}/{CONFIG_REL}", *FIXED_FLAGS,
                "-o", f"{AGENT_HOME}/{TRAJ_REL}", "-t", task]
        run = run_in_agent_sandbox(ctx, argv, self._mounts(), env=dict(FIXED_ENV))
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        (ctx.record_dir / "mini-config.yaml").write_text(config)  # no secret in it
        raw = traj_host.read_bytes() if traj_host.is_file() else None
        if raw is not None:
            (ctx.record_dir / "trajectory.json").write_bytes(raw)
        report: dict[str, Any] = {
            "adapter": ADAPTER, "cli_version": _version_of(_prefix_of(self.bin)),
            "argv": [*argv[:-1], "<instruction>"],
            "config_sha256": hashlib.sha256(config.encode()).hexdigest(),
            "wall_time_limit_seconds": wall_limit, "step_limit": spec.budget.assistant_steps,
            "trajectory_sha256": hashlib.sha256(raw).hexdigest() if raw is not None else None,
            "stderr_tail": tail(ctx.record_dir / "stderr.log")}
        return _collect(run, raw, report)

    def reconcile(self, execution: dict[str, Any]) -> dict[str, Any]:
        """The usage the responses reported to mini against the gateway's ledger."""
        claim = execution.get("agent_usage") or {}
        return cli_collect.reconcile_usage(execution, usage_check, claim.get("usage"),
                                           claim.get("usage_missing_turns") or 0)


def _collect(run: AgentRun, raw: bytes | None, report: dict[str, Any]) -> AgentRun:
    """Read the trajectory and decide the execution's status from it and what the sandbox saw
    (a watchdog kill or a resource limit outranks anything the trajectory says)."""
    traj = read_trajectory(raw)
    report["trajectory"] = traj.to_record()
    report["agent_status"] = traj.exit_status
    status, why = _status(run, traj)
    return cli_collect.settle(
        run, report, dict(traj.anomalies), status, why,
        turns=traj.turns if traj.readable else None,
        tool_calls=traj.tool_calls if traj.readable else None,
        # the agent's own claims, as reported; None when it made none (never a zero)
        agent_usage={"usage": traj.usage, "usage_missing_turns": traj.usage_missing_turns,
                     "cost_usd": traj.claimed_cost_usd,
                     # ignore_errors: an unpriced model's cost is recorded by mini as 0
                     "cost_usd_meaning": "litellm's price map, 0 for an unpriced model",
                     "api_calls": traj.claimed_api_calls} if traj.readable else None)


def _status(run: AgentRun, traj: Trajectory) -> tuple[ExecutionStatus, str]:
    """The trajectory's exit status onto the failure taxonomy."""
    if cli_collect.ended_by_sandbox(run):
        return run.status, cli_collect.SANDBOX_DECIDED
    end = traj.exit_status
    if end == "Submitted":
        return ("succeeded" if run.exit_code == 0 else "exited_nonzero"), "mini submitted"
    if end == "TimeExceeded":
        return "agent_timeout", "mini: TimeExceeded (agent.wall_time_limit_seconds)"
    if end == "LimitsExceeded":
        return "budget_exhausted", "mini: LimitsExceeded (agent.step_limit)"
    if end in CONFIG_ERRORS and not traj.commands:
        return "infra_error", f"mini: {end} before any command ran ({traj.exception or ''})"
    if not traj.readable and run.exit_code not in (0, None):
        return "infra_error", f"mini exited {run.exit_code} without a trajectory (startup " \
                              "or config failure)"
    if end is None:
        return run.status, "mini left no exit status"
    return "exited_nonzero", f"mini: {end}"


__all__ = ["ADAPTER", "BIN_ENV", "PIN", "MiniSweAgent", "default_bin", "override_config"]
