"""Added latency per HTTP request through the model proxy (forwarder, and relay for TCP) vs direct.

    .venv/bin/python bench/proxy_overhead.py [--n 300] [--rounds 6] [--gateway tcp|unix|both]

A tiny HTTP/1.1 gateway (one ``sendall`` per response, ``TCP_NODELAY``, keep-alive) runs in this
process. The same client program (the sandbox's ``python3``, raw sockets, ``perf_counter``) runs
inside bubblewrap twice per round: with ``network="host"`` against the gateway's own TCP port
(direct; for the Unix gateway, against its socket path), and with ``network="model-proxy"``
against ``127.0.0.1:<port>`` (through the forwarder, and for the TCP gateway the host relay
thread). Rounds alternate, so drift in machine load hits both sides. For each of "new connection
per request" and "keep-alive", prints p50/p95 of both sides and the added milliseconds, and
PASS/FAIL against the target of < 2 ms added at p50. Exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
from pathlib import Path

from assay.sandbox import Limits, Mount, ProxyTarget, run_sandboxed

TARGET_ADDED_P50_MS = 2.0
SANDBOX_PORT = 18080
_BODY = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
             + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY)

CLIENT = r"""
import json, socket, sys, time
family, where, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def connect():
    if family == "unix":
        s = socket.socket(socket.AF_UNIX); s.connect(where)
    else:
        host, port = where.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s
REQ = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}"
def ask(s):
    s.sendall(REQ)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("connection closed early")
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return
out = []
keep = connect() if mode == "keepalive" else None
for _ in range(n):
    t0 = time.perf_counter()
    if keep is None:
        s = connect(); ask(s); s.close()
    else:
        ask(keep)
    out.append((time.perf_counter() - t0) * 1000)
open("out.json", "w").write(json.dumps(out))
"""


def _handle(conn: socket.socket) -> None:
    if conn.family == socket.AF_INET:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            while len(buf) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            buf = buf[length:]
            conn.sendall(_RESPONSE)


def _serve(listener: socket.socket, stop: threading.Event) -> None:
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        threading.Thread(target=_handle, args=(conn,), daemon=True).start()


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _run_client(workdir: Path, args: list[str], **kw: object) -> list[float]:
    res = run_sandboxed(["python3", "-c", CLIENT, *args], workdir,
                        limits=Limits(wall_seconds=120.0), **kw)  # type: ignore[arg-type]
    if res.reason != "ok":
        raise SystemExit(f"client failed: {res.reason} {res.detail} {res.stderr_tail}")
    return json.loads((workdir / "out.json").read_text())


def bench(kind: str, n: int, rounds: int) -> bool:
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="assay-bench-proxy-") as tmp:
        tmpdir = Path(tmp)
        workdir = tmpdir / "work"
        workdir.mkdir()
        if kind == "tcp":
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            target = ProxyTarget(tcp=("127.0.0.1", port), port=SANDBOX_PORT)
            direct = dict(network="host", args=["tcp", f"127.0.0.1:{port}"])
        else:
            path = tmpdir / "gw.sock"
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(str(path))
            listener.listen(128)
            target = ProxyTarget(unix_socket=path, port=SANDBOX_PORT)
            direct = dict(network="none", args=["unix", "/run/gw/gw.sock"],
                          mounts=[Mount(source=path, target="/run/gw/gw.sock")])
        server = threading.Thread(target=_serve, args=(listener, stop), daemon=True)
        server.start()
        ok = True
        try:
            for mode in ("newconn", "keepalive"):
                sides: dict[str, list[float]] = {"direct": [], "proxied": []}
                per_run = n
                for _ in range(rounds):
                    d_args = [*direct["args"], str(per_run), mode]  # type: ignore[misc]
                    d_kw = {k: v for k, v in direct.items() if k != "args"}
                    sides["direct"] += _run_client(workdir, d_args, **d_kw)[5:]
                    p_args = ["tcp", f"127.0.0.1:{SANDBOX_PORT}", str(per_run), mode]
                    sides["proxied"] += _run_client(workdir, p_args, network="model-proxy",
                                                    proxy=target)[5:]
                d50, d95 = _pct(sides["direct"], 50), _pct(sides["direct"], 95)
                p50, p95 = _pct(sides["proxied"], 50), _pct(sides["proxied"], 95)
                added50, added95 = p50 - d50, p95 - d95
                verdict = "PASS" if added50 < TARGET_ADDED_P50_MS else "FAIL"
                ok = ok and verdict == "PASS"
                print(f"{kind:4} gateway, {mode:9}: direct p50 {d50:.3f} ms p95 {d95:.3f} ms | "
                      f"proxied p50 {p50:.3f} ms p95 {p95:.3f} ms | added p50 {added50:+.3f} ms "
                      f"p95 {added95:+.3f} ms  [{verdict}: target < {TARGET_ADDED_P50_MS} ms p50]"
                      f"  ({len(sides['proxied'])} requests per side)")
        finally:
            stop.set()
            server.join()
            listener.close()
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="requests per client run (default 200)")
    ap.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    ap.add_argument("--gateway", choices=("tcp", "unix", "both"), default="both")
    args = ap.parse_args(argv)
    if args.n < 10 or args.rounds < 1:
        ap.error("--n must be >= 10 and --rounds >= 1")
    kinds = ("tcp", "unix") if args.gateway == "both" else (args.gateway,)
    ok = all([bench(kind, args.n, args.rounds) for kind in kinds])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
