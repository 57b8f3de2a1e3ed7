"""A scripted judge model: a real OpenAI-compatible HTTP server that records what it was sent.

It is :class:`support.scripted_server.ScriptedServer` (the same HTTP serving code) with a
handler that answers from a **script keyed by a marker in the material**: the first key of the
script that occurs in the request's first user message (the quoted material) decides the reply.
The n-th try of one judging conversation (n = the number of assistant messages already in the
request: 0 for the first ask, 1 for the retry) gets the n-th reply of the key's list; the last
one repeats. A request no key matches, or two keys match, gets a 500, so a test that forgot to
script something fails loudly.

A reply is one of:

- a ``dict``: sent as JSON text (build one with :func:`verdict`);
- a ``str``: sent verbatim as the message content (malformed JSON, prose, a fenced block...);
- a ``scripted_server`` reply (``Answer``, ``Status``, ``Drop``, ``Garbage``): sent as it is;
- a callable ``(RecordedRequest) -> dict | str | Reply``: decided from the request, e.g.
  :func:`by_position` for order-dependent answers.

Example::

    script = {
        "GOOD": verdict({"correct": 3}, {"correct": ["answer.txt:1"]}),
        "BROKEN": "{not json",
        "LIAR": [verdict({"correct": 3}, {"correct": ["nope.py:1"]}),     # invented citation
                 verdict({"correct": 2}, {"correct": ["answer.txt:1"]})],  # good on the retry
        "AB": by_position(["ALPHA", "BETA"], {"ALPHA": {"winner": "A"},    # always prefers
                                               "BETA": {"winner": "B"}}),  # what is shown first
    }
    with JudgeServer(script) as server:
        ... judge.yaml with base_url: server.base_url ...
        assert server.requests_matching("GOOD")[0].messages[0]["role"] == "system"
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from support.scripted_server import (
    _REPLY_TYPES,
    DEFAULT_MODEL,
    Answer,
    RecordedRequest,
    Reply,
    ScriptedServer,
    Status,
)

JudgeReply: TypeAlias = "dict[str, Any] | str | Reply | Callable[[RecordedRequest], Any]"

__all__ = ["JudgeReply", "JudgeServer", "by_position", "tries_of", "verdict"]


def verdict(scores: Mapping[str, Any], citations: Mapping[str, list[str]] | list[str],
            reasons: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A reply by ``assay.judge.reply/1``: ``citations`` per criterion, or one list for all."""
    out: dict[str, Any] = {}
    for cid, score in scores.items():
        cites = citations if isinstance(citations, list) else citations.get(cid, [])
        out[cid] = {"score": score, "citations": list(cites),
                    "reason": (reasons or {}).get(cid, f"scripted reason for {cid}")}
    return {"criteria": out}


def by_position(markers: Sequence[str], replies: Mapping[str, Any]) -> Callable[
        [RecordedRequest], Any]:
    """A reply decided by which of ``markers`` comes first in the material: the reply of the
    marker shown first (a judge with a position bias, for pairwise tests)."""

    def decide(request: RecordedRequest) -> Any:
        text = request.case_input or ""
        found = [(text.find(m), m) for m in markers if m in text]
        if not found:
            return Status(500, body=json.dumps({"error": {
                "message": f"by_position: none of {list(markers)} in the material"}}))
        return replies[min(found)[1]]

    return decide


def tries_of(request: RecordedRequest) -> int:
    """0 for a first ask, 1 for the retry: the assistant messages already in the request."""
    return sum(1 for m in request.messages if isinstance(m, dict) and m.get("role") ==
               "assistant")


def _as_reply(value: Any, request: RecordedRequest, model: str) -> Reply:
    if callable(value) and not isinstance(value, _REPLY_TYPES):
        value = value(request)
    if isinstance(value, _REPLY_TYPES):
        return value
    if isinstance(value, dict):
        return Answer(json.dumps(value), model=model)
    if isinstance(value, str):
        return Answer(value, model=model)
    raise TypeError(f"judge script: {value!r} is not a reply")


class JudgeServer(ScriptedServer):
    """A ScriptedServer whose replies come from a judge script (see the module docstring)."""

    def __init__(self, script: Mapping[str, Any], *, model: str = DEFAULT_MODEL) -> None:
        self.script: dict[str, list[Any]] = {
            k: list(v) if isinstance(v, list | tuple) else [v] for k, v in script.items()}
        self.served = model
        super().__init__(self._handle, models=(model,))

    def _handle(self, request: RecordedRequest, attempt: int) -> Reply:
        text = request.case_input or ""
        keys = [k for k in self.script if k in text]
        if len(keys) != 1:
            why = "no script key" if not keys else f"several script keys {keys}"
            return Status(500, body=json.dumps({"error": {"message": f"judge script: {why} "
                                                          "in the material"}}))
        seq = self.script[keys[0]]
        return _as_reply(seq[min(tries_of(request), len(seq) - 1)], request, self.served)

    def requests_matching(self, marker: str) -> list[RecordedRequest]:
        """Chat requests whose material contains ``marker``, in arrival order."""
        return [r for r in self.chat_requests() if marker in (r.case_input or "")]
