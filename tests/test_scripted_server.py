"""Tests of the scripted OpenAI-compatible server (tests/support/scripted_server.py).

They drive it with the official openai client (3.x, which runs on httpx2) and with plain
httpx, and double as documentation of how the openai client reacts to each fault.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pytest
from support.scripted_server import (
    Answer,
    Drop,
    Garbage,
    RecordedRequest,
    ScriptedServer,
    Status,
    by_input,
    echo_label,
)

_open_clients: list[openai.AsyncOpenAI] = []


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body, then close the clients it made (no pytest async plugin)."""

    async def main() -> Any:
        try:
            return await coro_fn()
        finally:
            while _open_clients:
                await _open_clients.pop().close()

    return asyncio.run(main())


def client(server: ScriptedServer, **kwargs: Any) -> openai.AsyncOpenAI:
    """An openai client for `server`, without retries unless asked; closed by run()."""
    kwargs.setdefault("max_retries", 0)
    c = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", **kwargs)
    _open_clients.append(c)
    return c


async def ask(c: openai.AsyncOpenAI, text: str, **kwargs: Any) -> Any:
    return await c.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": text}], **kwargs
    )


# --------------------------------------------------------------------------- answers


def test_answer_fields_come_back_through_openai_client() -> None:
    answer = Answer("the answer is here", model="served-7b", system_fingerprint="fp_42")

    async def main() -> None:
        with ScriptedServer(lambda req, n: answer) as server:
            c = client(server)
            resp = await c.chat.completions.create(
                model="gpt-test",
                messages=[
                    {"role": "system", "content": "be terse"},
                    {"role": "user", "content": "classify this bug report"},
                ],
            )
            assert resp.object == "chat.completion"
            assert resp.id.startswith("chatcmpl-")
            assert resp.model == "served-7b"
            assert resp.system_fingerprint == "fp_42"
            choice = resp.choices[0]
            assert choice.message.content == "the answer is here"
            assert choice.message.role == "assistant"
            assert choice.message.refusal is None
            assert choice.finish_reason == "stop"
            # "auto" usage = whitespace word counts: 2 + 4 request words, 4 answer words.
            assert resp.usage is not None
            assert resp.usage.prompt_tokens == 6
            assert resp.usage.completion_tokens == 4
            assert resp.usage.total_tokens == 10

    run(main)


def test_usage_none_omits_key_and_explicit_usage_is_verbatim() -> None:
    handler = by_input(
        {
            "no-usage": Answer("x", usage=None),
            "given": Answer(
                "x", usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
            ),
            "refused": Answer(None, refusal="I can't help", finish_reason="content_filter"),
        }
    )

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            raw = await c.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "no-usage"}]
            )
            assert "usage" not in json.loads(raw.http_response.text)
            assert raw.parse().usage is None

            given = await ask(c, "given")
            assert given.usage is not None
            assert (given.usage.prompt_tokens, given.usage.total_tokens) == (7, 10)

            refused = await ask(c, "refused")
            assert refused.choices[0].message.content is None
            assert refused.choices[0].message.refusal == "I can't help"
            assert refused.choices[0].finish_reason == "content_filter"

    run(main)


# --------------------------------------------------------------------------- faults


def test_429_is_rate_limit_error_with_readable_retry_after() -> None:
    async def main() -> None:
        handler = by_input({"q": Status(429, {"Retry-After": "0.2"})})
        with ScriptedServer(handler) as server:
            with pytest.raises(openai.RateLimitError) as info:
                await ask(client(server), "q")
            assert info.value.status_code == 429
            assert info.value.response.headers["retry-after"] == "0.2"
            # The JSON error body is unwrapped: e.body is the "error" object.
            assert info.value.body == {"message": "scripted error", "type": "server_error"}

    run(main)


@pytest.mark.parametrize("code", [500, 503])
def test_5xx_is_internal_server_error(code: int) -> None:
    async def main() -> None:
        with ScriptedServer(lambda req, n: Status(code)) as server:
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client(server), "q")
            assert info.value.status_code == code

    run(main)


