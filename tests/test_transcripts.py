"""The gateway's model-side transcript, with real parts: a scripted upstream server, the real
gateway on its loop thread, the official ``openai`` client as the agent (and, in
``test_trial_view.py``, the real Qwen Code CLI through ``exp run``).

What is checked: every call's bodies are kept and rebuilt whole; a history resent on every call
is stored once (the store holds one blob per distinct message, and its bytes grow linearly with
the steps, not with their square); a streamed answer is reassembled as the client saw it; no
secret (the real key, the scoped token, even when the agent puts it in a message) reaches a file;
a body over the limit is stored truncated with a note; ``transcripts=False`` keeps no bodies and
the ledger says ``off``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from support.scripted_server import Answer, ScriptedServer

from assay.models.gateway.service import Gateway, Upstream
from assay.models.gateway.transcript import MAX_PIECE_BYTES
from assay.records.io import iter_rows
from assay.records.ledger import ModelCall
from assay.records.transcript import (
    BLOBS_FILE,
    CALLS_FILE,
    TranscriptBlob,
    TranscriptCall,
    load_transcript,
)

REAL_KEY = "sk-real-0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"
MODEL = "pinned-model"


def _tool_answer(_req: Any, n: int) -> Answer:
    return Answer(f"step {n}: looking", model=MODEL, tool_calls=[{
        "id": f"call_{n}", "type": "function",
        "function": {"name": "run_shell_command", "arguments": json.dumps({"command": "ls"})}}])


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def _agent_loop(gw: Gateway, token: str, steps: int, *, stream: bool,
                leak: str | None = None) -> list[dict[str, Any]]:
    """An agent that resends its whole history each step, as every CLI does; returns what the
    client assembled of each answer."""
    client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. " * 40},
        {"role": "user", "content": f"fix the bug (my key is {leak})" if leak else "fix it"}]
    seen = []
    for _ in range(steps):
        if stream:
            content, calls = "", {}
            for part in client.chat.completions.create(model=MODEL, messages=history,
                                                       stream=True):
                for choice in part.choices:
                    content += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                        slot["id"] += tc.id or ""
                        slot["name"] += (tc.function.name or "") if tc.function else ""
                        slot["args"] += (tc.function.arguments or "") if tc.function else ""
            tool_calls = [{"id": c["id"], "type": "function",
                           "function": {"name": c["name"], "arguments": c["args"]}}
                          for _, c in sorted(calls.items())]
        else:
            msg = client.chat.completions.create(model=MODEL, messages=history).choices[0]
            content = msg.message.content or ""
            tool_calls = [tc.model_dump() for tc in msg.message.tool_calls or []]
        seen.append({"content": content, "tool_calls": tool_calls})
        history.append({"role": "assistant", "content": content, "tool_calls": tool_calls})
        history.append({"role": "tool", "tool_call_id": tool_calls[0]["id"],
                        "content": "src/\ntests/\n" * 20})
    return seen


def test_a_resent_history_is_stored_once_and_rebuilt_whole(tmp_path: Path) -> None:
    sizes: dict[int, int] = {}
    for steps in (5, 20):
        adir = tmp_path / f"s{steps}"
        with ScriptedServer(_tool_answer) as srv, Gateway() as gw:
            token = gw.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                    upstream=Upstream(srv.base_url, REAL_KEY), model=MODEL)
            seen = _agent_loop(gw, token, steps, stream=True, leak=token)
            sent = [r.body for r in srv.chat_requests()]
            gw.close_attempt(token)
        rows = [ModelCall.read(r, adir) for r in iter_rows(adir / "model_calls.jsonl")]
        assert len(rows) == steps and {r.transcript for r in rows} == {"kept"}
        blobs = [TranscriptBlob.read(r, adir) for r in iter_rows(adir / BLOBS_FILE)]
        calls = [TranscriptCall.read(r, adir) for r in iter_rows(adir / CALLS_FILE)]
        assert [c.seq for c in calls] == [r.seq for r in rows]
        # each row lists only what is new (the previous call's history is named by reference),
        # so the call rows grow linearly too: 2 messages a step, never the whole history
        assert [len(c.messages) for c in calls] == [2] * steps
        assert [(c.prefix_seq, c.prefix_count) for c in calls] == \
            [(None, 0)] + [(c.seq, 2 * c.seq) for c in calls[:-1]]
        # one blob per distinct message (2 to start, then 2 new ones a step, the last step's
        # answer never resent) and one request rest (tools/settings unchanged): not steps²
        messages = [b for b in blobs if b.kind == "message"]
        assert len(messages) == 2 + 2 * (steps - 1), len(messages)
        assert len({b.sha256 for b in blobs}) == len(blobs)
        assert [b.kind for b in blobs].count("request") == 1
        sizes[steps] = (adir / BLOBS_FILE).stat().st_size + (adir / CALLS_FILE).stat().st_size

        # every call rebuilt: the history as the agent sent it (secret aside), the answer as
        # the client assembled it from the stream
        transcript = load_transcript(adir)
        assert transcript is not None and len(transcript.calls) == steps
        for call, body, got in zip(transcript.calls, sent, seen, strict=True):
            want = json.loads(json.dumps(body["messages"]).replace(token, "***"))
            assert call.messages == want
            assert call.request is not None and call.request["model"] == MODEL
            message = call.row.response["choices"][0]["message"]
            assert message["content"] == got["content"]
            assert [tc["function"] for tc in message["tool_calls"]] == \
                [tc["function"] for tc in got["tool_calls"]]
            assert call.row.response["choices"][0]["finish_reason"] == "stop"
        # the agent put its token in a message: it reached the upstream, but no file here
        assert token in json.dumps(sent[0])
        data = _all_bytes(adir)
        assert token.encode() not in data and REAL_KEY.encode() not in data
        assert b"***" in data
    # 4x the steps: the files grow about 4x (linear), far from the 16x of storing as sent
    assert sizes[20] < 5 * sizes[5], sizes
    sent_bytes = sum(len(json.dumps(b)) for b in sent)
    assert sizes[20] * 2 < sent_bytes, (sizes[20], sent_bytes)


def test_a_plain_answer_and_an_oversized_message_are_kept_with_a_note(tmp_path: Path) -> None:
    adir = tmp_path / "a"
    with ScriptedServer(_tool_answer) as srv, Gateway() as gw:
        token = gw.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                upstream=Upstream(srv.base_url, REAL_KEY), model=MODEL)
        _agent_loop(gw, token, 2, stream=False)
        client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
        huge = "x" * (MAX_PIECE_BYTES + 5000)
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": huge}])
        gw.close_attempt(token)
    transcript = load_transcript(adir)
    assert transcript is not None
    first, _, big = transcript.calls
    assert first.row.response["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0"
    (note,) = big.messages
    assert set(note) == {"truncated_json_head"} and note["truncated_json_head"].startswith(
        '{"content":"xxx')
    blob = next(TranscriptBlob.read(r, adir) for r in iter_rows(adir / BLOBS_FILE)
                if r["truncated"])
    assert blob.bytes > MAX_PIECE_BYTES and len(json.dumps(blob.value)) < MAX_PIECE_BYTES + 100


def test_transcripts_off_keeps_no_bodies_and_the_ledger_says_so(tmp_path: Path) -> None:
    adir = tmp_path / "a"
    with ScriptedServer(_tool_answer) as srv, Gateway() as gw:
        token = gw.open_attempt("a1", ledger_path=adir / "model_calls.jsonl",
                                upstream=Upstream(srv.base_url, REAL_KEY), model=MODEL,
                                transcripts=False)
        _agent_loop(gw, token, 3, stream=True)
        client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
        client.models.list()
        gw.close_attempt(token)
    rows = [ModelCall.read(r, adir) for r in iter_rows(adir / "model_calls.jsonl")]
    assert [(r.endpoint, r.transcript) for r in rows] == \
        [("chat.completions", "off")] * 3 + [("models", None)]
    assert sorted(p.name for p in adir.iterdir()) == ["model_calls.jsonl"]
    assert load_transcript(adir) is None
    assert b"careful coding agent" not in _all_bytes(adir)


def test_the_transcripts_key_leaves_older_identities_alone(tmp_path: Path) -> None:
    """Unset (the default, on), ``transcripts`` is absent from the identity's settings, so a run
    begun before the key existed resumes; ``false`` is read and frozen like any setting."""
    from support.bundles import make_bundle

    from assay.suites.experiment import load_experiment

    make_bundle(tmp_path / "tasks" / "t0", task_id="t0")
    exp = tmp_path / "experiment.yaml"
    body = "name: ident\ntasks: [tasks]\narms:\n  a: {agent: nop}\n"
    exp.write_text(body)
    on = load_experiment(exp)
    assert on.spec.transcripts is True and "transcripts" not in on.identity["settings"]
    exp.write_text(body + "transcripts: false\n")
    off = load_experiment(exp)
    assert off.spec.transcripts is False and off.identity["settings"]["transcripts"] is False
    exp.write_text(body + "transcripts: nope\n")
    with pytest.raises(Exception, match="transcripts"):
        load_experiment(exp)
