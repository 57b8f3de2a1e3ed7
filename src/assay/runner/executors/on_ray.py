"""``--executor ray``: each attempt's stages in a Ray task, on whichever node has room for it.

What stays on the driver: the state database (one writer), the gateway (one ledger per
attempt, one budget for the run, the only copy of the real key), the schedule and every
decision about a result. What goes to the worker: one attempt's ``run_trial`` (prepare → agent
→ freeze → verify, the sandbox and its model-proxy forwarder on that node), the task bundle
(through the object store, once per task), the arm's agent spec, the attempt's own gateway
token and the driver's address. The worker's hooks call the driver back before each stage
(``runner/executors/channel.py``), so the transitions are committed before their action as in a
local run, and the gateway's usage is read at the same moment.

Files (``--ray-transfer``, the manifest's ``executor.transfer`` and each ``placement.json``):

- **shared_fs** (the default): the worker writes the attempt directory itself, at the same
  absolute path, so the run directory must be on a file system every worker mounts at the
  driver's path (NFS, a cluster volume; on one machine, trivially). The worker checks that it
  sees the run's ``manifest.json`` with this experiment's identity before it does anything;
  where it does not, the attempt is an ``infra_error`` that says so.
- **object_store**: the worker is never given the run directory. The driver puts a tar of the
  task bundle in Ray's object store once per bundle (Ray copies it to a node once); the worker
  unpacks it (once per worker process and bundle), runs the attempt in a private temporary
  directory and sends its files back (``runner/executors/ray_transfer.py``): the frozen attempt over
  the channel before ``verifying`` is announced, the rest (the grade, the final ``trial.json``) as
  the task's return value; the driver unpacks both into the attempt's directory. What the driver
  reads between callbacks (its own ``placement.json`` and gateway ledger, the artifact after a lost
  node) is therefore on the driver when it reads it. A worker lost before ``verifying`` sends
  nothing: its artifact, if it froze one, is gone, and the trial runs again.
- **auto**: shared_fs where the worker sees the run directory (the check above), object_store
  where it does not; each attempt's ``placement.json`` says which, and the manifest's
  ``executor.transfers_used`` lists the ones the session used.

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

import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from assay.agents import parse_agent
from assay.errors import ImageRefused, ImageUnavailable, InputError, TrialRefused
from assay.records.io import atomic_write_json
from assay.records.manifest import utc_now
from assay.records.placement import PLACEMENT_JSON, Placement
from assay.runner.executors.base import WORKER_LOST, ExecutorKind, TrialJob
from assay.runner.executors.channel import ChannelServer, RemoteHooks, call
from assay.runner.executors.ray_transfer import pack, unpack_into
from assay.runner.trial import TrialHooks, TrialResult, run_trial
from assay.suites.bundle import Bundle, load_bundle

TRANSFER = "shared_fs"
#: the prefixes of the worker's private directories (object_store): no record on the driver
#: may name them (tests/test_ray_executor.py looks)
ATTEMPT_PREFIX, BUNDLE_PREFIX = "assay-ray-attempt-", "assay-ray-bundle-"


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors that mean the attempt's process or node is gone (not that it failed)."""
    from ray import exceptions as rx

    return tuple(getattr(rx, name) for name in (
        "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
        "OutOfMemoryError", "RaySystemError") if hasattr(rx, name))


