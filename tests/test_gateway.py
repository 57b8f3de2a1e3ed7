"""The model gateway, with real parts only: a scripted upstream model server started by the
test, the real gateway on its own loop thread, and the official ``openai`` client as the agent.
Every cost below is computed by hand from the price table, not by the code under test."""

from __future__ import annotations

import hashlib
import json
import pickle
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.scripted_server import Answer, Drop, ScriptedServer, Status, by_input

from assay.models.gateway.service import Gateway, Limits, Upstream
from assay.records.io import iter_rows
from assay.records.ledger import GatewayEvent, ModelCall

REAL_KEY = "sk-real-7f3c9d1e5b2a4c6e8f0a1b3d5e7f9a2c"
MODEL = "pinned-model"
PRICES = {MODEL: {"input": 2.0, "cached_input": 0.5, "output": 8.0}}
USAGE = {"prompt_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 400},
         "completion_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 120},
         "total_tokens": 1300}
# 600 uncached input at $2/M + 400 cached at $0.5/M + 300 output at $8/M
USAGE_COST = (600 * 2.0 + 400 * 0.5 + 300 * 8.0) / 1e6
TOOL_CALLS = [{"id": "call_1", "type": "function",
               "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'}}]


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    with Gateway(log_path=tmp_path / "gateway_events.jsonl") as gw:
        yield gw


def _open(gw: Gateway, server: ScriptedServer, tmp: Path, attempt: str = "a1", *,
          limits: Limits | None = None, stream_usage: bool = True) -> tuple[str, Path]:
    ledger = tmp / attempt / "model_calls.jsonl"
    token = gw.open_attempt(attempt, ledger_path=ledger,
                            upstream=Upstream(server.base_url, REAL_KEY,
                                              stream_usage=stream_usage),
                            model=MODEL, limits=limits, prices=PRICES)
    return token, ledger


def _agent(gw: Gateway, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)


def _rows(ledger: Path) -> list[ModelCall]:
    return [ModelCall.read(row, ledger) for row in iter_rows(ledger)]


def _ask(client: openai.OpenAI, text: str, **kw: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                  "content": text}], **kw)


def _collect(stream: Any) -> dict[str, Any]:
    content, calls, finish, usage, empty = "", {}, None, None, 0
    for part in stream:
        if part.usage is not None:
            usage = part.usage
        if not part.choices:
            empty += 1
            continue
        choice = part.choices[0]
        content += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    return {"content": content, "tool_calls": calls, "finish": finish, "usage": usage,
            "empty_chunks": empty}


# ------------------------------------------------------------------------- pass-through


def test_plain_call_passes_through_and_is_metered(gateway: Gateway, tmp_path: Path) -> None:
    answer = Answer("I will run the tests.", usage=USAGE, tool_calls=TOOL_CALLS,
                    finish_reason="tool_calls", model="pinned-model-2026")
    with ScriptedServer(by_input({"fix it": answer})) as server:
        direct = _ask(openai.OpenAI(base_url=server.base_url, api_key=REAL_KEY,
                                    max_retries=0), "fix it")
        token, ledger = _open(gateway, server, tmp_path)
        via = _ask(_agent(gateway, token), "fix it")
        upstream_seen = server.requests[-1]

    assert via.choices[0].message.content == direct.choices[0].message.content
    assert via.choices[0].finish_reason == direct.choices[0].finish_reason == "tool_calls"
    assert [c.model_dump() for c in via.choices[0].message.tool_calls] == \
        [c.model_dump() for c in direct.choices[0].message.tool_calls]
    assert via.usage.prompt_tokens_details.cached_tokens == 400
    # the upstream got the real key, never the scoped token
    assert upstream_seen.headers["authorization"] == f"Bearer {REAL_KEY}"
    assert token not in json.dumps(upstream_seen.headers)

    (row,) = _rows(ledger)
    assert (row.status, row.upstream_status, row.endpoint, row.stream) == \
        (200, 200, "chat.completions", False)
    assert (row.model_asked, row.model_upstream, row.model_served) == \
        (MODEL, MODEL, "pinned-model-2026")
    assert (row.input_tokens, row.cached_input_tokens, row.output_tokens,
            row.reasoning_tokens) == (1000, 400, 300, 120)
    assert row.cost_usd == pytest.approx(USAGE_COST)
    assert row.usage_missing is False and row.assistant_step is True
    assert row.finish_reason == "tool_calls" and row.latency_ms > 0
    usage = gateway.attempt_usage(token)
    assert usage == gateway.attempt_usage("a1")
    assert {k: usage[k] for k in ("calls", "input", "cached_input", "output", "reasoning",
                                  "cost_complete", "usage_missing_calls", "exhausted")} == {
        "calls": 1, "input": 1000, "cached_input": 400, "output": 300, "reasoning": 120,
        "cost_complete": True, "usage_missing_calls": 0, "exhausted": None}
    assert usage["cost_usd"] == pytest.approx(USAGE_COST)
    assert gateway.spent() == pytest.approx(USAGE_COST)


