"""Reference agents that validate a task rather than a model.

``oracle`` applies the task's reference solution (it must be accepted, every time); ``nop``
changes nothing (it must fail ``behavior``, or the task tests nothing). ``command:<shell>`` runs
any program in the workspace: this is how users plug in their own agent, and how the grader is
attacked in tests.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from assay.agents.atif_file import ATIF_ENV, collect_agent_atif
from assay.agents.base import SOLUTION_MOUNT, AgentContext, AgentRun, run_in_agent_sandbox
from assay.sandbox import Mount
from assay.sandbox.userns import readable_by_all


@dataclass
class Nop:
    name: str = "nop"

    def run(self, ctx: AgentContext) -> AgentRun:
        return run_in_agent_sandbox(ctx, ["true"])


@dataclass
class Oracle:
    """Only the oracle gets the solution folder mounted, read-only."""

    name: str = "oracle"

    def run(self, ctx: AgentContext) -> AgentRun:
        sol = ctx.bundle.solution_dir
        if (sol / "solve.patch").is_file():
            argv = ["git", "apply", "--whitespace=nowarn", f"{SOLUTION_MOUNT}/solve.patch"]
        elif (sol / "solve.sh").is_file():
            argv = ["sh", f"{SOLUTION_MOUNT}/solve.sh"]
        else:
            return AgentRun(status="infra_error",
                            detail=f"{sol}: no solve.patch or solve.sh for the oracle")
        # a copy readable by every user: the sandbox's users are not the host's root, and a
        # bundle checked out under umask 077 holds 0600 files a container's root would read
        with tempfile.TemporaryDirectory(prefix="assay-solution-") as tmp:
            copy = Path(tmp) / "solution"
            shutil.copytree(sol, copy, symlinks=True)
            readable_by_all(copy)
            return run_in_agent_sandbox(ctx, argv, [Mount(copy, SOLUTION_MOUNT)])


@dataclass
class Command:
    command: str
    name: str = "command"

    def run(self, ctx: AgentContext) -> AgentRun:
        """The command, told where it may write its own ATIF trajectory (``ASSAY_ATIF_PATH``),
        which is kept and checked once it ended (``agents/atif_file.py``)."""
        run = run_in_agent_sandbox(ctx, ["sh", "-c", self.command], env=ATIF_ENV)
        return collect_agent_atif(ctx, run)
