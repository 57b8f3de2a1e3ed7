"""``network="model-proxy"`` against real bubblewrap and real HTTP servers on the host: no mocks.

The gateway is a real threaded HTTP server started by the test (on TCP, through the relay thread,
and on a Unix socket, directly); the agent is ``python3`` inside the sandbox. Every "cannot
reach" check has a control showing the same target *is* reachable from the host, so the test
could fail.
"""

from __future__ import annotations

import glob
import hashlib
import http.server
import json
import socket
import socketserver
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from support.procscan import own_processes

from assay.sandbox import (
    REASONS,
    SANDBOX_PROXY_SOCKET,
    ExecResult,
    Limits,
    ProxyTarget,
    bwrap_available,
    run_sandboxed,
)
from assay.sandbox.outcome import classify

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FAST = Limits(wall_seconds=30.0, memory_mib=512, pids=128)
PORT = 18080


class GatewayHandler(http.server.BaseHTTPRequestHandler):
    """``/hello``; ``POST /echo`` (body back, with its sha256); ``/sse?n=&gap=`` (chunked
    server-sent events, one every ``gap`` seconds, send times recorded); ``/hold`` (starts a
    stream and never ends it)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def setup(self) -> None:
        super().setup()
        if self.connection.family == socket.AF_INET:
            # headers and body are two writes: without this the server itself would wait for
            # the client's delayed ACK (~40 ms) and hide what the proxy adds
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _send(self, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        with self.server.lock:
            self.server.paths.append(url.path)
        if url.path.startswith("/hello"):
            self._send(b"hello from the gateway " + url.path.encode())
        elif url.path == "/sse":
            q = parse_qs(url.query)
            n, gap = int(q["n"][0]), float(q["gap"][0])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                if i:
                    time.sleep(gap)
                self.server.sse_sent.append(time.time())
                self._chunk(f"data: {i}\n\n".encode())
            self._chunk(b"")
        elif url.path == "/hold":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(b"data: first\n\n")
            try:
                while True:  # until the peer goes away
                    time.sleep(0.1)
                    self._chunk(b": keep-alive\n\n")
            except OSError:
                self.server.hold_ended.set()
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._send(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def _init_state(server: Any) -> None:
    server.lock = threading.Lock()
    server.connections = 0
    server.paths = []
    server.sse_sent = []
    server.hold_ended = threading.Event()


class TcpGateway(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


class UnixGateway(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 256


class UnixGatewayHandler(GatewayHandler):
    def address_string(self) -> str:
        return "unix"


def _serve(server: Any) -> Iterator[Any]:
    _init_state(server)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        t.join()


@pytest.fixture
def gateway() -> Iterator[TcpGateway]:
    yield from _serve(TcpGateway(("127.0.0.1", 0), GatewayHandler))


@pytest.fixture
def unix_gateway(tmp_path: Path) -> Iterator[UnixGateway]:
    path = tmp_path / "gw.sock"
    yield from _serve(UnixGateway(str(path), UnixGatewayHandler))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


@pytest.fixture(autouse=True)
def nothing_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """After every test: no relay thread, no relay directory, no forwarder process of its own
    (another run's live sandboxes and relays on the same machine are not this test's
    leftovers). Relays make their directory in the temporary directory: a short private one
    per test (a socket path must stay under 108 bytes) keeps theirs apart from everyone's."""
    private = Path(tempfile.mkdtemp(prefix="nl-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield
    assert [t.name for t in threading.enumerate() if t.name.startswith("assay-proxy-relay")] == []
    assert glob.glob(str(private / "assay-proxy-*")) == []
    assert forwarder_processes(tmp_path) == []
    private.rmdir()


def forwarder_processes(root: Path) -> list[int]:
    """This test's host processes running the in-sandbox launcher/forwarder."""
    launchers = set(own_processes(root, " -I -S -c "))
    return sorted(launchers & set(own_processes(root, SANDBOX_PROXY_SOCKET)))


def target_of(server: Any, **kw: Any) -> ProxyTarget:
    if isinstance(server, TcpGateway):
        return ProxyTarget(tcp=server.server_address[:2], port=PORT, **kw)
    return ProxyTarget(unix_socket=Path(server.server_address), port=PORT, **kw)


def py(code: str, workdir: Path, server: Any, **kw: Any) -> ExecResult:
    kw.setdefault("limits", FAST)
    kw.setdefault("proxy", target_of(server))
    res = run_sandboxed(["python3", "-c", code], workdir, network="model-proxy", **kw)
    json.dumps(res.to_record())  # every result must be JSON-serialisable
    assert res.reason in REASONS
    return res


GET = (
    "import json, os, urllib.request\n"
    "def get(path):\n"
    "    with urllib.request.urlopen(os.environ['OPENAI_BASE_URL'] + path, timeout=10) as r:\n"
    "        return r.read().decode()\n"
)


# --------------------------------------------------------------------------------------------
# the gateway is reachable


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_gateway_is_reached_through_the_proxy_and_the_record_says_so(
    kind: str, workdir: Path, gateway: TcpGateway, unix_gateway: UnixGateway
) -> None:
    server = gateway if kind == "tcp" else unix_gateway
    target = target_of(server)
    res = py(GET + "print(get('/hello/1')); print(get('/hello/2'))", workdir, server,
             env={"OPENAI_BASE_URL": target.base_url})
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    assert res.stdout_tail.splitlines() == ["hello from the gateway /hello/1",
                                            "hello from the gateway /hello/2"]
    assert server.paths == ["/hello/1", "/hello/2"]
    rec = res.to_record()
    assert rec["network"] == "model-proxy"
    applied = rec["network_applied"]
    assert applied["network"] == "model-proxy"
    assert applied["reachable"] == [f"127.0.0.1:{PORT} → gateway"]
    assert applied["forwarder"] == "ready" and applied["command_started"] is True
    assert applied["gateway"] == target.describe()
    if kind == "tcp":  # the relay counts what it carried
        assert applied["connections"] == 2 and applied["upstream_failures"] == 0
        assert "host relay thread" in applied["path"]
    else:  # nothing on the host counts, so nothing is claimed
        assert "connections" not in applied and "relay" not in applied["path"]


def test_none_and_host_records_are_unchanged(workdir: Path) -> None:
    for network in ("none", "host"):
        res = run_sandboxed(["true"], workdir, network=network, limits=FAST)  # type: ignore[arg-type]
        assert res.reason == "ok" and res.network_applied is None
        assert "network_applied" not in res.to_record()


def test_the_first_connection_never_races_the_forwarder(workdir: Path, gateway: TcpGateway) -> None:
    """A bare connect at the command's first instruction, no retry, several times over."""
    code = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {PORT}))\n"
        "s.sendall(b'GET /hello/race HTTP/1.0\\r\\n\\r\\n')\n"
        "print(s.recv(4096).split(b'\\r\\n')[0].decode())\n"
    )
    for _ in range(5):
        res = py(code, workdir, gateway)
        assert res.reason == "ok", (res.detail, res.stderr_tail)
        assert res.stdout_tail.strip() == "HTTP/1.1 200 OK"


