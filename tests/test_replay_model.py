"""``builtin/replay`` with real parts: scripts read from files, the replay server on a real port,
the real gateway in front of it, the official ``openai`` client (chat, Responses) or plain HTTP
(Anthropic) as the agent; and one ``assay exp run`` whose arms speak the Responses API and
Anthropic Messages through the gateway in the sandbox, with an agent that applies the scripted
fix and is accepted by the verifier. Usage figures are checked against a hand count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.errors import SuiteError
from assay.models.gateway.service import Gateway, Upstream
from assay.models.replay_script import DEFAULT_FINAL, load_replay
from assay.models.replay_server import ReplayServer
from assay.records.io import iter_rows
from assay.records.ledger import ModelCall
from assay.sandbox import bwrap_available

SCRIPT = """turns:
  - tool_call: {name: bash, arguments: {command: ls}}
  - message: fixed it
final: nothing left
"""
MODEL = "builtin/replay"
PRICES = {MODEL: {"input": 1.0, "output": 2.0}}
# the first request's text is "fix add": 2 pieces; the answer is the name "bash" (1) and the
# arguments {"command": "ls"}: { " command " : " ls " } = 9 pieces
FIRST_USAGE = (2, 10)
FIRST_COST = (2 * 1.0 + 10 * 2.0) / 1e6
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]
RESP_TOOLS = [{"type": "function", "name": "bash", "parameters": SCHEMA}]
ANTH_TOOLS = [{"name": "bash", "input_schema": SCHEMA}]


def _script(tmp: Path, text: str = SCRIPT, name: str = "calc.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------- scripts


def test_script_forms(tmp_path: Path) -> None:
    folder = tmp_path / "scripts"
    folder.mkdir()
    _script(folder, name="t1.yaml")
    (folder / "t2.jsonl").write_text('{"tool_calls": [{"name": "a"}, {"name": "b", "id": "x"}]}'
                                     '\n\n{"message": "done"}\n{"final": "bye"}\n')
    book = load_replay(folder, ["t1", "t2"])
    assert [len(book.scripts[t].turns) for t in ("t1", "t2")] == [2, 2]
    assert book.scripts["t1"].turns[0].tool_calls[0].arguments == {"command": "ls"}
    assert book.scripts["t2"].final == "bye" and book.scripts["t2"].turns[0].tool_calls[1].id == "x"
    keyed = _script(tmp_path, "tasks:\n  t1: {turns: [{message: one}]}\n"
                    "  t2: {turns: [{message: two}], final: end}\n", "all.yaml")
    both = load_replay(keyed, ["t1", "t2"])
    assert both.scripts["t2"].final == "end" and both.scripts["t1"].final == DEFAULT_FINAL
    shared = load_replay(_script(tmp_path), ["t1", "t2"])
    assert shared.scripts["t1"] is shared.scripts["t2"]
    # the digest follows the content: a changed script is a changed experiment
    before = load_replay(folder, ["t1"]).sha256
    (folder / "t1.yaml").write_text(SCRIPT.replace("ls", "pwd"))
    assert load_replay(folder, ["t1"]).sha256 != before


def test_script_errors_name_file_line_and_field(tmp_path: Path) -> None:
    bad = _script(tmp_path, "turns:\n  - message: ok\n  - tool_call: {arguments: {}}\n"
                  "  - {}\n", "bad.yaml")
    with pytest.raises(SuiteError) as info:
        load_replay(bad, ["t"])
    text = str(info.value)
    assert f"{bad}:3: field 'turns.1.tool_call.name'" in text
    assert f"{bad}:4: field 'turns.2'" in text and "needs a message" in text
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"message": "ok"}\nnot json\n{"tool_call": {"name": ""}}\n')
    with pytest.raises(SuiteError) as info:
        load_replay(jsonl, ["t"])
    text = str(info.value)
    assert f"{jsonl}:2: not JSON" in text
    assert f"{jsonl}:3: field 'turns.2.tool_call.name'" in text
    folder = tmp_path / "scripts"
    folder.mkdir()
    with pytest.raises(SuiteError, match="no script for task 'calc-001'"):
        load_replay(folder, ["calc-001"])
    keyed = _script(tmp_path, "tasks:\n  t1: {turns: [{message: one}]}\n", "keyed.yaml")
    with pytest.raises(SuiteError, match=f"{keyed}:1: field 'tasks': no script for task 't2'"):
        load_replay(keyed, ["t1", "t2"])


# ------------------------------------------------------------------------- through the gateway


def _rows(ledger: Path) -> list[ModelCall]:
    return [ModelCall.read(r, ledger) for r in iter_rows(ledger)]


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def _chat(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    if not stream:
        msg = client.chat.completions.create(model="x", messages=messages, tools=CHAT_TOOLS,
                                             ).choices[0].message
        calls = [(c.id, c.function.name, json.loads(c.function.arguments))
                 for c in msg.tool_calls or []]
        return {"text": msg.content, "calls": calls, "assistant": msg.model_dump(
            exclude_none=True)}
    text, calls = "", {}
    for part in client.chat.completions.create(model="x", messages=messages, tools=CHAT_TOOLS,
                                               stream=True):
        for choice in part.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, ["", "", ""])
                slot[0] = tc.id or slot[0]
                slot[1] += tc.function.name or ""
                slot[2] += tc.function.arguments or ""
    found = [(i, n, json.loads(a)) for i, n, a in calls.values()]
    assistant = {"role": "assistant", "content": text or None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in found]} if found else {"role": "assistant", "content": text}
    return {"text": text or None, "calls": found, "assistant": assistant}


def _chat_flow(client: openai.OpenAI, stream: bool) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix add"}]
    out = []
    for _ in range(3):
        got = _chat(client, history, stream)
        out.append(got)
        history.append(got["assistant"])
        history += [{"role": "tool", "tool_call_id": cid, "content": "calc.py"}
                    for cid, _, _ in got["calls"]]
    return out


def _responses_flow(client: openai.OpenAI, stream: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "fix add"}]
    out = []
    for _ in range(3):
        if stream:
            events = list(client.responses.create(model="x", input=items, tools=RESP_TOOLS,
                                                  stream=True))
            assert events[-1].type == "response.completed"
            response = events[-1].response
        else:
            response = client.responses.create(model="x", input=items, tools=RESP_TOOLS)
        calls = [(o.call_id, o.name, json.loads(o.arguments)) for o in response.output
                 if o.type == "function_call"]
        text = "".join(c.text for o in response.output if o.type == "message"
                       for c in o.content) or None
        out.append({"text": text, "calls": calls})
        items += [o.model_dump(exclude_none=True) for o in response.output]
        items += [{"type": "function_call_output", "call_id": cid, "output": "calc.py"}
                  for cid, _, _ in calls]
    return out


def _anthropic_flow(gw: Gateway, token: str, stream: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix add"}]
    out = []
    for _ in range(3):
        r = httpx.post(gw.root_url + "/v1/messages", timeout=10,
                       headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
                       json={"model": "x", "max_tokens": 64, "messages": messages,
                             "tools": ANTH_TOOLS, "stream": stream})
        assert r.status_code == 200, r.text
        if stream:
            events = _sse(r.text)
            assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
            blocks: dict[int, dict[str, Any]] = {}
            for e in events:
                if e["type"] == "content_block_start":
                    blocks[e["index"]] = {**e["content_block"], "_json": ""}
                elif e["type"] == "content_block_delta":
                    d = e["delta"]
                    if d["type"] == "text_delta":
                        blocks[e["index"]]["text"] += d["text"]
                    else:
                        blocks[e["index"]]["_json"] += d["partial_json"]
            content = []
            for b in blocks.values():
                raw = b.pop("_json")
                if b["type"] == "tool_use":
                    b["input"] = json.loads(raw)
                content.append(b)
        else:
            content = r.json()["content"]
        calls = [(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        text = "".join(b["text"] for b in content if b["type"] == "text") or None
        out.append({"text": text, "calls": calls})
        messages.append({"role": "assistant", "content": content})
        if calls:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": cid, "content": "calc.py"}
                for cid, _, _ in calls]})
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "sse"])
@pytest.mark.parametrize("protocol", ["chat", "responses", "anthropic"])
def test_replay_answers_each_protocol_through_the_gateway(tmp_path: Path, protocol: str,
                                                          stream: bool) -> None:
    book = load_replay(_script(tmp_path), ["calc"])
    ledger = tmp_path / "a1" / "model_calls.jsonl"
    with ReplayServer({"arm/calc": book.scripts["calc"]}) as replay, Gateway() as gw:
        token = gw.open_attempt("a1", ledger_path=ledger, model=MODEL, prices=PRICES,
                                upstream=Upstream(replay.base_url("arm/calc"), "unused"),
                                protocol=protocol)  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=gw.base_url, api_key=token, max_retries=0)
        if protocol == "chat":
            got = _chat_flow(client, stream)
        elif protocol == "responses":
            got = _responses_flow(client, stream)
        else:
            got = _anthropic_flow(gw, token, stream)
    assert [(g["text"], [(n, a) for _, n, a in g["calls"]]) for g in got] == [
        (None, [("bash", {"command": "ls"})]), ("fixed it", []), ("nothing left", [])]
    assert got[0]["calls"][0][0]  # every tool call has an id
    rows = _rows(ledger)
    assert [(r.protocol, r.status, r.stream, r.assistant_step) for r in rows] == \
        [(protocol, 200, stream, True)] * 3
    assert (rows[0].input_tokens, rows[0].output_tokens) == FIRST_USAGE
    assert rows[0].cost_usd == pytest.approx(FIRST_COST)
    assert rows[0].model_served == MODEL and not any(r.usage_missing for r in rows)
    # reported as none, not unknown: the replay model has no cache and no reasoning
    assert rows[0].cached_input_tokens == 0
    assert rows[0].reasoning_tokens == (None if protocol == "anthropic" else 0)
    assert rows[0].finish_reason == {"chat": "tool_calls", "responses": "completed",
                                     "anthropic": "tool_use"}[protocol]
    # the history grows, so the input counts do: honest, not constant
    assert rows[0].input_tokens < rows[1].input_tokens < rows[2].input_tokens


def test_no_tools_offered_and_previous_response_id(tmp_path: Path) -> None:
    book = load_replay(_script(tmp_path), ["calc"])
    with ReplayServer({"arm/calc": book.scripts["calc"]}) as replay:
        client = openai.OpenAI(base_url=replay.base_url("arm/calc"), api_key="x")
        # a side request without tools (a title, say) never gets a call it cannot take
        title = client.chat.completions.create(model="x", messages=[
            {"role": "user", "content": "title?"}])
        assert title.choices[0].message.content == "nothing left"
        assert not title.choices[0].message.tool_calls
        first = client.responses.create(model="x", input="fix add", tools=RESP_TOOLS)
        assert first.output[0].type == "function_call"
        second = client.responses.create(model="x", previous_response_id=first.id,
                                         tools=RESP_TOOLS, input=[{
                                             "type": "function_call_output",
                                             "call_id": first.output[0].call_id,
                                             "output": "calc.py"}])
        assert second.output_text == "fixed it"
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=replay.base_url("arm/calc").replace("calc", "other"),
                          api_key="x", max_retries=0).responses.create(model="x", input="x")


def test_a_body_nested_too_deep_is_a_400(tmp_path: Path) -> None:
    """An agent's body is untrusted: JSON nested past the parser's recursion limit (which
    raises RecursionError, not ValueError) is refused like any other bad body, and the server
    goes on answering."""
    book = load_replay(_script(tmp_path), ["calc"])
    with ReplayServer({"arm/calc": book.scripts["calc"]}) as replay:
        url = replay.base_url("arm/calc") + "/chat/completions"
        deep = httpx.post(url, content="[" * 100_000 + "]" * 100_000, timeout=30)
        assert deep.status_code == 400 and "maximum recursion depth" in deep.json()[
            "error"]["message"]
        ok = httpx.post(url, json={"model": "x", "messages": [{"role": "user", "content": "t"}]},
                        timeout=30)
        assert ok.status_code == 200


# ------------------------------------------------------------------------- exp run, end to end

# Speaks the arm's protocol (ASSAY_MODEL_PROTOCOL) with urllib through the gateway, runs the
# tool calls it gets, and stops at the first answer without one.
AGENT = r"""
import json, os, subprocess, urllib.request
proto = os.environ["ASSAY_MODEL_PROTOCOL"]
def post(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    return json.load(urllib.request.urlopen(req, timeout=30))
def run(args):
    return subprocess.run(args["command"], shell=True, capture_output=True, text=True).stdout
schema = {"type": "object", "properties": {"command": {"type": "string"}}}
if proto == "responses":
    items = [{"role": "user", "content": "fix add"}]
    for _ in range(5):
        r = post(os.environ["OPENAI_BASE_URL"] + "/responses",
                 {"model": os.environ["ASSAY_MODEL"], "input": items,
                  "tools": [{"type": "function", "name": "bash", "parameters": schema}]},
                 {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        calls = [o for o in r["output"] if o["type"] == "function_call"]
        items += r["output"]
        if not calls:
            print("final:", r["output"][0]["content"][0]["text"])
            break
        items += [{"type": "function_call_output", "call_id": c["call_id"],
                   "output": run(json.loads(c["arguments"]))} for c in calls]
else:
    messages = [{"role": "user", "content": "fix add"}]
    for _ in range(5):
        r = post(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
                 {"model": os.environ["ANTHROPIC_MODEL"], "max_tokens": 256,
                  "messages": messages, "tools": [{"name": "bash", "input_schema": schema}]},
                 {"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                  "anthropic-version": "2023-06-01"})
        calls = [b for b in r["content"] if b["type"] == "tool_use"]
        messages.append({"role": "assistant", "content": r["content"]})
        if not calls:
            print("final:", r["content"][0]["text"])
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": run(c["input"])}
            for c in calls]})
print("OPENAI_BASE_URL" in os.environ, "ANTHROPIC_BASE_URL" in os.environ)
"""

FIX = """turns:
  - message: I will fix the sign.
    tool_call:
      name: bash
      arguments: {command: "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"}
  - message: Fixed add().
"""


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_exp_run_with_responses_and_anthropic_arms_on_replay(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "tasks" / "calc")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", "network_policy: model-proxy-only"))
    (bundle / "repo" / "agent.py").write_text(AGENT)
    from assay.suites.bundle import set_fixture_digest, tree_digest

    set_fixture_digest(bundle, tree_digest(bundle / "repo"))
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "calc-001.yaml").write_text(FIX)
    exp = tmp_path / "experiment.yaml"
    exp.write_text("""name: replay-ab
tasks: [tasks]
arms:
  codexish:
    agent: "command:python3 agent.py"
    model: {name: builtin/replay, script: scripts, protocol: responses}
  claudeish:
    agent: "command:python3 agent.py"
    model: {name: builtin/replay, script: scripts, protocol: anthropic}
limits: {cost_usd: 1.0}
prices:
  builtin/replay: {input: 1.0, output: 2.0}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    for arm, proto in (("codexish", "responses"), ("claudeish", "anthropic")):
        assert rep["arms"][arm]["accepted"] == 1, rep["arms"][arm]
        (ledger,) = out.glob(f"trials/calc-001/{arm}/0/a1/model_calls.jsonl")
        rows = [ModelCall.read(r, ledger) for r in iter_rows(ledger)]
        assert [(r.protocol, r.status, r.assistant_step) for r in rows] == [(proto, 200, True)] * 2
        assert all(r.cost_usd and r.cost_usd > 0 for r in rows)
        stdout = (ledger.parent / "agent" / "stdout.log").read_text()
        assert "final: Fixed add()." in stdout
        assert ("True True" if proto == "anthropic" else "True False") in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["arms"]["codexish"]["protocol"] == "responses"
    assert len(manifest["arms"]["codexish"]["script_sha256"]) == 64
    # a changed script is a changed experiment: the resume is refused, naming the arm
    (tmp_path / "scripts" / "calc-001.yaml").write_text(FIX.replace("Fixed", "Mended"))
    again = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert again.code == 2 and "codexish" in again.stderr + again.stdout


def test_replay_arm_script_problems_refused_before_running(tmp_path: Path) -> None:
    make_bundle(tmp_path / "tasks" / "calc")
    (tmp_path / "scripts").mkdir()
    exp = tmp_path / "experiment.yaml"
    exp.write_text("""name: replay-bad
tasks: [tasks]
arms:
  a:
    agent: "command:python3 agent.py"
    model: {name: builtin/replay, script: scripts}
  b:
    agent: "command:python3 agent.py"
    model: {name: builtin/replay}
""")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 2
    assert "arms.b.model" in res.stderr and "needs a script" in res.stderr
    exp.write_text(exp.read_text().replace("    model: {name: builtin/replay}\n",
                                           "    model: {name: builtin/replay, script: scripts}\n"))
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run")])
    assert res.code == 2 and "no script for task 'calc-001'" in res.stderr
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
