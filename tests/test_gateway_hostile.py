"""The gateway against an agent that attacks it, with real parts only: the real gateway on its
loop thread, raw sockets writing what an attacker would write, and an upstream built on Python's
``http.server``, which takes a bare line feed as a line end. A gateway that forwarded a bare LF
would really smuggle a second request to it, one ending in the gateway's own
``Authorization: Bearer <real key>``; the first test shows that upstream does split such bytes
into two requests, so its "nothing arrived" means something.

The large-body case sends a body declared as 512 MiB and a chunked one streamed until the
gateway hangs up, against a limit lowered to 1 MiB (the default of 32 MiB is checked with a
declared length only), so the default run moves a few MiB, not 512."""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.models.gateway.service import Gateway, ServerLimits, Upstream
from assay.records.io import iter_rows
from assay.records.ledger import GatewayEvent, ModelCall

REAL_KEY = "sk-real-0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a"
MODEL = "pinned-model"
PRICES = {MODEL: {"input": 2.0, "output": 8.0}}
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()


# ------------------------------------------------------------------ a lenient real upstream


class _Upstream(BaseHTTPRequestHandler):
    """Answers every request with a small chat completion and records what it read."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": self.path,  # type: ignore[attr-defined]
                                 "headers": [(k.lower(), v) for k, v in self.headers.items()],
                                 "body": body})
        out = json.dumps({"id": "c1", "object": "chat.completion", "model": MODEL,
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": "ok"}}],
                          "usage": {"prompt_tokens": 10, "completion_tokens": 2},
                          "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    server.seen = []  # type: ignore[attr-defined]
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _base(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with Gateway(log_path=tmp_path / "gateway_events.jsonl",
                 limits=ServerLimits(request_body_bytes=1024 * 1024, header_timeout=1.5)) as gw:
        yield gw


def _open(gw: Gateway, server: ThreadingHTTPServer, tmp: Path, attempt: str = "a1",
          protocol: str = "chat") -> tuple[str, Path]:
    ledger = tmp / attempt / "model_calls.jsonl"
    token = gw.open_attempt(attempt, ledger_path=ledger, model=MODEL, prices=PRICES,
                            upstream=Upstream(_base(server), REAL_KEY),
                            protocol=protocol)  # type: ignore[arg-type]
    return token, ledger


def _exchange(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send raw bytes, half-close nothing, read until the gateway closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        reply = b""
        try:
            while chunk := conn.recv(65536):
                reply += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return reply


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _events(tmp: Path) -> list[GatewayEvent]:
    path = tmp / "gateway_events.jsonl"
    return [GatewayEvent.read(row, path) for row in iter_rows(path)] if path.exists() else []


def _everything_written(tmp: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in tmp.rglob("*") if p.is_file())


def _good_call(gw: Gateway, token: str) -> httpx.Response:
    return httpx.post(f"{gw.base_url}/chat/completions", content=BODY, timeout=10,
                      headers={"Authorization": f"Bearer {token}",
                               "Content-Type": "application/json"})


# ------------------------------------------------------------------ smuggling


SMUGGLE = b"probe\n\nGET /v1/smuggled HTTP/1.1\nX-Pad: pad"


def test_the_upstream_really_splits_a_bare_lf(upstream: ThreadingHTTPServer) -> None:
    """What an unguarded gateway would have written: the upstream reads two requests, the
    second with the key that came after the injected line feeds."""
    head = (b"GET /v1/models HTTP/1.1\r\nHost: up\r\nContent-Length: 0\r\nUser-Agent: " + SMUGGLE
            + b"\r\nAuthorization: Bearer " + REAL_KEY.encode() + b"\r\nConnection: close\r\n\r\n")
    _exchange(upstream.server_address[1], head, timeout=3)
    seen = upstream.seen  # type: ignore[attr-defined]
    assert [r["path"] for r in seen] == ["/v1/models", "/v1/smuggled"]
    assert ("authorization", f"Bearer {REAL_KEY}") in seen[1]["headers"]


@pytest.mark.parametrize("route", ["GET /v1/models", "POST /v1/chat/completions"])
def test_bare_lf_smuggling_is_refused(gateway: Gateway, upstream: ThreadingHTTPServer,
                                      tmp_path: Path, route: str) -> None:
    token, ledger = _open(gateway, upstream, tmp_path)
    method, path = route.split()
    body = BODY if method == "POST" else b""
    reply = _exchange(gateway.port, (
        f"{method} {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
        + b"User-Agent: " + SMUGGLE + b"\r\n\r\n" + body)
    assert _status(reply) == 400
    assert upstream.seen == []  # type: ignore[attr-defined]
    assert REAL_KEY.encode() not in reply
    assert not ledger.exists() or list(iter_rows(ledger)) == []
    (event,) = _events(tmp_path)
    assert (event.kind, event.reason, event.status) == ("refused", "malformed", 400)
    assert REAL_KEY not in _everything_written(tmp_path)
    # the gateway keeps serving, and that call does reach the upstream, once
    assert _good_call(gateway, token).status_code == 200
    assert [r["path"] for r in upstream.seen] == ["/v1/chat/completions"]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ malformed requests

# Each: what a hostile or broken client writes after the request line, Host and token. Every
# one must be a 400 with nothing reaching the upstream.
MALFORMED: dict[str, bytes] = {
    "lf_in_value": b"User-Agent: a\nb\r\nContent-Length: 0\r\n\r\n",
    "cr_in_value": b"User-Agent: a\rb\r\nContent-Length: 0\r\n\r\n",
    "nul_in_value": b"User-Agent: a\x00b\r\nContent-Length: 0\r\n\r\n",
    "nul_in_name": b"User\x00Agent: a\r\nContent-Length: 0\r\n\r\n",
    "lf_in_name": b"User\nAgent: a\r\nContent-Length: 0\r\n\r\n",
    "space_before_colon": b"Content-Length : 2\r\n\r\n{}",
    "obs_fold": b"User-Agent: a\r\n  folded\r\nContent-Length: 0\r\n\r\n",
    "obs_fold_tab": b"Content-Type: application/json\r\n\tx\r\nContent-Length: 0\r\n\r\n",
    "duplicate_content_length": b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    "conflicting_content_length": b"Content-Length: 2\r\nContent-Length: 12\r\n\r\n{}",
    "content_length_list": b"Content-Length: 2, 2\r\n\r\n{}",
    "negative_content_length": b"Content-Length: -2\r\n\r\n{}",
    "te_with_content_length": b"Transfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n"
                              b"2\r\n{}\r\n0\r\n\r\n",
    "te_not_chunked": b"Transfer-Encoding: gzip\r\n\r\n{}",
    "invalid_chunk_size": b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "chunk_without_crlf": b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    "chunk_size_bare_lf": b"Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n",
    "upgrade": b"Connection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_request_is_a_400_and_never_forwarded(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path, kind: str) -> None:
    token, _ = _open(gateway, upstream, tmp_path)
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
    reply = _exchange(gateway.port, head.encode() + MALFORMED[kind])
    assert _status(reply) == 400, reply[:200]
    assert upstream.seen == []  # type: ignore[attr-defined]
    (event,) = _events(tmp_path)
    assert (event.kind, event.reason, event.status) == ("refused", "malformed", 400)
    assert token not in (event.detail or "")
    assert _good_call(gateway, token).status_code == 200


@pytest.mark.parametrize("target", ["http://evil.example/v1/chat/completions",
                                    "*", "/v1/chat/completions#frag"])
def test_request_target_must_be_a_path(gateway: Gateway, upstream: ThreadingHTTPServer,
                                       tmp_path: Path, target: str) -> None:
    token, _ = _open(gateway, upstream, tmp_path)
    reply = _exchange(gateway.port, (
        f"POST {target} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY)
    assert _status(reply) == 400
    assert upstream.seen == []  # type: ignore[attr-defined]
    assert [e.reason for e in _events(tmp_path)] == ["malformed"]


def test_oversized_head_is_a_431(gateway: Gateway, upstream: ThreadingHTTPServer,
                                 tmp_path: Path) -> None:
    token, _ = _open(gateway, upstream, tmp_path)
    pad = "".join(f"X-Pad-{i}: {'p' * 900}\r\n" for i in range(90))
    reply = _exchange(gateway.port, (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {token}\r\n"
        f"{pad}Content-Length: 0\r\n\r\n").encode())
    assert _status(reply) == 431
    assert upstream.seen == []  # type: ignore[attr-defined]
    assert [e.reason for e in _events(tmp_path)] == ["head_too_large"]


# ------------------------------------------------------------------ allow-lists


def test_only_allowed_headers_and_no_agent_credentials_go_upstream(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    token, ledger = _open(gateway, upstream, tmp_path)
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json", "User-Agent": "agent/1.0", "OpenAI-Beta": "x=v1",
            "X-Api-Key": "sk-agents-own-key", "Api-Key": "sk-agents-other-key",
            "Cookie": "session=abc", "Proxy-Authorization": "Basic Zm9vOmJhcg==",
            "OpenAI-Organization": "org-attacker", "X-Forwarded-For": "10.0.0.1",
            "X-Stainless-Lang": "python", "TE": "trailers", "Accept-Encoding": "gzip",
            "Anthropic-Version": "2023-06-01"}
    resp = httpx.post(f"{gateway.base_url}/chat/completions", content=BODY, headers=sent,
                      timeout=10)
    assert resp.status_code == 200
    (seen,) = upstream.seen  # type: ignore[attr-defined]
    names = {k for k, _ in seen["headers"]}
    assert names == {"host", "content-length", "connection", "content-type", "accept",
                     "user-agent", "openai-beta", "authorization", "accept-encoding"}
    headers = dict(seen["headers"])
    assert headers["authorization"] == f"Bearer {REAL_KEY}"
    assert headers["accept-encoding"] == "identity"
    assert token not in json.dumps(seen["headers"])
    assert "sk-agents-own-key" not in json.dumps(seen["headers"])
    assert [r.status for r in (ModelCall.read(r, ledger) for r in iter_rows(ledger))] == [200]


def test_anthropic_headers_and_the_beta_query(gateway: Gateway, upstream: ThreadingHTTPServer,
                                              tmp_path: Path) -> None:
    token, _ = _open(gateway, upstream, tmp_path, protocol="anthropic")
    body = json.dumps({"model": MODEL, "max_tokens": 5,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    resp = httpx.post(f"{gateway.root_url}/v1/messages?beta=true", content=body, timeout=10,
                      headers={"x-api-key": token, "anthropic-version": "2023-06-01",
                               "anthropic-beta": "tools-2024", "content-type":
                               "application/json", "openai-beta": "no"})
    assert resp.status_code == 200
    (seen,) = upstream.seen  # type: ignore[attr-defined]
    assert seen["path"] == "/v1/messages?beta=true"
    headers = dict(seen["headers"])
    assert headers["x-api-key"] == REAL_KEY
    assert headers["anthropic-beta"] == "tools-2024" and "openai-beta" not in headers
    assert "authorization" not in headers


@pytest.mark.parametrize("target", [
    "/v1/chat/completions?api-version=2024", "/v1/chat/completions?beta=true",
    "/v1/models?after_id=x", "/v1/chat/completions?a=%0d%0aX-Evil:%201",
])
def test_a_query_the_protocol_does_not_define_is_refused(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path, target: str) -> None:
    token, ledger = _open(gateway, upstream, tmp_path)
    method = "GET" if target.startswith("/v1/models") else "POST"
    resp = httpx.request(method, f"{gateway.root_url}{target}", timeout=10,
                         content=BODY if method == "POST" else None,
                         headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 400
    assert upstream.seen == []  # type: ignore[attr-defined]
    (row,) = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
    assert (row.status, row.forwarded) == (400, False) and "query parameter" in row.error


@pytest.mark.parametrize("target", ["/v1/files", "/v1/chat/completions/../../admin",
                                    "/v1/chat%2Fcompletions", "/v2/chat/completions",
                                    "/v1/embeddings", "/admin"])
def test_a_path_off_the_list_is_404_and_recorded(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path, target: str) -> None:
    token, ledger = _open(gateway, upstream, tmp_path)
    resp = httpx.post(f"{gateway.root_url}{target}", content=BODY, timeout=10,
                      headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 404
    assert upstream.seen == []  # type: ignore[attr-defined]
    (row,) = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
    assert (row.status, row.forwarded, row.upstream_status) == (404, False, None)


# ------------------------------------------------------------------ bounded bodies


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_declared_512_mib_body_is_413_before_a_byte_is_read(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    token, _ = _open(gateway, upstream, tmp_path)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        conn.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                      f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {512 * 1024 * 1024}\r\n\r\n").encode())
        reply = conn.recv(65536)  # answered without waiting for any of the body
    assert _status(reply) == 413
    assert b"request_too_large" in reply or b"body_too_large" in reply
    assert upstream.seen == []  # type: ignore[attr-defined]
    (event,) = _events(tmp_path)
    assert (event.reason, event.status, event.attempt_id) == ("body_too_large", 413, "a1")


def test_streamed_512_mib_body_is_cut_at_the_limit(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    """A chunked body that would be 512 MiB: the gateway answers 413 once 1 MiB has arrived and
    hangs up; the sender gets nowhere near 512 MiB out, and the process holds no copy of it."""
    token, _ = _open(gateway, upstream, tmp_path)
    before = _peak_rss_mib()
    piece = b"x" * (1024 * 1024)
    sent = 0
    reply = b""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        conn.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                      f"Authorization: Bearer {token}\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n").encode())
        try:
            while sent < 512 * len(piece):
                conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while chunk := conn.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    assert sent < 64 * len(piece), f"the gateway read {sent >> 20} MiB before stopping"
    if reply:  # a reset can overtake the answer; the event below is the record either way
        assert _status(reply) == 413
    assert upstream.seen == []  # type: ignore[attr-defined]
    assert [(e.reason, e.status) for e in _events(tmp_path)] == [("body_too_large", 413)]
    assert _peak_rss_mib() - before < 128


def test_default_limit_is_32_mib(upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    with Gateway() as gw:
        assert gw.applied_limits()["request_body_mib"] == 32
        token, _ = _open(gw, upstream, tmp_path)
        for size, expect in ((32 * 1024 * 1024 + 1, b" 413 "), (33 * 1024 * 1024, b" 413 ")):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as conn:
                conn.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                              f"Authorization: Bearer {token}\r\n"
                              f"Content-Length: {size}\r\n\r\n").encode())
                assert expect in conn.recv(65536)[:20]
    assert upstream.seen == []  # type: ignore[attr-defined]


# ------------------------------------------------------------------ scoped tokens


def test_token_reuse_after_the_attempt_ended(gateway: Gateway, upstream: ThreadingHTTPServer,
                                             tmp_path: Path) -> None:
    token, ledger = _open(gateway, upstream, tmp_path)
    assert _good_call(gateway, token).status_code == 200
    gateway.close_attempt(token)
    rows_before = ledger.read_bytes()
    # the same token, on a new connection and on a kept-alive one
    assert _good_call(gateway, token).status_code == 401
    with httpx.Client(timeout=10) as client:
        for _ in range(2):
            resp = client.post(f"{gateway.base_url}/chat/completions", content=BODY,
                               headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 401
    assert len(upstream.seen) == 1  # type: ignore[attr-defined]
    assert ledger.read_bytes() == rows_before
    events = _events(tmp_path)
    assert [(e.reason, e.attempt_id) for e in events] == [("revoked_token", "a1")] * 3


def test_a_token_is_its_own_attempts_only(gateway: Gateway, upstream: ThreadingHTTPServer,
                                          tmp_path: Path) -> None:
    """Attempt b's agent holding attempt a's token (leaked, or kept from an earlier run): while
    a runs the call is a's, in a's ledger and budget, never b's; once a ended it is refused,
    even on a connection b's own token opened."""
    token_a, ledger_a = _open(gateway, upstream, tmp_path, "a")
    token_b, ledger_b = _open(gateway, upstream, tmp_path, "b")
    with httpx.Client(timeout=10) as client:
        url = f"{gateway.base_url}/chat/completions"
        assert client.post(url, content=BODY,
                           headers={"Authorization": f"Bearer {token_b}"}).status_code == 200
        assert client.post(url, content=BODY,
                           headers={"Authorization": f"Bearer {token_a}"}).status_code == 200
        gateway.close_attempt(token_a)
        assert client.post(url, content=BODY,
                           headers={"Authorization": f"Bearer {token_a}"}).status_code == 401
    assert [r["attempt_id"] for r in iter_rows(ledger_a)] == ["a"]
    assert [r["attempt_id"] for r in iter_rows(ledger_b)] == ["b"]
    assert gateway.attempt_usage("b")["calls"] == 1
    assert [(e.reason, e.attempt_id) for e in _events(tmp_path)] == [("revoked_token", "a")]