def test_request_digest_is_of_the_agents_bytes(gateway: Gateway, tmp_path: Path) -> None:
    body = b'{"model": "some-other-model", "messages": [{"role": "user", "content": "hi"}]}'
    with ScriptedServer(by_input({"hi": Answer("hello", usage=USAGE)})) as server:
        token, ledger = _open(gateway, server, tmp_path)
        response = httpx.post(f"{gateway.base_url}/chat/completions", content=body,
                              headers={"Authorization": f"Bearer {token}",
                                       "Content-Type": "application/json"})
        sent = server.requests[-1]
    assert response.status_code == 200
    (row,) = _rows(ledger)
    assert row.request_sha256 == hashlib.sha256(body).hexdigest()
    assert row.request_bytes == len(body)
    # the arm's model is pinned: the agent asked for another, the upstream got the pinned one
    assert row.model_asked == "some-other-model" and sent.body["model"] == MODEL


def test_streaming_passes_chunks_through(gateway: Gateway, tmp_path: Path) -> None:
    answer = Answer("Running the tests now", usage=USAGE, tool_calls=TOOL_CALLS,
                    finish_reason="tool_calls", chunk_delay=0.01)
    with ScriptedServer(by_input({"go": answer})) as server:
        direct = _collect(_ask(openai.OpenAI(base_url=server.base_url, api_key=REAL_KEY,
                                             max_retries=0), "go", stream=True))
        token, ledger = _open(gateway, server, tmp_path)
        via = _collect(_ask(_agent(gateway, token), "go", stream=True))
        asked = _collect(_ask(_agent(gateway, token), "go", stream=True,
                              stream_options={"include_usage": True}))
        upstream_bodies = [r.body for r in server.chat_requests()]

    assert via["content"] == direct["content"] == "Running the tests now"
    assert via["tool_calls"] == direct["tool_calls"] == {
        0: {"id": "call_1", "name": "run_tests", "arguments": '{"path": "tests/"}'}}
    assert via["finish"] == direct["finish"] == "tool_calls"
    # the gateway asked the upstream for usage; the agent that did not ask sees no usage chunk
    assert upstream_bodies[1]["stream_options"] == {"include_usage": True}
    assert via["usage"] is None and via["empty_chunks"] == 0
    # an agent that asked for it gets it
    assert asked["usage"].prompt_tokens == 1000 and asked["empty_chunks"] == 1
    rows = _rows(ledger)
    assert [r.stream for r in rows] == [True, True]
    for row in rows:
        assert (row.input_tokens, row.cached_input_tokens, row.output_tokens,
                row.reasoning_tokens) == (1000, 400, 300, 120)
        assert row.cost_usd == pytest.approx(USAGE_COST) and row.usage_missing is False
        assert row.assistant_step and row.finish_reason == "tool_calls"
    assert gateway.attempt_usage(token)["cost_usd"] == pytest.approx(2 * USAGE_COST)


def test_stream_arrives_as_it_comes(gateway: Gateway, tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(8))
    with ScriptedServer(by_input({"slow": Answer(words, chunk_delay=0.15)})) as server:
        token, _ = _open(gateway, server, tmp_path)
        start = time.monotonic()
        stream = _ask(_agent(gateway, token), "slow", stream=True)
        first = None
        for part in stream:
            if part.choices and part.choices[0].delta.content:
                first = time.monotonic() - start
                break
        stream.close()
    # the whole answer takes > 1.3 s upstream; its first words reach the agent long before
    assert first is not None and first < 0.8