def test_the_command_gets_exactly_its_environment(workdir: Path, gateway: TcpGateway) -> None:
    """The launcher must be invisible: same environment as without it (Python's locale
    coercion in the launcher would otherwise add LC_CTYPE under LANG=C)."""
    code = "import json, os; print(json.dumps(dict(os.environ), sort_keys=True))"
    env = {"LANG": "C", "MARKER": "x y"}
    plain = run_sandboxed(["python3", "-I", "-c", code], workdir, env=env, limits=FAST)
    proxied = run_sandboxed(["python3", "-I", "-c", code], workdir, env=env, limits=FAST,
                            network="model-proxy", proxy=target_of(gateway))
    assert plain.reason == proxied.reason == "ok"
    seen_plain, seen_proxied = json.loads(plain.stdout_tail), json.loads(proxied.stdout_tail)
    # python3 itself coerces LC_CTYPE in both; the launcher must add nothing of its own
    assert seen_proxied == seen_plain


# --------------------------------------------------------------------------------------------
# streaming, keep-alive, concurrency, volume


def test_sse_chunks_arrive_one_by_one_with_their_timing(workdir: Path, gateway: TcpGateway) -> None:
    n, gap = 5, 0.4
    code = (
        "import http.client, json, time\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {PORT}, timeout=20)\n"
        f"c.request('GET', '/sse?n={n}&gap={gap}')\n"
        "r = c.getresponse()\n"
        "got = []\n"
        "while True:\n"
        "    line = r.readline()\n"
        "    if not line:\n"
        "        break\n"
        "    if line.startswith(b'data:'):\n"
        "        got.append([line.decode().strip(), time.time()])\n"
        "print(json.dumps(got))\n"
    )
    res = py(code, workdir, gateway)
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    got = json.loads(res.stdout_tail)
    assert [g[0] for g in got] == [f"data: {i}" for i in range(n)]
    sent = gateway.sse_sent
    assert len(sent) == n
    delays = [arrived - s for (_, arrived), s in zip(got, sent, strict=True)]
    # each event arrives soon after it was sent: buffering would hold the first one back until
    # the last was sent, (n-1)*gap = 1.6 s. Half that is the bound: on a loaded machine one
    # event can be 0.1-0.2 s late (which also shortens the next gap, so gaps are not compared
    # one by one), never 0.8 s.
    assert max(delays) < (n - 1) * gap / 2, delays
    # and the events stay spread out as sent, not bunched at the end
    assert got[-1][1] - got[0][1] > (n - 1) * gap * 0.75, got