def test_connections_per_attempt_are_capped(upstream: ThreadingHTTPServer,
                                            tmp_path: Path) -> None:
    with Gateway(log_path=tmp_path / "gateway_events.jsonl", connections_per_attempt=3) as gw:
        token, _ = _open(gw, upstream, tmp_path)
        other, _ = _open(gw, upstream, tmp_path, "other")
        assert gw.applied_limits()["connections_per_attempt"] == 3
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Length: {len(BODY)}\r\n\r\n"
                   ).encode() + BODY
        held = []
        for _ in range(3):  # three connections kept open, each with one call answered
            conn = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            conn.sendall(request)
            assert _status(conn.recv(65536)) == 200
            held.append(conn)
        try:
            extra = _exchange(gw.port, request)
            assert _status(extra) == 429 and b"connection_cap" in extra
            # another attempt is not held back by this one's cap
            assert _good_call(gw, other).status_code == 200
        finally:
            held.pop().close()
        # with one let go, a new connection is served again (once the gateway saw it close)
        deadline = time.monotonic() + 10
        while _status(_exchange(gw.port, request)) != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for conn in held:
            conn.close()
        events = [e for e in _events(tmp_path) if e.reason == "connection_cap"]
        assert events and all((e.attempt_id, e.status) == ("a1", 429) for e in events)
    assert len(upstream.seen) == 3 + 1 + 1  # type: ignore[attr-defined]


