"""The seam between the scheduler and an executor: what an attempt's job is, what an executor
must do, and the status of a lost worker.

Apart from the executors themselves (``executor``: the local one and the choice between them;
``executor_ray``), so the Ray executor builds on the seam without importing the module that
chooses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol, get_args

from assay.runner.trial import TrialHooks, TrialResult
from assay.suites.bundle import Bundle

#: ``--executor``: where an attempt's stages run.
ExecutorKind = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorKind, ...] = get_args(ExecutorKind)
#: ``--ray-transfer``: how a Ray worker's files reach the run directory (executor_ray.py)
RAY_TRANSFERS = ("shared_fs", "object_store", "auto")
#: The status of a :class:`TrialResult` whose worker or node died under it.
WORKER_LOST: Final = "worker_lost"


@dataclass(frozen=True)
class TrialJob:
    """One attempt's trial, as the scheduler hands it to an executor."""

    bundle: Bundle
    agent: str
    """The arm's agent spec (parsed where the attempt runs)."""
    trial_dir: Path
    """The attempt's directory on the driver (absolute: with ``shared_fs`` a Ray worker
    writes it over the shared file system; with ``object_store`` the driver unpacks what the
    worker sends back into it)."""
    rep: int
    attempt: int
    trial_id: str


class Executor(Protocol):
    """Runs one attempt's stages somewhere and returns their result; ``describe`` is the
    session's ``executor`` entry in ``manifest.json``."""

    kind: ExecutorKind

    def describe(self) -> dict[str, Any]: ...

    def run(self, job: TrialJob, hooks: TrialHooks) -> TrialResult: ...

    def interrupt(self) -> None:
        """The runner is being stopped (Ctrl-C, SIGTERM): end the attempts in flight without
        recording anything, so the next session finds them running and closes them as
        ``interrupted`` (``runner_restart``), as after a local interrupt."""

    def close(self) -> None: ...