def test_keep_alive_reuses_one_connection_without_delay(
    workdir: Path, gateway: TcpGateway
) -> None:
    """Twenty requests on one connection: one connection at the gateway, and no hop holds the
    responses back. A Nagle / delayed-ACK stall costs ~40 ms on *every* request, so the fastest
    of the twenty tells it; the median said it too, until a loaded machine (eight workers on two
    cores) took it to 16 ms with no stall at all."""
    code = (
        "import http.client, json, statistics, time\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {PORT}, timeout=10)\n"
        "out, ms = [], []\n"
        "for i in range(20):\n"
        "    t = time.perf_counter()\n"
        "    c.request('GET', f'/hello/{i}')\n"
        "    out.append(c.getresponse().read().decode())\n"
        "    ms.append((time.perf_counter() - t) * 1000)\n"
        "print(json.dumps([len(set(out)), out[-1], min(ms), statistics.median(ms)]))\n"
    )
    res = py(code, workdir, gateway)
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    distinct, last, fastest_ms, median_ms = json.loads(res.stdout_tail)
    assert [distinct, last] == [20, "hello from the gateway /hello/19"]
    assert fastest_ms < 20, (fastest_ms, median_ms)
    assert gateway.connections == 1
    assert res.network_applied is not None and res.network_applied["connections"] == 1


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_many_concurrent_connections_each_get_their_own_answer(
    kind: str, workdir: Path, gateway: TcpGateway, unix_gateway: UnixGateway
) -> None:
    server = gateway if kind == "tcp" else unix_gateway
    conns = 100
    code = (
        "import asyncio\n"
        "async def one(i):\n"
        f"    r, w = await asyncio.open_connection('127.0.0.1', {PORT})\n"
        "    w.write(f'GET /hello/c{i} HTTP/1.0\\r\\n\\r\\n'.encode())\n"
        "    data = await r.read()\n"
        "    w.close()\n"
        "    return data.rsplit(b'\\r\\n\\r\\n', 1)[1].decode()\n"
        "async def main():\n"
        f"    return await asyncio.gather(*(one(i) for i in range({conns})))\n"
        "got = asyncio.run(main())\n"
        f"bad = [i for i, g in enumerate(got) if g != f'hello from the gateway /hello/c{{i}}']\n"
        "print('bad', bad)\n"
    )
    res = py(code, workdir, server)
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    assert res.stdout_tail.strip() == "bad []"
    assert server.connections == conns
    if kind == "tcp":
        assert res.network_applied is not None and res.network_applied["connections"] == conns


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_a_gateway_slow_to_accept_does_not_stall_other_streams(
    kind: str, workdir: Path, tmp_path: Path
) -> None:
    """The gateway's accept queue is full, so the next connect to it must wait (TCP: a dropped
    SYN, retried after a second; Unix: EAGAIN): a stream already flowing on another connection
    must not wait with it. On Unix, the waiting connections then get through once the gateway
    accepts again (none is dropped); on TCP that is the kernel's SYN retry schedule, the same
    as for a direct client, so it is not timed here."""
    if kind == "tcp":
        listener = socket.create_server(("127.0.0.1", 0), backlog=1)
        target = ProxyTarget(tcp=listener.getsockname()[:2], port=PORT)
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(tmp_path / "slow.sock"))
        listener.listen(1)
        target = ProxyTarget(unix_socket=tmp_path / "slow.sock", port=PORT)
    n, gap, others = 6, 0.3, 5
    late_expected = others if kind == "unix" else 0
    sent: list[float] = []

    def serve() -> None:  # accepts nothing more until the first stream is over
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            for i in range(n):
                time.sleep(gap)
                sent.append(time.time())
                conn.sendall(f"data: {i}\n\n".encode())
        listener.settimeout(15)
        for _ in range(late_expected):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"late")

    code = (
        "import json, socket, time\n"
        f"a = socket.create_connection(('127.0.0.1', {PORT}))\n"
        "a.sendall(b'GET /sse HTTP/1.1\\r\\nHost: gw\\r\\n\\r\\n')\n"
        "time.sleep(0.1)\n"
        f"others = [socket.create_connection(('127.0.0.1', {PORT})) for _ in range({others})]\n"
        "got = []\n"
        f"while len(got) < {n}:\n"
        "    chunk = a.recv(65536)\n"
        "    if not chunk:\n"
        "        break\n"
        "    got += [time.time()] * chunk.count(b'data: ')\n"
        "late = []\n"
        f"for s in others[:{late_expected}]:\n"
        "    s.settimeout(15)\n"
        "    late.append(s.recv(100).decode())\n"
        "print(json.dumps([got, late]))\n"
    )
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        res = run_sandboxed(["python3", "-c", code], workdir, network="model-proxy", limits=FAST,
                            proxy=target)
        assert res.reason == "ok", (res.detail, res.stderr_tail)
        got, late = json.loads(res.stdout_tail)
        assert len(got) == n == len(sent)
        delays = [g - s for g, s in zip(got, sent, strict=True)]
        assert max(delays) < 0.5, delays
        assert late == ["late"] * late_expected
    finally:
        t.join(20)
        listener.close()


