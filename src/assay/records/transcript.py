"""An attempt's model-side transcript: the bodies of its model calls, as the gateway saw them.

Written by ``assay.models.gateway.transcript`` beside ``model_calls.jsonl``, append-only, in two
files: ``transcript_blobs.jsonl`` holds each distinct piece once by the SHA-256 of its canonical
JSON (a message of the resent history, or the rest of a request body: tools, system prompt,
settings), and ``transcript.jsonl`` one row per call naming its pieces by digest (the part of
its history it shares with the previous call by that call's seq and a count), with the answer (a
streamed one reassembled). So the history an agent resends on every call is stored
once, and the files grow with what is new at each step, not with the square of the steps.
Secrets (the scoped token, the real key) are replaced by ``***`` before anything is hashed or
written. ``load_transcript`` rebuilds each call's full request from the two files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from assay.records.base import Record
from assay.records.io import iter_rows

BLOBS_FILE = "transcript_blobs.jsonl"
CALLS_FILE = "transcript.jsonl"


class TranscriptBlob(Record):
    """One distinct piece of an attempt's model requests, stored once however often it was
    sent."""

    schema_name = "assay.transcript_blob"
    schema_version = 1
    file = BLOBS_FILE

    sha256: str
    """SHA-256 of the piece's canonical JSON (sorted keys, no spaces, UTF-8), after redaction."""
    kind: Literal["message", "request"]
    """``message``: one item of the history the request carries (chat and Anthropic
    ``messages[i]``, Responses ``input[i]``); ``request``: the rest of a request body (model,
    tools, system prompt, settings)."""
    bytes: int
    """Size of the canonical JSON, whole (before any truncation)."""
    truncated: bool
    """The piece was over the stored size limit (1 MiB): ``value`` is
    ``{"truncated_json_head": <its first bytes as text>}``."""
    value: Any
    """The piece, as JSON, with every secret replaced by ``***``."""


class TranscriptCall(Record):
    """One model call of an attempt: what it sent (by digest) and what it got back."""

    schema_name = "assay.transcript_call"
    schema_version = 1
    file = CALLS_FILE

    seq: int
    """The call's ``seq`` in ``model_calls.jsonl`` (its ledger row)."""
    time: str
    """When the gateway received the request, ISO 8601 UTC."""
    endpoint: str
    """The route called, as in the ledger (``chat.completions``, ``responses``, ``messages``,
    ``messages.count_tokens``)."""
    protocol: Literal["chat", "responses", "anthropic"]
    """The API spoken."""
    status: int
    """HTTP status the agent received."""
    bodies: Literal["kept", "over_limit"]
    """``over_limit``: the attempt had already stored its most transcript bytes (256 MiB), so
    this row has no bodies."""
    request: str | None
    """Digest of the request body without its history list (a ``request`` blob); null when the
    body was not a JSON object (see ``request_note``) or not kept."""
    prefix_seq: int | None = None
    """The call whose history this one's begins with (the previous call, when the agent
    resent it): its first ``prefix_count`` messages are this call's first ones. Null: none
    shared, ``messages`` is the whole history."""
    prefix_count: int = 0
    """How many messages of call ``prefix_seq``'s history this one begins with."""
    messages: list[str]
    """Digests of the rest of the history the request carried (after the shared prefix), in
    order (``message`` blobs)."""
    request_note: str | None
    """What the body was when it was not a JSON object: its size and first bytes."""
    response: Any
    """The answer as JSON (a streamed answer reassembled into its API's plain shape; an error
    answer as the upstream sent it); null when there was none or it was not JSON."""
    response_truncated: bool
    """The answer was over 1 MiB: ``response`` is ``{"truncated_json_head": ...}``."""
    response_bytes: int | None
    """Size of the answer's canonical JSON, whole."""
    response_note: str | None
    """What is missing or partial about the answer (a stream cut short, a body that was not
    JSON, the gateway's error, the protocol anomalies of a stream whose pieces were left out
    of the reassembled answer, such as an index out of bounds), readable and redacted."""


@dataclass
class CallBodies:
    """One call rebuilt: its row, its request body whole, its history resolved."""

    row: TranscriptCall
    request: dict[str, Any] | None
    messages: list[Any] = field(default_factory=list)


@dataclass
class Transcript:
    calls: list[CallBodies]
    blobs: int
    blob_bytes: int
    torn: int = 0


def load_transcript(attempt_dir: Path) -> Transcript | None:
    """The attempt's transcript with every call's pieces resolved; None when it has none (the
    transcript was off, or the arm had no model). A digest with no blob resolves to a note."""
    calls_path = attempt_dir / CALLS_FILE
    if not calls_path.is_file():
        return None
    torn = [0]

    def on_torn(_tail: bytes) -> None:
        torn[0] += 1

    store: dict[str, Any] = {}
    size = 0
    blobs_path = attempt_dir / BLOBS_FILE
    if blobs_path.is_file():
        for raw in iter_rows(blobs_path, on_torn=on_torn):
            blob = TranscriptBlob.read(raw, blobs_path)
            store[blob.sha256] = blob.value
            size += blob.bytes

    def get(digest: str) -> Any:
        return store.get(digest, {"missing_blob": digest})

    calls = []
    history: dict[int, list[str]] = {}  # each call's whole history, as digests
    for raw in iter_rows(calls_path, on_torn=on_torn):
        row = TranscriptCall.read(raw, calls_path)
        request = get(row.request) if row.request else None
        shared = history.get(row.prefix_seq, []) if row.prefix_seq is not None else []
        whole = shared[:row.prefix_count] + row.messages
        if row.prefix_seq is not None and len(shared) < row.prefix_count:
            whole = [f"missing-prefix:{row.prefix_seq}"] + row.messages  # a torn reference
        history[row.seq] = whole
        calls.append(CallBodies(row, request if isinstance(request, dict) else None,
                                [get(d) for d in whole]))
    return Transcript(calls, len(store), size, torn[0])
