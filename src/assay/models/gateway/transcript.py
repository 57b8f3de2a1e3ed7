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
  of a plain one (``gateway_reassemble``, which bounds what an upstream's stream can make it
  hold and notes each protocol anomaly in ``response_note``).

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

from assay.models.gateway.wire import Family
from assay.models.ledger import LedgerFile, Syncer
from assay.models.untrusted_json import parse_json
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
            body = parse_json(request_body)
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


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    with path.open("rb") as fh:
        for line in fh:
            value = parse_json(line)
            if isinstance(value, dict):
                out.append(value)
    return out


def plain_response(data: bytes) -> tuple[Any, str | None]:
    """A non-streamed answer body as stored: its JSON, or a note with its first bytes."""
    value = parse_json(data)
    if value is not None:
        return value, None
    head = data[:2000].decode("utf-8", errors="replace")
    return None, f"not JSON ({len(data)} bytes): {head}"