def test_4xx_map_to_their_openai_errors() -> None:
    handler = by_input({"400": Status(400), "401": Status(401)})

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            with pytest.raises(openai.BadRequestError):
                await ask(c, "400")
            with pytest.raises(openai.AuthenticationError):
                await ask(c, "401")

    run(main)


def test_drop_is_api_connection_error_and_request_is_recorded() -> None:
    async def main() -> None:
        with ScriptedServer(lambda req, n: Drop()) as server:
            with pytest.raises(openai.APIConnectionError) as info:
                await ask(client(server), "q")
            # Not a timeout: the connection was closed without any response bytes
            # (the cause is httpx2's RemoteProtocolError "Server disconnected ...").
            assert not isinstance(info.value, openai.APITimeoutError)
            assert len(server.requests_for("q")) == 1

    run(main)


def test_garbage_200_body_surfaces_as_text_not_an_error() -> None:
    """What openai 3.x does with a 200 whose body is not JSON.

    - Content-Type not JSON (text/html): NO exception. `create(...)` returns the body as a
      plain `str` instead of a ChatCompletion (strict response validation is off by
      default), so callers that do `resp.choices` get an AttributeError on a str.
      With `with_raw_response`, `.http_response.text` is the garbage body and `.parse()`
      also returns that str.
    - Content-Type application/json with a non-JSON body: `create(...)` raises a bare
      json.JSONDecodeError (not an openai.APIError!); `with_raw_response.create(...)`
      succeeds and `.parse()` raises the JSONDecodeError.
    - A non-2xx Garbage (e.g. an HTML 502) is a normal InternalServerError whose `.body`
      is the raw text.
    """
    handler = by_input(
        {
            "html": Garbage(),
            "bad-json": Garbage(body="{not json", content_type="application/json"),
            "html-502": Garbage(status=502),
        }
    )

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)

            plain = await ask(c, "html")
            assert plain == "<html>upstream proxy error</html>"
            assert isinstance(plain, str)

            raw = await c.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "html"}]
            )
            assert raw.status_code == 200
            assert raw.headers["content-type"] == "text/html"
            assert raw.http_response.text == "<html>upstream proxy error</html>"
            assert raw.parse() == "<html>upstream proxy error</html>"

            with pytest.raises(json.JSONDecodeError):
                await ask(c, "bad-json")
            raw = await c.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "bad-json"}]
            )
            assert raw.http_response.text == "{not json"
            with pytest.raises(json.JSONDecodeError):
                raw.parse()

            with pytest.raises(openai.InternalServerError) as info:
                await ask(c, "html-502")
            assert info.value.status_code == 502
            assert info.value.body == "<html>upstream proxy error</html>"

    run(main)


def test_handler_exception_becomes_500_and_is_recorded() -> None:
    def broken(req: RecordedRequest, n: int) -> Answer:
        raise KeyError("typo in test script")

    async def main() -> None:
        with ScriptedServer(broken) as server:
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client(server), "q")
            assert "typo in test script" in str(info.value)
            assert server.requests[0].error is not None
            assert server.requests[0].error.startswith("KeyError")

    run(main)


# --------------------------------------------------------------------------- concurrency


def test_delays_do_not_block_other_connections() -> None:
    async def main() -> None:
        with ScriptedServer(lambda req, n: Answer("slow", delay=1.0)) as server:
            c = client(server)
            results = await asyncio.gather(ask(c, "a"), ask(c, "b"))
            assert [r.choices[0].message.content for r in results] == ["slow", "slow"]
            # A server that blocked on the first delay would read the second request only
            # after it: both arriving well within one delay proves they were served together.
            a, b = server.requests
            assert a.connection != b.connection
            assert abs(a.received_at - b.received_at) < 0.8

    run(main)


def test_64_concurrent_requests_on_one_client() -> None:
    labels = {f"case-{i}": f"label-{i}" for i in range(64)}

    def handler(req: RecordedRequest, n: int) -> Answer:
        # A short delay keeps all 64 in flight at once, so each needs its own connection.
        label = labels[req.case_input or ""]
        return Answer(json.dumps({"label": label}), delay=0.2)

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            start = time.monotonic()
            results = await asyncio.gather(*(ask(c, f"case-{i}") for i in range(64)))
            elapsed = time.monotonic() - start
            got = [json.loads(r.choices[0].message.content)["label"] for r in results]
            assert got == [f"label-{i}" for i in range(64)]
            assert elapsed < 5, elapsed  # generous: the connection count proves concurrency
            assert len(server.chat_requests()) == 64
            assert len({r.connection for r in server.requests}) == 64

            # A second wave reuses the pooled keep-alive connections.
            await asyncio.gather(*(ask(c, f"case-{i}") for i in range(64)))
            assert len({r.connection for r in server.requests}) == 64

    run(main)