def test_slow_loris_is_dropped_and_others_are_served(
        gateway: Gateway, upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    """A client trickling its head one byte at a time is cut off after the header timeout
    (1.5 s here, 10 s by default) while another agent's calls go through meanwhile."""
    token, ledger = _open(gateway, upstream, tmp_path)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
            f"Authorization: Bearer {token}\r\nX-Slow: {'s' * 200}\r\n").encode()
    result: dict[str, Any] = {}

    def trickle() -> None:
        started = time.monotonic()
        reply = b""
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
            result["connected"] = time.monotonic()
            try:
                for byte in head:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.05)
                    if time.monotonic() - started > 20:
                        break
                reply = conn.recv(65536)
            except (BrokenPipeError, ConnectionResetError):
                pass
        result.update(reply=reply, seconds=time.monotonic() - started, cut=time.monotonic())

    slow = threading.Thread(target=trickle)
    slow.start()
    done_at: list[float] = []
    while slow.is_alive():
        assert _good_call(gateway, token).status_code == 200
        done_at.append(time.monotonic())
        time.sleep(0.1)
    slow.join()
    served = len(done_at)
    # served while the trickling connection held its slot (how many depends on the load: a
    # call took over half a second with eight test workers on two cores)
    assert any(result["connected"] < t < result["cut"] for t in done_at), (result, done_at)
    assert result["seconds"] < 10  # the whole head would have taken over 12 s to trickle
    if result["reply"]:
        assert _status(result["reply"]) == 408
    assert [(e.reason, e.status) for e in _events(tmp_path)] == [("header_timeout", 408)]
    assert len(list(iter_rows(ledger))) == served


