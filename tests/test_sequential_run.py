"""A sequential bar in a real run: ``command:`` arms asking a scripted endpoint through the real
gateway, real sandboxes, the real verifier and state database. Six tiny tasks, one look at four.

- plainly better (the candidate is told the fix, the baseline is not): ACCEPT at the first
  look, and no trial of the two tasks after it ever starts;
- plainly no better (the other way round): REJECT at the first look;
- on the edge (the candidate fixes one task in four): no look decides, the run goes to the end;
- each killed with SIGKILL while an attempt runs, then resumed, reaches the same looks and the
  same verdict as the uninterrupted run.

Reduced form (``make test``): the better run, uninterrupted (about 7 CPU-seconds). Full form:
``ASSAY_SEQUENTIAL_FULL=1 pytest tests/test_sequential_run.py`` (``make test-full`` sets it)
runs all three, each uninterrupted and killed with SIGKILL while an attempt runs and resumed,
compares their looks, and resumes the better run to the end on purpose (``--run-to-end``):
about 40 CPU-seconds, a minute and a half on two cores.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.bundles import make_bundle
from support.scripted_server import ASK_THROUGH_GATEWAY, Answer, ScriptedServer

from assay.sandbox import bwrap_available
from assay.suites.bundle import set_fixture_digest, tree_digest
from assay.suites.experiment import load_experiment, task_order

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
FULL = os.environ.get("ASSAY_SEQUENTIAL_FULL") == "1"

# the agent tells the endpoint which arm's model it is and what kind of task it is in, and
# applies the fix when told to; a first answer with "wait" keeps it running to be killed
AGENT = ASK_THROUGH_GATEWAY.replace(
    '"content": "fix add"', '"content": "fix add " + open("kind.txt").read()') + r"""
if "wait" in text:
    time.sleep(20)
if "plus" in text:
    subprocess.run(["sed", "-i", "s/return a - b/return a + b/", "src/calc/__init__.py"])
"""

TASKS = 6


def _experiment(root: Path, baseline: str, candidate: str) -> Path:
    """Six tasks, arms ``base`` and ``cand`` whose models are named ``baseline`` and
    ``candidate`` (the endpoint answers by model name: ``fixer``, ``idler`` or ``edgy``, which
    fixes only tasks of kind ``fix``: the first and fifth in the run's task order)."""
    bundles = [make_bundle(root / "tasks" / f"t{i}", task_id=f"t{i}") for i in range(TASKS)]
    exp = root / "experiment.yaml"
    exp.write_text(f"""name: seq
tasks: [tasks]
seed: 3
concurrency: 2
arms:
  base:
    agent: "command:python3 agent.py"
    model: {{name: {baseline}, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}}
  cand:
    agent: "command:python3 agent.py"
    model: {{name: {candidate}, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}}
prices:
  {baseline}: {{input: 1000, output: 1000}}
  {candidate}: {{input: 1000, output: 1000}}
bar:
  hoped_improvement: 0.2
  max_regression: 0.1
  sequential: {{looks: [4], spending: pocock}}
""")
    for b in bundles:
        y = b / "task.yaml"
        y.write_text(y.read_text().replace("network_policy: none",
                                           "network_policy: model-proxy-only"))
    order = task_order(load_experiment(exp))
    for b in bundles:
        kind = "fix" if b.name in (order[0], order[4]) else "plain"
        (b / "repo" / "agent.py").write_text(AGENT)
        (b / "repo" / "kind.txt").write_text(kind)
        set_fixture_digest(b, tree_digest(b / "repo"))
    return exp


def _answer(req, n: int) -> Answer:
    body = req.body or {}
    model = body.get("model", "")
    said = body.get("messages", [{}])[0].get("content", "")
    fix = model == "fixer" or (model == "edgy" and said.endswith("fix"))
    return Answer("use plus" if fix else "leave it", model=model)


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch):
    with ScriptedServer(_answer) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        yield srv


def _looks(out: Path) -> list[tuple]:
    seq = json.loads((out / "sequential.json").read_text())
    return [(lk["index"], lk["tasks"], lk["decision"], round(lk["delta"], 6),
             [round(x, 6) for x in lk["ci"]]) for lk in seq["looks"]]


def _started_tasks(out: Path) -> set[str]:
    with sqlite3.connect(f"file:{out / 'state.sqlite'}?mode=ro", uri=True) as c:
        return {r[0] for r in c.execute("SELECT DISTINCT t.task FROM attempts a JOIN trials t "
                                        "ON t.id = a.trial")}


def _run(exp: Path, out: Path, *flags: str) -> str:
    res = run_cli(["exp", "run", str(exp), "--out", str(out), *flags])
    assert res.code == 0, res.stderr
    return res.stderr


def _killed_then_resumed(exp: Path, out: Path, endpoint: ScriptedServer) -> None:
    """Kill -9 the runner while an attempt of the first stretch runs, then resume."""
    endpoint.handler = _waiting_first(endpoint.handler)
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "assay", "exp", "run", str(exp), "--out",
                             str(out)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if endpoint.chat_requests() and _running(out):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("no attempt started running: " + proc.stderr.read().decode()[-2000:])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (out / "sequential.json").exists() or not json.loads(
        (out / "sequential.json").read_text())["looks"]  # killed before the look
    _run(exp, out)