def test_large_bodies_pass_intact_both_ways(workdir: Path, gateway: TcpGateway) -> None:
    """Megabytes each way on several connections at once: back-pressure, no loss, no mixing."""
    code = (
        "import hashlib, http.client, os, threading\n"
        "bad = []\n"
        "def one(i):\n"
        "    body = os.urandom(3 * 1024 * 1024 + i)\n"
        f"    c = http.client.HTTPConnection('127.0.0.1', {PORT}, timeout=30)\n"
        "    c.request('POST', '/echo', body=body)\n"
        "    digest, _, back = c.getresponse().read().partition(b'\\n')\n"
        "    if back != body or digest.decode() != hashlib.sha256(body).hexdigest():\n"
        "        bad.append(i)\n"
        "ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print('bad', bad)\n"
    )
    res = py(code, workdir, gateway)
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    assert res.stdout_tail.strip() == "bad []"


# --------------------------------------------------------------------------------------------
# nothing else is reachable


def _default_route_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def test_nothing_but_the_gateway_is_reachable(workdir: Path, gateway: TcpGateway) -> None:
    other = socket.create_server(("0.0.0.0", 0))  # every host address, loopback included
    other.settimeout(0.2)
    other_port = other.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = other.accept()
            except TimeoutError:
                continue
            accepted.append(addr)
            conn.sendall(b"other service\n")
            conn.close()

    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_name = f"\0assay-test-{uuid.uuid4().hex}"
    abstract.bind(abstract_name)
    abstract.listen(5)
    host_ip = _default_route_address()
    gw_port = gateway.server_address[1]
    targets = {"other loopback port": ["127.0.0.1", other_port],
               "the gateway's own host port": ["127.0.0.1", gw_port],
               "other loopback address": ["127.0.0.2", other_port],
               "ipv6 loopback": ["::1", other_port],
               "public address": ["1.1.1.1", 80]}
    if host_ip is not None:
        targets["host's own address"] = [host_ip, other_port]
    code = (
        "import json, socket\n"
        f"targets = {json.dumps(targets)}\n"
        "out = {}\n"
        "for name, (host, port) in targets.items():\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3).close()\n"
        "        out[name] = 'CONNECTED'\n"
        "    except OSError as e:\n"
        "        out[name] = type(e).__name__\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80); out['dns'] = 'RESOLVED'\n"
        "except OSError as e:\n"
        "    out['dns'] = type(e).__name__\n"
        "try:\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))\n"
        "    out['udp'] = 'SENT'\n"
        "except OSError as e:\n"
        "    out['udp'] = type(e).__name__\n"
        "a = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    a.connect({abstract_name!r}); out['abstract unix socket'] = 'CONNECTED'\n"
        "except OSError as e:\n"
        "    out['abstract unix socket'] = type(e).__name__\n"
        "out['interfaces'] = sorted(n for _, n in socket.if_nameindex())\n"
        "out['resolv.conf'] = open('/etc/resolv.conf').read()\n"
        "print(json.dumps(out))\n"
    )
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        res = py(code, workdir, gateway)
        assert res.reason == "ok", (res.detail, res.stderr_tail)
        out = json.loads(res.stdout_tail)
        for name in [*targets, "abstract unix socket"]:
            assert out[name] != "CONNECTED", (name, out)
        assert out["dns"] != "RESOLVED" and out["udp"] != "SENT", out
        assert out["interfaces"] == ["lo"] and out["resolv.conf"] == ""
        assert accepted == [] and gateway.paths == []
        # controls: from the host, the same targets are there
        socket.create_connection(("127.0.0.1", other_port), timeout=3).close()
        if host_ip is not None:
            socket.create_connection((host_ip, other_port), timeout=3).close()
        probe = socket.socket(socket.AF_UNIX)
        probe.connect(abstract_name)
        probe.close()
        deadline = time.monotonic() + 3
        while len(accepted) < (2 if host_ip else 1) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(accepted) == (2 if host_ip else 1)
    finally:
        stop.set()
        t.join()
        other.close()
        abstract.close()


