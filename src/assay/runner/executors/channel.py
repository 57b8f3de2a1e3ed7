"""The way back from a remote attempt to the driver: its hooks, called over HTTP.

An attempt on a Ray worker runs the same ``run_trial`` as a local one, and its stages still
have to be announced to the one state database before they happen (``running`` before the
agent, ``freezing`` before the freeze, ``verifying`` once the artifact is complete) and still
need the gateway's usage when the agent ends. Both live in the driver's process, so the
worker's hooks (:class:`RemoteHooks`) call the driver's (:class:`ChannelServer`) and wait for
the answer: a transition is committed on the driver before the worker goes on, exactly as
locally.

Each attempt gets its own random secret, registered before its task is submitted and removed
when the driver has recorded its end. A call with an unknown secret is refused (403), so a
worker the driver has already written off (``worker_lost``) can never move, freeze or grade
that attempt afterwards. The secret is a Python value of the worker process: the sandboxed
agent never sees it (its environment is built from the model variables alone).

With ``transfer: object_store`` (no shared file system) one more call carries files: before
it announces ``verifying``, the worker posts the attempt directory as it stands (the frozen
artifact, ``trial.json``, the agent's logs) as a tar (``files``), and the driver unpacks it into
the run directory (``runner/executors/ray_transfer.py``) before it answers. The driver then holds
the artifact the moment the attempt is ``verifying``: a node lost while verifying is graded on the
driver, and the frozen artifact is never run again, exactly as with a shared file system.

A plain ``http.server`` on a thread: a handful of small calls per attempt, minutes apart.
"""

from __future__ import annotations

import json
import secrets
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from assay.errors import TransportError
from assay.models.json_reply import send_json
from assay.runner.executors.ray_transfer import changed_since, files_of, pack
from assay.runner.trial import TrialHooks

_TIMEOUT_SECONDS = 120.0
_MAX_BODY = 16 * 1024 * 1024
#: a frozen artifact may be large; it is spooled to disk past 64 MiB, never held whole
_MAX_FILES_BODY = 64 * 1024**3
_SPOOL = 64 * 1024 * 1024


class _Registered:
    def __init__(self, hooks: TrialHooks, on_started: Callable[[dict[str, Any]], None],
                 on_files: Callable[[IO[bytes]], None] | None) -> None:
        self.hooks = hooks
        self.on_started = on_started
        self.on_files = on_files