class RayExecutor:
    """Attempts as Ray tasks on a running cluster (``address``: ``auto``, ``HOST:PORT`` or
    ``ray://HOST:PORT``); ``gateway_host`` is the address the workers reach the driver at
    (default: the driver's node address as Ray sees it); ``transfer`` was checked by
    ``make_executor``, before Ray was imported."""

    kind: ExecutorKind = "ray"

    def __init__(self, *, address: str, gateway_host: str | None = None,
                 transfer: str = TRANSFER) -> None:
        import ray

        self.address, self.transfer = address, transfer
        self._used: list[str] = []  # the live ``transfers_used`` of describe()
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
        # ray's stubs type remote() for functions of at most 10 parameters (this one takes 14)
        self._remote = ray.remote(_remote_attempt)  # type: ignore[arg-type]
        self._bundles: dict[str, Any] = {}
        self._bundle_tars: dict[tuple[str, str], Any] = {}
        self._images: dict[str, dict[str, Any]] = {}  # digest -> the image's record and chunks
        self._sent: dict[str, dict[str, int]] = {}  # the live ``images_sent`` of describe()
        self._image_lock = threading.Lock()  # one image packed at a time, bundles go on
        self._lock = threading.Lock()
        self._lost = _lost_errors()
        self._inflight: set[Any] = set()
        self._interrupted = threading.Event()
        self.nodes_at_start = sum(1 for n in ray.nodes() if n.get("Alive"))

    def describe(self) -> dict[str, Any]:
        """The session's entry; ``transfers_used`` is this executor's own list, filled in as
        attempts report in, so the entry written when the session ends says what was used."""
        return {"kind": "ray", "address": self.address, "ray_version": self.ray_version,
                "transfer": self.transfer, "transfers_used": self._used,
                "driver_ip": self.driver_ip, "gateway_host": self.gateway_host,
                "nodes_at_start": self.nodes_at_start, "channel": self.channel.url,
                "images_sent": self._sent}

    def _bundle_tar_ref(self, bundle: Bundle) -> Any:
        """``[ref, sha256]``: the bundle as a tar in the object store, put once per bundle
        (spec digest and place) whatever the number of attempts, and its digest (the
        workers' cache key); Ray copies it to each node that asks, once."""
        import ray

        key = (bundle.spec_sha256, str(bundle.root.resolve()))
        with self._lock:
            if key not in self._bundle_tars:
                repo = (bundle.root / bundle.spec.initial_state.repository).resolve()
                if not repo.is_relative_to(bundle.root.resolve()):
                    raise TrialRefused(f"{bundle.root}: its starting tree {repo} is outside the "
                                       "bundle; --ray-transfer object_store ships the bundle "
                                       "directory alone")
                # the image's source stays behind when the image itself is sent (a worker
                # never builds it; an archive may be gigabytes)
                shipped = self._image_ship(bundle)
                source = bundle.spec.initial_state.environment.image
                data = pack(bundle.root, arcname="bundle", leave_out=source if shipped and
                            "problem" not in shipped else None)
                self._bundle_tars[key] = [ray.put(data), hashlib.sha256(data).hexdigest()]
            return self._bundle_tars[key]

    def _image_ship(self, bundle: Bundle) -> dict[str, Any] | None:
        """What a worker needs to run the task in the driver's image: the image's record and
        its chunks in the object store (put once per image for the session, each at most
        ``ship.CHUNK_BYTES``; Ray copies them to a node only when a worker there asks), or
        ``{"problem": why}`` when the driver cannot give it. None for a task on the host's
        system or pinned to a registry image (each worker pulls that by digest itself)."""
        import ray

        from assay.environments.run import ensure_image, registry_reference
        from assay.environments.ship import pack_image
        from assay.environments.store import ImageStore

        if bundle.spec.initial_state.environment.image is None or \
                registry_reference(bundle) is not None:
            return None
        try:
            image = ensure_image(bundle)  # the driver's store (built or imported here)
        except TrialRefused as exc:
            return {"problem": str(exc).removeprefix(f"{bundle.id}: ")}
        assert image is not None
        with self._image_lock:
            if image.digest not in self._images:
                try:
                    chunks, size = pack_image(ImageStore(), image, ray.put)
                except (ImageRefused, ImageUnavailable, OSError) as exc:
                    return {"problem": f"the driver cannot send the image {image.digest}: "
                                       f"{exc}"}
                self._images[image.digest] = {"image": image, "chunks": chunks, "bytes": size}
                self._sent[image.digest] = {"bytes": size, "chunks": len(chunks)}
            return self._images[image.digest]

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
            with self._lock:
                if placed["transfer"] not in self._used:
                    self._used.append(placed["transfer"])
                    self._used.sort()

        def on_files(body: IO[bytes]) -> None:
            unpack_into(body, job.trial_dir)

        secret = self.channel.register(hooks, on_started, on_files)
        try:
            res = job.bundle.spec.resources
            options = {"num_cpus": res.cpu_cores, "memory": res.memory_limit_mib * 2**20,
                       "max_retries": 0, "retry_exceptions": False,
                       "name": f"assay {job.trial_id} a{job.attempt}"}
            cfg = {"model_env": dict(hooks.model_env), "proxy": hooks.proxy,
                   "grace_seconds": hooks.grace_seconds,
                   "verifier_revision": hooks.verifier_revision,
                   # the arm's files: their copy in the run directory (shared_fs only)
                   "agent_files": None if hooks.agent_files is None else str(hooks.agent_files)}
            run_dir = job.trial_dir.parents[4]  # trials/<task>/<arm>/<rep>/<attempt>
            # object_store: the worker is never told where the run directory is; the bundle's
            # tar goes in a list so that Ray fetches it only where the worker asks for it
            see = None if self.transfer == "object_store" else str(run_dir)
            tar = self._bundle_tar_ref(job.bundle) if self.transfer != "shared_fs" else None
            image = self._image_ship(job.bundle)
            ref = self._remote.options(**options).remote(  # type: ignore[call-arg]  # as above
                self._bundle_ref(job.bundle), tar, str(job.bundle.root.resolve()), job.agent,
                str(job.trial_dir), job.rep, job.attempt, job.trial_id, see,
                _identity_of(run_dir), self.channel.url, secret, cfg, image)
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
            if out.get("files") is not None:  # object_store: what the driver lacks, now
                unpack_into(out["files"], job.trial_dir)
        finally:
            self.channel.unregister(secret)
        return TrialResult(job.trial_dir, out["status"], out["grade"], out["record"],
                           out.get("error"))

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
        return TrialResult(job.trial_dir, WORKER_LOST, None, None,
                           f"{WORKER_LOST}: {evidence}")

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
    return {"schema": Placement.schema_id(), "executor": "ray",
            "transfer": str(info.get("transfer") or TRANSFER),
            "node_id": str(info.get("node_id")), "node_ip": str(info.get("node_ip")),
            "hostname": str(info.get("hostname")), "worker_pid": int(info.get("pid") or 0),
            "started_at": str(info.get("started_at"))}