def test_close_delimited_stream_and_connection_reuse(gateway: Gateway,
                                                     tmp_path: Path) -> None:
    script = by_input({"closing": Answer("x y", usage=USAGE, stream_framing="close")},
                      default=Answer("kept", usage=USAGE))
    with ScriptedServer(script) as server:
        token, ledger = _open(gateway, server, tmp_path)
        client = _agent(gateway, token)
        for _ in range(3):
            _ask(client, "plain")
        _collect(_ask(client, "plain", stream=True))
        assert _collect(_ask(client, "closing", stream=True))["content"] == "x y"
        _ask(client, "plain")
        connections = [r.connection for r in server.chat_requests()]
    # keep-alive upstream: one connection until the close-delimited stream ended it
    assert connections == [1, 1, 1, 1, 1, 2]
    assert [r.input_tokens for r in _rows(ledger)] == [1000] * 6


def test_upstream_dropping_the_call_is_502_not_unreachable(gateway: Gateway,
                                                           tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Drop())) as server:
        token, ledger = _open(gateway, server, tmp_path)
        with pytest.raises(openai.APIStatusError) as info:
            _ask(_agent(gateway, token), "x")
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_error"
    (row,) = _rows(ledger)
    assert row.upstream_unreachable is False
    # the request reached the upstream, which may have billed it: unknown, not zero
    assert row.usage_missing is True and row.cost_usd is None
    assert gateway.attempt_usage(token)["upstream_unreachable_calls"] == 0


def test_streamed_usage_missing_when_upstream_cannot_send_it(gateway: Gateway,
                                                             tmp_path: Path) -> None:
    with ScriptedServer(by_input({"go": Answer("done", usage=USAGE)})) as server:
        token, ledger = _open(gateway, server, tmp_path, stream_usage=False)
        got = _collect(_ask(_agent(gateway, token), "go", stream=True))
        sent = server.chat_requests()[-1].body
    assert got["content"] == "done"
    assert "stream_options" not in sent  # the arm says this upstream rejects it
    (row,) = _rows(ledger)
    assert row.usage_missing is True and row.cost_usd is None
    assert row.input_tokens is None and row.output_tokens is None
    assert row.assistant_step is True  # the response completed; only its size is unknown
    usage = gateway.attempt_usage(token)
    assert usage["cost_complete"] is False and usage["usage_missing_calls"] == 1


def test_usage_missing_makes_cost_a_lower_bound(gateway: Gateway, tmp_path: Path) -> None:
    script = by_input({"priced": Answer("a", usage=USAGE), "unpriced": Answer("b", usage=None)})
    with ScriptedServer(script) as server:
        token, ledger = _open(gateway, server, tmp_path)
        client = _agent(gateway, token)
        _ask(client, "priced")
        _ask(client, "unpriced")
    rows = _rows(ledger)
    assert [r.usage_missing for r in rows] == [False, True]
    assert rows[1].cost_usd is None and rows[1].input_tokens is None  # never a zero
    usage = gateway.attempt_usage(token)
    assert usage["cost_usd"] == pytest.approx(USAGE_COST)  # the known part only ...
    assert usage["cost_complete"] is False  # ... and it says it is a lower bound
    assert usage["usage_missing_calls"] == 1
    assert gateway.spent_complete() is False


def test_models_route_and_error_answers_pass_through(gateway: Gateway, tmp_path: Path) -> None:
    script = by_input({"busy": Status(429, {"Retry-After": "1"})})
    with ScriptedServer(script, models=[MODEL, "other"]) as server:
        token, ledger = _open(gateway, server, tmp_path)
        client = _agent(gateway, token)
        assert [m.id for m in client.models.list()] == [MODEL, "other"]
        with pytest.raises(openai.RateLimitError):
            _ask(client, "busy")
    models, busy = _rows(ledger)
    assert (models.endpoint, models.status, models.cost_usd) == ("models", 200, 0.0)
    assert (busy.status, busy.upstream_status, busy.assistant_step) == (429, 429, False)
    assert busy.cost_usd == 0.0 and busy.usage_missing is False  # an error answer is not billed


# ------------------------------------------------------------------------- budgets


