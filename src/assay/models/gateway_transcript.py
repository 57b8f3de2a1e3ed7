"""The model side of an attempt as it happened: what each call sent and what came back.

The ledger (``model_calls.jsonl``) keeps a call's figures and a digest of its body; this module
keeps the bodies themselves, so a reader can see what the model was asked and answered without
the agent's own logs. Two append-only files sit beside the ledger in the attempt directory
(outside every sandbox bind, so an agent can never write them):

- ``transcript_blobs.jsonl``: content-addressed pieces, one row per distinct piece,
  ``{"sha256", "kind", "bytes", "truncated", "value"}``. A piece is one message of the
  request's history (chat and Anthropic ``messages[i]``, Responses ``input[i]``) or the rest of
  a request body (tools, system prompt, settings: everything but that list), in canonical JSON
  (sorted keys, no spaces), redacted before it is hashed.
- ``transcript.jsonl``: one row per call (``TranscriptCall``), ``{"seq", "request":
  <digest of the rest>, "prefix_seq", "prefix_count", "messages": [<digest>, ...],
  "response": ...}``: the history is the first ``prefix_count`` messages of call
  ``prefix_seq``'s history, then ``messages``; a streamed answer is reassembled into the shape
  of a plain one (``StreamCollector``).

How it grows: agents resend the whole history on every call, so storing bodies as sent costs
O(steps²). Here a call adds one row naming the part of its history it shares with the previous
call by reference (a seq and a count) and listing the digests of the rest, plus the pieces never
seen before in this attempt: its new messages, its answer (stored once in its call row, and once
more as a message when the agent sends it back), and the rest of the request only when the tools
or system prompt changed. So the files grow linearly in the new messages of each step; an agent
that rewrites its history (compaction) costs one full list of digests (64 bytes a message) at
that call. ``bench/transcript_growth.py`` measures it. The work per call is linear in the
request (every message is serialized and hashed), as the gateway's own parsing already is.

Bounds: a piece over ``MAX_PIECE_BYTES`` is stored as its first bytes with ``truncated`` set and
its full size; a response over ``MAX_RESPONSE_BYTES`` likewise; past ``MAX_ATTEMPT_BYTES`` of
pieces in one attempt, later calls keep their row with ``bodies: "over_limit"`` and no bodies.
Redaction: every string that equals or contains the scoped token or the real key (as sent or
JSON-escaped) is replaced by ``***`` before hashing or writing, so no secret reaches a file.
``transcripts: false`` in the experiment turns all of this off: no files, and each ledger row
says ``transcript: "off"``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from assay.models.gateway_wire import Family, whole_events
from assay.models.ledger import LedgerFile, Syncer
from assay.records.transcript import BLOBS_FILE, CALLS_FILE

#: One message or request rest, canonical JSON, stored whole up to this size.
MAX_PIECE_BYTES = 1024 * 1024
#: One (reassembled) answer, stored whole up to this size.
MAX_RESPONSE_BYTES = 1024 * 1024
#: All pieces and answers of one attempt; later calls keep their row without bodies.
MAX_ATTEMPT_BYTES = 256 * 1024 * 1024
#: Where each family's request keeps the history it resends.
HISTORY_KEY: dict[str, str] = {"chat": "messages", "anthropic": "messages", "responses": "input"}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Redactor:
    """Replaces each secret, in the forms it can take inside JSON text, by ``***``."""

    def __init__(self, secrets: list[str]) -> None:
        forms: set[str] = set()
        for s in secrets:
            if s:
                forms.add(s)
                forms.add(json.dumps(s, ensure_ascii=False)[1:-1])
                forms.add(json.dumps(s)[1:-1])
        self.forms = sorted(forms, key=len, reverse=True)

    def text(self, text: str) -> str:
        for form in self.forms:
            if form in text:
                text = text.replace(form, "***")
        return text


def _bounded(text: str, limit: int) -> tuple[Any, bool, int]:
    """(value to store, truncated, size in bytes) of a canonical JSON text."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return json.loads(text), False, len(raw)
    head = raw[:limit].decode("utf-8", errors="ignore")
    return {"truncated_json_head": head}, True, len(raw)


