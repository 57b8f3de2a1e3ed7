"""Build steps reach the package registries and nothing else.

The proxy (:mod:`assay.environments.egress`) is tested against a real HTTP server this file
starts on the host's loopback, with the policy injected (``registry.test`` allowed,
``elsewhere.test`` not, the proxy's resolver sending both to that server, so only the policy
tells them apart): no internet needed. Then real build steps
run in the build sandbox (``--unshare-net`` plus the forwarder and the proxy) in the shared base
image (``tests/support/images.py``), read-only, so nothing is built for this file: no direct
route out, another host refused through the proxy, the test's own server reached only when the
policy names it, and Debian's archive and PyPI reached through the proxy (skipped, saying so,
when this machine cannot reach them). The whole file takes about 12 s once the base image
exists (measured on these 2-core machines: 8 s of it is apt's index download from Debian).

The full form (``ASSAY_ENV_BUILD_FULL=1``, as in ``tests/test_env_build.py``) adds three real
builds: a Dockerfile whose ``apt-get install`` without ``--no-install-recommends`` needs a
Recommends package and fetches from PyPI through the proxy, built twice to the same digest
(45 s idle, 115 s loaded), and one whose step fetches from another host and fails naming it
(25-90 s). Run it with ``ASSAY_ENV_BUILD_FULL=1 .venv/bin/python -m pytest -q
tests/test_build_egress.py``.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest

from assay.environments.egress import (
    MAX_HEAD_BYTES,
    REGISTRY_HOSTS,
    EgressPolicy,
    RegistryProxy,
    policy_for,
)

FULL = os.environ.get("ASSAY_ENV_BUILD_FULL") == "1"
full_only = pytest.mark.skipif(not FULL, reason="a real image build: runs with "
                               "ASSAY_ENV_BUILD_FULL=1 (make test-full sets it)")


class _Upstream(http.server.BaseHTTPRequestHandler):
    """Answers every GET with what it was asked; counts requests."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.seen.append(f"{self.headers.get('Host')} {self.path}")
        body = f"upstream saw {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Upstream,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


#: The allowed name in the local tests, and another one: both lead to the test's server (the
#: proxy's resolver is pointed at it), so only the policy tells them apart. Not ``localhost``:
#: a step's ``no_proxy`` sends that to its own loopback, never to the proxy.
ALLOWED = "registry.test"
OTHER = "elsewhere.test"


def _to_loopback(_host: str, port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


@pytest.fixture
def proxy(upstream: tuple[int, list[str]]) -> Iterator[RegistryProxy]:
    port, _ = upstream
    with RegistryProxy(EgressPolicy(frozenset({ALLOWED}), frozenset({80, 443, port})),
                       connect=_to_loopback) as running:
        yield running


def _dial(proxy: RegistryProxy) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(proxy.socket_path))
    return sock


def _response(sock: socket.socket, conn: h11.Connection) -> tuple[int, bytes]:
    status = 0
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return status, body
        else:
            raise AssertionError(f"unexpected {event!r}")


def _get(sock: socket.socket, conn: h11.Connection, url: str) -> tuple[int, bytes]:
    host = url.split("/")[2].encode()
    head = conn.send(h11.Request(method="GET", target=url, headers=[("Host", host)]))
    assert head is not None and conn.send(h11.EndOfMessage()) == b""  # no body to send
    sock.sendall(head)
    return _response(sock, conn)


def test_an_allowed_host_is_forwarded_and_another_refused_with_403(
        proxy: RegistryProxy, upstream: tuple[int, list[str]]) -> None:
    port, seen = upstream
    with _dial(proxy) as sock:
        conn = h11.Connection(h11.CLIENT)
        status, body = _get(sock, conn, f"http://{ALLOWED}:{port}/debian/dists/x?y=1")
        assert (status, body) == (200, b"upstream saw /debian/dists/x?y=1\n")
        conn.start_next_cycle()  # the same connection carries the next request (apt does)
        status, body = _get(sock, conn, f"http://{OTHER}:{port}/secret")
    assert status == 403
    assert f"{OTHER} is not a package registry this build may reach".encode() in body
    assert f"allowed: {ALLOWED}".encode() in body
    # the refused request never reached the server, which saw the allowed one in origin form
    assert seen == [f"{ALLOWED}:{port} /debian/dists/x?y=1"]
    assert (proxy.stats.allowed, proxy.stats.refused) == (1, 1)
    assert proxy.stats.refused_hosts == [OTHER]