class ChannelServer:
    """The driver's end: one server per run, one registration per attempt in flight."""

    def __init__(self, host: str) -> None:
        self._attempts: dict[str, _Registered] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                server._handle(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="assay-executor-channel", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.socket.getsockname()[:2]  # an AF_INET (host, port)
        return f"http://{host}:{port}"

    def register(self, hooks: TrialHooks, on_started: Callable[[dict[str, Any]], None],
                 on_files: Callable[[IO[bytes]], None] | None = None) -> str:
        """``on_files`` receives a tar the worker posts (object_store); None refuses one."""
        secret = secrets.token_urlsafe(32)
        with self._lock:
            self._attempts[secret] = _Registered(hooks, on_started, on_files)
        return secret

    def unregister(self, secret: str) -> None:
        """From now on the attempt's worker is refused; waits for a call in progress, so the
        caller reads the attempt's state after the last transition it will ever see."""
        with self._lock:
            self._attempts.pop(secret, None)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        parts = req.path.strip("/").split("/")
        length = int(req.headers.get("Content-Length") or 0)
        if len(parts) == 2 and parts[1] == "files" and length <= _MAX_FILES_BODY:
            return self._files(req, parts[0], length)
        if len(parts) != 2 or length > _MAX_BODY:
            return send_json(req, 404, {"error": "no such call"})
        secret, op = parts
        try:
            payload = json.loads(req.rfile.read(length) or b"{}")
        except ValueError:
            return send_json(req, 400, {"error": "the body is not JSON"})
        # The lock is held through the hook: unregister() then waits for a transition in
        # progress, and none can start after it.
        with self._lock:
            reg = self._attempts.get(secret)
            if reg is None:
                return send_json(req, 403, {"error": "this attempt is closed or unknown"})
            try:
                if op == "started":
                    reg.on_started(payload)
                    return send_json(req, 200, {})
                if op == "before":
                    reg.hooks.before(str(payload["stage"]))
                    return send_json(req, 200, {})
                if op == "after_agent":
                    return send_json(req, 200, {"execution": reg.hooks.after_agent(
                        payload["execution"])})
            except Exception as exc:  # noqa: BLE001 - the worker learns why, the run goes on
                return send_json(req, 409, {"error": f"{type(exc).__name__}: {exc}"[:1000]})
        return send_json(req, 404, {"error": f"no call {op!r}"})

    def _files(self, req: BaseHTTPRequestHandler, secret: str, length: int) -> None:
        with self._lock:  # a closed attempt's upload is refused before it is read
            known = secret in self._attempts
        if not known:
            return send_json(req, 403, {"error": "this attempt is closed or unknown"})
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as body:
            left = length
            while left:
                chunk = req.rfile.read(min(left, 1 << 20))
                if not chunk:
                    return send_json(req, 400, {"error": "the body ended early"})
                body.write(chunk)
                left -= len(chunk)
            body.seek(0)
            with self._lock:
                reg = self._attempts.get(secret)
                if reg is None or reg.on_files is None:
                    return send_json(req, 403, {"error": "this attempt takes no files"})
                try:
                    reg.on_files(body)
                except Exception as exc:  # noqa: BLE001 - the worker learns why
                    return send_json(req, 409, {"error": f"{type(exc).__name__}: {exc}"[:1000]})
        return send_json(req, 200, {})


def call(url: str, secret: str, op: str, payload: dict[str, Any] | bytes) -> dict[str, Any]:
    """The worker's end: one call, its answer, or ``TransportError`` saying why not; bytes
    are posted as they are (a tar for ``files``)."""
    raw = isinstance(payload, bytes)
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    kind = "application/x-tar" if raw else "application/json"
    request = urllib.request.Request(f"{url}/{secret}/{op}", data=body, method="POST",
                                     headers={"Content-Type": kind})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read()).get("error")
        except ValueError:
            why = None
        raise TransportError(f"the driver refused {op!r} ({exc.code}): {why}") from None
    except (OSError, ValueError) as exc:
        raise TransportError(f"the driver's channel {url} is unreachable for {op!r}: "
                             f"{type(exc).__name__}: {exc}") from None


class RemoteHooks(TrialHooks):
    """The worker's hooks: the driver's decisions, asked for at the same points."""

    def __init__(self, url: str, secret: str, *, model_env: dict[str, str], proxy: Any,
                 grace_seconds: float, verifier_revision: str | None,
                 agent_files: str | None = None, ship_from: Path | None = None,
                 before_ship: Callable[[], None] | None = None) -> None:
        """``ship_from``: the worker's private attempt directory (object_store), posted to
        the driver before ``verifying`` is announced; ``before_ship`` readies it (paths)."""
        super().__init__()
        self.url, self.secret = url, secret
        self.model_env = dict(model_env)
        self.proxy = proxy
        self.grace_seconds = grace_seconds
        self.verifier_revision = verifier_revision
        self.agent_files = None if agent_files is None else Path(agent_files)
        self.ship_from, self.before_ship = ship_from, before_ship
        #: what the ``files`` call carried (path: size, mtime), so the end sends only the rest
        self.shipped: dict[str, tuple[int, int]] = {}

    def before(self, stage: str) -> None:
        if stage == "verify" and self.ship_from is not None:
            if self.before_ship is not None:
                self.before_ship()
            self.shipped = files_of(self.ship_from)
            call(self.url, self.secret, "files", pack(self.ship_from, self.shipped))
        call(self.url, self.secret, "before", {"stage": stage})

    def unshipped(self) -> list[str]:
        """The attempt's files the driver does not have yet (new or changed since
        ``files``; all of them when nothing was shipped)."""
        assert self.ship_from is not None
        return changed_since(self.ship_from, self.shipped)

    def after_agent(self, execution: dict[str, Any]) -> dict[str, Any]:
        return call(self.url, self.secret, "after_agent", {"execution": execution})["execution"]


__all__ = ["ChannelServer", "RemoteHooks", "call"]