class TranscriptWriter:
    """One attempt's transcript files, open for appending until closed. Called from the
    gateway's thread only (``record``), closed from any."""

    def __init__(self, attempt_dir: Path, syncer: Syncer, secrets: list[str]) -> None:
        self.blobs = LedgerFile(attempt_dir / BLOBS_FILE, syncer)
        self.calls = LedgerFile(attempt_dir / CALLS_FILE, syncer)
        self.redact = Redactor(secrets)
        self.seen: set[str] = set()
        self.stored = 0
        # the previous call's whole history, as digests, and its seq: the next call names the
        # part it shares by reference instead of listing it again
        self.last: tuple[int, list[str]] | None = None
        self._lock = threading.Lock()
        for row in _rows(attempt_dir / BLOBS_FILE):  # a reopened attempt keeps its store
            if isinstance(row.get("sha256"), str):
                self.seen.add(row["sha256"])
                self.stored += int(row.get("bytes") or 0)

    def close(self) -> None:
        self.blobs.close()
        self.calls.close()

    @property
    def over_limit(self) -> bool:
        return self.stored >= MAX_ATTEMPT_BYTES

    def _piece(self, kind: str, value: Any) -> str:
        text = self.redact.text(canonical(value))
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if digest not in self.seen:
            stored, truncated, size = _bounded(text, MAX_PIECE_BYTES)
            self.blobs.append({"sha256": digest, "kind": kind, "bytes": size,
                               "truncated": truncated, "value": stored})
            self.seen.add(digest)
            self.stored += min(size, MAX_PIECE_BYTES)
        return digest

    def record(self, *, seq: int, time: str, endpoint: str, protocol: Family,
               request_body: bytes, response: Any, response_note: str | None,
               status: int) -> str:
        """Append one call's row (and its new pieces); the value for the ledger's
        ``transcript`` field."""
        with self._lock:
            row: dict[str, Any] = {"seq": seq, "time": time, "endpoint": endpoint,
                                   "protocol": protocol, "status": status,
                                   "bodies": "kept", "request": None, "prefix_seq": None,
                                   "prefix_count": 0, "messages": [],
                                   "request_note": None, "response": None,
                                   "response_truncated": False, "response_bytes": None,
                                   "response_note": response_note}
            if self.over_limit:
                row["bodies"] = "over_limit"
                row["response_note"] = None
                self.calls.append(row)
                return "over_limit"
            body = _json(request_body)
            if isinstance(body, dict):
                key = HISTORY_KEY.get(protocol, "messages")
                history = body.get(key)
                if isinstance(history, list):
                    rest = {k: v for k, v in body.items() if k != key}
                    digests = [self._piece("message", m) for m in history]
                    shared = _common_prefix(self.last[1], digests) if self.last else 0
                    if shared:
                        assert self.last is not None
                        row["prefix_seq"], row["prefix_count"] = self.last[0], shared
                    row["messages"] = digests[shared:]
                    self.last = (seq, digests)
                else:
                    rest = body
                row["request"] = self._piece("request", rest)
            elif request_body:
                head = self.redact.text(request_body[:4096].decode("utf-8", errors="replace"))
                row["request_note"] = f"not a JSON object ({len(request_body)} bytes): {head}"
            if response is not None:
                text = self.redact.text(canonical(response))
                value, truncated, size = _bounded(text, MAX_RESPONSE_BYTES)
                row.update(response=value, response_truncated=truncated, response_bytes=size)
                self.stored += min(size, MAX_RESPONSE_BYTES)
            if row["response_note"]:
                row["response_note"] = self.redact.text(row["response_note"])[:2000]
            self.calls.append(row)
            return "kept"


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    with path.open("rb") as fh:
        for line in fh:
            value = _json(line)
            if isinstance(value, dict):
                out.append(value)
    return out


def plain_response(data: bytes) -> tuple[Any, str | None]:
    """A non-streamed answer body as stored: its JSON, or a note with its first bytes."""
    value = _json(data)
    if value is not None:
        return value, None
    head = data[:2000].decode("utf-8", errors="replace")
    return None, f"not JSON ({len(data)} bytes): {head}"