def test_a_silent_connection_is_closed(gateway: Gateway) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        reply = conn.recv(65536)
    assert time.monotonic() - started < 9
    assert reply == b"" or _status(reply) == 408


# ------------------------------------------------------------------ a hostile upstream


class _RawUpstream:
    """An upstream that reads each request's head and body and answers with scripted raw
    bytes (``answers``, one per request, in order; a callable streams its answer)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.connections = 0
        self.sent = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while self.answers:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                answer = self.answers.pop(0)
                try:
                    if callable(answer):
                        answer(conn, self)
                    else:
                        conn.sendall(answer)
                except OSError:
                    return

    def close(self) -> None:
        self.answers.clear()
        self._sock.close()


def _answer(content: str, extra: str = "") -> bytes:
    body = json.dumps({"model": MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _open_raw(gw: Gateway, raw: _RawUpstream, tmp: Path) -> tuple[str, Path]:
    ledger = tmp / "a1" / "model_calls.jsonl"
    return gw.open_attempt("a1", ledger_path=ledger, model=MODEL, prices=PRICES,
                           upstream=Upstream(raw.base_url, REAL_KEY)), ledger


def test_a_malformed_upstream_answer_is_a_502(gateway: Gateway, tmp_path: Path) -> None:
    raw = _RawUpstream([_answer("first", "X-Evil: a\nSet-Cookie: planted=1\r\n")])
    try:
        token, ledger = _open_raw(gateway, raw, tmp_path)
        resp = _good_call(gateway, token)
    finally:
        raw.close()
    assert resp.status_code == 502 and "set-cookie" not in resp.headers
    (row,) = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
    assert row.status == 502 and "malformed answer" in row.error


def test_an_answer_nobody_asked_for_is_never_handed_on(gateway: Gateway,
                                                       tmp_path: Path) -> None:
    """An upstream that answers one request twice: the spare answer must not become the
    answer to the next call (the connection it sits on is not reused)."""
    raw = _RawUpstream([_answer("first") + _answer("SPARE"), _answer("second")])
    try:
        token, _ = _open_raw(gateway, raw, tmp_path)
        with httpx.Client(timeout=10) as client:
            url = f"{gateway.base_url}/chat/completions"
            auth = {"Authorization": f"Bearer {token}"}
            first = client.post(url, content=BODY, headers=auth).json()
            second = client.post(url, content=BODY, headers=auth).json()
    finally:
        raw.close()
    assert first["choices"][0]["message"]["content"] == "first"
    assert second["choices"][0]["message"]["content"] == "second"
    assert raw.connections == 2


def _endless(head: bytes, piece: bytes) -> Any:
    def send(conn: socket.socket, raw: _RawUpstream) -> None:
        conn.sendall(head)
        while raw.sent < 1024 ** 3:
            conn.sendall(piece)
            raw.sent += len(piece)
    return send


def test_a_huge_plain_answer_is_not_held(gateway: Gateway, tmp_path: Path) -> None:
    """An answer declared as 1 GiB: the gateway holds at most 64 MiB of it, then fails the
    call and hangs up on the upstream."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (1024 ** 3))
    raw = _RawUpstream([_endless(head, b"x" * (1 << 20))])
    before = _peak_rss_mib()
    try:
        token, ledger = _open_raw(gateway, raw, tmp_path)
        resp = _good_call(gateway, token)
    finally:
        raw.close()
    assert resp.status_code == 502
    (row,) = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
    assert "over" in row.error and row.usage_missing
    assert raw.sent < 256 * (1 << 20)
    assert _peak_rss_mib() - before < 300


