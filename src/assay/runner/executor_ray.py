"""``--executor ray``: each attempt's stages in a Ray task, on whichever node has room for it.

What stays on the driver: the state database (one writer), the gateway (one ledger per
attempt, one budget for the run, the only copy of the real key), the schedule and every
decision about a result. What goes to the worker: one attempt's ``run_trial`` (prepare → agent
→ freeze → verify, the sandbox and its model-proxy forwarder on that node), the task bundle
(through the object store, once per task), the arm's agent spec, the attempt's own gateway
token and the driver's address. The worker's hooks call the driver back before each stage
(``runner/executor_channel.py``), so the transitions are committed before their action as in a
local run, and the gateway's usage is read at the same moment.

Files: **shared_fs** is the transfer implemented. The worker writes the attempt directory
itself, at the same absolute path, so the run directory must be on a file system every worker
mounts at the driver's path (NFS, a cluster volume; on one machine, trivially). The worker
checks that it sees the run's ``manifest.json`` with this experiment's identity before it does
anything; where it does not, the attempt is an ``infra_error`` that says so. Carrying the
attempt's files back through the object store (for clusters without a shared file system) is
not implemented; the manifest's ``executor.transfer`` says which one a session used.

Lost workers: each task is submitted with ``max_retries=0``, so Ray never re-runs an attempt
behind the state database's back. When a task fails because its worker process or its node
died (or its result object was lost), :meth:`RayExecutor.run` returns a ``worker_lost``
result with Ray's error text and the node, and the scheduler closes the attempt as
``infra_error`` (reason ``worker_lost: …``) and schedules a new one within ``retries.infra``.
The lost worker's secret is revoked first, so a worker that was only cut off can no longer
move, freeze or grade the attempt it was written off for.

Ray is imported only here, and this module only with ``--executor ray``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from assay.agents import parse_agent
from assay.errors import InputError
from assay.records.io import atomic_write_json
from assay.records.manifest import utc_now
from assay.records.placement import PLACEMENT_JSON, Placement
from assay.runner.executor import WORKER_LOST, TrialJob
from assay.runner.executor_channel import ChannelServer, RemoteHooks, call
from assay.runner.trial import TrialHooks, TrialResult, run_trial
from assay.suites.bundle import Bundle

TRANSFER = "shared_fs"


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors that mean the attempt's process or node is gone (not that it failed)."""
    from ray import exceptions as rx

    return tuple(getattr(rx, name) for name in (
        "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
        "OutOfMemoryError", "RaySystemError") if hasattr(rx, name))