class StreamCollector:
    """Reassembles a streamed answer (SSE) into the shape of a plain answer of its API, from
    the same bytes the agent received; holds at most ``MAX_RESPONSE_BYTES`` of text."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self._buf = b""
        self.size = 0
        self.cut = False
        self.events = 0
        # chat
        self._chat: dict[int, dict[str, Any]] = {}
        self._top: dict[str, Any] = {}
        # anthropic
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, str] = {}
        # responses
        self._final: Any = None
        self._text: list[str] = []

    def feed(self, piece: bytes) -> None:
        buf = self._buf + piece if self._buf else piece
        spans, rest = whole_events(buf)
        for begin, end, _ in spans:
            self._event(buf[begin:end])
        self._buf = buf[rest:]
        if len(self._buf) > MAX_RESPONSE_BYTES:
            self._buf, self.cut = b"", True

    def _event(self, event: bytes) -> None:
        data = [line[5:].strip() for line in event.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")]
        if not data or data == [b"[DONE]"]:
            return
        payload = _json(b"\n".join(data))
        if not isinstance(payload, dict):
            return
        self.events += 1
        self.size += sum(len(d) for d in data)
        if self.size > MAX_RESPONSE_BYTES:
            self.cut = True
            return
        if self.family == "chat":
            self._chat_event(payload)
        elif self.family == "anthropic":
            self._anthropic_event(payload)
        else:
            self._responses_event(payload)

    def _chat_event(self, p: dict[str, Any]) -> None:
        for k in ("id", "model", "created", "usage", "system_fingerprint"):
            if p.get(k) is not None:
                self._top[k] = p[k]
        choices = p.get("choices")
        for ch in choices if isinstance(choices, list) else []:
            if not isinstance(ch, dict):
                continue
            idx = ch.get("index") if isinstance(ch.get("index"), int) else 0
            slot = self._chat.setdefault(idx, {"index": idx, "message": {"role": "assistant"},
                                               "finish_reason": None})
            if isinstance(ch.get("finish_reason"), str):
                slot["finish_reason"] = ch["finish_reason"]
            delta = ch.get("delta")
            if not isinstance(delta, dict):
                continue
            msg = slot["message"]
            for k in ("content", "reasoning_content", "reasoning", "refusal"):
                if isinstance(delta.get(k), str):
                    msg[k] = msg.get(k, "") + delta[k]
            calls = delta.get("tool_calls")
            for tc in calls if isinstance(calls, list) else []:
                if not isinstance(tc, dict):
                    continue
                tools = msg.setdefault("tool_calls", [])
                i = tc.get("index") if isinstance(tc.get("index"), int) else len(tools)
                while len(tools) <= i:
                    tools.append({"id": None, "type": "function",
                                  "function": {"name": "", "arguments": ""}})
                cur = tools[i]
                if isinstance(tc.get("id"), str):
                    cur["id"] = tc["id"]
                fn = tc.get("function")
                if isinstance(fn, dict):
                    for k in ("name", "arguments"):
                        if isinstance(fn.get(k), str):
                            cur["function"][k] += fn[k]

    def _anthropic_event(self, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind == "message_start" and isinstance(p.get("message"), dict):
            self._message = dict(p["message"])
        elif kind == "content_block_start" and isinstance(p.get("content_block"), dict):
            idx = p.get("index") if isinstance(p.get("index"), int) else len(self._blocks)
            self._blocks[idx] = dict(p["content_block"])
        elif kind == "content_block_delta" and isinstance(p.get("delta"), dict):
            idx = p.get("index") if isinstance(p.get("index"), int) else 0
            block = self._blocks.setdefault(idx, {"type": "text", "text": ""})
            d = p["delta"]
            for field, key in (("text", "text"), ("thinking", "thinking"),
                               ("signature", "signature")):
                if isinstance(d.get(field), str):
                    block[key] = block.get(key, "") + d[field]
            if isinstance(d.get("partial_json"), str):
                self._partial[idx] = self._partial.get(idx, "") + d["partial_json"]
        elif kind == "message_delta":
            msg = self._message if self._message is not None else {}
            self._message = msg
            if isinstance(p.get("delta"), dict):
                msg.update({k: v for k, v in p["delta"].items() if v is not None})
            if isinstance(p.get("usage"), dict):
                msg["usage"] = {**(msg.get("usage") or {}), **p["usage"]}

    def _responses_event(self, p: dict[str, Any]) -> None:
        kind = p.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed") \
                and isinstance(p.get("response"), dict):
            self._final = p["response"]
        elif kind == "response.output_text.delta" and isinstance(p.get("delta"), str):
            self._text.append(p["delta"])

    def result(self) -> tuple[Any, str | None]:
        """(the reassembled answer, a note when it is partial or absent)."""
        if self._buf.strip():
            self._event(self._buf)
            self._buf = b""
        note = (f"the stream was over {MAX_RESPONSE_BYTES} bytes: reassembled from its start"
                if self.cut else None)
        if self.events == 0:
            return None, "no events in the stream"
        if self.family == "chat":
            out = {**self._top, "object": "chat.completion",
                   "choices": [self._chat[i] for i in sorted(self._chat)]}
        elif self.family == "anthropic":
            out = dict(self._message or {"type": "message", "role": "assistant"})
            blocks = []
            for i in sorted(self._blocks):
                block = dict(self._blocks[i])
                if i in self._partial:
                    parsed = _json(self._partial[i].encode("utf-8"))
                    block["input"] = parsed if parsed is not None else self._partial[i]
                blocks.append(block)
            out["content"] = blocks
        else:
            out = self._final if self._final is not None else {
                "object": "response", "output_text": "".join(self._text)}
            if self._final is None:
                note = note or "the stream ended before its response.completed event"
        return out, note