def test_using_the_socket_directly_still_reaches_only_the_gateway(
    workdir: Path, gateway: TcpGateway
) -> None:
    """The agent skips the forwarder and talks to the bound socket: the other end is fixed on
    the host, so it gets the gateway and cannot redirect, replace or add to it."""
    other = socket.create_server(("127.0.0.1", 0))
    other_port = other.getsockname()[1]
    other.settimeout(0.2)
    code = (
        "import json, os, socket\n"
        f"path = {SANDBOX_PROXY_SOCKET!r}\n"
        "out = {}\n"
        "def ask(raw):\n"
        "    s = socket.socket(socket.AF_UNIX); s.connect(path); s.sendall(raw)\n"
        "    data = b''\n"
        "    while chunk := s.recv(65536):\n"
        "        data += chunk\n"
        "    return data.decode(errors='replace')\n"
        "out['direct'] = ask(b'GET /hello/direct HTTP/1.0\\r\\n\\r\\n').split('\\r\\n')[0]\n"
        f"out['connect'] = ask(b'CONNECT 127.0.0.1:{other_port} HTTP/1.1\\r\\n"
        f"Host: 127.0.0.1:{other_port}\\r\\n\\r\\n').split('\\r\\n')[0]\n"
        "out['dir'] = sorted(os.listdir(os.path.dirname(path)))\n"
        "for what, fn in [('unlink', lambda: os.unlink(path)),\n"
        "                 ('rename', lambda: os.rename(path, path + '.x')),\n"
        "                 ('bind', lambda: socket.socket(socket.AF_UNIX).bind(path + '2'))]:\n"
        "    try:\n"
        "        fn(); out[what] = 'DONE'\n"
        "    except OSError as e:\n"
        "        out[what] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    try:
        res = py(code, workdir, gateway)
        assert res.reason == "ok", (res.detail, res.stderr_tail)
        out = json.loads(res.stdout_tail)
        assert out["direct"] == "HTTP/1.1 200 OK"
        # the CONNECT went to the gateway (which refuses it), not to the other port
        assert out["connect"].startswith("HTTP/1.1 501"), out
        assert gateway.paths == ["/hello/direct"]
        with pytest.raises(TimeoutError):
            other.accept()
        assert out["dir"] == ["gateway.sock"]
        assert out["unlink"] != "DONE" and out["rename"] != "DONE" and out["bind"] != "DONE"
    finally:
        other.close()


def test_killing_the_forwarder_only_breaks_the_agents_own_access(
    workdir: Path, gateway: TcpGateway
) -> None:
    code = (
        GET
        + "import signal, socket, time\n"
        "out = {'before': get('/hello/before')}\n"
        "mine = os.getpid()\n"
        "fwd = []\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit() and int(p) != mine:\n"
        "        try:\n"
        "            cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        if cmd.split(b'\\0')[1:4] == [b'-I', b'-S', b'-c']:  # not bwrap's\n"
        "            fwd.append(int(p))\n"
        "out['forwarders'] = len(fwd)\n"
        "for p in fwd:\n"
        "    os.kill(p, signal.SIGKILL)\n"
        "time.sleep(0.2)\n"
        "try:\n"
        "    get('/hello/after'); out['after'] = 'REACHED'\n"
        "except OSError as e:\n"
        "    out['after'] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    res = py(code, workdir, gateway, env={"OPENAI_BASE_URL": f"http://127.0.0.1:{PORT}"})
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    out = json.loads(res.stdout_tail)
    assert out["before"] == "hello from the gateway /hello/before"
    assert out["forwarders"] == 1 and out["after"] != "REACHED"
    assert gateway.paths == ["/hello/before"]
    # the gateway, and the next sandbox's access to it, are untouched
    with socket.create_connection(gateway.server_address[:2], timeout=3) as s:
        s.sendall(b"GET /hello/host HTTP/1.0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
    again = py(GET + "print(get('/hello/again'))", workdir, gateway,
               env={"OPENAI_BASE_URL": f"http://127.0.0.1:{PORT}"})
    assert again.reason == "ok" and "/hello/again" in again.stdout_tail


# --------------------------------------------------------------------------------------------
# lifecycle and failures


def test_an_open_stream_does_not_keep_anything_alive(workdir: Path, gateway: TcpGateway) -> None:
    """The command leaves a stream open and a background process behind and exits: the run
    returns at once, the gateway sees its connection end, and nothing of the proxy remains
    (checked by the autouse fixture)."""
    code = (
        "import os, socket, subprocess, sys\n"
        f"s = socket.create_connection(('127.0.0.1', {PORT}))\n"
        "s.sendall(b'GET /hold HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
        # the headers and the first event are two writes: they may come in two reads
        "buf = b''\n"
        "while b'data: first' not in buf:\n"
        "    part = s.recv(4096)\n"
        "    assert part, buf\n"
        "    buf += part\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "print('leaving')\n"
        "os._exit(0)\n"
    )
    t0 = time.monotonic()
    res = py(code, workdir, gateway)
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    assert time.monotonic() - t0 < 10
    assert gateway.hold_ended.wait(5)


def test_a_timeout_mid_stream_is_a_timeout(workdir: Path, gateway: TcpGateway) -> None:
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {PORT}))\n"
        "s.sendall(b'GET /hold HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
        "while s.recv(4096):\n"
        "    pass\n"
    )
    res = py(code, workdir, gateway, limits=Limits(wall_seconds=2.0, memory_mib=512, pids=64))
    assert res.reason == "timeout" and res.timed_out
    assert res.network_applied is not None and res.network_applied["command_started"] is True
    assert gateway.hold_ended.wait(5)


