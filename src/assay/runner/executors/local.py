"""Where an experiment's attempts run: the seam between the scheduler and one trial's stages.

The scheduler (``runner/experiment.py``) owns the state database, the gateway and the retry
rules; an executor only carries one attempt's ``run_trial`` (prepare → agent → freeze → verify)
to wherever it runs and brings its result back. Two exist:

- ``local`` (the default): ``run_trial`` in the runner's own thread, exactly as before the seam;
- ``ray`` (``runner/executors/on_ray.py``, ``pip install 'assay[ray]'``): ``run_trial`` in a Ray
  task on some node of a Ray cluster, its hooks (the state transitions, the gateway's usage) carried
  back to the driver over a small authenticated channel (``runner/executors/channel.py``).

An executor never decides what a result means and never retries: a worker or node lost
mid-attempt comes back as a :class:`TrialResult` with status ``worker_lost`` and its evidence,
and the scheduler records it like any infrastructure failure. The executor is not part of an
experiment's identity: a run started locally may resume on Ray and the other way round; each
session's ``executor`` entry in ``manifest.json`` says where that session ran.

Ray is imported only when ``--executor ray`` is asked for (:func:`make_executor`), so a local
run never loads it and an install without it works as before.
"""

from __future__ import annotations

from typing import Any

from assay.agents import parse_agent
from assay.errors import InputError
from assay.runner.executors.base import (
    EXECUTORS,
    RAY_TRANSFERS,
    WORKER_LOST,
    Executor,
    ExecutorKind,
    TrialJob,
)
from assay.runner.trial import TrialHooks, TrialResult, run_trial


class LocalExecutor:
    """The runner's own thread: ``run_trial`` called directly (the behaviour before Ray)."""

    kind: ExecutorKind = "local"

    def describe(self) -> dict[str, Any]:
        return {"kind": "local"}

    def run(self, job: TrialJob, hooks: TrialHooks) -> TrialResult:
        return run_trial(job.bundle, parse_agent(job.agent), job.trial_dir, rep=job.rep,
                         attempt=job.attempt, hooks=hooks, trial_id=job.trial_id)

    def interrupt(self) -> None:
        pass  # the attempts are this process's threads and their sandboxes its children

    def close(self) -> None:
        pass


def make_executor(kind: str, *, ray_address: str | None = None,
                  gateway_host: str | None = None,
                  ray_transfer: str | None = None) -> Executor:
    """The executor named ``kind``; ``ray`` connects to the cluster now, so a wrong address or
    a missing install is an ``InputError`` before any state is written. ``ray_transfer``
    (``shared_fs``, the default, ``object_store`` or ``auto``) is how a worker's files reach
    the run directory (``runner/executors/on_ray.py``)."""
    if kind == "local":
        if ray_address is not None:
            raise InputError("--ray-address is for --executor ray")
        if ray_transfer is not None:
            raise InputError("--ray-transfer is for --executor ray")
        return LocalExecutor()
    if kind == "ray":
        if ray_transfer is not None and ray_transfer not in RAY_TRANSFERS:
            raise InputError(f"--ray-transfer: {ray_transfer!r} is not one of "
                             f"{', '.join(RAY_TRANSFERS)}")
        try:
            import ray  # noqa: F401 - only to say clearly what is missing
        except ImportError:
            raise InputError("--executor ray needs Ray on the driver and every worker: "
                             "pip install 'assay[ray]'") from None
        from assay.runner.executors.on_ray import RayExecutor

        return RayExecutor(address=ray_address or "auto", gateway_host=gateway_host,
                           transfer=ray_transfer or "shared_fs")
    raise InputError(f"--executor: {kind!r} is not one of {', '.join(EXECUTORS)}")


__all__ = ["EXECUTORS", "RAY_TRANSFERS", "WORKER_LOST", "Executor", "LocalExecutor", "TrialJob",
           "make_executor"]
