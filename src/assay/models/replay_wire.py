"""How ``builtin/replay`` picks its answer from a request, and writes it in the wire shape of the
API it was asked over: chat completions, the OpenAI Responses API or Anthropic Messages, plain
JSON or SSE, with tool calls first-class in each (chat ``tool_calls``, Responses
``function_call`` output items, Anthropic ``tool_use`` content blocks).

Which turn: the model is stateless, like a real one. The n-th answer of a conversation is turn n,
where n is the number of assistant turns already in the request's history (chat and Anthropic:
``assistant`` messages; Responses: runs of assistant items in ``input``, plus the turn of a
``previous_response_id`` this server answered). So concurrent attempts of one task, and an
agent's own side requests, each get their own place in the script. A tool-call turn asked by a
request that offers no tools (a title request, say) is answered with the turn's message, or the
final message, since a tool call the agent cannot take would break it.

Usage is honest about what it is: ``input`` counts the pieces (words and punctuation marks,
``\\w+|[^\\w\\s]``) of the text in the request's conversation, ``output`` those of the answer
(text, tool names, arguments); no model tokenizer, no cache, no reasoning (reported as 0).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from assay.models.replay_script import Script

_PIECE = re.compile(r"\w+|[^\w\s]")


def pieces(text: str) -> int:
    """The replay model's token count: words and punctuation marks."""
    return len(_PIECE.findall(text))


#: Keys whose values are labels of the protocol, not text the model reads.
_LABELS = frozenset({"role", "type", "id", "call_id", "tool_call_id", "tool_use_id", "status",
                     "model", "cache_control"})


def strings(value: Any) -> list[str]:
    """Every string of text inside a JSON value (roles, types and ids left out)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in _LABELS for s in strings(v)]
    return []


@dataclass
class Answer:
    """The answer to one request, protocol-free."""

    text: str | None
    # (id, function name, arguments)
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    # the script turn answered; len(turns) is the final message
    turn: int = 0


def history_turns(protocol: str, body: dict[str, Any], previous: int | None = None) -> int:
    """How many assistant turns the request's conversation already holds."""
    if protocol in ("chat", "anthropic"):
        messages = body.get("messages")
        return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant") \
            if isinstance(messages, list) else 0
    items = body.get("input")
    turns = 0 if previous is None else previous + 1
    if not isinstance(items, list):
        return turns
    in_turn = False
    for item in items:
        mine = isinstance(item, dict) and (
            item.get("type") in ("function_call", "reasoning")
            or (item.get("type") in (None, "message") and item.get("role") == "assistant"))
        if mine and not in_turn:
            turns += 1
        in_turn = mine
    return turns


def answer(script: Script, protocol: str, body: dict[str, Any],
           previous: int | None = None) -> Answer:
    """The script's answer to ``body``."""
    n = history_turns(protocol, body, previous)
    offered = isinstance(body.get("tools"), list) and bool(body["tools"])
    calls: list[tuple[str, str, dict[str, Any]]] = []
    if n < len(script.turns):
        turn = script.turns[n]
        text = turn.message
        if turn.tool_calls and offered:
            calls = [(c.id or f"call_{n}_{k}", c.name, c.arguments)
                     for k, c in enumerate(turn.tool_calls)]
        elif text is None:
            text = script.final
    else:
        text = script.final
    conversation = [body.get(k) for k in ("system", "instructions", "messages", "input")]
    heard = sum(pieces(s) for s in strings(conversation))
    spoken = pieces(text or "") + sum(pieces(name) + pieces(json.dumps(args))
                                      for _, name, args in calls)
    return Answer(text, calls, heard, spoken, min(n, len(script.turns)))


# ------------------------------------------------------------------------------ rendering


