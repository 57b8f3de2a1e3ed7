"""``network="model-proxy"``: the sandbox reaches one model gateway on the host and nothing else.

What the sandbox gets::

    command ──tcp──> 127.0.0.1:<port>  (the sandbox's own loopback, in its own network namespace)
                       forwarder (python3, inside the sandbox's namespaces)
                         ──> /run/assay-proxy/gateway.sock  (one socket file, bound read-only)
                               ──> the gateway's Unix socket, or the host relay thread
                                     (:mod:`assay.sandbox.relay`) ──tcp──> the gateway

Why this is "the gateway and nothing else": the network namespace is bubblewrap's
``--unshare-net`` one (a loopback interface and no route anywhere, no DNS: ``/etc/resolv.conf``
is empty); abstract Unix sockets are per network namespace, so the host's are out of reach too;
the only way out of the namespace is the one socket file bound in, and its other end is fixed on
the host before the sandbox starts. Whatever the command does (kill the forwarder, connect to the
socket itself, bind other ports) it can reach only the gateway, or break only its own access.

Lifecycle: :func:`start_proxy` runs before bubblewrap (relay thread, the status pipe);
:mod:`assay.sandbox.forwarder`'s launcher is the first program in the sandbox, listens before it
reports ready and ``exec``-s the command after, so the command's first connection cannot race
the forwarder. The forwarder is a process of the sandbox's PID namespace, so it dies with the
sandbox; the relay is stopped by :meth:`ProxySession.close` before ``run_sandboxed`` returns.
The launcher's verdict arrives on a pipe only it can write to (close-on-exec); anything but a
clean hand-over is a ``sandbox_error`` (:meth:`ProxySession.failure`).

Costs: one python3 start per execution (~15-30 ms) and the forwarder's memory (~10 MiB,
counted in the execution's memory limit). Its process is added to the ``pids`` budget (the
record's note says so), but starting it needs one short-lived process more, so ``pids=1`` is a
``sandbox_error``. Added latency per request: ``bench/proxy_overhead.py``.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import SandboxFailed
from assay.sandbox.bwrap import DEFAULT_PATH, Mount
from assay.sandbox.forwarder import (
    EXEC_FAILED,
    FAILED,
    MAX_CONNECTIONS_ARG,
    READY,
    REFUSED,
    REPORT_FD_ARG,
)
from assay.sandbox.relay import Relay

#: Where the gateway's socket appears inside the sandbox.
SANDBOX_PROXY_SOCKET = "/run/assay-proxy/gateway.sock"
#: The sandbox-side port when the caller does not choose one.
DEFAULT_PROXY_PORT = 8080
#: Ports below this need a capability the sandbox does not have.
_MIN_PORT = 1024
_FORWARDER_SOURCE: str | None = None


@dataclass(frozen=True)
class ProxyTarget:
    """Where the gateway listens on the host, and where the sandbox sees it.

    Exactly one of ``unix_socket`` (the gateway listens there itself: no relay, one hop less) and
    ``tcp`` (``(host, port)``; a relay thread carries the sandbox's connections there). Inside the
    sandbox the gateway is ``http://127.0.0.1:<port>`` (:attr:`base_url`); the caller sets the
    agent's ``OPENAI_BASE_URL`` from it. ``name`` only labels the record."""

    unix_socket: Path | None = None
    tcp: tuple[str, int] | None = None
    port: int = DEFAULT_PROXY_PORT
    name: str = "gateway"
    #: the most connections the forwarder relays at once (the attempt's connection limit at
    #: the gateway); one past it is closed inside the sandbox. None: no limit of its own.
    max_connections: int | None = None

    def __post_init__(self) -> None:
        if (self.unix_socket is None) == (self.tcp is None):
            raise ValueError("ProxyTarget needs exactly one of unix_socket and tcp")
        if self.tcp is not None:
            host, port = self.tcp
            if not isinstance(host, str) or not host or not isinstance(port, int) or not (
                0 < port < 65536
            ):
                raise ValueError(f"tcp must be (host, port), not {self.tcp!r}")
        if not isinstance(self.port, int) or not _MIN_PORT <= self.port < 65536:
            raise ValueError(f"port must be an int in {_MIN_PORT}..65535 (the sandbox user "
                             f"cannot bind lower ports), not {self.port!r}")
        if not self.name or not self.name.isprintable():
            raise ValueError("name must be a non-empty printable string")
        if self.max_connections is not None and (
                not isinstance(self.max_connections, int) or self.max_connections < 1):
            raise ValueError(f"max_connections must be a positive int, not "
                             f"{self.max_connections!r}")

    @property
    def base_url(self) -> str:
        """The gateway's address as the command sees it."""
        return f"http://127.0.0.1:{self.port}"

    def describe(self) -> str:
        if self.tcp is not None:
            return f"tcp {self.tcp[0]}:{self.tcp[1]}"
        return f"unix {self.unix_socket}"


def forwarder_source() -> str:
    """The text of :mod:`assay.sandbox.forwarder`, run by ``python3 -c`` in the sandbox."""
    global _FORWARDER_SOURCE
    if _FORWARDER_SOURCE is None:
        _FORWARDER_SOURCE = (Path(__file__).parent / "forwarder.py").read_text(encoding="utf-8")
    return _FORWARDER_SOURCE


def sandbox_python() -> str | None:
    """The system python3 the sandbox can run (it sees the host's /usr)."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3"
    found = shutil.which("python3", path=DEFAULT_PATH)
    if found and os.path.realpath(found).startswith(("/usr/", "/bin/")):
        return found
    return None


class ProxySession:
    """One execution's model proxy: relay (if any), the bound socket, the launcher and its
    status pipe. Create with :func:`start_proxy`; always :meth:`close`."""

    def __init__(self, target: ProxyTarget, python: str, socket_path: Path,
                 relay: Relay | None) -> None:
        self.target = target
        self.python = python
        self.socket_path = socket_path
        self.relay = relay
        self.status = ""
        self.handed_over = False
        self.forwarder = "not started"
        self.refused_claim: int | None = None
        self._closed = False

    def mount(self) -> Mount:
        return Mount(source=self.socket_path, target=SANDBOX_PROXY_SOCKET)

    def launcher_argv(self, argv: tuple[str, ...], status_fd: int,
                      report_fd: int | None = None) -> list[str]:
        """The command bubblewrap runs: the launcher, which becomes ``argv``. ``status_fd`` is
        the write end of the launcher's status pipe, passed into the sandbox; ``report_fd``
        the forwarder's own pipe for the connections it refused."""
        options = []
        if self.target.max_connections is not None:
            options.append(f"{MAX_CONNECTIONS_ARG}{self.target.max_connections}")
        if report_fd is not None:
            options.append(f"{REPORT_FD_ARG}{report_fd}")
        return [self.python, "-I", "-S", "-c", forwarder_source(), SANDBOX_PROXY_SOCKET,
                str(self.target.port), str(status_fd), *options, "--", *argv]

    def read_report(self, data: bytes) -> None:
        """The forwarder's last ``refused: N`` line: how many connections it closed past its
        limit (at least: it writes at most once a second). Written inside the sandbox, so a
        claim; a line that is not a count is ignored."""
        for line in data.decode("ascii", errors="replace").splitlines()[-50:]:
            word = line[len(REFUSED):].strip() if line.startswith(REFUSED) else ""
            if word.isdigit() and len(word) < 13:
                self.refused_claim = max(self.refused_claim or 0, int(word))

    def failure(self, status: bytes) -> str | None:
        """Why the command never ran, or ``None`` when the launcher handed over to it.
        ``status`` is everything the launcher wrote to its status pipe."""
        self.status = status.decode("utf-8", errors="replace")
        lines = self.status.splitlines()
        if READY in lines:
            self.forwarder = "ready"
        for line in lines:
            if line.startswith(FAILED):
                self.forwarder = line
                return "model-proxy forwarder did not start: " + line[len(FAILED):].strip()
            if line.startswith(EXEC_FAILED):
                return "the command could not be executed: " + line[len(EXEC_FAILED):].strip()
        if READY in lines:
            self.handed_over = True
            return None
        return "model-proxy launcher never reported that the forwarder was ready"

    def record(self) -> dict[str, Any]:
        """``ExecResult.network_applied``: what the command could reach, by which path."""
        t = self.target
        hops = [f"forwarder ({self.python}, in the sandbox's network namespace)",
                f"Unix socket {SANDBOX_PROXY_SOCKET} (one socket file, bound read-only)"]
        if self.relay is not None:
            hops.append("host relay thread")
        hops.append(t.describe())
        rec: dict[str, Any] = {
            "network": "model-proxy",
            "reachable": [f"127.0.0.1:{t.port} → {t.name}"] if self.handed_over else [],
            "gateway": t.describe(),
            "path": " → ".join(hops),
            "isolation": "own network namespace: loopback only, no route, no DNS",
            "forwarder": self.forwarder,
            "command_started": self.handed_over,
        }
        if self.target.max_connections is not None:
            rec["forwarder_max_connections"] = self.target.max_connections
            # the forwarder runs in the agent's sandbox: its count is a claim (the gateway's
            # own refusals are its events); unknown stays unknown
            rec["forwarder_refused_claim"] = self.refused_claim or 0 if self.handed_over \
                else None
        if self.relay is not None:  # only the relay can count; unknown stays unknown
            rec["connections"] = self.relay.connections
            rec["upstream_failures"] = self.relay.upstream_failures
        return rec

    def close(self) -> list[str]:
        """Stop the relay (if any). Returns warnings."""
        if self.relay is None or self._closed:
            return []
        self._closed = True
        return self.relay.close()


def read_available(fd: int) -> bytes:
    """Everything readable on ``fd`` now, without waiting (its writers are gone by then)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def open_to_sandbox(socket_path: Path) -> None:
    """Let every user connect to the socket (connecting needs write permission on it): the
    sandbox's user is not the host's root when ids are mapped (:mod:`assay.sandbox.userns`).
    Who else on the host can reach it is up to its folder (the relay's is private)."""
    try:
        mode = os.stat(socket_path).st_mode
        if mode & 0o666 != 0o666:
            os.chmod(socket_path, 0o666)
    except OSError as exc:
        raise SandboxFailed(f"gateway socket {socket_path}: {exc.strerror or exc}") from exc


def start_proxy(target: ProxyTarget) -> ProxySession:
    """Everything the host needs before the sandbox starts. Raises :class:`SandboxFailed` with
    a readable reason when the proxy cannot be set up (the execution is then a sandbox_error)."""
    python = sandbox_python()
    if python is None:
        raise SandboxFailed("model-proxy needs the system python3 (/usr/bin/python3) for its "
                            "forwarder; none found")
    if target.unix_socket is not None:
        path = Path(target.unix_socket).absolute()
        try:
            is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
        except OSError as exc:
            raise SandboxFailed(f"gateway socket {path}: {exc.strerror or exc}") from exc
        if not is_socket:
            raise SandboxFailed(f"gateway socket {path} is not a socket")
        open_to_sandbox(path)
        return ProxySession(target, python, path, None)
    assert target.tcp is not None
    try:
        relay = Relay(target.tcp)
    except OSError as exc:
        raise SandboxFailed(f"cannot start the proxy relay to {target.describe()}: {exc}") from exc
    try:
        open_to_sandbox(relay.socket_path)
        return ProxySession(target, python, relay.socket_path, relay)
    except BaseException:
        relay.close()
        raise