def test_forwarder_failure_is_a_sandbox_error(workdir: Path, gateway: TcpGateway) -> None:
    """A real start failure: the pids limit leaves no room to fork the forwarder."""
    res = py("print('must not run')", workdir, gateway,
             limits=Limits(wall_seconds=20.0, memory_mib=512, pids=1))
    if res.limits_applied["pids"].mechanism not in ("cgroup_v1", "cgroup_v2"):
        pytest.skip("no pids cgroup here: cannot make the forwarder's fork fail")
    assert res.reason == "sandbox_error", (res.reason, res.detail, res.stderr_tail)
    assert res.detail is not None
    assert res.detail.startswith("model-proxy forwarder did not start:"), res.detail
    assert "must not run" not in res.stdout_tail
    assert res.network_applied is not None
    assert res.network_applied["reachable"] == [] and not res.network_applied["command_started"]
    assert res.network_applied["forwarder"].startswith("failed:")


def test_host_side_setup_failures_are_sandbox_errors(workdir: Path, tmp_path: Path) -> None:
    missing = ProxyTarget(unix_socket=tmp_path / "nobody-listens.sock")
    res = run_sandboxed(["true"], workdir, network="model-proxy", proxy=missing, limits=FAST)
    assert res.reason == "sandbox_error"
    assert res.detail is not None and "nobody-listens.sock" in res.detail
    assert res.network_applied is not None and res.network_applied["reachable"] == []
    plain_file = tmp_path / "not-a-socket"
    plain_file.write_text("")
    res = run_sandboxed(["true"], workdir, network="model-proxy", limits=FAST,
                        proxy=ProxyTarget(unix_socket=plain_file))
    assert res.reason == "sandbox_error" and "is not a socket" in (res.detail or "")