def _sse(name: str | None, data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {name}\n" if name else "").encode() + f"data: {payload}\n\n".encode()


def chat_usage(a: Answer) -> dict[str, Any]:
    return {"prompt_tokens": a.input_tokens, "completion_tokens": a.output_tokens,
            "total_tokens": a.input_tokens + a.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def chat_plain(a: Answer, model: str, rid: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": a.text}
    if a.calls:
        message["tool_calls"] = [{"id": cid, "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for cid, name, args in a.calls]
    return {"id": f"chatcmpl-{rid}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": "replay",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if a.calls else "stop"}],
            "usage": chat_usage(a)}


def chat_events(a: Answer, model: str, rid: str, *, include_usage: bool) -> list[bytes]:
    base = {"id": f"chatcmpl-{rid}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model, "system_fingerprint": "replay"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if a.text:
        out.append(chunk({"content": a.text}))
    for i, (cid, name, args) in enumerate(a.calls):
        out.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": i,
                                          "function": {"arguments": json.dumps(args)}}]}))
    out.append(chunk({}, "tool_calls" if a.calls else "stop"))
    if include_usage:
        out.append(_sse(None, {**base, "choices": [], "usage": chat_usage(a)}))
    out.append(_sse(None, "[DONE]"))
    return out


def _responses_items(a: Answer, rid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if a.text is not None:
        items.append({"type": "message", "id": f"msg_{rid}", "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": a.text, "annotations": []}]})
    items += [{"type": "function_call", "id": f"fc_{rid}_{i}", "status": "completed",
               "call_id": cid, "name": name, "arguments": json.dumps(args)}
              for i, (cid, name, args) in enumerate(a.calls)]
    return items


def responses_plain(a: Answer, model: str, rid: str, status: str = "completed",
                    ) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"resp_{rid}", "object": "response", "created_at": int(time.time()),
        "status": status, "error": None, "incomplete_details": None, "model": model,
        "output": _responses_items(a, rid) if status == "completed" else [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    if status == "completed":
        body["usage"] = {"input_tokens": a.input_tokens,
                         "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": a.output_tokens,
                         "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": a.input_tokens + a.output_tokens}
    return body


def responses_events(a: Answer, model: str, rid: str) -> list[bytes]:
    seq = itertools.count()
    out: list[bytes] = []

    def ev(kind: str, **data: Any) -> None:
        out.append(_sse(kind, {"type": kind, "sequence_number": next(seq), **data}))

    shell = responses_plain(a, model, rid, status="in_progress")
    ev("response.created", response=shell)
    ev("response.in_progress", response=shell)
    for i, item in enumerate(_responses_items(a, rid)):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            ev("response.output_item.added", output_index=i,
               item={**item, "status": "in_progress", "content": []})
            empty = {"type": "output_text", "text": "", "annotations": []}
            ev("response.content_part.added", item_id=item["id"], output_index=i,
               content_index=0, part=empty)
            ev("response.output_text.delta", item_id=item["id"], output_index=i,
               content_index=0, delta=text)
            ev("response.output_text.done", item_id=item["id"], output_index=i,
               content_index=0, text=text)
            ev("response.content_part.done", item_id=item["id"], output_index=i,
               content_index=0, part=item["content"][0])
        else:
            ev("response.output_item.added", output_index=i,
               item={**item, "status": "in_progress", "arguments": ""})
            ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
               delta=item["arguments"])
            ev("response.function_call_arguments.done", item_id=item["id"], output_index=i,
               arguments=item["arguments"])
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=responses_plain(a, model, rid))
    return out


def _blocks(a: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": a.text}] if a.text else []
    return blocks + [{"type": "tool_use", "id": cid, "name": name, "input": args}
                     for cid, name, args in a.calls]


def _anthropic_usage(a: Answer, output: int) -> dict[str, Any]:
    return {"input_tokens": a.input_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": output}


def anthropic_plain(a: Answer, model: str, rid: str) -> dict[str, Any]:
    return {"id": f"msg_{rid}", "type": "message", "role": "assistant", "model": model,
            "content": _blocks(a), "stop_reason": "tool_use" if a.calls else "end_turn",
            "stop_sequence": None, "usage": _anthropic_usage(a, a.output_tokens)}


def anthropic_events(a: Answer, model: str, rid: str) -> list[bytes]:
    start = {**anthropic_plain(a, model, rid), "content": [], "stop_reason": None,
             "usage": _anthropic_usage(a, 0)}
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(_blocks(a)):
        first: dict[str, Any]
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": first}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": delta}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use" if a.calls else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": a.output_tokens}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out