def test_connect_tunnels_bytes_to_an_allowed_host_only(
        proxy: RegistryProxy, upstream: tuple[int, list[str]]) -> None:
    port, seen = upstream
    with _dial(proxy) as sock:
        sock.sendall(f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\nHost: {ALLOWED}:{port}\r\n\r\n"
                     .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200 ")
        # the tunnel is bytes: speak HTTP to the server through it, as TLS would be spoken
        inner = h11.Connection(h11.CLIENT)
        status, body = _get(sock, inner, f"http://{ALLOWED}:{port}/tunnelled")
    assert status == 200 and body.startswith(b"upstream saw ")
    assert len(seen) == 1
    for target, words in ((f"{OTHER}:{port}", b"not a package registry"),
                          (f"{ALLOWED}:22", f"port 22 of {ALLOWED} is not allowed".encode()),
                          (ALLOWED, b"CONNECT needs host:port")):
        with _dial(proxy) as sock:
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            status, body = _response(sock, h11.Connection(h11.CLIENT))
            # the answer to a CONNECT that is refused is an ordinary response
            assert status in (400, 403) and words in body, (target, status, body)
    assert len(seen) == 1


def test_oversized_or_broken_requests_are_answered_and_dropped(proxy: RegistryProxy) -> None:
    with _dial(proxy) as sock:
        sock.sendall(b"GET http://registry.test/ HTTP/1.1\r\nHost: registry.test\r\nX-Big: "
                     + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n")
        status, body = _response(sock, h11.Connection(h11.CLIENT))
    assert status == 431 and b"over" in body
    with _dial(proxy) as sock:
        sock.sendall(b"\x16\x03\x01 this is TLS, not HTTP\r\n\r\n")
        status, body = _response(sock, h11.Connection(h11.CLIENT))
    assert status == 400 and b"not a valid HTTP request" in body
    with _dial(proxy) as sock:  # an https URL sent as a plain request: CONNECT is the way
        status, body = _get(sock, h11.Connection(h11.CLIENT), f"https://{ALLOWED}/x")
    assert status == 400 and b"CONNECT" in body
    assert proxy.stats.allowed == 0


def test_connections_beyond_the_limit_wait_for_a_free_one(
        upstream: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.environments.egress as egress

    port, _ = upstream
    monkeypatch.setattr(egress, "MAX_CONNECTIONS", 2)
    with RegistryProxy(EgressPolicy(frozenset({ALLOWED}), frozenset({port})),
                       connect=_to_loopback) as running:
        idle = [_dial(running), _dial(running)]  # a step holding every slot, saying nothing
        waiting = _dial(running)
        conn = h11.Connection(h11.CLIENT)
        waiting.sendall(conn.send(h11.Request(method="GET", target=f"http://{ALLOWED}:{port}/w",
                                              headers=[("Host", ALLOWED)])) or b"")
        waiting.settimeout(1.0)
        with pytest.raises(TimeoutError):
            waiting.recv(1)  # queued, not served: no third thread
        idle.pop().close()
        waiting.settimeout(30)
        assert _response(waiting, conn) == (200, b"upstream saw /w\n")
        for sock in (*idle, waiting):
            sock.close()


def test_the_policy_is_the_registries_plus_the_recipes_mirror() -> None:
    policy = policy_for(["http://127.0.0.1:3142/debian", "https://mirror.example.org/debian"])
    assert policy.hosts == frozenset(REGISTRY_HOSTS)
    assert policy.refusal("PyPI.org.", 443) is None  # case and a trailing dot do not matter
    assert policy.refusal("pypi.org.evil.example", 443) is not None
    assert policy.refusal("evil.pypi.org", 443) is not None  # exact names, no suffixes
    assert policy.refusal("pypi.org", 22) is not None
    # a mirror is its host on its port, nothing more: a local apt cache opens one port of
    # the building machine's loopback, not the others
    assert policy.refusal("127.0.0.1", 3142) is None
    assert policy.refusal("127.0.0.1", 80) is not None
    assert policy.refusal("pypi.org", 3142) is not None
    assert policy.refusal("mirror.example.org", 443) is None
    assert policy.refusal("mirror.example.org", 80) is not None
    assert "127.0.0.1:3142" in policy.reachable() and "pypi.org:443" in policy.reachable()
    assert "127.0.0.1:80" not in policy.reachable()
    assert policy_for(["http://deb.debian.org/debian"]) == policy_for()


@pytest.fixture
def machine_proxy(upstream: tuple[int, list[str]]) -> Iterator[tuple[RegistryProxy, int]]:
    """A stand-in for the building machine's own HTTP proxy, on TCP: a second registry proxy
    (it allows the test's hosts) behind the real forwarder's splicer from a loopback port."""
    from assay.sandbox.forwarder import Splicer, unix_connector

    port, _ = upstream
    inner = RegistryProxy(EgressPolicy(frozenset({ALLOWED, OTHER}), frozenset({port})),
                          connect=_to_loopback)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop_r, stop_w = socket.socketpair()
    splicer = Splicer(listener, unix_connector(str(inner.socket_path)), stop_sock=stop_r)
    thread = threading.Thread(target=splicer.run, daemon=True)
    thread.start()
    try:
        yield inner, listener.getsockname()[1]
    finally:
        stop_w.send(b"x")
        thread.join(10)
        splicer.close_all()
        stop_r.close()
        stop_w.close()
        inner.close()


def test_the_machines_own_proxy_carries_allowed_requests_only(
        upstream: tuple[int, list[str]],
        machine_proxy: tuple[RegistryProxy, int]) -> None:
    from assay.environments.host_proxy import host_proxies

    port, seen = upstream
    machine, machine_port = machine_proxy
    proxies = host_proxies({"http_proxy": f"http://build:s3cret@127.0.0.1:{machine_port}",
                            "HTTPS_PROXY": f"127.0.0.1:{machine_port}",
                            "no_proxy": "internal.example"})
    assert proxies.https is not None and proxies.https.authorization is None
    assert proxies.http is not None and proxies.http.authorization is not None
    assert "s3cret" not in repr(proxies)  # credentials stay out of any printed form
    assert proxies.via("https", "mirror.internal.example") is None
    # our proxy resolves nothing itself here: every connection must go through the machine's
    unreachable = "no direct connection in this test"

    def refuse(host: str, port: int) -> socket.socket:
        if port == machine_port:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        raise OSError(unreachable)

    with RegistryProxy(EgressPolicy(frozenset({ALLOWED}), frozenset({port})), connect=refuse,
                       upstream=proxies) as ours:
        with _dial(ours) as sock:
            status, body = _get(sock, h11.Connection(h11.CLIENT),
                                f"http://{ALLOWED}:{port}/through")
        assert (status, body) == (200, b"upstream saw /through\n")
        with _dial(ours) as sock:
            sock.sendall(f"CONNECT {ALLOWED}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1)
            assert head.startswith(b"HTTP/1.1 200 ")
            status, body = _get(sock, h11.Connection(h11.CLIENT),
                                f"http://{ALLOWED}:{port}/tunnelled")
        # the tunnel's bytes reached the server as sent (this client's absolute form)
        assert (status, body) == (200, f"upstream saw http://{ALLOWED}:{port}/tunnelled\n"
                                  .encode())
        # refused by ours before the machine's proxy (which would allow it) sees anything
        with _dial(ours) as sock:
            status, body = _get(sock, h11.Connection(h11.CLIENT), f"http://{OTHER}:{port}/x")
        assert status == 403
    assert machine.stats.allowed == 2 and machine.stats.refused == 0
    assert len(seen) == 2


def test_close_removes_the_socket_and_ends_open_connections(
        upstream: tuple[int, list[str]]) -> None:
    port, _ = upstream
    proxy = RegistryProxy(EgressPolicy(frozenset({ALLOWED}), frozenset({port})),
                          connect=_to_loopback)
    idle = _dial(proxy)
    # one exchange first, so the connection is being served (kept alive), not still queued
    assert _get(idle, h11.Connection(h11.CLIENT), f"http://{ALLOWED}:{port}/a")[0] == 200
    folder: Path = proxy.directory
    proxy.close()
    assert not folder.exists()
    idle.settimeout(10)
    assert idle.recv(10) == b""  # the proxy's end was closed
    idle.close()


# -- real steps in the build sandbox (the shared base image, read-only) ----------------------

#: Run by the image's own python3 inside a step: what the step's network lets it do.
PROBE = r'''
import json, socket, sys, urllib.error, urllib.request
out = {}
def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except urllib.error.HTTPError as exc:
        out[name] = ["http", exc.code, exc.read().decode()[:300]]
    except Exception as exc:
        out[name] = ["error", type(exc).__name__, str(exc)[:300],
                     getattr(exc, "errno", None) or getattr(getattr(exc, "reason", None),
                                                             "errno", None)]
def direct(host, port):
    socket.create_connection((host, port), timeout=10).close()
    return "connected"
def fetch(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return [r.status, r.read().decode()[:200]]
for i, arg in enumerate(sys.argv[1:]):
    kind, _, rest = arg.partition("=")
    if kind == "direct":
        host, _, port = rest.rpartition(":")
        attempt(arg, lambda: direct(host, int(port)))
    elif kind == "dns":
        attempt(arg, lambda: socket.getaddrinfo(rest, 443)[0][4][0])
    else:
        attempt(arg, lambda: fetch(rest))
for name, value in out.items():
    print("@probe " + json.dumps([name, value]))
'''


@pytest.fixture(scope="module")
def base_rootfs() -> Path:
    from support.images import base_image

    store, image = base_image()
    return store.rootfs(image.digest)


def _probe(rootfs: Path, proxy: RegistryProxy, *targets: str,
           ro_binds: tuple[tuple[Path, str], ...] = (),
           extra_env: dict[str, str] | None = None) -> dict[str, list[object]]:
    import json

    from assay.environments.build_sandbox import DEFAULT_PATH, StepEgress, run_in_root

    run = run_in_root(rootfs, ["python3", "-c", PROBE, *targets],
                      env={"PATH": DEFAULT_PATH, "HOME": "/tmp", **(extra_env or {})},
                      writable=False, ro_binds=ro_binds, timeout=180,
                      egress=StepEgress(proxy.socket_path))
    assert run.ok and run.egress_failure is None, (run, run.tail)
    return dict(json.loads(t[len("@probe "):]) for t in run.tail if t.startswith("@probe "))


def test_a_step_has_no_route_out_and_reaches_only_allowed_hosts_through_the_proxy(
        base_rootfs: Path, proxy: RegistryProxy, upstream: tuple[int, list[str]]) -> None:
    import errno

    port, seen = upstream
    got = _probe(base_rootfs, proxy,
                 "direct=192.0.2.10:443",  # anywhere off the host: no route at all
                 f"direct=127.0.0.1:{port}",  # the host's loopback is not the step's
                 "dns=pypi.org",
                 f"get=http://{ALLOWED}:{port}/allowed",
                 f"get=http://{OTHER}:{port}/not-allowed")
    assert got["direct=192.0.2.10:443"][0] == "error"
    assert got["direct=192.0.2.10:443"][3] == errno.ENETUNREACH, got
    assert got[f"direct=127.0.0.1:{port}"][:2] == ["error", "ConnectionRefusedError"], got
    assert got["dns=pypi.org"][0] == "error", got
    assert got[f"get=http://{ALLOWED}:{port}/allowed"] == [
        "ok", [200, "upstream saw /allowed\n"]]
    refused = got[f"get=http://{OTHER}:{port}/not-allowed"]
    assert refused[:2] == ["http", 403] and "not a package registry" in str(refused[2])
    assert seen == [f"{ALLOWED}:{port} /allowed"]  # only what the policy allows reached it


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError:
        return False
    return True


def test_debian_and_pypi_are_reached_through_the_proxy_and_nothing_else(
        base_rootfs: Path) -> None:
    from assay.environments.build_sandbox import DEFAULT_PATH, StepEgress, run_in_root
    from assay.environments.debian import APT_BUILD_SETTINGS, host_ca_bundle

    for host, port in (("deb.debian.org", 80), ("pypi.org", 443)):
        if not _reachable(host, port):
            pytest.skip(f"{host}:{port} is not reachable from this machine")
    ca = host_ca_bundle()
    if ca is None:
        pytest.skip("no CA bundle on this host for HTTPS from the step")
    with RegistryProxy(policy_for(["http://deb.debian.org/debian"])) as proxy:
        got = _probe(base_rootfs, proxy, "get=https://pypi.org/simple/six/",
                     "get=https://example.com/", "get=http://example.com/",
                     ro_binds=((ca, "/dev/.host-ca.crt"),),
                     extra_env={"SSL_CERT_FILE": "/dev/.host-ca.crt"})
        assert got["get=https://pypi.org/simple/six/"][0] == "ok", got
        assert "six" in str(got["get=https://pypi.org/simple/six/"][1])
        # https elsewhere: the CONNECT is refused, so the tunnel never opens
        assert got["get=https://example.com/"][0] == "error", got
        assert "403" in str(got["get=https://example.com/"][2]), got
        assert got["get=http://example.com/"][:2] == ["http", 403], got
        # apt, configured as a build configures it, fetches the archive's index and a package
        # (into /tmp: the shared image stays read-only)
        options = [f"-o{line.strip().rstrip(';').replace(' ', '=', 1)}".replace('"', "")
                   for line in APT_BUILD_SETTINGS.splitlines()]
        options += ["-oDir::State::Lists=/tmp/lists", "-oDir::Cache=/tmp/cache",
                    "-oDebug::NoLocking=1"]
        script = ('mkdir -p /tmp/lists/partial /tmp/cache/archives/partial /tmp/get && '
                  'cd /tmp/get && apt-get -qq "$@" update && apt-get -qq "$@" download tree '
                  '&& ls /tmp/get')
        run = run_in_root(base_rootfs, ["/bin/sh", "-c", script, "apt", *options],
                          env={"PATH": DEFAULT_PATH, "HOME": "/tmp"}, writable=False,
                          timeout=300, egress=StepEgress(proxy.socket_path))
        assert run.ok, run.tail
        assert any(t.startswith("tree_") and t.endswith(".deb") for t in run.tail), run.tail
        assert proxy.stats.refused_hosts == ["example.com"]
        assert proxy.stats.allowed >= 3


# -- the full form: real builds ---------------------------------------------------------------

#: ``wget`` Recommends ``ca-certificates``, whose bundle the next line needs; then wget fetches
#: from PyPI through the registry proxy (trusting the building machine's CA bundle, which the
#: build names in ``SSL_CERT_FILE``: these machines' HTTPS may pass an inspecting proxy).
RECOMMENDS_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y wget && rm -rf /var/lib/apt/lists/*
RUN test -s /etc/ssl/certs/ca-certificates.crt && \\
    wget -q --ca-certificate="$SSL_CERT_FILE" -O /pypi-six.html https://pypi.org/simple/six/
WORKDIR /app
"""
REFUSED_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends wget
RUN wget -q -O /dev/null http://example.com/
WORKDIR /app
"""


@full_only
def test_recommends_installed_through_the_proxy_and_two_builds_give_one_digest(
        tmp_path: Path) -> None:
    from support.images import require_mmdebstrap

    from assay.environments.build import build_environment
    from assay.environments.store import ImageStore

    require_mmdebstrap()
    if not _reachable("deb.debian.org", 80) or not _reachable("pypi.org", 443):
        pytest.skip("Debian's archive or PyPI is not reachable from this machine")
    (tmp_path / "ctx").mkdir()
    dockerfile = tmp_path / "ctx" / "Dockerfile"
    dockerfile.write_text(RECOMMENDS_DOCKERFILE)
    # Docker Hub's debian image is not what this test is about: the translation's Debian
    images = [build_environment(dockerfile, store=ImageStore(tmp_path / f"store{i}"),
                                approximate_base=True).image
              for i in (1, 2)]
    first, second = images
    # where Docker Hub cannot be reached (here), the translation stood in, and says so
    assert any(n.startswith("built on docker.io/library/debian") for n in first.notes) or (
        first.substitutions[0] == "FROM docker.io/library/debian:bookworm-slim could not be "
        "pulled here: the base approximated (--approximate-base)"), first.substitutions
    assert first.digest == second.digest  # reproducible, proxy and all
    assert {"wget", "ca-certificates"} <= set(first.packages)  # the Recommends came too
    rootfs = ImageStore(tmp_path / "store1").rootfs(first.digest)
    assert "six" in (rootfs / "pypi-six.html").read_text()
    assert not (rootfs / "etc/apt/apt.conf.d/99assay-build").exists()
    assert not any((rootfs / "dev").glob(".assay*"))
    assert first.build_hosts and "pypi.org:443" in first.build_hosts


@full_only
def test_a_step_reaching_elsewhere_fails_naming_the_refused_host(tmp_path: Path) -> None:
    from support.images import require_mmdebstrap

    from assay.environments.build import build_environment
    from assay.environments.debian import BuildFailed
    from assay.environments.store import ImageStore

    require_mmdebstrap()
    if not _reachable("deb.debian.org", 80):
        pytest.skip("Debian's archive is not reachable from this machine")
    (tmp_path / "ctx").mkdir()
    dockerfile = tmp_path / "ctx" / "Dockerfile"
    dockerfile.write_text(REFUSED_DOCKERFILE)
    store = ImageStore(tmp_path / "store")
    with pytest.raises(BuildFailed) as caught:
        build_environment(dockerfile, store=store, approximate_base=True)
    message = str(caught.value)
    assert "the proxy refused example.com" in message, message
    assert "pypi.org" in message  # the allowed list is named
    assert store.ls() == []
