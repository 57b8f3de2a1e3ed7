"""The gateway against an upstream whose stream is hostile or broken, with real parts only: a
scripted upstream (``support.scripted_server``'s ``Chunks``, ``support.protocol_server``'s
``Turn.events``) streaming chunks no honest provider sends, through the real gateway on its
loop thread, to a plain HTTP client as the agent.

An upstream chooses every index in its stream (``choices[].index``, ``tool_calls[].index``,
an Anthropic block's ``index``). Before the bound, an index of 10**8 made the gateway fill a
list of 10**8 tool calls (memory exhaustion), a negative one crashed the call, and a string or
boolean one put its data in the wrong place. What is checked, by outcome: the call is answered
and recorded at once with the stream passed on as it came; the transcript keeps every honest
piece where it belongs, leaves the hostile piece out, and its ``response_note`` names the
anomaly; the gateway goes on serving the attempt; and an honest stream whose indices are
interleaved or sparse is reassembled exactly, with no note.

Also here, each a case that ended a call without its ledger row, or a run on a traceback,
before: JSON nested deeper than the parser's recursion limit (an answer, a chunk, an agent's
body), which raises past every ``except ValueError``; a usage count of 10**400 (its cost
overflows a float) or NaN; names of megabytes written into every ledger row; an answer read
whole however long; a refusal that is an object. And the SSE splitter fed a stream cut
anywhere (it keeps an unfinished event without rescanning it; ``bench/sse_split.py`` times
it). The narrow runs' client (``models/client.py``) reads the same hostile upstream, so its
cases are here too."""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import run_cli, write_suite
from support.protocol_server import ProtocolServer, Turn
from support.scripted_server import (
    Answer,
    Chunks,
    Garbage,
    ScriptedServer,
    Status,
    by_input,
)
from test_gateway_hostile import _answer, _endless, _RawUpstream

from assay.models.client import ChatClient
from assay.models.gateway.protocols import ChatStreamMeter
from assay.models.gateway.reassemble import MAX_STREAM_INDEX, MAX_STREAM_ITEMS, StreamCollector
from assay.models.gateway.service import Gateway, Upstream
from assay.models.gateway.wire import MAX_NAME, EventBuffer, whole_events
from assay.models.prices import Usage
from assay.records.io import iter_rows
from assay.records.ledger import ModelCall
from assay.records.transcript import CallBodies, load_transcript

