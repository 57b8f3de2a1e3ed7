"""The build steps' only way out: an HTTP proxy on the host that reaches the package registries
and nothing else.

A recipe's ``run``, ``pip`` and ``apt`` steps run in a network namespace of their own (loopback
only: :mod:`assay.environments.build_sandbox`). Their one path out is a Unix socket bound into
the sandbox, behind which this proxy listens, in a thread of the building process. It speaks
the two forms package managers use through a proxy:

* forward proxying of absolute-URI requests (``GET http://deb.debian.org/debian/... HTTP/1.1``,
  how apt fetches an ``http://`` archive): the request is re-sent upstream in origin form with
  ``Connection: close``, the response streamed back; the client's connection may carry more
  requests (keep-alive, each one checked);
* ``CONNECT host:443`` (pip, npm, apt over https): after the check, bytes are tunnelled both
  ways as they come. TLS is not intercepted: the client verifies the registry's certificate.

Every request is parsed with h11 (headers bounded at :data:`MAX_HEAD_BYTES`, responses' too),
and allowed only when its host is in the policy (exact names, case-insensitive: no suffixes, no
IP addresses unless listed) and its port is 80 or 443 (:data:`REGISTRY_PORTS`), or when it is
the recipe's own mirror, that host on that port (:class:`EgressPolicy`). Anything else gets
``403 Forbidden`` with a body naming the host and the allowed list, so a failing step's output
says why. The names are resolved here, on the host, so the sandbox needs no DNS. Pipelined
requests (apt sends several at once) wait in h11's buffer, read only as each is answered; at
most :data:`MAX_CONNECTIONS` clients are served at once.

A building machine that reaches the internet only through a proxy of its own names it in
``https_proxy``/``http_proxy`` (and ``no_proxy``), as ``mmdebstrap`` is given it: the registry
proxy then makes its allowed connections through that proxy
(:mod:`assay.environments.host_proxy`), after its own check, so the allow-list is the same
either way.

What this narrows and what it does not: the hosts a step's process can open a connection to.
It does not judge what is fetched from them (any package on PyPI or npm is reachable: that is
what the build is for), and the host's own ``mmdebstrap`` run, before the image exists, keeps
the host's network (:mod:`assay.environments.debian`).
"""

from __future__ import annotations

import contextlib
import http
import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h11

from assay.environments.host_proxy import HostProxies, UpstreamProxy, open_tunnel, proxy_auth

#: The package registries build steps may reach: Debian's archive and its security archive,
#: PyPI (the index and the files it links to) and npm. A recipe's own ``mirror`` is added to
#: these for its build (:func:`policy_for`).
REGISTRY_HOSTS = ("deb.debian.org", "security.debian.org", "pypi.org", "files.pythonhosted.org",
                  "registry.npmjs.org")
#: Ports a step may ask for: plain HTTP (apt's ``http://`` archive) and HTTPS.
REGISTRY_PORTS = (80, 443)
#: The largest request or response head (request line or status line plus headers) accepted.
MAX_HEAD_BYTES = 32 * 1024
#: A connection with nothing to read or write for this long is closed.
IDLE_SECONDS = 300.0
CONNECT_SECONDS = 30.0
CHUNK = 65536
#: Client connections served at once (a thread each); more wait in the listener's backlog, so a
#: step that opens thousands cannot exhaust the building machine's threads.
MAX_CONNECTIONS = 64
#: Refused hosts remembered for the image's notes (the first ones, distinct).
MAX_REFUSED_KEPT = 20
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
               b"proxy-authenticate", b"te", b"trailer", b"upgrade"}
#: ``sockaddr_un`` holds 108 bytes; a longer TMPDIR falls back to /tmp.
_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class EgressPolicy:
    """Which ``host:port`` a build step may reach through the proxy: any of ``hosts`` on any
    of ``ports``, and each of ``endpoints`` (a recipe's own mirror: that host on that port
    alone, so a mirror at ``http://127.0.0.1:3142`` opens that one port of the building
    machine's loopback and nothing else of it)."""

    hosts: frozenset[str]
    ports: frozenset[int] = frozenset(REGISTRY_PORTS)
    endpoints: frozenset[tuple[str, int]] = frozenset()

    def refusal(self, host: str, port: int) -> str | None:
        """Why ``host:port`` is refused, or None when it is allowed."""
        name = host.lower().rstrip(".")
        if (name, port) in self.endpoints:
            return None
        if name not in self.hosts:
            return (f"{host} is not a package registry this build may reach (allowed: "
                    f"{', '.join(self.allowed())})")
        if port not in self.ports:
            return (f"port {port} of {host} is not allowed (only "
                    f"{', '.join(str(p) for p in sorted(self.ports))})")
        return None

    def allowed(self) -> list[str]:
        """The hosts, then each endpoint as ``host:port``."""
        return [*sorted(self.hosts), *(f"{h}:{p}" for h, p in sorted(self.endpoints))]

    def reachable(self) -> list[str]:
        """Every ``host:port`` a step may reach (the image record's ``build_hosts``)."""
        pairs = {(h, p) for h in self.hosts for p in self.ports} | set(self.endpoints)
        return [f"{h}:{p}" for h, p in sorted(pairs)]


