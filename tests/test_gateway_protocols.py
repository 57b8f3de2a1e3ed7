"""The gateway speaking the OpenAI Responses API and Anthropic Messages, with real parts only: a
scripted upstream of each protocol started by the test (``support.protocol_server``), the real
gateway, and as the agent the official ``openai`` client (Responses) or plain HTTP (Anthropic,
whose SDK is not a dependency here). Every cost is computed by hand from the price table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.protocol_server import ProtocolServer, Turn, anthropic_events, responses_events
from support.scripted_server import Status

from assay.models.gateway.anthropic import AnthropicStreamMeter
from assay.models.gateway.responses import ResponsesStreamMeter
from assay.models.gateway.service import Gateway, Limits, Upstream
from assay.models.prices import Usage
from assay.records.io import iter_rows
from assay.records.ledger import ModelCall

REAL_KEY = "sk-real-0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"
MODEL = "pinned-model"
PRICES = {MODEL: {"input": 2.0, "cached_input": 0.5, "output": 8.0, "cache_write": 2.5}}
CALL = {"id": "call_7", "name": "bash", "arguments": {"command": "pytest -q"}}

R_USAGE = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 400},
           "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 120},
           "total_tokens": 1300}
# OpenAI: cached tokens are part of the input: 600 at $2/M + 400 at $0.5/M + 300 out at $8/M
R_COST = (600 * 2.0 + 400 * 0.5 + 300 * 8.0) / 1e6

A_START = {"input_tokens": 200, "cache_read_input_tokens": 800,
           "cache_creation_input_tokens": 100, "output_tokens": 1}
A_USAGE = {**A_START, "output_tokens": 50}
# Anthropic: three separate input counts: 200 at $2/M + 800 reads at $0.5/M + 100 writes at
# $2.5/M, and 50 out at $8/M
A_COST = (200 * 2.0 + 800 * 0.5 + 100 * 2.5 + 50 * 8.0) / 1e6
A_TOKENS = 200 + 800 + 100 + 50


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    with Gateway(log_path=tmp_path / "gateway_events.jsonl") as gw:
        yield gw


def _open(gw: Gateway, up: ProtocolServer, tmp: Path, protocol: str, attempt: str = "a1", *,
          limits: Limits | None = None) -> tuple[str, Path]:
    ledger = tmp / attempt / "model_calls.jsonl"
    token = gw.open_attempt(attempt, ledger_path=ledger, upstream=Upstream(up.base_url, REAL_KEY),
                            model=MODEL, limits=limits, prices=PRICES,
                            protocol=protocol)  # type: ignore[arg-type]
    return token, ledger


def _rows(ledger: Path) -> list[ModelCall]:
    return [ModelCall.read(row, ledger) for row in iter_rows(ledger)]


def _client(gw: Gateway, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)


def _messages(gw: Gateway, token: str, *, stream: bool = False, bearer: bool = False,
              path: str = "/v1/messages") -> httpx.Response:
    auth = ({"Authorization": f"Bearer {token}"} if bearer else {"x-api-key": token})
    body = {"model": "claude-agent-choice", "max_tokens": 100, "stream": stream,
            "messages": [{"role": "user", "content": "fix it"}]}
    return httpx.post(gw.root_url + path + "?beta=true", json=body, timeout=10,
                      headers={**auth, "anthropic-version": "2023-06-01"})


def _sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        lines = block.strip().splitlines()
        name = next((x[6:].strip() for x in lines if x.startswith("event:")), "")
        data = [x[5:].strip() for x in lines if x.startswith("data:")]
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out


# ------------------------------------------------------------------------- Responses API


def test_responses_plain_passes_through_and_is_metered(gateway: Gateway, tmp_path: Path) -> None:
    with ProtocolServer(lambda r, n: Turn(tool_calls=[CALL], usage=R_USAGE,
                                          model="served-2026")) as up:
        token, ledger = _open(gateway, up, tmp_path, "responses")
        got = _client(gateway, token).responses.create(model="agent-choice", input="fix it")
        (seen,) = up.model_requests()
    (item,) = got.output
    assert (item.type, item.name, json.loads(item.arguments)) == \
        ("function_call", "bash", {"command": "pytest -q"})
    assert got.usage.input_tokens_details.cached_tokens == 400
    assert seen.path == "/v1/responses" and seen.body["model"] == MODEL  # pinned
    assert seen.headers["authorization"] == f"Bearer {REAL_KEY}"
    (row,) = _rows(ledger)
    assert (row.endpoint, row.protocol, row.status, row.stream) == \
        ("responses", "responses", 200, False)
    assert (row.model_asked, row.model_upstream, row.model_served) == \
        ("agent-choice", MODEL, "served-2026")
    assert (row.input_tokens, row.cached_input_tokens, row.output_tokens, row.reasoning_tokens,
            row.cache_write_input_tokens) == (1000, 400, 300, 120, None)
    assert row.cost_usd == pytest.approx(R_COST)
    assert row.finish_reason == "completed" and row.assistant_step and not row.usage_missing
    usage = gateway.attempt_usage(token)
    assert (usage["input"], usage["cached_input"], usage["output"], usage["reasoning"],
            usage["tokens"]) == (1000, 400, 300, 120, 1300)


def test_responses_stream_budget_hit_ends_cleanly_then_4xx(gateway: Gateway,
                                                           tmp_path: Path) -> None:
    turn = Turn(text="all tests pass", usage=R_USAGE)
    with ProtocolServer(lambda r, n: turn) as up:
        token, ledger = _open(gateway, up, tmp_path, "responses", limits=Limits(tokens=1000))
        client = _client(gateway, token)
        events = list(client.responses.create(model=MODEL, input="go", stream=True))
        # the stream that reached the limit ends the protocol's way, whole
        assert events[-1].type == "response.completed"
        assert events[-1].response.usage.output_tokens == 300
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text.strip() == "all tests pass"
        # settled before response.completed reached the agent: the next calls are refused
        for stream in (False, True):
            with pytest.raises(openai.PermissionDeniedError) as info:
                client.responses.create(model=MODEL, input="more", stream=stream)
            err = info.value.response.json()["error"]
            assert set(err) >= {"message", "type", "code"}
            assert err["code"] == "budget_exhausted"
            assert err["message"].startswith("budget exhausted: tokens limit reached "
                                             "(1300 of 1000 tokens used)")
        assert len(up.model_requests()) == 1
    rows = _rows(ledger)
    assert [(r.stream, r.status, r.exhausted, r.forwarded) for r in rows] == [
        (True, 200, "tokens", True), (False, 403, "tokens", False), (True, 403, "tokens", False)]
    assert rows[0].cost_usd == pytest.approx(R_COST) and rows[0].reasoning_tokens == 120


def test_responses_missing_usage_is_flagged(gateway: Gateway, tmp_path: Path) -> None:
    replies = {0: Turn(text="no usage"), 1: Turn(text="cut", usage=R_USAGE, cut_after=4)}
    with ProtocolServer(lambda r, n: replies[n]) as up:
        token, ledger = _open(gateway, up, tmp_path, "responses")
        client = _client(gateway, token)
        client.responses.create(model=MODEL, input="a")
        with pytest.raises(openai.APIError):
            list(client.responses.create(model=MODEL, input="b", stream=True))
    plain, cut = _rows(ledger)
    assert plain.usage_missing and plain.cost_usd is None and plain.input_tokens is None
    assert cut.usage_missing and cut.cost_usd is None and "broke off" in (cut.error or "")
    usage = gateway.attempt_usage(token)
    assert usage["usage_missing_calls"] == 2 and usage["cost_complete"] is False


# ------------------------------------------------------------------------- Anthropic Messages


def test_anthropic_plain_with_x_api_key(gateway: Gateway, tmp_path: Path) -> None:
    with ProtocolServer(lambda r, n: Turn(text="I will run it", tool_calls=[CALL],
                                          usage=A_USAGE, model="claude-served")) as up:
        token, ledger = _open(gateway, up, tmp_path, "anthropic")
        answer = _messages(gateway, token)
        (seen,) = up.model_requests()
    assert answer.status_code == 200
    body = answer.json()
    assert [b["type"] for b in body["content"]] == ["text", "tool_use"]
    assert body["content"][1]["input"] == {"command": "pytest -q"}
    # upstream: the real key in Anthropic's own header, the agent's version header kept
    assert seen.headers["x-api-key"] == REAL_KEY and "authorization" not in seen.headers
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.path == "/v1/messages?beta=true" and seen.body["model"] == MODEL
    (row,) = _rows(ledger)
    assert (row.endpoint, row.protocol, row.model_asked, row.model_served) == \
        ("messages", "anthropic", "claude-agent-choice", "claude-served")
    # kept as reported: nothing summed into input_tokens
    assert (row.input_tokens, row.cached_input_tokens, row.cache_write_input_tokens,
            row.output_tokens, row.reasoning_tokens) == (200, 800, 100, 50, None)
    assert row.cost_usd == pytest.approx(A_COST)
    assert row.finish_reason == "tool_use" and row.assistant_step
    usage = gateway.attempt_usage(token)
    assert (usage["input"], usage["cached_input"], usage["cache_write_input"],
            usage["tokens"]) == (200, 800, 100, A_TOKENS)


def test_anthropic_stream_budget_hit_ends_cleanly_then_4xx(gateway: Gateway,
                                                           tmp_path: Path) -> None:
    turn = Turn(tool_calls=[CALL], start_usage=A_START, usage={"output_tokens": 50})
    with ProtocolServer(lambda r, n: turn) as up:
        token, ledger = _open(gateway, up, tmp_path, "anthropic",
                              limits=Limits(cost_usd=A_COST))
        answer = _messages(gateway, token, stream=True, bearer=True)  # Bearer works too
        events = _sse(answer.text)
        assert answer.status_code == 200
        assert [n for n, _ in events] == [n for n, _ in anthropic_events(turn, 1)]
        assert events[-1] == ("message_stop", {"type": "message_stop"})
        for stream in (False, True):
            refused = _messages(gateway, token, stream=stream)
            assert refused.status_code == 403
            body = refused.json()
            assert body["type"] == "error" and body["error"]["type"] == "permission_error"
            assert body["error"]["message"].startswith("budget exhausted: cost_usd limit")
        assert len(up.model_requests()) == 1
    rows = _rows(ledger)
    assert [(r.stream, r.status, r.exhausted) for r in rows] == [
        (True, 200, "cost_usd"), (False, 403, "cost_usd"), (True, 403, "cost_usd")]
    # the output is message_delta's final figure, not message_start's placeholder
    first = rows[0]
    assert (first.input_tokens, first.cached_input_tokens, first.cache_write_input_tokens,
            first.output_tokens) == (200, 800, 100, 50)
    assert first.cost_usd == pytest.approx(A_COST) and first.finish_reason == "tool_use"


def test_anthropic_cut_stream_and_missing_usage(gateway: Gateway, tmp_path: Path) -> None:
    replies = {0: Turn(text="x", start_usage=A_START, usage={"output_tokens": 9}, cut_after=3),
               1: Turn(text="no usage at all")}
    with ProtocolServer(lambda r, n: replies[n]) as up:
        token, ledger = _open(gateway, up, tmp_path, "anthropic")
        with pytest.raises(httpx.RemoteProtocolError):  # the agent sees the stream break off
            _messages(gateway, token, stream=True)
        _messages(gateway, token)
        assert len(up.model_requests()) == 2
    cut, plain = _rows(ledger)
    # input known from message_start, output unknown: flagged, no cost, never a guess
    assert (cut.input_tokens, cut.output_tokens, cut.usage_missing, cut.cost_usd) == \
        (200, None, True, None)
    assert plain.usage_missing and plain.cost_usd is None
    assert gateway.attempt_usage(token)["cost_complete"] is False


def test_count_tokens_is_recorded_not_billed(gateway: Gateway, tmp_path: Path) -> None:
    with ProtocolServer(lambda r, n: Turn(text="unused")) as up:
        token, ledger = _open(gateway, up, tmp_path, "anthropic")
        got = _messages(gateway, token, path="/v1/messages/count_tokens")
        (seen,) = up.model_requests()
    assert got.status_code == 200 and got.json() == {"input_tokens": 42}
    assert seen.path.startswith("/v1/messages/count_tokens") and seen.body["model"] == MODEL
    (row,) = _rows(ledger)
    assert (row.endpoint, row.forwarded, row.cost_usd, row.usage_missing, row.assistant_step,
            row.input_tokens) == ("messages.count_tokens", True, 0.0, False, False, None)
    assert gateway.attempt_usage(token)["cost_complete"] is True


# ------------------------------------------------------------------------- refusals, keys


def test_wrong_protocol_and_revoked_token_in_the_callers_shape(gateway: Gateway,
                                                              tmp_path: Path) -> None:
    with ProtocolServer(lambda r, n: Turn(text="ok", usage=A_USAGE)) as up:
        a_token, a_ledger = _open(gateway, up, tmp_path, "anthropic", "a1")
        r_token, _ = _open(gateway, up, tmp_path, "responses", "a2")
        with pytest.raises(openai.BadRequestError) as wrong:
            _client(gateway, a_token).responses.create(model=MODEL, input="x")
        wrong_anthropic = _messages(gateway, r_token)
        gateway.close_attempt(a_token)
        gateway.close_attempt(r_token)
        revoked = _messages(gateway, a_token, stream=True)
        with pytest.raises(openai.AuthenticationError) as revoked_openai:
            _client(gateway, r_token).responses.create(model=MODEL, input="x")
        assert up.model_requests() == []  # nothing refused reached the upstream
    err = wrong.value.response.json()["error"]
    assert err["code"] == "wrong_protocol" and "'anthropic'" in err["message"]
    assert "POST /v1/messages" in err["message"]
    assert wrong_anthropic.status_code == 400
    assert wrong_anthropic.json()["error"]["type"] == "invalid_request_error"
    assert "model.protocol" in wrong_anthropic.json()["error"]["message"]
    assert revoked.status_code == 401
    assert revoked.json() == {"type": "error", "error": {
        "type": "authentication_error",
        "message": "this API key was revoked: its attempt has ended"}}
    assert revoked_openai.value.response.json()["error"]["code"] == "invalid_api_key"
    (row,) = _rows(a_ledger)
    assert (row.status, row.forwarded, row.protocol) == (400, False, "anthropic")
    with pytest.raises(ValueError, match="unknown protocol"):
        gateway.open_attempt("a3", ledger_path=tmp_path / "x.jsonl", model=MODEL,
                             upstream=Upstream(up.base_url, REAL_KEY),
                             protocol="gemini")  # type: ignore[arg-type]


def test_ledger_matches_upstream_and_key_never_written(tmp_path: Path) -> None:
    script = [Turn(tool_calls=[CALL], usage=A_USAGE), Status(500), Turn(text="done",
                                                                       usage=A_USAGE)]
    with ProtocolServer(lambda r, n: script[min(n, 2)]) as up, \
            Gateway(log_path=tmp_path / "log" / "gateway_events.jsonl") as gw:
        token, ledger = _open(gw, up, tmp_path, "anthropic")
        statuses = [_messages(gw, token, stream=s).status_code for s in (False, False, True)]
        _messages(gw, "sk-assay-made-up")
        seen = up.model_requests()
        shown = repr(gw) + json.dumps(gw.attempt_usage(token))
    assert statuses == [200, 500, 200]
    rows = _rows(ledger)
    forwarded = [r for r in rows if r.forwarded]
    assert len(forwarded) == len(seen) == 3
    assert [r.upstream_status for r in forwarded] == [200, 500, 200]
    assert all(s.body["model"] == r.model_upstream for s, r in zip(seen, forwarded, strict=True))
    assert sum(r.cost_usd or 0 for r in rows) == pytest.approx(2 * A_COST)  # the 500 is free
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert REAL_KEY.encode() not in data and token.encode() not in data, path
    assert REAL_KEY not in shown and token not in shown


# ------------------------------------------------------------------------- meters, unit


def _raw(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


@pytest.mark.parametrize("kind", ["responses", "anthropic"])
def test_stream_meters_at_every_split(kind: str) -> None:
    if kind == "responses":
        raw = _raw(responses_events(Turn(text="a b", tool_calls=[CALL], usage=R_USAGE), 1))
        want = Usage(input=1000, cached_input=400, output=300, reasoning=120)
    else:
        raw = _raw(anthropic_events(Turn(text="a", start_usage=A_START,
                                         usage={"output_tokens": 50}), 1))
        want = Usage(input=200, cached_input=800, output=50, cache_write=100,
                     cached_in_input=False)
    for cut in range(1, len(raw), 7):
        meter = ResponsesStreamMeter() if kind == "responses" else AnthropicStreamMeter()
        passed = meter.feed(raw[:cut]) + meter.feed(raw[cut:]) + meter.flush()
        assert passed == raw and meter.done
        outcome = meter.outcome()
        assert outcome.usage == want and outcome.step