class RayExecutor:
    """Attempts as Ray tasks on a running cluster (``address``: ``auto``, ``HOST:PORT`` or
    ``ray://HOST:PORT``); ``gateway_host`` is the address the workers reach the driver at
    (default: the driver's node address as Ray sees it)."""

    kind = "ray"

    def __init__(self, *, address: str, gateway_host: str | None = None) -> None:
        import ray

        self.address = address
        # Ray's core worker installs its own SIGTERM handler (it logs and exits); the runner's
        # (SIGTERM as an interrupt: tasks cancelled, exit 130, resumable) is put back after it.
        handlers = _python_handlers()
        # a caller (a notebook) already connected keeps its connection: used, never shut down
        self._owns_ray = not ray.is_initialized()
        try:
            if self._owns_ray:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"--ray-address {address}: cannot join a Ray cluster: "
                             f"{type(exc).__name__}: {exc}") from None
        finally:
            _restore(handlers)
        self.ray_version = ray.__version__
        self.driver_ip = ray.util.get_node_ip_address()
        self.gateway_host = gateway_host or self.driver_ip
        try:
            self.channel = ChannelServer(self.gateway_host)
        except OSError as exc:
            if self._owns_ray:
                ray.shutdown()
            raise InputError(f"--gateway-host {self.gateway_host}: cannot listen there: "
                             f"{exc}") from None
        self._remote = ray.remote(_remote_attempt)
        self._bundles: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._lost = _lost_errors()
        self._inflight: set[Any] = set()
        self._interrupted = threading.Event()
        self.nodes_at_start = sum(1 for n in ray.nodes() if n.get("Alive"))

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "ray_version": self.ray_version,
                "transfer": TRANSFER, "driver_ip": self.driver_ip,
                "gateway_host": self.gateway_host, "nodes_at_start": self.nodes_at_start,
                "channel": self.channel.url}

    def _bundle_ref(self, bundle: Bundle) -> Any:
        import ray

        with self._lock:
            if bundle.spec_sha256 not in self._bundles:
                self._bundles[bundle.spec_sha256] = ray.put(bundle)
            return self._bundles[bundle.spec_sha256]

    def run(self, job: TrialJob, hooks: TrialHooks) -> TrialResult:
        import ray
        from ray.exceptions import RayTaskError

        placed: dict[str, Any] = {}

        def on_started(info: dict[str, Any]) -> None:
            placed.update(_placement(info))
            _save(job.trial_dir, placed)

        secret = self.channel.register(hooks, on_started)
        try:
            res = job.bundle.spec.resources
            options = {"num_cpus": res.cpu_cores, "memory": res.memory_limit_mib * 2**20,
                       "max_retries": 0, "retry_exceptions": False,
                       "name": f"assay {job.trial_id} a{job.attempt}"}
            cfg = {"model_env": dict(hooks.model_env), "proxy": hooks.proxy,
                   "grace_seconds": hooks.grace_seconds,
                   "verifier_revision": hooks.verifier_revision}
            run_dir = job.trial_dir.parents[4]  # trials/<task>/<arm>/<rep>/<attempt>
            ref = self._remote.options(**options).remote(
                self._bundle_ref(job.bundle), job.agent, str(job.trial_dir), job.rep,
                job.attempt, job.trial_id, str(run_dir), _identity_of(run_dir),
                self.channel.url, secret, cfg)
            with self._lock:
                self._inflight.add(ref)
            try:
                out = ray.get(ref)
            except Exception as exc:
                if self._interrupted.is_set():  # cancelled by interrupt(): record nothing
                    raise KeyboardInterrupt from None
                cause = getattr(exc, "cause", None) if isinstance(exc, RayTaskError) else exc
                if isinstance(cause, self._lost):
                    return self._lost_result(job, cause, placed, secret)
                if isinstance(cause, Exception):  # the attempt's own code raised: as locally
                    raise cause from None
                raise
            finally:
                with self._lock:
                    self._inflight.discard(ref)
        finally:
            self.channel.unregister(secret)
        return TrialResult(job.trial_dir, out["status"], out["grade"], out["record"])

    def _lost_result(self, job: TrialJob, exc: BaseException, placed: dict[str, Any],
                     secret: str) -> TrialResult:
        self.channel.unregister(secret)  # before anyone reads the attempt's last state
        text = " ".join(str(exc).split())
        where = (f" on node {placed['node_id'][:12]} ({placed['node_ip']})" if placed
                 else " before it reported in")
        evidence = f"{type(exc).__name__}{where}: {text}"[:480]
        if placed:
            placed.update(lost_at=utc_now(), lost_error=evidence)
            _save(job.trial_dir, placed)
        return TrialResult(job.trial_dir, WORKER_LOST, None,
                           {"error": f"{WORKER_LOST}: {evidence}"})

    def interrupt(self) -> None:
        import ray

        self._interrupted.set()
        with self._lock:
            refs = list(self._inflight)
        for ref in refs:  # force: the worker process ends, and its sandbox with it
            ray.cancel(ref, force=True)

    def close(self) -> None:
        import ray

        self.channel.close()
        if self._owns_ray:
            ray.shutdown()


def _python_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


def _identity_of(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text()).get("identity_sha256")
    except (OSError, ValueError):
        return None


def _placement(info: dict[str, Any]) -> dict[str, Any]:
    return {"schema": Placement.schema_id(), "executor": "ray", "transfer": TRANSFER,
            "node_id": str(info.get("node_id")), "node_ip": str(info.get("node_ip")),
            "hostname": str(info.get("hostname")), "worker_pid": int(info.get("pid") or 0),
            "started_at": str(info.get("started_at"))}


def _save(trial_dir: Path, data: dict[str, Any]) -> None:
    path = trial_dir / PLACEMENT_JSON
    trial_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, Placement.read(data, path).model_dump(mode="json", by_alias=True))


def _remote_attempt(bundle: Bundle, agent: str, trial_dir: str, rep: int, attempt: int,
                    trial_id: str, run_dir: str, identity: str | None, url: str, secret: str,
                    cfg: dict[str, Any]) -> dict[str, Any]:
    """The Ray task: report in, check the run directory is shared, run the trial's stages."""
    import ray

    seen = _identity_of(Path(run_dir))
    node = ray.get_runtime_context().get_node_id()
    call(url, secret, "started", {"node_id": node, "node_ip": ray.util.get_node_ip_address(),
                                  "hostname": socket.gethostname(), "pid": os.getpid(),
                                  "started_at": utc_now()})
    if identity is None or seen != identity:
        return {"status": "infra_error", "grade": None, "record": {
            "error": f"the run directory {run_dir} is not visible on node {node[:12]} "
                     f"({socket.gethostname()}): --executor ray writes each attempt over a "
                     "shared file system mounted at the driver's path (transfer shared_fs)"}}
    hooks = RemoteHooks(url, secret, **cfg)
    res = run_trial(bundle, parse_agent(agent), Path(trial_dir), rep=rep, attempt=attempt,
                    hooks=hooks, trial_id=trial_id)
    return {"status": res.status, "grade": res.grade, "record": res.record}


__all__ = ["TRANSFER", "RayExecutor"]