def _save(trial_dir: Path, data: dict[str, Any]) -> None:
    path = trial_dir / PLACEMENT_JSON
    trial_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, Placement.read(data, path).model_dump(mode="json", by_alias=True))


def _remote_attempt(bundle: Bundle, tar: list[Any] | None, driver_root: str, agent: str,
                    trial_dir: str, rep: int, attempt: int, trial_id: str, run_dir: str | None,
                    identity: str | None, url: str, secret: str,
                    cfg: dict[str, Any], image: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Ray task: choose the transfer (``run_dir`` None: object_store, never looked at;
    no ``tar``: shared_fs), report in, have the driver's image (``image``: see
    :func:`_have_image`), run the trial's stages."""
    import ray

    seen = _identity_of(Path(run_dir)) if run_dir is not None else None
    shared = run_dir is not None and identity is not None and seen == identity
    transfer = "shared_fs" if shared or tar is None else "object_store"
    node = ray.get_runtime_context().get_node_id()
    call(url, secret, "started", {"node_id": node, "node_ip": ray.util.get_node_ip_address(),
                                  "hostname": socket.gethostname(), "pid": os.getpid(),
                                  "started_at": utc_now(), "transfer": transfer})
    if transfer == "shared_fs" and not shared:
        return {"status": "infra_error", "grade": None, "record": None,
                "error": f"the run directory {run_dir} is not visible on node {node[:12]} "
                         f"({socket.gethostname()}): --ray-transfer shared_fs writes each "
                         "attempt over a shared file system mounted at the driver's path (use "
                         "--ray-transfer object_store or auto where there is none)"}
    if transfer == "shared_fs":
        if image is not None:
            _have_image(bundle, image, node)
        hooks = RemoteHooks(url, secret, **cfg)
        res = run_trial(bundle, parse_agent(agent), Path(trial_dir), rep=rep, attempt=attempt,
                        hooks=hooks, trial_id=trial_id)
        return {"status": res.status, "grade": res.grade, "record": res.record,
                "error": res.error}
    assert tar is not None
    local_bundle = _unpacked_bundle(tar[1], tar[0])
    if image is not None:
        _have_image(local_bundle, image, node)
    scratch = Path(tempfile.mkdtemp(prefix=ATTEMPT_PREFIX))
    try:
        private = scratch / "attempt"

        def driver_paths() -> None:
            _rewrite_task_path(private, driver_root)

        hooks = RemoteHooks(url, secret, **cfg, ship_from=private, before_ship=driver_paths)
        res = run_trial(local_bundle, parse_agent(agent), private, rep=rep, attempt=attempt,
                        hooks=hooks, trial_id=trial_id)
        driver_paths()
        record = res.record
        if record is not None:
            record = record.model_copy(update={"task": record.task.model_copy(
                update={"path": driver_root})})
        return {"status": res.status, "grade": res.grade, "record": record,
                "error": res.error, "files": pack(private, hooks.unshipped())}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _have_image(bundle: Bundle, ship: dict[str, Any], node: str) -> None:
    """Make the driver's image present in this node's store (``$ASSAY_CACHE_DIR``): found
    there, or fetched chunk by chunk from the object store, verified against its digest and
    placed (``environments/ship.py``); one worker process of a node fetches it while the
    others wait for the store's lock and then find it. Whatever happens is handed to
    ``environments.run`` for this bundle, so the trial runs in exactly that image or is an
    ``infra_error`` naming the image and the reason: never in an image built here."""
    import ray
    from ray.exceptions import RayError

    from assay.environments.run import run_in_given_image
    from assay.environments.ship import receive_image
    from assay.environments.store import ImageStore

    if "problem" in ship:
        run_in_given_image(bundle, "", ship["problem"])
        return
    image = ship["image"]
    store = ImageStore()
    where = f"node {node[:12]} ({socket.gethostname()})"
    problem = None
    try:
        if store.get(image.digest) is None:
            with store.source_lock(image.source_kind, image.source_digest):
                receive_image(store, image, (ray.get(ref) for ref in ship["chunks"]))
    except RayError as exc:
        text = " ".join(str(exc).split())[:300]
        problem = (f"the image {image.digest} could not be fetched from the driver's store "
                   f"through Ray's object store to {where}: {type(exc).__name__}: {text}")
    except (ImageRefused, ImageUnavailable, OSError) as exc:
        problem = f"the image {image.digest} could not be placed on {where}: {exc}"
    run_in_given_image(bundle, image.digest, problem)