def test_keep_alive_serves_several_requests_per_connection_with_httpx() -> None:
    with ScriptedServer(echo_label()) as server, httpx.Client(base_url=server.base_url) as http:
        for i in range(5):
            resp = http.post(
                "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]},
            )
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/json"
            assert resp.json()["choices"][0]["message"]["content"] == '{"label": "bug"}'
        assert http.get("/models").status_code == 200
        assert len(server.requests) == 6
        assert {r.connection for r in server.requests} == {server.requests[0].connection}


# --------------------------------------------------------------------------- scripting


def test_by_input_plays_replies_in_order_and_repeats_the_last() -> None:
    handler = by_input(
        {
            "flaky": [Status(429, {"Retry-After": "0"}), Status(503), Answer("finally")],
            "steady": Answer("always"),
        }
    )

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            with pytest.raises(openai.RateLimitError):
                await ask(c, "flaky")
            with pytest.raises(openai.InternalServerError):
                await ask(c, "flaky")
            for _ in range(3):
                resp = await ask(c, "flaky")
                assert resp.choices[0].message.content == "finally"
            for _ in range(2):
                resp = await ask(c, "steady")
                assert resp.choices[0].message.content == "always"
            # Unscripted input with no default: a loud 500 naming the input.
            with pytest.raises(openai.InternalServerError, match="unscripted"):
                await ask(c, "unscripted")
            assert len(server.requests_for("flaky")) == 5

    run(main)


def test_by_input_retries_through_the_openai_client() -> None:
    """The scripted sequence works with the client's own retries.

    openai 3.x honours Retry-After / retry-after-ms only when 0 < delay <= 120 s:
    "Retry-After: 0" falls back to its exponential backoff (0.5 s, 1 s, ... with jitter),
    and a delay above 120 s means no retry at all. Use a small positive value for speed.
    """
    handler = by_input(
        {
            "q": [
                Status(429, {"Retry-After": "0.01"}),
                Status(500, {"retry-after-ms": "10"}),
                Answer("ok"),
            ]
        }
    )

    async def main() -> None:
        with ScriptedServer(handler) as server:
            start = time.monotonic()
            resp = await ask(client(server, max_retries=2), "q")
            # Backoff for two retries would be >= 1.125 s; honoured headers take ~0.02 s.
            assert time.monotonic() - start < 1.0
            assert resp.choices[0].message.content == "ok"
            assert len(server.requests_for("q")) == 3

    run(main)


def test_by_input_default_reply_or_handler() -> None:
    async def main() -> None:
        with ScriptedServer(by_input({"a": Answer("A")}, default=Answer("D"))) as server:
            assert (await ask(client(server), "zzz")).choices[0].message.content == "D"
        fallback = echo_label(labels_by_input={"zzz": "feature"})
        with ScriptedServer(by_input({"a": Answer("A")}, default=fallback)) as server:
            content = (await ask(client(server), "zzz")).choices[0].message.content
            assert json.loads(content) == {"label": "feature"}

    run(main)


def test_by_input_rejects_bad_scripts() -> None:
    with pytest.raises(ValueError):
        by_input({"a": []})
    with pytest.raises(TypeError):
        by_input({"a": ["not a reply"]})  # type: ignore[list-item]


def test_echo_label_uses_mapping_then_fallback() -> None:
    handler = echo_label("verdict", {"q1": "pass"}, fallback="fail")

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            assert (await ask(c, "q1")).choices[0].message.content == '{"verdict": "pass"}'
            assert (await ask(c, "q2")).choices[0].message.content == '{"verdict": "fail"}'

    run(main)


# --------------------------------------------------------------------------- recording


