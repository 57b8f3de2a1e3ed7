"""The host side of ``network="model-proxy"`` for a gateway that only listens on TCP.

A thread in the caller's process accepts on a Unix socket in a private (0700) temporary directory
and splices every connection to the gateway's one TCP address (:class:`assay.sandbox.forwarder.
Splicer`). The socket file alone is bound into the sandbox, so the sandbox can ask this relay for
a connection but never choose where it goes: the destination is fixed here, on the host, before
the sandbox exists. One relay per execution, stopped (thread joined, every connection closed,
directory removed) before ``run_sandboxed`` returns, so nothing of it outlives the run.

Being a thread, its latency depends on the caller's GIL: a caller that burns CPU in Python in
other threads adds up to a switch interval (5 ms by default) per hop. ``bench/proxy_overhead.py``
measures the usual case.
"""

from __future__ import annotations

import itertools
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from assay.sandbox.forwarder import BACKLOG, Splicer, tcp_connector

#: ``sockaddr_un`` holds 108 bytes; a longer TMPDIR falls back to /tmp.
_MAX_SOCKET_PATH = 100
_JOIN_SECONDS = 15.0
_ids = itertools.count(1)


class Relay:
    """A running relay from :attr:`socket_path` to ``gateway``; :meth:`close` stops it."""

    def __init__(self, gateway: tuple[str, int]) -> None:
        self.gateway = gateway
        base = tempfile.gettempdir()
        if len(base) > _MAX_SOCKET_PATH - 40:
            base = "/tmp"
        self.directory = Path(tempfile.mkdtemp(prefix="assay-proxy-", dir=base))
        self.socket_path = self.directory / "gateway.sock"
        self.error: str | None = None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._wake_r, self._wake_w = socket.socketpair()
        try:
            listener.bind(str(self.socket_path))
            listener.listen(BACKLOG)
            self.splicer = Splicer(listener, tcp_connector(gateway), stop_sock=self._wake_r)
            self.thread = threading.Thread(
                target=self._run, name=f"assay-proxy-relay-{next(_ids)}", daemon=True
            )
            self.thread.start()
        except BaseException:
            listener.close()
            self._close_wake()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def _run(self) -> None:
        try:
            self.splicer.run()
        except BaseException as exc:  # a bug here must show in the record, not vanish
            self.error = f"relay thread failed: {type(exc).__name__}: {exc}"

    @property
    def connections(self) -> int:
        return self.splicer.accepted

    @property
    def upstream_failures(self) -> int:
        return self.splicer.upstream_failures

    def _close_wake(self) -> None:
        for s in (self._wake_r, self._wake_w):
            s.close()

    def close(self) -> list[str]:
        """Stop the thread, close every connection, remove the socket. Returns warnings."""
        warnings: list[str] = []
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self.thread.join(_JOIN_SECONDS)
        if self.thread.is_alive():
            warnings.append(f"proxy relay thread {self.thread.name} did not stop")
        else:
            self.splicer.close_all()
        self._close_wake()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.error:
            warnings.append(self.error)
        return warnings