def _assert_refused(client: openai.OpenAI, limit: str) -> None:
    with pytest.raises(openai.PermissionDeniedError) as info:
        _ask(client, "more")
    assert info.value.status_code == 403
    assert info.value.body["type"] == "budget_exhausted"
    assert info.value.body["message"].startswith(f"budget exhausted: {limit} limit reached")


def test_budget_exhausted_by_tokens(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        token, ledger = _open(gateway, server, tmp_path, limits=Limits(tokens=2600))
        client = _agent(gateway, token)
        _ask(client, "one")
        assert gateway.attempt_usage(token)["exhausted"] is None  # 1300 of 2600
        _ask(client, "two")  # 2600: reached
        _assert_refused(client, "tokens")
        _assert_refused(client, "tokens")
        assert len(server.chat_requests()) == 2  # refused calls never reach the upstream
    rows = _rows(ledger)
    assert [r.status for r in rows] == [200, 200, 403, 403]
    assert [r.exhausted for r in rows] == [None, "tokens", "tokens", "tokens"]
    assert [r.forwarded for r in rows] == [True, True, False, False]
    assert "2600 of 2600 tokens used" in rows[2].error
    assert gateway.attempt_usage(token)["exhausted"] == "tokens"


def test_budget_exhausted_by_cost(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        # 0.0038 per call: the third call reaches 0.0114 >= 0.01
        token, ledger = _open(gateway, server, tmp_path, limits=Limits(cost_usd=0.01))
        client = _agent(gateway, token)
        for _ in range(3):
            _ask(client, "work")
        _assert_refused(client, "cost_usd")
    rows = _rows(ledger)
    assert [r.status for r in rows] == [200, 200, 200, 403]
    assert sum(r.cost_usd or 0 for r in rows) == pytest.approx(3 * USAGE_COST)
    assert gateway.attempt_usage(token)["exhausted"] == "cost_usd"


def test_budget_exhausted_by_assistant_steps(gateway: Gateway, tmp_path: Path) -> None:
    script = by_input({"fail": Status(500)}, default=Answer("ok", usage=None))
    with ScriptedServer(script) as server:
        token, ledger = _open(gateway, server, tmp_path, limits=Limits(assistant_steps=2))
        client = _agent(gateway, token)
        _ask(client, "one")
        with pytest.raises(openai.InternalServerError):
            _ask(client, "fail")  # an error answer is not an assistant step
        _ask(client, "two")
        _assert_refused(client, "assistant_steps")
    rows = _rows(ledger)
    assert [r.assistant_step for r in rows] == [True, False, True, False]
    assert [r.status for r in rows] == [200, 500, 200, 403]
    # steps are counted even though usage is missing; cost stays unknown, not zero
    usage = gateway.attempt_usage(token)
    assert usage["exhausted"] == "assistant_steps" and usage["assistant_steps"] == 2
    assert usage["cost_complete"] is False


def test_budget_hit_by_a_streaming_call(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("a b c", usage=USAGE))) as server:
        token, ledger = _open(gateway, server, tmp_path, limits=Limits(tokens=1000))
        client = _agent(gateway, token)
        got = _collect(_ask(client, "stream", stream=True))
        assert got["content"] == "a b c" and got["finish"] == "stop"
        # settled before the agent saw [DONE]: the very next call is refused
        _assert_refused(client, "tokens")
        with pytest.raises(openai.PermissionDeniedError):
            _collect(_ask(client, "stream", stream=True))
    rows = _rows(ledger)
    assert [(r.stream, r.status, r.exhausted) for r in rows] == [
        (True, 200, "tokens"), (False, 403, "tokens"), (True, 403, "tokens")]


def test_total_budget_across_attempts(tmp_path: Path) -> None:
    with Gateway(total_cost_usd=0.007) as gw, \
            ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        first, _ = _open(gw, server, tmp_path, "a1")
        _ask(_agent(gw, first), "x")
        assert not gw.total_exhausted
        second, _ = _open(gw, server, tmp_path, "a2")
        _ask(_agent(gw, second), "x")
        assert gw.total_exhausted
        assert gw.spent() == pytest.approx(2 * USAGE_COST)


# ------------------------------------------------------------------------- tokens and keys


def test_revoked_and_unknown_tokens_get_401(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        token, ledger = _open(gateway, server, tmp_path)
        _ask(_agent(gateway, token), "x")
        gateway.close_attempt(token)
        gateway.close_attempt(token)  # idempotent
        with pytest.raises(openai.AuthenticationError) as revoked:
            _ask(_agent(gateway, token), "x")
        with pytest.raises(openai.AuthenticationError) as unknown:
            _ask(_agent(gateway, "sk-assay-made-up"), "x")
        no_token = httpx.get(f"{gateway.base_url}/models")
        assert len(server.chat_requests()) == 1
    assert revoked.value.status_code == unknown.value.status_code == 401
    assert "revoked" in revoked.value.body["message"]
    assert unknown.value.body["code"] == "invalid_api_key"
    assert no_token.status_code == 401 and no_token.json()["error"]["message"]
    assert [(e.reason, e.attempt_id) for e in gateway.events] == [
        ("revoked_token", "a1"), ("unknown_token", None), ("no_token", None)]
    assert len(_rows(ledger)) == 1  # the closed attempt's ledger is left as it was
    assert gateway.attempt_usage(token)["calls"] == 1  # still readable after close


def test_real_key_never_written_nor_shown(tmp_path: Path) -> None:
    log = tmp_path / "log" / "gateway_events.jsonl"
    with ScriptedServer(by_input({"fail": Status(500)},
                                 default=Answer("ok", usage=USAGE))) as server:
        with Gateway(log_path=log) as gw:
            token, _ = _open(gw, server, tmp_path)
            client = _agent(gw, token)
            _ask(client, "x")
            _collect(_ask(client, "y", stream=True))
            with pytest.raises(openai.InternalServerError):
                _ask(client, "fail")
            with pytest.raises(openai.AuthenticationError):
                _ask(_agent(gw, "wrong"), "x")
            dead = gw.open_attempt("dead", ledger_path=tmp_path / "dead" / "model_calls.jsonl",
                                   upstream=Upstream(f"http://127.0.0.1:{_free_port()}/v1",
                                                     REAL_KEY), model=MODEL)
            with pytest.raises(openai.APIStatusError):
                _ask(_agent(gw, dead), "x")
            gw.close_attempt(token)
            with pytest.raises(openai.AuthenticationError):
                _ask(client, "x")
            with pytest.raises(TypeError):  # the key cannot be handed to a child process
                pickle.dumps(Upstream(server.base_url, REAL_KEY))
            shown = [repr(gw), str(gw), repr(Upstream(server.base_url, REAL_KEY)),
                     repr(gw.events), json.dumps(gw.attempt_usage("a1"))]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"model_calls.jsonl", "gateway_events.jsonl"}
    for path in files:
        data = path.read_bytes()
        assert REAL_KEY.encode() not in data, path
        assert token.encode() not in data, path
    for text in shown:
        assert REAL_KEY not in text and token not in text
    assert [GatewayEvent.read(r, log).reason for r in iter_rows(log)] == [
        "unknown_token", "revoked_token"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upstream_unreachable_is_502_and_flagged(gateway: Gateway, tmp_path: Path) -> None:
    ledger = tmp_path / "a1" / "model_calls.jsonl"
    port = _free_port()
    token = gateway.open_attempt("a1", ledger_path=ledger, model=MODEL, prices=PRICES,
                                 upstream=Upstream(f"http://127.0.0.1:{port}/v1", REAL_KEY))
    with pytest.raises(openai.APIStatusError) as info:
        _ask(_agent(gateway, token), "x")
    assert info.value.status_code == 502
    assert "unreachable" in info.value.body["message"]
    assert info.value.body["code"] == "upstream_unreachable"
    (row,) = _rows(ledger)
    assert row.status == 502 and row.upstream_status is None and row.upstream_unreachable
    assert row.usage_missing is False and row.cost_usd == 0.0  # nothing reached a provider
    assert "unreachable" in row.error
    usage = gateway.attempt_usage(token)
    assert usage["upstream_unreachable_calls"] == 1 and usage["cost_complete"] is True


def test_close_attempt_cuts_a_call_in_flight(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("late", delay=5.0))) as server:
        token, ledger = _open(gateway, server, tmp_path)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                _ask(_agent(gateway, token), "x")
            except openai.APIError as exc:
                errors.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        while not server.chat_requests():
            threading.Event().wait(0.01)
        gateway.close_attempt(token)
        thread.join(10)
    assert errors and isinstance(errors[0], openai.APIConnectionError)
    (row,) = _rows(ledger)
    assert row.usage_missing is True and row.cost_usd is None  # tokens may have been spent
    assert "attempt was closed" in row.error
    assert gateway.attempt_usage(token)["cost_complete"] is False


# ------------------------------------------------------------------------- concurrency, sockets


def test_concurrent_attempts_keep_their_ledgers_apart(gateway: Gateway, tmp_path: Path) -> None:
    n_attempts, n_calls = 6, 8
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE, delay=0.01))) as server:
        tokens = {f"att{i}": _open(gateway, server, tmp_path, f"att{i}") for i in range(n_attempts)}
        failures: list[BaseException] = []

        def agent(attempt: str, token: str) -> None:
            client = _agent(gateway, token)
            try:
                for j in range(n_calls):
                    stream = j % 2 == 1
                    reply = _ask(client, f"{attempt}-{j}", stream=stream)
                    if stream:
                        assert _collect(reply)["content"] == "ok"
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=agent, args=(a, t)) for a, (t, _) in tokens.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not failures
    for attempt, (token, ledger) in tokens.items():
        rows = _rows(ledger)
        assert len(rows) == n_calls
        assert {r.attempt_id for r in rows} == {attempt}
        assert [r.seq for r in rows] == list(range(1, n_calls + 1))
        assert gateway.attempt_usage(token)["input"] == n_calls * 1000
    assert gateway.spent() == pytest.approx(n_attempts * n_calls * USAGE_COST)