REAL_KEY = "sk-real-5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b"
MODEL = "pinned-model"
USAGE = {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


def _chunk(choices: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": MODEL, "choices": choices, **top}


def _delta(delta: dict[str, Any], index: Any = 0, finish: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "finish_reason": finish}


def _tool(index: Any, *, id: str | None = None, name: str | None = None,
          args: str | None = None) -> dict[str, Any]:
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    out: dict[str, Any] = {"index": index, "function": fn}
    if id is not None:
        out.update(id=id, type="function")
    return out


def _stream(*pieces: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat stream: a role chunk, ``pieces`` (each one chunk), a finish and a usage chunk."""
    return [_chunk([_delta({"role": "assistant", "content": ""})]), *pieces,
            _chunk([_delta({}, finish="tool_calls")]), _chunk([], usage=USAGE)]


#: The honest part of every hostile stream below: text, and one tool call in two pieces.
HONEST = (_chunk([_delta({"content": "Let me look."})]),
          _chunk([_delta({"tool_calls": [_tool(0, id="call_a", name="bash", args='{"cmd"')]})]),
          _chunk([_delta({"tool_calls": [_tool(0, args=': "ls"}')]})]))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with Gateway(log_path=tmp_path / "gateway_events.jsonl") as gw:
        yield gw


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _post(gw: Gateway, token: str, path: str, body: dict[str, Any],
          headers: dict[str, str]) -> tuple[int, str]:
    """One call as an agent makes it, the stream read to its end: (status, the raw text)."""
    with httpx.stream("POST", gw.root_url + path, json=body, timeout=30,
                      headers=headers) as resp:
        return resp.status_code, resp.read().decode()


def _chat(gw: Gateway, token: str) -> tuple[int, str]:
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "fix"}]}
    return _post(gw, token, "/v1/chat/completions", body, {"Authorization": f"Bearer {token}"})


def _run_chat(gw: Gateway, tmp: Path, replies: list[Chunks]) -> tuple[list[str], Path]:
    """Each reply streamed through the gateway to one call of one attempt; the raw streams
    the agent received, and the attempt directory."""
    adir = tmp / "a1"
    served = iter(replies)
    with ScriptedServer(lambda _req, _n: next(served)) as up:
        token = gw.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                upstream=Upstream(up.base_url, REAL_KEY), model=MODEL)
        raws = []
        for _ in replies:
            status, raw = _chat(gw, token)
            assert status == 200
            raws.append(raw)
        gw.close_attempt(token)
    return raws, adir


def _calls(adir: Path) -> tuple[list[ModelCall], list[CallBodies]]:
    ledger = [ModelCall.read(r, adir) for r in iter_rows(adir / "model_calls.jsonl")]
    transcript = load_transcript(adir)
    assert transcript is not None and transcript.torn == 0
    return ledger, transcript.calls


def _assert_honest_part_kept(call: CallBodies) -> None:
    (choice,) = call.row.response["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    (tc,) = choice["message"]["tool_calls"]
    assert tc["id"] == "call_a" and tc["index"] == 0
    assert tc["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}


def test_interleaved_and_sparse_indices_are_reassembled_exactly(gateway: Gateway,
                                                                tmp_path: Path) -> None:
    """Honest streams: two tool calls whose pieces alternate (0, 1, 0, 1), two choices whose
    pieces alternate, and tool calls numbered 0 and 3 (legal, sparse): each piece lands in its
    own slot, in index order, nothing is invented for the skipped numbers, and no note."""
    interleaved = _stream(
        _chunk([_delta({"tool_calls": [_tool(0, id="call_a", name="read", args='{"pa')]})]),
        _chunk([_delta({"tool_calls": [_tool(1, id="call_b", name="bash", args='{"cm')]})]),
        _chunk([_delta({"tool_calls": [_tool(0, args='th": "a.py"}')]})]),
        _chunk([_delta({"tool_calls": [_tool(1, args='d": "ls"}')]})]))
    two_choices = _stream(
        _chunk([_delta({"content": "one "}, 0), _delta({"content": "uno "}, 1)]),
        _chunk([_delta({"content": "two"}, 1)]),
        _chunk([_delta({"content": "dos"}, 0)]))
    sparse = _stream(
        _chunk([_delta({"tool_calls": [_tool(3, id="call_d", name="grep", args="{}")]})]),
        _chunk([_delta({"tool_calls": [_tool(0, id="call_a", name="ls", args="{}")]})]))
    raws, adir = _run_chat(gateway, tmp_path,
                           [Chunks(interleaved), Chunks(two_choices), Chunks(sparse)])
    ledger, calls = _calls(adir)
    assert [r.status for r in ledger] == [200, 200, 200]
    assert all(r.error is None and r.transcript == "kept" for r in ledger)
    assert [c.row.response_note for c in calls] == [None, None, None]

    (choice,) = calls[0].row.response["choices"]
    assert [(t["index"], t["id"], t["function"]) for t in choice["message"]["tool_calls"]] == [
        (0, "call_a", {"name": "read", "arguments": '{"path": "a.py"}'}),
        (1, "call_b", {"name": "bash", "arguments": '{"cmd": "ls"}'})]

    choices = calls[1].row.response["choices"]
    assert [(c["index"], c["message"]["content"]) for c in choices] == \
        [(0, "one dos"), (1, "uno two")]

    (choice,) = calls[2].row.response["choices"]
    assert [(t["index"], t["id"]) for t in choice["message"]["tool_calls"]] == \
        [(0, "call_a"), (3, "call_d")]
    # the agent got the stream as the upstream sent it, but for the usage-only chunk the
    # gateway asked for on its behalf
    assert raws[2].count("data: ") == len(sparse) and raws[2].endswith("data: [DONE]\n\n")
    assert all(json.dumps(c) in raws[2] for c in sparse[:-1])


# (where the hostile index sits, its value, what the note says of it)
HOSTILE = [
    ("tool_calls", 100_000_000, f"tool_calls[].index 100000000 is outside 0..{MAX_STREAM_INDEX}"),
    ("tool_calls", -1, "tool_calls[].index -1 is outside"),
    ("tool_calls", "1", "tool_calls[].index '1' is not an integer"),
    ("tool_calls", True, "tool_calls[].index True is not an integer"),
    ("tool_calls", 1.0, "tool_calls[].index 1.0 is not an integer"),
    ("choices", 100_000_000, "choices[].index 100000000 is outside"),
    ("choices", -3, "choices[].index -3 is outside"),
    ("choices", "0", "choices[].index '0' is not an integer"),
    ("choices", False, "choices[].index False is not an integer"),
]


@pytest.mark.parametrize(("where", "index", "said"), HOSTILE,
                         ids=[f"{w}-{i!r}" for w, i, _ in HOSTILE])
def test_a_hostile_index_is_an_anomaly_not_an_allocation(gateway: Gateway, tmp_path: Path,
                                                         where: str, index: Any,
                                                         said: str) -> None:
    if where == "tool_calls":
        hostile = _chunk([_delta({"tool_calls": [_tool(index, id="call_x", name="rm",
                                                       args='{"path": "/"}')]})])
    else:
        hostile = _chunk([_delta({"content": "HOSTILE"}, index)])
    stream = _stream(HONEST[0], hostile, *HONEST[1:])
    before = _peak_rss_mib()
    raws, adir = _run_chat(gateway, tmp_path, [Chunks(stream), Chunks(_stream(*HONEST))])
    # memory: 10**8 tool calls would have taken gigabytes; nothing near that was held
    assert _peak_rss_mib() - before < 200

    ledger, calls = _calls(adir)
    # both calls answered and recorded in full: the anomaly is the transcript's, not a failure
    assert [(r.status, r.error, r.transcript) for r in ledger] == [(200, None, "kept")] * 2
    assert ledger[0].output_tokens == 7 and not ledger[0].usage_missing
    assert ledger[0].finish_reason == "tool_calls"
    # the agent got the hostile chunk as it came: what to make of it is the agent's test
    assert json.dumps(hostile) in raws[0]

    hostile_call, honest_call = calls
    _assert_honest_part_kept(hostile_call)
    _assert_honest_part_kept(honest_call)
    assert "HOSTILE" not in json.dumps(hostile_call.row.response)
    assert "call_x" not in json.dumps(hostile_call.row.response)
    note = hostile_call.row.response_note
    assert note is not None and note.startswith("1 protocol anomalies in the stream: event 3: ")
    assert said in note and note.endswith("left out")
    assert honest_call.row.response_note is None


def test_too_many_slots_are_capped_and_counted(gateway: Gateway, tmp_path: Path) -> None:
    """Every index legal, but more slots than an answer holds: 1024 choices, then choices 0, 1
    and 2 with 1024 tool calls each (4096 slots in all), then 10 more tool calls on choice 3.
    The answer holds the first MAX_STREAM_ITEMS; the note describes 5 and counts the rest."""
    calls = [_tool(t, id=f"c{t}", name="x", args="{}") for t in range(MAX_STREAM_INDEX + 1)]
    stream = _stream(
        _chunk([_delta({"content": "x"}, i) for i in range(MAX_STREAM_INDEX + 1)]),
        *[_chunk([_delta({"tool_calls": calls}, i)]) for i in range(3)],
        _chunk([_delta({"tool_calls": calls[:10]}, 3)]))
    assert (MAX_STREAM_INDEX + 1) * 4 == MAX_STREAM_ITEMS
    (raw,), adir = _run_chat(gateway, tmp_path, [Chunks(stream)])
    ledger, (call,) = _calls(adir)
    assert (ledger[0].status, ledger[0].error) == (200, None)
    got = call.row.response["choices"]
    assert len(got) == MAX_STREAM_INDEX + 1
    assert [len(c["message"].get("tool_calls", [])) for c in got[:5]] == [1024, 1024, 1024, 0, 0]
    assert got[3]["message"]["tool_calls"] == [] and got[3]["message"]["content"] == "x"
    assert got[2]["message"]["tool_calls"][-1]["function"] == {"name": "x", "arguments": "{}"}
    note = call.row.response_note
    assert note is not None and note.startswith("10 protocol anomalies in the stream: event 6: ")
    assert f"a new tool call past the answer's {MAX_STREAM_ITEMS} choices" in note
    assert note.endswith("; and 5 more")


def _anthropic_stream(*blocks: tuple[str, Any]) -> list[tuple[str, Any]]:
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "stop_reason": None, "usage": {"input_tokens": 20, "output_tokens": 1}}}
    end = [("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                              "usage": {"output_tokens": 9}}),
           ("message_stop", {"type": "message_stop"})]
    return [("message_start", start), *blocks, *end]


def _block_start(index: Any, block: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block})


def _block_delta(index: Any, delta: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index,
                                    "delta": delta})


def test_anthropic_block_indices_are_bounded_too(gateway: Gateway, tmp_path: Path) -> None:
    """Blocks 0 (text) and 1 (tool use) with their deltas interleaved, among a block started
    at 10**8, a delta for block -1 and a block numbered "2": the honest blocks whole, the rest
    left out and noted."""
    events = _anthropic_stream(
        _block_start(0, {"type": "text", "text": ""}),
        _block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
        _block_delta(0, {"type": "text_delta", "text": "Running "}),
        _block_delta(1, {"type": "input_json_delta", "partial_json": '{"cmd": '}),
        _block_start(100_000_000, {"type": "text", "text": "HOSTILE"}),
        _block_delta(-1, {"type": "text_delta", "text": "HOSTILE"}),
        _block_start("2", {"type": "text", "text": "HOSTILE"}),
        _block_delta(0, {"type": "text_delta", "text": "the tests."}),
        _block_delta(1, {"type": "input_json_delta", "partial_json": '"pytest"}'}))
    adir = tmp_path / "a1"
    with ProtocolServer(lambda _req, _n: Turn(events=events)) as up:
        token = gateway.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                     upstream=Upstream(up.base_url, REAL_KEY), model=MODEL,
                                     protocol="anthropic")
        body = {"model": MODEL, "max_tokens": 100, "stream": True,
                "messages": [{"role": "user", "content": "fix"}]}
        status, raw = _post(gateway, token, "/v1/messages", body,
                            {"x-api-key": token, "anthropic-version": "2023-06-01"})
        gateway.close_attempt(token)
    assert status == 200 and raw.count("HOSTILE") == 3
    ledger, (call,) = _calls(adir)
    assert (ledger[0].status, ledger[0].error, ledger[0].output_tokens) == (200, None, 9)
    response = call.row.response
    assert response["stop_reason"] == "tool_use"
    assert response["content"] == [
        {"type": "text", "text": "Running the tests."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "pytest"}}]
    note = call.row.response_note
    assert note is not None and note.startswith("3 protocol anomalies in the stream: ")
    assert "content_block_start.index 100000000 is outside" in note
    assert "content_block_delta.index -1 is outside" in note
    assert "content_block_start.index '2' is not an integer" in note


# ------------------------------------------------------------------ the event splitter, unit


def test_the_event_buffer_finds_every_event_however_the_stream_is_cut() -> None:
    """The same events, whether the stream comes whole or cut anywhere (an end split between
    two pieces included, LF and CRLF ends mixed), as ``whole_events`` finds in the whole."""
    stream = (b"data: {\"a\": 1}\n\n" b"event: x\r\ndata: {\"b\": 2}\r\n\r\n"
              b": comment\n\n" b"data: " + b"y" * 300 + b"\r\n\r\n" b"data: [DONE]\n\n"
              b"data: {\"unfinished\"")
    spans, rest = whole_events(stream)
    want = [stream[b:e] for b, e, _ in spans]
    for size in (1, 2, 3, 5, 64, len(stream)):
        for first in range(min(size, 7)):
            pieces = [stream[:first]] + [stream[i:i + size] for i in range(first, len(stream),
                                                                           size)]
            buffer, got, passed, fed = EventBuffer(), [], b"", 0
            for piece in pieces:
                buf, found = buffer.feed(piece)
                fed += len(piece)
                got += [buf[b:e] for b, e, _ in found]
                passed += buf[:found[-1][2]] if found else b""
                assert buffer.size == fed - len(passed)  # kept: all fed and not yet whole
            assert got == want, (size, first)
            assert passed == stream[:rest] and buffer.flush() == stream[rest:]
            assert buffer.size == 0


@pytest.mark.parametrize("size", [1, 3, 1460])
def test_the_chat_meter_and_the_collector_at_small_pieces(size: int) -> None:
    """A whole chat stream fed a few bytes at a time: every byte handed on, the usage read,
    the answer reassembled as from one piece."""
    events = _stream(*HONEST)
    raw = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
    meter, collector = ChatStreamMeter(hide_usage_event=False), StreamCollector("chat")
    passed = b""
    for i in range(0, len(raw), size):
        collector.feed(raw[i:i + size])
        passed += meter.feed(raw[i:i + size])
    passed += meter.flush()
    assert passed == raw and meter.done
    assert meter.outcome().usage == Usage(input=12, output=7)
    whole = StreamCollector("chat")
    whole.feed(raw)
    assert collector.result() == whole.result()
    answer, note = whole.result()
    assert note is None and answer["choices"][0]["message"]["content"] == "Let me look."


# ------------------------------------------------------------------ nesting


DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON, deeper than any parser's recursion limit


def test_a_deeply_nested_answer_is_recorded_not_a_crash(gateway: Gateway,
                                                         tmp_path: Path) -> None:
    """JSON nested 100,000 deep in a streamed chunk (the chat meter and the collector parse
    it), as a plain answer, and as an agent's request body: Python's parser raises
    RecursionError, not ValueError (before, the call ended there, with no ledger row and the
    agent's stream cut); each call is answered, given its ledger row, and the next served."""
    stream = _stream(HONEST[0], {"choices": [], "junk": json.loads("[" * 500 + "]" * 500)})
    raw_deep = f'data: {{"choices": [], "deep": {DEEP}}}'
    adir = tmp_path / "a1"
    replies = iter([Chunks([*stream[:2], raw_deep, *stream[2:]]),
                    Garbage(body=DEEP, content_type="application/json"),
                    Chunks(_stream(*HONEST)), Status(400)])
    with ScriptedServer(lambda _req, _n: next(replies)) as up:
        token = gateway.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                     upstream=Upstream(up.base_url, REAL_KEY), model=MODEL)
        status, raw = _chat(gateway, token)
        assert status == 200 and raw.count(DEEP) == 1 and raw.endswith("data: [DONE]\n\n")
        plain = httpx.post(gateway.base_url + "/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {token}"},
                           json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
        assert plain.status_code == 200 and plain.text == DEEP
        assert _chat(gateway, token)[0] == 200
        # and an agent may send such a body too: forwarded as it came, the upstream's 400
        deep_ask = httpx.post(gateway.base_url + "/chat/completions", timeout=30,
                              headers={"Authorization": f"Bearer {token}",
                                       "Content-Type": "application/json"}, content=DEEP)
        assert deep_ask.status_code == 400
        gateway.close_attempt(token)
    ledger, calls = _calls(adir)
    assert [(r.seq, r.status) for r in ledger] == [(1, 200), (2, 200), (3, 200), (4, 400)]
    assert [r.error for r in ledger[:3]] == [None, None, None]
    assert ledger[3].request_bytes == len(DEEP) and ledger[3].error.startswith("upstream HTTP 400")
    assert calls[3].request is None and calls[3].row.request_note.startswith(
        f"not a JSON object ({len(DEEP)} bytes)")
    assert ledger[0].output_tokens == 7 and ledger[1].usage_missing
    (choice,) = calls[0].row.response["choices"]
    assert choice["message"]["content"] == "Let me look."
    assert calls[1].row.response is None and calls[1].row.response_note.startswith("not JSON")
    _assert_honest_part_kept(calls[2])


def test_the_run_client_retries_a_deeply_nested_answer() -> None:
    """The narrow runs' client (``models/client.py``) reads an upstream's answer too: one nested
    too deep to parse is a ``non_json_body`` try, retried, not a RecursionError."""
    replies = iter([Garbage(body=DEEP, content_type="application/json"),
                    Answer("fine", model=MODEL)])

    async def ask(base_url: str) -> Any:
        client = ChatClient(base_url, REAL_KEY, MODEL, backoff_base_s=0.01, max_tries=3)
        try:
            return await client.complete([{"role": "user", "content": "q"}], temperature=0)
        finally:
            await client.aclose()

    with ScriptedServer(lambda _req, _n: next(replies)) as up:
        got = asyncio.run(ask(up.base_url))
    assert got.content == "fine"
    assert [(t.status, t.error) for t in got.tries] == [(200, "non_json_body"), (200, None)]


# ------------------------------------------------------------------ numbers and shapes


def test_a_count_no_call_can_have_is_no_count(gateway: Gateway, tmp_path: Path) -> None:
    """Usage of 10**400 tokens (JSON allows it; its cost overflows a float, which ended the
    call without its ledger row): the count is unknown, the row is written and flagged
    ``usage_missing``, the cost unknown, and the answer handed on; streamed and plain alike."""
    huge = {"prompt_tokens": 10**400, "completion_tokens": 7}
    replies = iter([Chunks(_stream(*HONEST)[:-1] + [_chunk([], usage=huge)]),
                    Answer("plain", model=MODEL, usage=huge)])
    adir = tmp_path / "a1"
    with ScriptedServer(lambda _req, _n: next(replies)) as up:
        token = gateway.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                     upstream=Upstream(up.base_url, REAL_KEY), model=MODEL,
                                     prices={MODEL: {"input": 2.0, "output": 8.0}})
        assert _chat(gateway, token)[0] == 200
        plain = httpx.post(gateway.base_url + "/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {token}"},
                           json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
        assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"] == \
            "plain"
        usage = gateway.attempt_usage(token)
        gateway.close_attempt(token)
    ledger, calls = _calls(adir)
    assert [(r.status, r.error) for r in ledger] == [(200, None), (200, None)]
    assert [(r.input_tokens, r.output_tokens) for r in ledger] == [(None, 7), (None, 7)]
    assert all(r.usage_missing and r.cost_usd is None for r in ledger)
    assert usage["usage_missing_calls"] == 2 and usage["cost_complete"] is False
    _assert_honest_part_kept(calls[0])


def test_an_anthropic_usage_of_the_wrong_shape_costs_the_transcript_nothing(
        gateway: Gateway, tmp_path: Path) -> None:
    """``message_start`` whose usage is a list, then a ``message_delta`` with usage: the
    collector merged the two with ``{**list}`` (a TypeError that ended the call); now the
    delta's usage is kept, and the answer whole."""
    events = _anthropic_stream(_block_start(0, {"type": "text", "text": ""}),
                               _block_delta(0, {"type": "text_delta", "text": "done"}))
    events[0][1]["message"]["usage"] = [1, 2]
    adir = tmp_path / "a1"
    with ProtocolServer(lambda _req, _n: Turn(events=events)) as up:
        token = gateway.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                     upstream=Upstream(up.base_url, REAL_KEY), model=MODEL,
                                     protocol="anthropic")
        body = {"model": MODEL, "max_tokens": 100, "stream": True,
                "messages": [{"role": "user", "content": "fix"}]}
        status, raw = _post(gateway, token, "/v1/messages", body,
                            {"x-api-key": token, "anthropic-version": "2023-06-01"})
        gateway.close_attempt(token)
    assert status == 200 and "message_stop" in raw
    ledger, (call,) = _calls(adir)
    assert (ledger[0].status, ledger[0].error, ledger[0].output_tokens) == (200, None, 9)
    assert call.row.response["content"] == [{"type": "text", "text": "done"}]
    assert call.row.response["usage"] == {"output_tokens": 9}
    assert call.row.response_note is None


def test_a_reassembly_that_fails_is_noted_and_keeps_what_came_before() -> None:
    """Whatever an upstream sends, the collector never raises past the gateway: a failure
    stops it with a note naming the event. Every shape known to break it is handled above, so
    the failure is forced here, by replacing the chat reader after the first event."""

    def broken(_payload: dict[str, Any]) -> None:
        raise KeyError("x")

    collector = StreamCollector("chat")
    collector.feed(f"data: {json.dumps(HONEST[0])}\n\n".encode())
    collector._chat_event = broken  # type: ignore[method-assign]
    collector.feed(f"data: {json.dumps(HONEST[1])}\n\n".encode())
    collector.feed(f"data: {json.dumps(HONEST[2])}\n\n".encode())  # not read any more
    answer, note = collector.result()
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "Let me look."}
    assert note == ("reassembly stopped at event 2 (KeyError: 'x'): the answer is what came "
                    "before it")