def _waiting_first(inner):
    calls: list[int] = []

    def handler(req, n):
        calls.append(1)
        got = inner(req, n)
        return Answer(f"{got.content} wait", model=got.model) if len(calls) == 1 else got
    return handler


def _running(out: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{out / 'state.sqlite'}?mode=ro", uri=True) as c:
            return any(r[0] == "running" for r in c.execute("SELECT state FROM attempts"))
    except sqlite3.OperationalError:
        return False


def _check_stopped(exp: Path, out: Path, decision: str) -> None:
    looks = _looks(out)
    assert [(lk[0], lk[1], lk[2]) for lk in looks] == [(0, 4, decision)]
    order = task_order(load_experiment(exp))
    assert _started_tasks(out) == set(order[:4])  # no task past the look ever started
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sequential"]["task_order"] == order
    assert manifest["sessions"][-1]["status"] == "stopped_at_look"
    with sqlite3.connect(out / "state.sqlite") as c:
        (recorded,) = c.execute("SELECT count(*) FROM looks").fetchone()
        pending = c.execute("SELECT count(*) FROM trials WHERE state='pending'").fetchone()[0]
    assert recorded == 1 and pending == 2 * (TASKS - 4)
    res = run_cli(["exp", "verdict", str(out), "--json"])
    verdict = json.loads(res.stdout)["verdict"]
    assert verdict["decision"] == decision
    report = (out / "report.md").read_text()
    assert "look 1 of 2" in report and "stopped at look 1" in report
    assert re.search(r"4 planned trials \(2 tasks\) not run, about \$0\.[0-9]*[1-9]", report)
    assert '<svg class="looks-plot"' in (out / "report.html").read_text()
    status = run_cli(["exp", "status", str(out)]).stdout
    assert f"looks:    1 taken; look 1 decided {decision}" in status
    compared = run_cli(["exp", "compare", str(out)]).stdout
    assert "Sequential bar: the looks" in compared and "look 1 of 2" in compared


def test_plainly_better_accepts_at_the_first_look(tmp_path: Path, endpoint) -> None:
    exp = _experiment(tmp_path, "idler", "fixer")
    out = tmp_path / "run"
    shown = _run(exp, out, "--show-interim")  # asked for, and recorded
    assert "look 1 of 2 at 4 of 6 tasks" in shown and "accept; Δ = +100.0 pts" in shown
    assert json.loads((out / "manifest.json").read_text())["sessions"][-1]["show_interim"]
    _check_stopped(exp, out, "accept")
    before = _looks(out)
    if not FULL:
        return
    killed = tmp_path / "killed"  # killed and resumed: the same look, the same figures
    _killed_then_resumed(exp, killed, endpoint)
    _check_stopped(exp, killed, "accept")
    assert _looks(killed) == before
    # resumed to the end on purpose: the rest runs, no look is taken, the verdict is the
    # fixed design's and says so, and the session records the flag
    res = run_cli(["exp", "run", str(exp), "--out", str(out), "--run-to-end"])
    assert res.code == 0, res.stderr
    assert _looks(out) == before and _started_tasks(out) == set(task_order(load_experiment(exp)))
    seq = json.loads((out / "sequential.json").read_text())
    assert seq["run_to_end"] is True and seq["stopped_at_look"] == 0
    sessions = json.loads((out / "manifest.json").read_text())["sessions"]
    assert [s.get("run_to_end") for s in sessions] == [False, True]
    assert sessions[-1]["status"] == "complete"
    verdict = json.loads(run_cli(["exp", "verdict", str(out), "--json"]).stdout)["verdict"]
    assert verdict["decision"] == "accept"  # 6 of 6 fixed: the 95% interval accepts too
    assert verdict["reasons"][0].startswith("analysed as the fixed design")


@pytest.mark.skipif(not FULL, reason="full form only (ASSAY_SEQUENTIAL_FULL=1): 16 trials")
def test_plainly_no_better_rejects_at_the_first_look(tmp_path: Path, endpoint) -> None:
    exp = _experiment(tmp_path, "fixer", "idler")
    plain = tmp_path / "run"
    shown = _run(exp, plain)  # the look's decision is said, never the interim Δ
    assert "look 1 of 2 at 4 of 6 tasks (level 96.18%): reject" in shown
    assert "Δ" not in shown.split("look 1 of 2", 1)[1].split("\n", 1)[0]
    assert json.loads((plain / "manifest.json").read_text())["sessions"][-1][
        "show_interim"] is False
    _check_stopped(exp, plain, "reject")
    killed = tmp_path / "killed"
    _killed_then_resumed(exp, killed, endpoint)
    _check_stopped(exp, killed, "reject")
    assert _looks(killed) == _looks(plain)


@pytest.mark.skipif(not FULL, reason="full form only (ASSAY_SEQUENTIAL_FULL=1): 24 trials")
def test_on_the_edge_runs_to_the_end(tmp_path: Path, endpoint) -> None:
    exp = _experiment(tmp_path, "idler", "edgy")
    out = tmp_path / "run"
    _run(exp, out)
    looks = _looks(out)
    assert [(lk[1], lk[2]) for lk in looks] == [(4, "continue"), (6, "inconclusive")]
    assert _started_tasks(out) == set(task_order(load_experiment(exp)))
    killed = tmp_path / "killed"
    _killed_then_resumed(exp, killed, endpoint)
    assert _looks(killed) == looks