def test_expect_100_continue(gateway: Gateway, tmp_path: Path) -> None:
    """curl sends big bodies only after the server says 100 Continue."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        token, ledger = _open(gateway, server, tmp_path)
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as conn:
            conn.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: Bearer {token}\r\nExpect: 100-continue\r\n"
                          f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                          ).encode())
            assert conn.recv(100).startswith(b"HTTP/1.1 100 Continue")
            conn.sendall(body.encode())
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 OK")
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["choices"][0]["message"]["content"] \
        == "ok"
    assert len(_rows(ledger)) == 1


def test_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "gw.sock"
    with ScriptedServer(by_input({}, default=Answer("over the socket", usage=USAGE))) as server, \
            Gateway(unix_socket=sock) as gw:
        token, ledger = _open(gw, server, tmp_path)
        transport = httpx.HTTPTransport(uds=str(sock))
        client = openai.OpenAI(base_url="http://gateway/v1", api_key=token, max_retries=0,
                               http_client=httpx.Client(transport=transport))
        assert _ask(client, "x").choices[0].message.content == "over the socket"
    assert not sock.exists()
    assert len(_rows(ledger)) == 1


def test_model_without_a_price(gateway: Gateway, tmp_path: Path) -> None:
    with ScriptedServer(by_input({}, default=Answer("ok", usage=USAGE))) as server:
        upstream = Upstream(server.base_url, REAL_KEY)
        with pytest.raises(ValueError, match="needs its price"):
            gateway.open_attempt("capped", ledger_path=tmp_path / "c" / "model_calls.jsonl",
                                 upstream=upstream, model="unpriced",
                                 limits=Limits(cost_usd=1.0), prices=PRICES)
        token = gateway.open_attempt("free", ledger_path=tmp_path / "f" / "model_calls.jsonl",
                                     upstream=upstream, model="unpriced", prices=PRICES)
        _ask(_agent(gateway, token), "x")
    (row,) = _rows(tmp_path / "f" / "model_calls.jsonl")
    assert row.input_tokens == 1000 and row.cost_usd is None  # tokens known, price not
    assert row.usage_missing is False
    usage = gateway.attempt_usage(token)
    assert usage["cost_complete"] is False and usage["cost_usd"] == 0.0


def test_garbage_from_an_agent_is_a_400(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as conn:
        conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert "bad request" in json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["message"]
    # the gateway still serves after it
    assert httpx.get(f"{gateway.base_url}/models").status_code == 401