#: this worker process's unpacked bundles by their tar's digest (a Ray worker process runs
#: many attempts); removed when the process exits normally
_UNPACKED: dict[str, Bundle] = {}
_UNPACK_LOCK = threading.Lock()


def _unpacked_bundle(digest: str, tar: Any) -> Bundle:
    import ray

    with _UNPACK_LOCK:
        if digest not in _UNPACKED or not _UNPACKED[digest].root.is_dir():
            data = ray.get(tar)
            if hashlib.sha256(data).hexdigest() != digest:
                raise TrialRefused("the task bundle's tar from the object store does not match "
                                   "its digest")
            where = Path(tempfile.mkdtemp(prefix=BUNDLE_PREFIX))
            atexit.register(shutil.rmtree, where, True)
            unpack_into(data, where / "x")
            _UNPACKED[digest] = load_bundle(where / "x" / "bundle")
        return _UNPACKED[digest]


def _rewrite_task_path(trial_dir: Path, driver_root: str) -> None:
    """``trial.json`` names the bundle it ran: the driver's copy, not the worker's."""
    path = trial_dir / "trial.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(record.get("task"), dict):
        record["task"]["path"] = driver_root
        atomic_write_json(path, record)


__all__ = ["ATTEMPT_PREFIX", "BUNDLE_PREFIX", "TRANSFER", "RayExecutor"]