def test_an_endless_stream_event_is_cut(gateway: Gateway, tmp_path: Path) -> None:
    """A stream whose one event never ends: the gateway waits for at most 8 MiB of it."""
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"100000\r\n" + b"d" * 0x100000 + b"\r\n"
    raw = _RawUpstream([_endless(head + b"6\r\ndata: \r\n", piece)])
    body = json.dumps({"model": MODEL, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        token, ledger = _open_raw(gateway, raw, tmp_path)
        with httpx.stream("POST", f"{gateway.base_url}/chat/completions", content=body,
                          headers={"Authorization": f"Bearer {token}"}, timeout=30) as resp:
            assert resp.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in resp.iter_bytes():
                    pass
    finally:
        raw.close()
    (row,) = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
    assert row.usage_missing and "event of the stream is over" in row.error
    assert raw.sent < 256 * (1 << 20)


def test_a_flood_of_connections_is_held_to_the_ceiling(upstream: ThreadingHTTPServer,
                                                       tmp_path: Path) -> None:
    """Connections that never send a token count against the gateway's ceiling, not an
    attempt's cap: past it a new one is closed unread, and the count is an event."""
    with Gateway(log_path=tmp_path / "gateway_events.jsonl", max_connections=4,
                 limits=ServerLimits(header_timeout=2.0)) as gw:
        token, _ = _open(gw, upstream, tmp_path)
        idle = [socket.create_connection(("127.0.0.1", gw.port), timeout=10) for _ in range(4)]
        try:
            time.sleep(0.2)  # let the gateway take them
            with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as extra:
                try:
                    assert extra.recv(65536) == b""
                except ConnectionResetError:
                    pass
        finally:
            for conn in idle:
                conn.close()
        deadline = time.monotonic() + 10
        while True:  # served again once the gateway saw the idle ones go
            try:
                if _good_call(gw, token).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.05)
        busy = [e for e in _events(tmp_path) if e.reason == "gateway_busy"]
        assert busy and busy[0].status == 503 and "4 were already open" in busy[0].detail