def policy_for(mirrors: Iterable[str] = ()) -> EgressPolicy:
    """:data:`REGISTRY_HOSTS` on :data:`REGISTRY_PORTS`, plus each of the recipe's archive URLs
    as one endpoint (its host, on its port)."""
    endpoints = set()
    for url in mirrors:
        parts = urlsplit(url)
        if not parts.hostname:
            continue
        host = parts.hostname.lower().rstrip(".")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            continue
        if host not in REGISTRY_HOSTS or port not in REGISTRY_PORTS:
            endpoints.add((host, port))
    return EgressPolicy(frozenset(REGISTRY_HOSTS), frozenset(REGISTRY_PORTS),
                        frozenset(endpoints))


class _Closed(Exception):
    """The client went away, or sent what cannot be answered: end the connection."""


@dataclass
class ProxyStats:
    """What the proxy did, for the image's notes."""

    allowed: int = 0
    refused: int = 0
    refused_hosts: list[str] = field(default_factory=list)


class RegistryProxy:
    """The proxy, listening on :attr:`socket_path` (in a private 0700 folder) until
    :meth:`close`. One thread accepts; each connection gets a thread of its own (host threads:
    the build sandbox's process limits do not apply here)."""

    def __init__(self, policy: EgressPolicy,
                 connect: Callable[[str, int], socket.socket] | None = None,
                 upstream: HostProxies | None = None) -> None:
        self.policy = policy
        self.connect = connect or _connect
        self.upstream = upstream or HostProxies()
        self.stats = ProxyStats()
        base = tempfile.gettempdir()
        if len(base) > _MAX_SOCKET_PATH - 40:
            base = "/tmp"
        self.directory = Path(tempfile.mkdtemp(prefix="assay-egress-", dir=base))
        self.socket_path = self.directory / "registry.sock"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.socket_path))
            # a root-run build's steps are an unprivileged host uid (its build namespace's
            # root): the socket must take their connections; its 0700 folder keeps it the
            # build's alone on the host
            os.chmod(self.socket_path, 0o666)
            self._listener.listen(64)
        except BaseException:
            self._listener.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self._acceptor = threading.Thread(target=self._accept, name="assay-egress-accept",
                                          daemon=True)
        self._acceptor.start()

    # -- lifecycle ------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            while not self._slots.acquire(timeout=0.5):
                if self._closing:
                    return
            try:
                client, _ = self._listener.accept()
            except OSError:
                self._slots.release()
                return  # closed
            with self._lock:
                if self._closing:
                    client.close()
                    self._slots.release()
                    return
                self._open.add(client)
                worker = threading.Thread(target=self._serve, args=(client,),
                                          name="assay-egress-conn", daemon=True)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(worker)
            try:
                worker.start()
            except RuntimeError:  # no thread to be had: this client goes unserved
                self._forget(client)
                self._slots.release()

    def close(self) -> None:
        """Stop accepting, end every connection, remove the socket's folder."""
        with self._lock:
            self._closing = True
            open_now = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(10)
        for worker in list(self._threads):
            worker.join(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RegistryProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closing:
                return False
            self._open.add(sock)
            return True

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        sock.close()

    def _note_refused(self, host: str) -> None:
        with self._lock:
            self.stats.refused += 1
            if host not in self.stats.refused_hosts and len(
                    self.stats.refused_hosts) < MAX_REFUSED_KEPT:
                self.stats.refused_hosts.append(host)

    def _note_allowed(self) -> None:
        with self._lock:
            self.stats.allowed += 1

    # -- one client connection ------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        client.settimeout(IDLE_SECONDS)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while True:
                event = _next(conn, client)
                if isinstance(event, h11.ConnectionClosed):
                    return
                if not isinstance(event, h11.Request):
                    return
                if _head_size(event) > MAX_HEAD_BYTES:
                    _answer(conn, client, 431, f"request head over {MAX_HEAD_BYTES} bytes")
                    return
                if event.method == b"CONNECT":
                    self._tunnel(conn, client, event)
                    return
                self._forward(conn, client, event)
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                else:
                    return
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            _answer(conn, client, status,
                    f"request head over {MAX_HEAD_BYTES} bytes" if status == 431
                    else f"not a valid HTTP request: {exc}")
        except (OSError, _Closed, h11.LocalProtocolError):
            return
        finally:
            self._forget(client)
            self._slots.release()

    def _open_upstream(self, conn: h11.Connection, client: socket.socket, scheme: str,
                       host: str, port: int) -> tuple[socket.socket, UpstreamProxy | None] | None:
        """The policy's check, then a tracked connection to ``host:port`` (through the
        building machine's own proxy when it names one for ``scheme``). None when the client
        has been answered instead: 403 for a refused host or port, 502 when nothing answers.
        On success the request's rest is the caller's to read (a forwarded body goes on)."""
        why = self.policy.refusal(host, port)
        if why is not None:
            self._note_refused(host)
            _drain(conn, client)
            _answer(conn, client, 403, why)
            return None
        via = self.upstream.via(scheme, host)
        try:
            upstream = self.connect(via.host, via.port) if via else self.connect(host, port)
        except OSError as exc:
            _drain(conn, client)
            where = f"the building machine's proxy {via.host}:{via.port}" if via else (
                f"{host}:{port}")
            _answer(conn, client, 502, f"could not connect to {where}: {exc}")
            return None
        self._note_allowed()
        if not self._track(upstream):
            upstream.close()
            raise _Closed
        return upstream, via

    def _forward(self, conn: h11.Connection, client: socket.socket,
                 request: h11.Request) -> None:
        """An absolute-URI request: checked, re-sent upstream, its response streamed back."""
        target = request.target.decode("ascii", "replace")
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            _drain(conn, client)
            _answer(conn, client, 400, "this proxy forwards absolute http:// URLs; use "
                    "CONNECT for https")
            return
        try:
            port = parts.port or 80
        except ValueError:
            _drain(conn, client)
            _answer(conn, client, 400, f"bad port in {target[:200]}")
            return
        host = parts.hostname
        link = self._open_upstream(conn, client, "http", host, port)
        if link is None:
            return
        upstream, via = link
        try:
            authority = host if port == 80 else f"{host}:{port}"
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # through the machine's proxy the request keeps its absolute form
            self._exchange(conn, client, upstream, request,
                           f"http://{authority}{path}" if via else path, authority,
                           proxy_auth(via))
        finally:
            self._forget(upstream)

    def _exchange(self, conn: h11.Connection, client: socket.socket, upstream: socket.socket,
                  request: h11.Request, path: str, authority: str,
                  extra: list[tuple[bytes, bytes]]) -> None:
        """Send ``request`` upstream as ``path`` (origin form, or absolute to a proxy) with
        ``Host: authority``, ``Connection: close`` and the ``extra`` headers, its body after it,
        then stream the response back."""
        host = authority
        up = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        headers = [(k, v) for k, v in request.headers
                   if k.lower() not in _HOP_BY_HOP and k.lower() != b"host"]
        headers = [(b"host", authority.encode("ascii")), *headers, *extra,
                   (b"connection", b"close")]
        upstream.sendall(up.send(h11.Request(method=request.method, target=path.encode(),
                                             headers=headers)) or b"")
        # the request body, if any, as it comes
        while True:
            event = _next(conn, client)
            if isinstance(event, h11.Data):
                upstream.sendall(up.send(h11.Data(data=event.data)) or b"")
            elif isinstance(event, h11.EndOfMessage):
                upstream.sendall(up.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise _Closed
        # the response
        try:
            while True:
                event = _next(up, upstream)
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    if _head_size(event) > MAX_HEAD_BYTES:
                        _answer(conn, client, 502, f"{host}'s response head is over "
                                f"{MAX_HEAD_BYTES} bytes")
                        return
                    kept = [(k, v) for k, v in event.headers if k.lower() not in _HOP_BY_HOP]
                    client.sendall(conn.send(h11.Response(
                        status_code=event.status_code, headers=kept,
                        reason=event.reason)) or b"")
                    break
                raise _Closed
        except h11.RemoteProtocolError as exc:
            _answer(conn, client, 502, f"{host} sent a response this proxy cannot read: {exc}")
            return
        except (OSError, _Closed) as exc:
            if conn.our_state is h11.SEND_RESPONSE:
                _answer(conn, client, 502, f"{host} did not answer: {exc}")
                return
            raise
        while True:
            try:
                event = _next(up, upstream)
            except h11.RemoteProtocolError as exc:
                raise _Closed from exc
            if isinstance(event, h11.Data):
                client.sendall(conn.send(h11.Data(data=event.data)) or b"")
            elif isinstance(event, h11.EndOfMessage):
                client.sendall(conn.send(h11.EndOfMessage()) or b"")
                return
            else:
                raise _Closed

    def _tunnel(self, conn: h11.Connection, client: socket.socket,
                request: h11.Request) -> None:
        """``CONNECT host:port``: checked, then bytes both ways."""
        target = request.target.decode("ascii", "replace")
        host, sep, port_text = target.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            _drain(conn, client)
            _answer(conn, client, 400, f"CONNECT needs host:port, not {target[:200]!r}")
            return
        port = int(port_text)
        link = self._open_upstream(conn, client, "https", host, port)
        if link is None:
            return
        upstream, via = link
        _drain(conn, client)
        try:
            early_down = b""
            if via is not None:
                opened = open_tunnel(upstream, target, via, max_head=MAX_HEAD_BYTES)
                if isinstance(opened, str):
                    _answer(conn, client, 502, opened)
                    return
                early_down = opened
            client.sendall(conn.send(h11.Response(status_code=200, headers=[],
                                                  reason=b"Connection established")) or b"")
            early, _closed = conn.trailing_data
            if early:
                upstream.sendall(early)
            if early_down:
                client.sendall(early_down)
            _pump(client, upstream)
        finally:
            self._forget(upstream)


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=CONNECT_SECONDS)
    sock.settimeout(IDLE_SECONDS)
    return sock


def _next(conn: h11.Connection, sock: socket.socket) -> object:
    """The next h11 event of ``conn``, reading from ``sock`` as needed."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = sock.recv(CHUNK)
            except TimeoutError as exc:
                raise _Closed from exc
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            raise _Closed
        return event


def _drain(conn: h11.Connection, client: socket.socket) -> None:
    """Read the rest of a refused request (its body, if any) so the answer can be sent."""
    while conn.their_state is h11.SEND_BODY:
        event = _next(conn, client)
        if not isinstance(event, (h11.Data, h11.EndOfMessage)):
            raise _Closed


def _answer(conn: h11.Connection, client: socket.socket, status: int, why: str) -> None:
    """A short text answer that ends the connection (when the state still allows one)."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = f"assay build proxy: {why}\n".encode("utf-8", "replace")
    with contextlib.suppress(OSError, h11.LocalProtocolError):
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        client.sendall(conn.send(h11.Response(status_code=status, reason=_phrase(status),
                                              headers=headers)) or b"")
        client.sendall(conn.send(h11.Data(data=body)) or b"")
        client.sendall(conn.send(h11.EndOfMessage()) or b"")


def _head_size(event: h11.Request | h11.Response) -> int:
    """The bytes of a head as parsed. h11's own bound applies to a head still incomplete, so
    one that arrives whole in a single read is measured here."""
    start = len(event.target) if isinstance(event, h11.Request) else len(event.reason)
    return start + sum(len(k) + len(v) + 4 for k, v in event.headers)


def _phrase(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until both sides are done (half-closes passed on) or neither moves for
    :data:`IDLE_SECONDS`. Blocking writes: the peer's pace is the tunnel's."""
    sel = selectors.DefaultSelector()
    peers = {a: b, b: a}
    done: set[socket.socket] = set()
    for sock in (a, b):
        sel.register(sock, selectors.EVENT_READ)
    try:
        while len(done) < 2:
            ready = sel.select(IDLE_SECONDS)
            if not ready:
                return
            for key, _ in ready:
                sock = a if key.fileobj is a else b
                try:
                    data = sock.recv(CHUNK)
                except OSError:
                    return
                peer = peers[sock]
                if not data:
                    done.add(sock)
                    sel.unregister(sock)
                    with contextlib.suppress(OSError):
                        peer.shutdown(socket.SHUT_WR)
                    continue
                try:
                    peer.sendall(data)
                except OSError:
                    return
    finally:
        sel.close()