def test_a_name_of_megabytes_is_cut_in_the_ledger(gateway: Gateway, tmp_path: Path) -> None:
    """A ``model`` of 1 MB from the upstream (plain and streamed), a ``finish_reason`` of
    100 KB, and a ``model`` of 1 MB in the agent's request: each ledger row keeps the first
    ``MAX_NAME`` characters and the full length, never the megabyte (it would be written into
    every call's row); the agent gets the answer as it came."""
    big, reason = "m" * 1_000_000, "r" * 100_000
    streamed = [{**c, "model": big} for c in _stream(*HONEST)]
    streamed[-2]["choices"][0]["finish_reason"] = reason
    replies = iter([Chunks(streamed), Answer("plain", model=big, finish_reason=reason)])
    adir = tmp_path / "a1"
    with ScriptedServer(lambda _req, _n: next(replies)) as up:
        token = gateway.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                     upstream=Upstream(up.base_url, REAL_KEY), model=MODEL)
        status, raw = _chat(gateway, token)
        assert status == 200 and raw.count(big) == len(streamed) - 1  # usage chunk kept back
        plain = httpx.post(gateway.base_url + "/chat/completions", timeout=30,
                           headers={"Authorization": f"Bearer {token}"},
                           json={"model": "a" * 1_000_000,
                                 "messages": [{"role": "user", "content": "x"}]})
        assert plain.status_code == 200 and plain.json()["model"] == big
        gateway.close_attempt(token)
    ledger, _ = _calls(adir)
    assert [r.model_served for r in ledger] == [f"{'m' * MAX_NAME}… (1000000 chars)"] * 2
    assert [r.finish_reason for r in ledger] == [f"{'r' * MAX_NAME}… (100000 chars)"] * 2
    assert [r.model_asked for r in ledger] == [MODEL, f"{'a' * MAX_NAME}… (1000000 chars)"]
    assert all(r.model_upstream == MODEL for r in ledger)  # what went upstream: pinned
    assert (adir / "model_calls.jsonl").stat().st_size < 10_000