def test_requests_are_recorded_with_messages_and_attempt_counts() -> None:
    seen: list[tuple[str | None, int]] = []

    def handler(req: RecordedRequest, n: int) -> Answer:
        seen.append((req.case_input, n))
        return Answer("ok")

    async def main() -> None:
        with ScriptedServer(handler) as server:
            c = client(server)
            messages = [
                {"role": "system", "content": "you label bugs"},
                {"role": "user", "content": "crash on save"},
                {"role": "assistant", "content": "bug"},
                {"role": "user", "content": "and again?"},
            ]
            before = time.monotonic()
            await c.chat.completions.create(model="gpt-test", messages=messages, temperature=0)
            await ask(c, "crash on save")
            await ask(c, "other")
            await c.models.list()

            assert seen == [("crash on save", 0), ("crash on save", 1), ("other", 0)]
            first = server.requests[0]
            assert first.method == "POST"
            assert first.path == "/v1/chat/completions"
            assert first.messages == messages
            assert first.case_input == "crash on save"
            assert first.body is not None
            assert first.body["model"] == "gpt-test"
            assert first.body["temperature"] == 0
            assert first.headers["authorization"] == "Bearer test"
            assert first.headers["content-type"] == "application/json"
            assert first.received_at >= before
            assert len(server.requests) == 4
            assert len(server.chat_requests()) == 3
            assert [r.path for r in server.requests][-1] == "/v1/models"
            assert server.requests[-1].messages == []
            assert server.requests[-1].case_input is None
            assert len(server.requests_for("crash on save")) == 2
            assert server.requests_for("never sent") == []

    run(main)


def test_case_input_reads_text_parts() -> None:
    req = RecordedRequest(
        method="POST",
        path="/v1/chat/completions",
        headers={},
        body={"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        received_at=0.0,
    )
    assert req.case_input == "hi"


# --------------------------------------------------------------------------- endpoints


def test_models_endpoint_and_404() -> None:
    async def main() -> None:
        with ScriptedServer(models=["m-small", "m-large"]) as server:
            page = await client(server).models.list()
            assert [m.id for m in page.data] == ["m-small", "m-large"]
            assert page.data[0].owned_by == "scripted"

            async with httpx.AsyncClient() as http:
                resp = await http.get(f"{server.base_url}/models")
                assert resp.json() == {
                    "object": "list",
                    "data": [
                        {"id": "m-small", "object": "model", "created": 0, "owned_by": "scripted"},
                        {"id": "m-large", "object": "model", "created": 0, "owned_by": "scripted"},
                    ],
                }
                missing = await http.post(f"{server.base_url}/embeddings", json={})
                assert missing.status_code == 404
                assert "error" in missing.json()
                wrong_method = await http.get(f"{server.base_url}/chat/completions")
                assert wrong_method.status_code == 404

    run(main)


def test_raw_socket_chunked_body_and_connection_close() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "chunky"}]}).encode()
    half = len(body) // 2
    chunked = (
        f"{half:x}\r\n".encode()
        + body[:half]
        + b"\r\n"
        + f"{len(body) - half:x}\r\n".encode()
        + body[half:]
        + b"\r\n0\r\n\r\n"
    )
    with ScriptedServer(echo_label(labels_by_input={"chunky": "ok"})) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked
            )
            data = b""
            while chunk := sock.recv(65536):  # server closes after the response
                data += chunk
        head, _, payload = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"Connection: close" in head
        content = json.loads(payload)["choices"][0]["message"]["content"]
        assert json.loads(content) == {"label": "ok"}
        assert server.requests[0].case_input == "chunky"


def test_stop_closes_idle_and_busy_connections() -> None:
    async def main() -> None:
        server = ScriptedServer(by_input({"slow": Answer("late", delay=30)}, Answer("ok")))
        server.start()
        port = server.port
        c = client(server)
        await ask(c, "fast")  # leaves an idle keep-alive connection in the pool
        pending = asyncio.ensure_future(ask(c, "slow"))
        await asyncio.sleep(0.2)
        start = time.monotonic()
        server.stop()
        assert time.monotonic() - start < 2
        with pytest.raises(openai.APIConnectionError):
            await pending
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        server.stop()  # idempotent

    run(main)
