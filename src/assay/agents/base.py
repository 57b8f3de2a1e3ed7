"""What every agent adapter shares: the context a trial gives it, and what it hands back.

Adapters only launch, wait, stop and collect. The agent sees the starting tree (at the sandbox's
workspace path) and the instruction file, nothing else of the bundle, no host environment and
no API key; whatever it leaves running dies with its sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from assay.environments.run import task_root
from assay.records.statuses import ExecutionStatus
from assay.sandbox import (
    KILL_GRACE_SECONDS,
    SANDBOX_WORKDIR,
    ExecResult,
    Limits,
    Mount,
    ProxyTarget,
    run_sandboxed,
)
from assay.suites.agent_files import AGENT_FILES_MOUNT
from assay.suites.bundle import Bundle

INSTRUCTION_MOUNT = "/assay/instruction.md"
AGENT_HOME = "/assay/home"
#: What the agent's HOME may take on disk beside the workspace (its CLI's caches, a pip
#: cache): the agent's writable folders together are held to ``resources.workspace_mib`` plus
#: this while it runs (``Limits.disk_mib``); the freeze still holds the workspace alone to its
#: limit.
HOME_MIB = 1024
SOLUTION_MOUNT = "/assay/solution"

# Sandbox outcome -> how the trial's execution is recorded.
EXECUTION_STATUS: dict[str, ExecutionStatus] = {
    "ok": "succeeded",
    "nonzero_exit": "exited_nonzero",  # not a failure by itself: the verifier decides
    "timeout": "agent_timeout",
    "memory_limit": "resource_limit",
    "process_limit": "resource_limit",
    "disk_limit": "resource_limit",
    "sandbox_error": "infra_error",
}


@dataclass
class AgentContext:
    bundle: Bundle
    workspace: Path  # host path of the live workspace
    home: Path  # host path of the agent's fresh HOME (outside the workspace)
    record_dir: Path  # where the agent's raw streams go
    #: the gateway's variables (OPENAI_BASE_URL, the attempt's scoped OPENAI_API_KEY, …); never
    #: the real key, which only the gateway holds
    model_env: dict[str, str] = field(default_factory=dict)
    #: where the sandbox's only network path leads (``network_policy: model-proxy-only``)
    proxy: ProxyTarget | None = None
    #: the runner's watchdog: SIGTERM at the wall budget, SIGKILL this much later
    grace_seconds: float = KILL_GRACE_SECONDS
    #: the arm's own files (``agent_files``), a host folder bound read-only at
    #: ``/assay/agent`` (``ASSAY_AGENT_DIR``); None: the arm names none
    agent_files: Path | None = None
    #: the instruction as the agent receives it (the task's, then the generated rules),
    #: written with the trial's records (``instruction.md``); None: made from the bundle
    instruction_file: Path | None = None

    def instruction_text(self) -> str:
        """What the agent is told (``Bundle.agent_instruction``), as recorded."""
        if self.instruction_file is not None:
            return self.instruction_file.read_text(encoding="utf-8")
        return self.bundle.agent_instruction()


@dataclass
class AgentRun:
    status: ExecutionStatus
    exit_code: int | None = None
    reason: str | None = None
    wall_seconds: float | None = None
    detail: str | None = None
    limits_applied: dict[str, Any] = field(default_factory=dict)
    #: the kernel's counters behind the outcome (OOM kills, refused forks, CPU throttling)
    evidence: dict[str, int] = field(default_factory=dict)
    #: which layer ended the agent: ``agent`` (it exited) or ``watchdog`` (the wall budget)
    ended_by: str | None = None
    #: what network the sandbox applied (None: the default, no network)
    network_applied: dict[str, Any] | None = None
    #: what an adapter read from the agent's own output (its status, usage claims, stream
    #: anomalies), merged into the execution record under these keys
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        rec = {"status": self.status, "exit_code": self.exit_code, "reason": self.reason,
               "wall_seconds": self.wall_seconds, "detail": self.detail,
               "limits_applied": self.limits_applied, "evidence": self.evidence}
        if self.ended_by is not None:
            rec["ended_by"] = self.ended_by
        if self.network_applied is not None:
            rec["network_applied"] = self.network_applied
        rec.update(self.extra)
        return rec


class Agent(Protocol):
    @property
    def name(self) -> str: ...

    def run(self, ctx: AgentContext) -> AgentRun: ...


# Optional on an adapter, looked up with getattr so the reference agents need neither:
#   describe() -> dict: what the adapter configured (CLI and its digest, flags, config
#     digest); the trial record keeps it as ``agent_identity``.
#   reconcile(execution) -> execution: called once the runner added the gateway's figures
#     (``model_usage``), so the adapter can check the agent's own claims against them.


def agent_env(ctx: AgentContext) -> dict[str, str]:
    """A fresh HOME and fresh data, config and cache directories inside it: an agent CLI finds
    no state from an earlier trial and leaves none for the next."""
    return {"ASSAY_INSTRUCTION_FILE": INSTRUCTION_MOUNT, "ASSAY_WORKSPACE": SANDBOX_WORKDIR,
            "ASSAY_TASK_ID": ctx.bundle.id, "HOME": AGENT_HOME,
            # the agent's own time limit; the runner's watchdog ends it grace seconds later
            "ASSAY_AGENT_WALL_SECONDS": f"{ctx.bundle.spec.budget.agent_wall_seconds:g}",
            "XDG_DATA_HOME": f"{AGENT_HOME}/.local/share",
            "XDG_CONFIG_HOME": f"{AGENT_HOME}/.config", "XDG_CACHE_HOME": f"{AGENT_HOME}/.cache",
            "XDG_STATE_HOME": f"{AGENT_HOME}/.local/state"}


def sandbox_workspace(ctx: AgentContext) -> str:
    """Where the workspace is inside the agent's sandbox: the task's image's working
    directory, or :data:`SANDBOX_WORKDIR` on the host's system (for a CLI's ``--cwd``)."""
    image = task_root(ctx.bundle)
    return image.workspace if image is not None else SANDBOX_WORKDIR


def run_in_agent_sandbox(ctx: AgentContext, argv: list[str],
                         extra_mounts: list[Mount] | None = None, *,
                         env: dict[str, str] | None = None,
                         stdin: bytes | None = None) -> AgentRun:
    """Run ``argv`` as the agent: task resources and agent wall budget, no network, the
    instruction read-only, a fresh HOME outside the workspace. ``env`` adds an adapter's own
    variables; ``stdin`` is fed and then closed (without it stdin is /dev/null)."""
    spec = ctx.bundle.spec
    limits = Limits(wall_seconds=spec.budget.agent_wall_seconds,
                    memory_mib=spec.resources.memory_limit_mib, pids=spec.resources.pids,
                    cpu_cores=spec.resources.cpu_cores,
                    disk_mib=spec.resources.workspace_mib + HOME_MIB)
    instruction = ctx.instruction_file
    if instruction is None:  # no trial recorded it (a direct caller): written beside the streams
        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        instruction = ctx.record_dir / "instruction.md"
        instruction.write_text(ctx.instruction_text(), encoding="utf-8")
    mounts = [Mount(instruction.resolve(), INSTRUCTION_MOUNT),
              Mount(ctx.home, AGENT_HOME, writable=True), *(extra_mounts or [])]
    files_env: dict[str, str] = {}
    image = task_root(ctx.bundle)  # the task's pinned environment, or the host's system
    if image is not None:
        files_env["ASSAY_WORKSPACE"] = image.workspace
    if ctx.agent_files is not None:
        mounts.append(Mount(ctx.agent_files.resolve(), AGENT_FILES_MOUNT))
        files_env["ASSAY_AGENT_DIR"] = AGENT_FILES_MOUNT
    result: ExecResult = run_sandboxed(
        argv, ctx.workspace, limits=limits,
        env={**agent_env(ctx), **files_env, **ctx.model_env, **(env or {})},
        mounts=mounts, stdin=stdin, network="model-proxy" if ctx.proxy is not None else "none",
        proxy=ctx.proxy, record_dir=ctx.record_dir, grace_seconds=ctx.grace_seconds,
        image=image)
    return AgentRun(status=EXECUTION_STATUS.get(result.reason, "infra_error"),
                    exit_code=result.exit_code, reason=result.reason,
                    wall_seconds=round(result.wall_seconds, 3), detail=result.detail,
                    limits_applied={k: v.to_record() for k, v in result.limits_applied.items()},
                    evidence=dict(result.evidence),
                    ended_by="watchdog" if result.timed_out else "agent",
                    network_applied=result.network_applied)