def test_the_run_client_reads_at_most_its_bound_of_an_answer() -> None:
    """An endpoint answering 1 GiB (declared, then sent until the client hangs up) and an
    endless chunked answer: the narrow runs' client reads neither past its bound (1 MiB here,
    ``MAX_ANSWER_BYTES`` = 64 MiB by default), records ``body_too_large`` and asks again; the
    third answer is an honest one."""
    declared = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % (1024 ** 3))
    chunked = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" \
              b"Transfer-Encoding: chunked\r\n\r\n"
    piece = b"100000\r\n" + b"[" * 0x100000 + b"\r\n"
    raw = _RawUpstream([_endless(declared, b"x" * (1 << 20)), _endless(chunked, piece),
                        _answer("fine")])

    async def ask() -> Any:
        client = ChatClient(raw.base_url, REAL_KEY, MODEL, backoff_base_s=0.01, max_tries=3,
                            max_answer_bytes=1 << 20)
        try:
            return await client.complete([{"role": "user", "content": "q"}], temperature=0)
        finally:
            await client.aclose()

    before = _peak_rss_mib()
    try:
        got = asyncio.run(ask())
    finally:
        raw.close()
    assert got.content == "fine"
    assert [(t.status, t.error) for t in got.tries] == [
        (200, "body_too_large"), (200, "body_too_large"), (200, None)]
    assert raw.sent < 256 * (1 << 20) and _peak_rss_mib() - before < 200


