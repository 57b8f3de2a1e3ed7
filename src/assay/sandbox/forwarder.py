"""The byte pump behind ``network="model-proxy"``, and the launcher that starts it in the sandbox.

This file runs in two places, which is why it imports nothing but the standard library and keeps
to what the sandbox's *system* ``python3`` (3.9 or later) understands: the host imports
:class:`Splicer` for its relay thread (:mod:`assay.sandbox.relay`), and
:mod:`assay.sandbox.netproxy` hands this file's source to ``python3 -I -S -c`` inside the
sandbox, where :func:`launch` starts the forwarder and then becomes the command. That is also
why it is one file of about 400 lines: the sandbox runs it as a single ``python3 -c`` program,
so the pump and the launcher cannot live in separate modules there.

:class:`Splicer` is one thread and one selector for any number of connections: every accepted
connection is paired with a new connection to the one fixed upstream, and bytes are written on
the moment they are read (no line, message or size buffering), so SSE chunks and keep-alive
connections pass through as they come. A partial write parks the rest and stops reading from the
other side until it is flushed: back-pressure, never unbounded memory. Every TCP socket gets
``TCP_NODELAY`` so small chunks are not held back by Nagle's algorithm; half-closes are passed on.
One thread rather than one per connection because, inside the sandbox, threads count against the
execution's ``pids`` limit.

The launcher protocol (``python3 -I -S -c SOURCE SOCKET PORT STATUS_FD [--max-connections=N]
[--report-fd=FD] -- COMMAND...``): listen on
``127.0.0.1:PORT`` *before* anything else, so the command's first connection is queued even if
the forwarder has not been scheduled yet; fork the forwarder off (twice, so it is re-parented to
bubblewrap's PID 1 and is never a child the command could ``wait`` for) and wait for its
"running" byte; write :data:`READY` to the status descriptor; ``exec`` the command with the
environment the launcher itself was given (read back from ``/proc/self/environ``: Python's
locale coercion may have added ``LC_CTYPE``). The status descriptor is close-on-exec, so only
the launcher can write to it: a failure is a :data:`FAILED` line (forwarder) or an
:data:`EXEC_FAILED` line (the command could not be executed), and a command cannot forge
either. The forwarder writes ``refused: N`` lines to a descriptor of its own (``--report-fd``,
never the status one: a process of the sandbox can open another's descriptors through
``/proc``, so what the forwarder holds is not proof, and a forged status line must stay
impossible) when it closed connections past ``--max-connections`` (the attempt's connection
limit at the gateway: a flood never leaves the sandbox); the record calls that count a claim.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import stat
import sys
import time
from collections.abc import Callable

READY = "ready"
FAILED = "failed:"
EXEC_FAILED = "exec-failed:"
REFUSED = "refused:"
MAX_CONNECTIONS_ARG = "--max-connections="
REPORT_FD_ARG = "--report-fd="
CHUNK = 65536
BACKLOG = 512
#: how long an accepted connection may wait for the upstream's backlog to make room
CONNECT_TIMEOUT = 10.0
RETRY_SECONDS = 0.01
_R = selectors.EVENT_READ
_W = selectors.EVENT_WRITE
_MAX_STATUS = 2000


class _End:
    """One socket of a spliced pair: what waits to be written to it, whether it sent EOF."""

    __slots__ = ("sock", "peer", "pending", "eof", "shut", "mask", "closed", "connecting")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer: _End = self
        self.pending = b""
        self.eof = False
        self.shut = False
        self.mask = 0
        self.closed = False
        self.connecting = False


def _nodelay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def unix_connector(path: str) -> Callable[[], socket.socket]:
    """Connections to the Unix socket ``path``. A local connect completes at once or, when the
    listener's backlog is full, raises ``BlockingIOError`` (the splicer retries; waiting here
    would stall every other connection)."""

    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        return sock

    return connect


def tcp_connector(address: tuple[str, int]) -> Callable[[], socket.socket]:
    """Connections to ``address``, returned while the handshake may still be in progress (the
    splicer waits for it without blocking: a gateway with a full backlog, whose SYNs are
    dropped and retried after a second, must not stall every other connection)."""

    def connect() -> socket.socket:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            address[0], address[1], type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            _nodelay(sock)
            sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise BlockingIOError(err, os.strerror(err))
            if err not in (0, errno.EINPROGRESS):
                raise OSError(err, os.strerror(err))
        except BaseException:
            sock.close()
            raise
        return sock

    return connect


class Splicer:
    """Accept on ``listener``, pair each connection with ``connect()``, pump bytes both ways.

    :meth:`run` returns when ``stop_sock`` becomes readable; then :meth:`close_all`. ``accepted``
    and ``upstream_failures`` count what happened (the relay puts them in the record).

    ``max_pairs``: the most connections relayed at once; one accepted past it is closed at once
    (``refused`` counts them), so an agent's flood of connections never leaves the sandbox.
    ``on_refused`` is told the count at most once a second (and once more when it changed)."""

    def __init__(
        self,
        listener: socket.socket,
        connect: Callable[[], socket.socket],
        stop_sock: socket.socket | None = None,
        max_pairs: int | None = None,
        on_refused: Callable[[int], None] | None = None,
    ) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener = listener
        self.connect = connect
        self.stop_sock = stop_sock
        self.accepted = 0
        self.upstream_failures = 0
        self.max_pairs = max_pairs
        self.refused = 0
        self.on_refused = on_refused
        self._told = 0
        self._told_at = 0.0
        self.ends: set[_End] = set()
        #: accepted clients whose upstream refused for now (a Unix listener's full backlog)
        self.waiting: list[tuple[socket.socket, float]] = []
        listener.setblocking(False)
        self.sel.register(listener, _R, None)
        if stop_sock is not None:
            stop_sock.setblocking(False)
            self.sel.register(stop_sock, _R, None)

    def run(self) -> None:
        while True:
            timeout = RETRY_SECONDS if self.waiting else None
            if self.refused != self._told:
                timeout = min(timeout or 1.0, 1.0)
                self._tell()
            for key, events in self.sel.select(timeout):
                end = key.data
                if end is None:
                    if key.fileobj is self.listener:
                        self._accept()
                    else:
                        return
                    continue
                if end.closed:
                    continue
                if events & _W:
                    if end.connecting:
                        self._connected(end)
                    else:
                        self._flush(end)
                if events & _R and not end.closed:
                    self._read(end)
            if self.waiting:
                self._retry_waiting()

    def _accept(self) -> None:
        while True:
            try:
                client, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. EMFILE: leave it queued, try again shortly
                time.sleep(RETRY_SECONDS)
                return
            if self.max_pairs is not None and (
                    len(self.ends) // 2 + len(self.waiting) >= self.max_pairs):
                client.close()
                self.refused += 1
                continue
            self.accepted += 1
            client.setblocking(False)
            _nodelay(client)
            self._pair(client, time.monotonic() + CONNECT_TIMEOUT)

    def _tell(self) -> None:
        now = time.monotonic()
        if self.on_refused is not None and now - self._told_at >= 1.0:
            self.on_refused(self.refused)
            self._told, self._told_at = self.refused, now

    def _pair(self, client: socket.socket, deadline: float) -> None:
        """Connect ``client``'s upstream; a full backlog (EAGAIN) waits in ``waiting``."""
        try:
            upstream = self.connect()
        except BlockingIOError:
            if time.monotonic() < deadline:
                self.waiting.append((client, deadline))
                return
            self.upstream_failures += 1
            client.close()
            return
        except OSError:
            self.upstream_failures += 1
            client.close()
            return
        a, b = _End(client), _End(upstream)
        a.peer, b.peer = b, a
        b.connecting = True  # writable once connected (at once for a Unix socket)
        self.ends.update((a, b))
        self._settle(a)

    def _retry_waiting(self) -> None:
        waiting, self.waiting = self.waiting, []
        for client, deadline in waiting:
            self._pair(client, deadline)

    def _connected(self, end: _End) -> None:
        err = end.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.upstream_failures += 1
            self._close(end)
            return
        end.connecting = False
        self._settle(end)

    def _read(self, end: _End) -> None:
        try:
            data = end.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(end)
            return
        peer = end.peer
        if not data:
            end.eof = True
            if not peer.pending:
                self._shut(peer)
        else:
            try:
                n = peer.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._close(end)
                return
            if n < len(data):
                peer.pending = data[n:]
        self._settle(end)

    def _flush(self, end: _End) -> None:
        try:
            n = end.sock.send(end.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(end)
            return
        end.pending = end.pending[n:]
        if not end.pending and end.peer.eof:
            self._shut(end)
        self._settle(end)

    def _shut(self, end: _End) -> None:
        if not end.shut:
            end.shut = True
            try:
                end.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _settle(self, end: _End) -> None:
        """Close a pair that is done both ways, else ask the selector for what each side needs."""
        peer = end.peer
        if end.eof and peer.eof and not end.pending and not peer.pending:
            self._close(end)
            return
        for e in (end, peer):
            if e.connecting:
                mask = _W
            elif e.eof or e.peer.pending or e.peer.connecting:
                mask = _W if e.pending else 0
            else:
                mask = _R | (_W if e.pending else 0)
            if mask != e.mask:
                if e.mask == 0:
                    self.sel.register(e.sock, mask, e)
                elif mask == 0:
                    self.sel.unregister(e.sock)
                else:
                    self.sel.modify(e.sock, mask, e)
                e.mask = mask

    def _close(self, end: _End) -> None:
        for e in (end, end.peer):
            if e.closed:
                continue
            e.closed = True
            if e.mask:
                self.sel.unregister(e.sock)
                e.mask = 0
            e.sock.close()
            self.ends.discard(e)

    def close_all(self) -> None:
        for end in list(self.ends):
            self._close(end)
        for client, _deadline in self.waiting:
            client.close()
        self.waiting = []
        self.sel.close()
        self.listener.close()


def _initial_environ() -> dict[str, str]:
    """The environment this process was started with (before Python's locale coercion)."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return dict(os.environ)
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def _serve(listener: socket.socket, socket_path: str, ready_fd: int, max_pairs: int | None,
           report_fd: int) -> None:
    """The forwarder process: stdio on /dev/null (it must hold none of the command's pipes);
    one byte on ``ready_fd`` once its loop can run. Connections it refused past ``max_pairs``
    are reported as ``refused: N`` lines on ``report_fd`` (never blocking on it)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)

    def tell(count: int) -> None:
        if report_fd < 0:
            return
        try:
            os.write(report_fd, (REFUSED + " " + str(count) + "\n").encode())
        except OSError:
            pass

    splicer = Splicer(listener, unix_connector(socket_path), max_pairs=max_pairs,
                      on_refused=tell)
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    splicer.run()


def _start_forwarder(listener: socket.socket, socket_path: str, status_fd: int,
                     max_pairs: int | None = None, report_fd: int = -1) -> None:
    """Fork the forwarder (via a short-lived middle process) and wait until it says it runs;
    raises ``OSError`` if it does not."""
    ready_r, ready_w = os.pipe()
    try:
        middle = os.fork()
        if middle == 0:  # pragma: no cover - runs in the sandbox
            try:
                os.close(status_fd)
                os.close(ready_r)
                if os.fork() == 0:
                    try:
                        _serve(listener, socket_path, ready_w, max_pairs, report_fd)
                    finally:
                        os._exit(0)
            finally:
                os._exit(0)  # a failed fork closes ready_w unwritten: the launcher sees EOF
        os.close(ready_w)
        ready_w = -1
        os.waitpid(middle, 0)
        if os.read(ready_r, 1) != b"1":
            raise OSError("the forwarder process ended before it was ready "
                          "(no room for one more process?)")
    finally:
        os.close(ready_r)
        if ready_w != -1:
            os.close(ready_w)


def launch(args: list[str]) -> int:
    """Start the forwarder, report, become the command; see the module docstring."""
    socket_path, port, status_fd = args[0], int(args[1]), int(args[2])
    rest = args[3:]
    max_pairs, report_fd = None, -1
    while rest[:1] and rest[0].startswith((MAX_CONNECTIONS_ARG, REPORT_FD_ARG)):
        if rest[0].startswith(MAX_CONNECTIONS_ARG):
            max_pairs = int(rest[0][len(MAX_CONNECTIONS_ARG):]) or None
        else:
            report_fd = int(rest[0][len(REPORT_FD_ARG):])
        rest = rest[1:]
    command = rest[1:] if rest[:1] == ["--"] else rest
    os.set_inheritable(status_fd, False)
    if report_fd >= 0:
        os.set_inheritable(report_fd, False)  # the forwarder's alone, never the command's
        os.set_blocking(report_fd, False)

    def report(line: str) -> None:
        try:
            os.write(status_fd, (line[:_MAX_STATUS] + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    try:
        if not stat.S_ISSOCK(os.stat(socket_path).st_mode):
            report(f"{FAILED} {socket_path} is not a socket")
            return 125
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(BACKLOG)
        _start_forwarder(listener, socket_path, status_fd, max_pairs, report_fd)
        listener.close()
        if report_fd >= 0:
            os.close(report_fd)
    except OSError as exc:
        report(f"{FAILED} forwarder for 127.0.0.1:{port} -> {socket_path}: {exc}")
        return 125
    report(READY)
    if not command:
        report(f"{EXEC_FAILED} no command given")
        return 127
    try:
        os.execvpe(command[0], command, _initial_environ())
    except OSError as exc:
        report(f"{EXEC_FAILED} {command[0]}: {exc.strerror or exc}")
    return 127


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