def test_a_dead_tcp_gateway_is_counted(workdir: Path) -> None:
    """The relay cannot know the gateway is down until asked; it says so in the record."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()
    res = run_sandboxed(
        ["python3", "-c", GET + "\ntry:\n    get('/x')\nexcept OSError as e:\n"
         "    print(type(e).__name__)\n"],
        workdir, network="model-proxy", limits=FAST,
        env={"OPENAI_BASE_URL": f"http://127.0.0.1:{PORT}"},
        proxy=ProxyTarget(tcp=("127.0.0.1", dead_port), port=PORT),
    )
    assert res.reason == "ok", (res.detail, res.stderr_tail)
    assert res.network_applied is not None
    assert res.network_applied["upstream_failures"] == 1
    assert res.network_applied["connections"] == 1


def test_missing_command_is_a_sandbox_error_that_cannot_be_faked(
    workdir: Path, gateway: TcpGateway
) -> None:
    res = run_sandboxed(["no-such-command-xyz"], workdir, network="model-proxy",
                        proxy=target_of(gateway), limits=FAST)
    assert res.reason == "sandbox_error"
    assert res.detail is not None and "no-such-command-xyz" in res.detail
    assert res.network_applied is not None and res.network_applied["forwarder"] == "ready"
    assert res.network_applied["command_started"] is False
    # a command that prints the launcher's words and exits like it is just a failing command
    fake = py("import sys; print('failed: forwarder'); print('exec-failed: x', file=sys.stderr);"
              " sys.exit(125)", workdir, gateway)
    assert fake.reason == "nonzero_exit" and fake.exit_code == 125


def test_arguments_are_checked(workdir: Path, gateway: TcpGateway, tmp_path: Path) -> None:
    target = target_of(gateway)
    with pytest.raises(ValueError):
        run_sandboxed(["true"], workdir, network="model-proxy")
    with pytest.raises(ValueError):
        run_sandboxed(["true"], workdir, proxy=target)
    with pytest.raises(ValueError):
        run_sandboxed(["true"], workdir, network="model-proxy", proxy=target, isolation="none")
    with pytest.raises(ValueError):
        ProxyTarget()
    with pytest.raises(ValueError):
        ProxyTarget(unix_socket=tmp_path / "s", tcp=("127.0.0.1", 1))
    with pytest.raises(ValueError):
        ProxyTarget(tcp=("127.0.0.1", 1), port=80)
    with pytest.raises(ValueError):
        ProxyTarget(tcp=("127.0.0.1", 0))
    assert ProxyTarget(tcp=("127.0.0.1", 1), port=9999).base_url == "http://127.0.0.1:9999"


def test_concurrent_sandboxes_each_get_their_own_relay(
    workdir: Path, gateway: TcpGateway, tmp_path: Path
) -> None:
    dirs = []
    for i in range(4):
        d = tmp_path / f"w{i}"
        d.mkdir()
        dirs.append(d)
    results: dict[int, ExecResult] = {}

    def one(i: int) -> None:
        results[i] = py(GET + f"print(get('/hello/t{i}'))", dirs[i], gateway,
                        env={"OPENAI_BASE_URL": f"http://127.0.0.1:{PORT}"})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert results[i].reason == "ok", results[i].stderr_tail
        assert results[i].stdout_tail.strip() == f"hello from the gateway /hello/t{i}"
        assert results[i].network_applied is not None
        assert results[i].network_applied["connections"] == 1
    assert sorted(gateway.paths) == [f"/hello/t{i}" for i in range(4)]


def test_a_setup_failure_outranks_whatever_the_exit_looked_like() -> None:
    """Pure rule: if the launcher never handed over, the command did not run, whatever the
    exit status, the watchdog or the kernel counters say."""
    common: dict[str, Any] = dict(
        sandboxed=True, evidence={"oom_kills": 1}, stderr_tail="", memory_mechanism="cgroup_v1",
        pids_mechanism="cgroup_v1", cpu_seconds_mechanism="not_applied", wall_seconds=5.0,
        cpu_seconds=None)
    for code, timed_out in ((0, False), (125, False), (None, True)):
        out = classify(returncode=code or 0, bwrap_exit_code=code, timed_out=timed_out,
                       setup_failure="model-proxy forwarder did not start: x", **common)
        assert out.reason == "sandbox_error" and out.exit_code is None
        assert out.detail is not None and out.detail.startswith("model-proxy forwarder")
        assert ("watchdog fired before the command started" in out.detail) == timed_out
    assert classify(returncode=0, bwrap_exit_code=0, timed_out=False, setup_failure=None,
                    **{**common, "evidence": {}}).reason == "ok"