def test_a_narrow_run_outlives_an_endpoints_impossible_answers(tmp_path: Path) -> None:
    """``assay run`` against an endpoint that answers what no record or scorer expected, each
    of which stopped the run on a traceback: a usage of NaN prompt tokens, 10**400 completion
    tokens, 1,000 more keys and a deep object (NaN is not JSON: the row could not be written);
    a ``refusal`` that is an object (the scorer cut it as a string); content parts whose
    ``text`` is a number (joined as strings). Now the impossible figures are unknown and the
    usage incomplete, the refusal is its JSON text, the odd part is skipped, a model name of
    100,000 characters is cut in the row, and the run ends normally."""
    junk = {f"k{i}": i for i in range(1000)}
    deep: dict[str, Any] = {"n": 1}
    for _ in range(10):
        deep = {"d": deep}
    bad = {"prompt_tokens": float("nan"), "completion_tokens": 10**400, "total_tokens": 3,
           "cost": float("inf"), "deep": deep, **junk}
    parts: Any = [{"type": "text", "text": 5}, {"type": "text", "text": '{"label": "bug"}'}]
    suite = write_suite(tmp_path / "suite", [("c1", "one", "bug"), ("c2", "two", "bug"),
                                             ("c3", "three", "bug")])
    run = tmp_path / "run"
    script = {"one": Answer('{"label": "bug"}', usage=bad, model="m" * 100_000),
              "two": Answer('{"label": "bug"}', refusal={"why": 5}),  # type: ignore[arg-type]
              "three": Answer(parts, usage=None)}
    with ScriptedServer(by_input(script)) as up:
        res = run_cli(["run", str(suite), "--max-tries", "1", "-j", "1", "--out", str(run)],
                      env={"MODEL_BASE_URL": up.base_url, "MODEL_NAME": MODEL,
                           "MODEL_API_KEY": REAL_KEY})
    assert res.code == 0, res.stdout + res.stderr
    rows = {r["id"]: r for r in iter_rows(run / "raw_predictions.jsonl")}
    assert [rows[c]["correct"] for c in ("c1", "c2", "c3")] == [True, False, True]
    assert rows["c1"]["usage"] == {"prompt_tokens": None, "completion_tokens": None,
                                   "total_tokens": 3, "incomplete": True}
    assert rows["c1"]["served_model"] == f"{'m' * 256}… (100000 chars)"
    assert rows["c2"]["invalid_reason"] == "refusal"
    assert rows["c3"]["raw"] == '{"label": "bug"}'
    report = json.loads((run / "report.json").read_text())
    # c1's figures unknown, c3 reported none
    assert report["usage"]["incomplete"] is True and report["usage"]["rows_missing_usage"] == 2
