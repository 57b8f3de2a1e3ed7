"""Trials as ATIF trajectories, with real parts: ``exp run`` through the CLI, two ``command:``
arms (a Python agent in the bubblewrap sandbox that runs a tool loop through the real gateway)
against a scripted upstream, and the maintained ``atif`` package (``atif.Trajectory``, the
Pydantic models of ATIF v1.8) as the validator. Nothing is mocked.

- ``own`` writes its own ATIF trajectory where ``ASSAY_ATIF_PATH`` says: kept, valid, the
  trial's step source; its model is priced, so the final figures (from the ledger, not the
  agent's claims) are whole and equal the ledger's.
- ``bad`` writes an invalid one (an agent without a version): an evidence gap with the
  reason, the trial graded all the same; its trajectory is built from the gateway transcript
  with every tool call matched to its observation; its model has no price, so the cost is
  left out with its reason and lower bound, never a zero.

The rehearsal's real Qwen Code trials are checked the same way in ``test_examples.py``.
One experiment of two trials: about 6 CPU-seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli
from support import agent_cli
from support.scripted_server import Answer, RecordedRequest, ScriptedServer

from assay.records.io import iter_rows
from assay.records.ledger import ledger_totals

atif = pytest.importorskip("atif", reason="the atif package (assay[dev]) validates ATIF here")

FIX_CMD = ("python3 -c \"import pathlib; p = pathlib.Path('src/calc/__init__.py'); "
           "p.write_text(p.read_text().replace('a - b', 'a + b'))\"")

AGENT = r'''
import json, os, subprocess, sys, urllib.request
mode = sys.argv[1]
msgs = [{"role": "user", "content": open(os.environ["ASSAY_INSTRUCTION_FILE"]).read()}]
steps = [{"step_id": 1, "source": "user", "message": msgs[0]["content"]}]
for _ in range(6):
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ["ASSAY_MODEL"], "messages": msgs}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=60))
    msg = answer["choices"][0]["message"]
    msgs.append(msg)
    step = {"step_id": len(steps) + 1, "source": "agent", "message": msg.get("content") or "",
            "metrics": {"prompt_tokens": answer["usage"]["prompt_tokens"],
                        "completion_tokens": answer["usage"]["completion_tokens"]}}
    calls, results = [], []
    for c in msg.get("tool_calls") or []:
        args = json.loads(c["function"]["arguments"])
        out = subprocess.run(args["command"], shell=True, capture_output=True, text=True)
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": out.stdout})
        calls.append({"tool_call_id": c["id"], "function_name": c["function"]["name"],
                      "arguments": args})
        results.append({"source_call_id": c["id"], "content": out.stdout})
    if calls:
        step.update(tool_calls=calls, observation={"results": results})
    steps.append(step)
    if not calls:
        break
agent = {"name": "loop-agent", "version": "0.1"}
if mode == "bad":
    del agent["version"]
doc = {"schema_version": "ATIF-v1.8", "agent": agent, "steps": steps,
       "final_metrics": {"total_prompt_tokens": 1}}
with open(os.environ["ASSAY_ATIF_PATH"], "w") as fh:
    json.dump(doc, fh)
'''


def _tool(n: int, command: str) -> Answer:
    return Answer(f"step {n}", model="scripted", tool_calls=[{
        "id": f"call_{n}", "type": "function",
        "function": {"name": "run_shell_command", "arguments": json.dumps({"command": command})}}],
        finish_reason="tool_calls")


def _upstream(req: RecordedRequest, n: int) -> Answer:
    done = sum(1 for m in (req.body or {}).get("messages", []) if m.get("role") == "tool")
    if done == 0:
        return _tool(0, "ls src/calc")
    if done == 1:
        return _tool(1, FIX_CMD)
    return Answer("Fixed add().", model="scripted")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not agent_cli.bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    root = tmp_path_factory.mktemp("atif")
    agent_cli.proxy_bundle(root / "tasks" / "calc")
    (root / "agents").mkdir()
    (root / "agents" / "loop.py").write_text(AGENT)
    arms = "".join(
        f"  {arm}:\n    agent: \"command:python3 agents/loop.py {arm}\"\n"
        f"    agent_files: [agents/]\n"
        f"    model: {{name: {model}, base_url_env: AT_UPSTREAM, api_key_env: AT_KEY}}\n"
        for arm, model in (("own", "priced-model"), ("bad", "unpriced-model")))
    exp = root / "experiment.yaml"
    exp.write_text("name: atif\ntasks: [tasks]\nseed: 1\nconcurrency: 2\narms:\n" + arms
                   + "prices:\n  priced-model: {input: 1.0, output: 2.0}\n")
    with ScriptedServer(_upstream) as srv, pytest.MonkeyPatch.context() as mp:
        mp.setenv("AT_UPSTREAM", srv.base_url)
        mp.setenv("AT_KEY", SECRET)
        res = run_cli(["exp", "run", str(exp), "--out", str(root / "run")])
        assert res.code == 0, res.stdout + res.stderr
    yield root / "run"


def _doc(out: Path, arm: str) -> tuple[Path, dict[str, Any], Any]:
    adir, _trial = agent_cli.trial_of(out, arm)
    data = json.loads((adir / "trajectory.atif.json").read_text())
    return adir, data, atif.Trajectory.model_validate(data)  # the maintained validator


def _ledger(adir: Path) -> list[dict[str, Any]]:
    return list(iter_rows(adir / "model_calls.jsonl"))


def test_an_agents_own_valid_trajectory_is_kept_and_used(run: Path) -> None:
    adir, data, doc = _doc(run, "own")
    trial = json.loads((adir / "trial.json").read_text())
    assert trial["execution"]["agent_atif"]["status"] == "valid"
    assert not trial["execution"].get("evidence_gap")
    assert trial["grade"]["accepted"] is True
    assert doc.schema_version == "ATIF-v1.8" and doc.agent.name == "loop-agent"
    assert [s.source for s in doc.steps] == ["user", "agent", "agent", "agent"]
    assert [tc.tool_call_id for tc in doc.steps[1].tool_calls] == ["call_0"]
    assert doc.steps[1].observation.results[0].source_call_id == "call_0"
    # the final figures are the gateway's, not the agent's claim (it said 1 prompt token)
    led = ledger_totals(adir / "model_calls.jsonl")
    assert doc.final_metrics.total_prompt_tokens == led["input"] > 1
    assert doc.final_metrics.total_completion_tokens == led["output"] > 0
    assert doc.final_metrics.total_cost_usd == pytest.approx(led["cost_usd"]) and \
        led["cost_usd"] > 0
    assert data["extra"]["assay"]["agent_final_metrics"] == {"total_prompt_tokens": 1}
    ids = data["extra"]["assay"]
    assert (ids["task"], ids["arm"], ids["repetition"], ids["attempt"]) == \
        ("calc-001", "own", 0, 1)
    assert ids["verdict"] == "accepted" and ids["failure_code"] is None
    assert ids["steps_source"].startswith("the agent's own ATIF trajectory")
    # the trial view reads the same steps
    shown = run_cli(["trial", "show", str(adir)])
    assert shown.code == 0 and "steps (from the agent's own ATIF trajectory)" in shown.stdout


def test_an_invalid_trajectory_is_an_evidence_gap_and_the_transcript_is_exported(
        run: Path) -> None:
    adir, data, doc = _doc(run, "bad")
    trial = json.loads((adir / "trial.json").read_text())
    own = trial["execution"]["agent_atif"]
    assert own["status"] == "invalid" and "agent.version" in own["reason"], own
    assert "agent/trajectory.atif.json" in own["reason"]
    assert trial["execution"]["evidence_gap"] is True
    assert any(a.startswith("agent_atif_invalid") for a in trial["execution"]["anomalies"])
    assert trial["status"] == "graded" and trial["grade"]["accepted"] is True
    assert (adir / "agent" / "trajectory.atif.json").is_file()  # kept as evidence
    assert data["extra"]["assay"]["steps_source"] == "the gateway transcript"
    rows = _ledger(adir)
    agent_steps = [s for s in doc.steps if s.source == "agent"]
    assert len(agent_steps) == len(rows) == 3
    for step, row in zip(agent_steps, rows, strict=True):
        assert step.metrics.prompt_tokens == row["input_tokens"]
        assert step.metrics.completion_tokens == row["output_tokens"]
        assert step.metrics.cost_usd is None  # unpriced: unknown, not zero
        ids = [tc.tool_call_id for tc in step.tool_calls or []]
        assert [r.source_call_id for r in (step.observation.results if step.observation
                                           else [])] == ids
    assert [tc.function_name for tc in agent_steps[1].tool_calls] == ["run_shell_command"]
    assert agent_steps[1].tool_calls[0].arguments == {"command": FIX_CMD}
    led = ledger_totals(adir / "model_calls.jsonl")
    fm = doc.final_metrics
    assert (fm.total_prompt_tokens, fm.total_completion_tokens) == (led["input"],
                                                                    led["output"])
    assert fm.total_cost_usd is None and "total_cost_usd" not in data["final_metrics"]
    assert "lower bound" in fm.extra["cost_note"]
    assert fm.extra["lower_bounds"]["total_cost_usd"] == 0.0


def test_trial_and_run_export_commands(run: Path, tmp_path: Path) -> None:
    adir, data, _doc_ = _doc(run, "bad")
    res = run_cli(["trial", "export", str(adir), "--format", "atif"])
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout) == data  # the same document, built again from the records
    out = tmp_path / "export"
    res = run_cli(["exp", "export", str(run), "--format", "atif", str(out)])
    assert res.code == 0, res.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    assert files == ["calc-001/bad/0/a1.atif.json", "calc-001/own/0/a1.atif.json"]
    for f in out.rglob("*.json"):
        atif.Trajectory.model_validate_json(f.read_text())
    bad = run_cli(["trial", "export", str(adir), "--format", "jsonl"])
    assert bad.code == 2 and "--format jsonl: the formats are atif" in bad.stderr


def test_a_torn_ledger_row_leaves_the_totals_out_with_their_lower_bounds(
        run: Path, tmp_path: Path) -> None:
    """The runner killed while the gateway wrote a row: that call's usage is lost, so no
    token total is known; they are left out with the reason and the lower bound, never a
    total that passes for the whole."""
    import shutil

    adir, data, _ = _doc(run, "own")
    copy = tmp_path / "a1"
    shutil.copytree(adir, copy)
    with (copy / "model_calls.jsonl").open("ab") as fh:
        fh.write(b'{"time": "2026-01-01T00:00:00Z", "latency_ms": 1.0, "attem')
    res = run_cli(["trial", "export", str(copy)])
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    fm = atif.Trajectory.model_validate(doc).final_metrics
    assert fm.total_prompt_tokens is None and fm.total_cost_usd is None
    assert "cut short" in fm.extra["usage_note"]
    assert fm.extra["lower_bounds"]["total_prompt_tokens"] == \
        data["final_metrics"]["total_prompt_tokens"]


# ------------------------------------------------------------- an agent's document, hostile


def _valid() -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.8", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "hi"},
                      {"step_id": 2, "source": "agent", "message": "ok",
                       "tool_calls": [{"tool_call_id": "c1", "function_name": "sh",
                                       "arguments": {}}],
                       "observation": {"results": [{"source_call_id": "c1",
                                                    "content": "done"}]}}]}


@pytest.mark.parametrize(("damage", "said"), [
    (lambda d: d["steps"].reverse(), "steps[0].step_id is 2, expected 1"),
    (lambda d: d["steps"][1]["observation"]["results"][0].update(source_call_id="c9"),
     "observation for 'c9', which no tool call of the step has"),
    (lambda d: d["steps"][0].update(metrics={"prompt_tokens": 1}),
     "metrics is for agent steps only"),
    # stricter than the reference, which takes any tag: a 2.x may mean other fields
    (lambda d: d.update(schema_version="ATIF-v2.0"), "assay reads ATIF 1.x"),
    (lambda d: d.update(verdict="accepted"), "verdict: Extra inputs are not permitted"),
    (lambda d: d["steps"][1].update(timestamp="yesterday"), "steps.1.timestamp"),
])
def test_an_invalid_document_is_refused_with_its_field(tmp_path: Path, damage: Any,
                                                        said: str) -> None:
    from assay.records.atif import read_atif

    doc = _valid()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert read_atif(path)[1] is None
    atif.Trajectory.model_validate(doc)  # the reference agrees it is valid ...
    damage(doc)
    path.write_text(json.dumps(doc))
    got, why = read_atif(path)
    assert got is None and said in str(why) and str(path) in str(why)
    if "1.x" not in said:
        with pytest.raises(ValueError):  # ... and that the damaged one is not
            atif.Trajectory.model_validate(doc)


def test_what_an_agent_leaves_is_read_as_data_never_a_crash(tmp_path: Path) -> None:
    """A link (to a file the agent must not make the runner read), a folder, bytes that are
    not JSON, JSON nested past the recursion limit, a document over the read limit: each a
    reason, none an exception."""
    from assay.agents.atif_file import collect_agent_atif
    from assay.agents.base import AgentContext, AgentRun
    from assay.records.atif import ATIF_FILE, read_atif

    cases: dict[str, Any] = {
        "link": lambda p: p.symlink_to("/etc/hostname"),
        "folder": lambda p: p.mkdir(),
        "binary": lambda p: p.write_bytes(b"\xff\xfe{not json"),
        "deep": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "huge": lambda p: p.write_bytes(b" " * ((64 << 20) + 1)),
    }
    expect = {"link": "not a regular file", "folder": "not a regular file",
              "binary": "not a JSON object", "deep": "not a JSON object", "huge": "over the"}
    for name, make in cases.items():
        home, record = tmp_path / name / "home", tmp_path / name / "agent"
        home.mkdir(parents=True)
        make(home / ATIF_FILE)
        ctx = AgentContext(bundle=None, workspace=tmp_path, home=home,  # type: ignore[arg-type]
                           record_dir=record)
        run = collect_agent_atif(ctx, AgentRun(status="succeeded"))
        found = run.extra["agent_atif"]
        assert found["status"] == "invalid" and expect[name] in found["reason"], (name, found)
        assert run.extra["evidence_gap"] is True
        if name in ("binary", "deep"):  # copied and kept as evidence, then refused
            assert read_atif(record / ATIF_FILE)[0] is None
        else:
            assert not (record / ATIF_FILE).exists()
    # nothing written: nothing said (an agent need not write one)
    home = tmp_path / "none" / "home"
    home.mkdir(parents=True)
    ctx = AgentContext(bundle=None, workspace=tmp_path, home=home,  # type: ignore[arg-type]
                       record_dir=tmp_path / "none" / "agent")
    assert collect_agent_atif(ctx, AgentRun(status="succeeded")).extra == {}
