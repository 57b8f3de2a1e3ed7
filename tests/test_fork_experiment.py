"""Fork experiments with real parts: a prefix agent runs once per (task, repetition) in the
real sandbox, its workspace and HOME are frozen, and both arms start from an identical copy,
which each arm's agent checks for itself (and fails without). The record proves it: every
arm's ``trial.json`` carries the digests of its restored copy, equal to the prefix's
``state.json``. The runner is also killed with SIGKILL mid-prefix and again mid-arm: the dead
prefix is kept and run anew, and a frozen state is reused after a restart, never rebuilt.

The task is a copy of ``examples/agent-tasks/duration-parse-001`` with the test's agent script
and the fix added to its starting tree (and the digest pinned again).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.procscan import own_processes
from support.scripted_server import Answer, ScriptedServer

from assay import run_experiment
from assay.errors import RunConflict, SuiteError
from assay.sandbox import bwrap_available
from assay.suites.bundle import set_fixture_digest, tree_digest

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent-tasks" / "duration-parse-001"
TASK = "duration-parse-001"

# One script, two roles. The prefix leaves a file in the workspace and a session (with a random
# nonce: every prefix run leaves a different state) in its XDG data directory, then exits 0 as
# the contract says. An arm checks both are there, fixes the bug only then, and fails otherwise.
AGENT = r"""
import json, os, subprocess, sys, time, urllib.request
role = sys.argv[1]
session = os.path.join(os.environ["XDG_DATA_HOME"], "toyagent", "session.json")
note = "src/durations/fork_note.txt"

def ask(text):
    if "OPENAI_BASE_URL" not in os.environ:
        return ""
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ["ASSAY_MODEL"],
                         "messages": [{"role": "user", "content": text}]}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"]

if role == "prefix":
    assert os.environ["ASSAY_FORK_UNTIL"] == "compaction", os.environ.get("ASSAY_FORK_UNTIL")
    assert os.environ["ASSAY_FORK_UNTIL_KIND"] == "event"
    if "wait" in ask("prefix"):
        time.sleep(40)
    open(note, "w").write("the prefix was here\n")
    os.makedirs(os.path.dirname(session))
    json.dump({"steps": 3, "nonce": os.urandom(8).hex(), "until": os.environ["ASSAY_FORK_UNTIL"]},
              open(session, "w"))
    print("prefix: stopped at", os.environ["ASSAY_FORK_UNTIL"])
    sys.exit(0)

# an arm
if not (os.path.isfile(note) and os.path.isfile(session)):
    print("arm: the forked state is missing", os.path.isfile(note), os.path.isfile(session))
    sys.exit(3)
state = json.load(open(session))
print("arm", role, "continues from nonce", state["nonce"],
      "state", os.environ.get("ASSAY_FORK_STATE"))
if "wait" in ask("arm " + role):
    time.sleep(40)
subprocess.run(["git", "apply", "fix.patch"], check=True)
"""


def _task(root: Path, *, network: str = "none") -> Path:
    bundle = root / "tasks" / TASK
    shutil.copytree(EXAMPLE, bundle)
    repo = bundle / "repo"
    (repo / "fork_agent.py").write_text(AGENT)
    shutil.copyfile(bundle / "solution" / "solve.patch", repo / "fix.patch")
    y = bundle / "task.yaml"
    y.write_text(y.read_text().replace("network_policy: none", f"network_policy: {network}"))
    set_fixture_digest(bundle, tree_digest(repo))
    return bundle


def _experiment(root: Path, *, fork: str | None, reps: int = 2, arms: tuple[str, ...] = ("a", "b"),
                model: bool = False, concurrency: int = 2) -> Path:
    _task(root, network="model-proxy-only" if model else "none")
    m = "    model: {name: scripted-model, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}\n"
    arm_text = "".join(f"  {a}:\n    agent: \"command:python3 fork_agent.py {a}\"\n"
                       + (m if model else "") for a in arms)
    exp = root / "experiment.yaml"
    exp.write_text(f"name: fork-test\ntasks: [tasks]\nrepetitions: {reps}\nseed: 3\n"
                   f"concurrency: {concurrency}\narms:\n{arm_text}"
                   + (fork or "")
                   + ("prices:\n  scripted-model: {input: 1000000, output: 1000000}\n"
                      if model else ""))
    return exp


FORK = """fork:
  prefix_agent: "command:python3 fork_agent.py prefix"
  until: compaction
"""
FORK_WITH_MODEL = FORK + (
    "  model: {name: scripted-model, base_url_env: TEST_UPSTREAM, api_key_env: TEST_KEY}\n")


def _trial(out: Path, arm: str, rep: int, attempt: str = "a1") -> dict:
    return json.loads((out / "trials" / TASK / arm / str(rep) / attempt / "trial.json").read_text())


def _graded(out: Path, arm: str, rep: int) -> dict:
    """The trial.json of the graded attempt of a trial."""
    base = out / "trials" / TASK / arm / str(rep)
    graded = [json.loads(p.read_text()) for p in sorted(base.glob("a*/trial.json"))]
    graded = [t for t in graded if t["status"] == "graded"]
    assert len(graded) == 1, graded
    return graded[0]


@needs_bwrap
def test_both_arms_start_from_the_same_frozen_state(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, fork=FORK)
    out = tmp_path / "run"
    res = run_experiment(exp, out)
    assert res.status == "complete", res
    # the prefix ran once per (task, repetition), not once per arm
    assert res.fork is not None and res.fork["prefix_runs_this_session"] == 2
    assert res.fork["prefix_attempts"] == 2 and res.fork["cost_usd"] is None
    forks = out / "forks" / TASK
    assert sorted(p.name for p in forks.iterdir()) == ["0", "1"]
    states = {}
    for rep in (0, 1):
        assert [p.name for p in (forks / str(rep)).iterdir()] == ["a1"]
        d = forks / str(rep) / "a1"
        assert {"prefix.json", "state.json", "state.tar", "agent"} <= {p.name for p in d.iterdir()}
        prefix = json.loads((d / "prefix.json").read_text())
        assert prefix["status"] == "frozen" and prefix["exit_code"] == 0
        assert prefix["until"] == "compaction" and prefix["wall_seconds"] > 0
        assert "prefix: stopped at compaction" in (d / "agent" / "stdout.log").read_text()
        state = json.loads((d / "state.json").read_text())
        assert state["schema"] == "assay.fork.state/1" and state["until"] == "compaction"
        assert state["restored_at"] == {"workspace": "/work", "home": "/assay/home"}
        assert state["prefix"]["exit_code"] == 0
        states[rep] = state
        for arm in ("a", "b"):
            trial = _trial(out, arm, rep)
            fork = trial["fork"]
            # recomputed from the arm's restored copy, equal to the prefix's frozen state
            for k in ("state_digest", "workspace_digest", "home_digest", "tar_sha256"):
                assert fork[k] == state[k], (arm, rep, k)
            assert fork["dir"] == f"forks/{TASK}/{rep}/a1" and fork["prefix_exit_code"] == 0
            assert trial["grade"]["accepted"] is True, trial
            stdout = (out / "trials" / TASK / arm / str(rep) / "a1" / "agent" /
                      "stdout.log").read_text()
            assert f"state {state['state_digest']}" in stdout
    # the two repetitions had two prefix runs: different states (the nonce), so equal digests
    # across arms come from sharing one frozen state, not from a deterministic prefix
    assert states[0]["state_digest"] != states[1]["state_digest"]
    nonces = {arm: (out / "trials" / TASK / arm / "0" / "a1" / "agent" / "stdout.log")
              .read_text().split("nonce ")[1].split()[0] for arm in ("a", "b")}
    assert nonces["a"] == nonces["b"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fork"]["prefix_agent"] == "command:python3 fork_agent.py prefix"
    assert manifest["sessions"][-1]["fork"]["prefix_runs_this_session"] == 2
    rep = json.loads((out / "report.json").read_text())
    assert rep["fork"]["prefix_attempts"] == 2

    # resuming the finished run reuses the frozen states: no prefix runs again
    again = run_experiment(exp, out)
    assert again.status == "complete" and again.fork["prefix_runs_this_session"] == 0
    assert sorted(p.name for p in (forks / "0").iterdir()) == ["a1"]
    # a changed fork block is another experiment: refused on resume, naming what changed
    exp.write_text(exp.read_text().replace("until: compaction", "until: 12"))
    with pytest.raises(RunConflict) as conflict:
        run_experiment(exp, out)
    assert "settings.fork.until" in str(conflict.value)


@needs_bwrap
def test_without_the_fork_the_arm_finds_no_state_and_fails(tmp_path: Path) -> None:
    """The control: the arms' check is real, they fail when started from the pristine tree."""
    exp = _experiment(tmp_path, fork=None, reps=1, arms=("a",))
    out = tmp_path / "run"
    assert run_experiment(exp, out).status == "complete"
    trial = _trial(out, "a", 0)
    assert "fork" not in trial
    # no fork block, no fork anywhere: a run begun before forks existed still resumes
    manifest = json.loads((out / "manifest.json").read_text())
    assert "fork" not in manifest and "fork" not in manifest["identity"]["settings"]
    assert not (out / "forks").exists()
    assert trial["execution"]["exit_code"] == 3 and trial["grade"]["accepted"] is False
    assert "the forked state is missing" in (
        out / "trials" / TASK / "a" / "0" / "a1" / "agent" / "stdout.log").read_text()


@needs_bwrap
def test_a_failing_prefix_freezes_nothing_and_the_arm_is_an_infra_error(tmp_path: Path) -> None:
    # exits 7 (not the contract's 0) only when it was told the step number as the contract says
    fork = ("fork:\n  prefix_agent: 'command:test \"$ASSAY_FORK_UNTIL\" = 2 && test "
            "\"$ASSAY_FORK_UNTIL_KIND\" = step && exit 7; exit 1'\n  until: 2\n")
    exp = _experiment(tmp_path, fork=fork, reps=1, arms=("a",))
    exp.write_text(exp.read_text() + "retries: {infra: 1}\n")
    out = tmp_path / "run"
    res = run_experiment(exp, out)
    assert res.status == "infra_errors" and res.counts == {"infra_error": 1}
    prefixes = sorted((out / "forks" / TASK / "0").iterdir())
    assert [p.name for p in prefixes] == ["a1", "a2"]  # the retry ran a new prefix attempt
    for d in prefixes:
        rec = json.loads((d / "prefix.json").read_text())
        assert rec["status"] == "failed" and rec["exit_code"] == 7
        assert not (d / "state.json").exists() and not (d / "state.tar").exists()
    trial = _trial(out, "a", 0)
    assert trial["status"] == "infra_error" and "did not reach until=2" in trial["error"]


def test_an_invalid_fork_block_is_refused_with_file_line_and_field(tmp_path: Path) -> None:
    _task(tmp_path)
    base = ("name: fork-test\ntasks: [tasks]\narms:\n  a:\n    agent: nop\n")
    exp = tmp_path / "experiment.yaml"
    exp.write_text(base + "fork:\n  prefix_agent: nop\n  until: 0\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "r1")])
    assert res.code == 2
    assert f"{exp}:8: field 'fork.until'" in res.stderr, res.stderr
    assert "positive int" in res.stderr
    exp.write_text(base + "fork:\n  prefix_agent: \"bogus-agent\"\n  until: 5\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "r2")])
    assert res.code == 2
    assert f"{exp}:7: field 'fork.prefix_agent'" in res.stderr, res.stderr
    assert not (tmp_path / "r2").exists()  # refused before anything ran
    exp.write_text(base + "fork:\n  prefix_agent: nop\n  until: ''\n  steps: 3\n")
    with pytest.raises(SuiteError) as err:
        run_experiment(exp, tmp_path / "r3")
    fields = {p.field for p in err.value.problems}
    assert fields == {"fork.until", "fork.steps"}, err.value.problems
    exp.write_text(base + "fork:\n  until: 3\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "r4")])
    assert res.code == 2 and "field 'fork.prefix_agent'" in res.stderr
    # a cost limit the prefix's model could not be held to
    exp.write_text(base + "limits: {cost_usd: 1}\nfork:\n  prefix_agent: nop\n  until: 3\n"
                   "  model: {name: unpriced}\n")
    with pytest.raises(SuiteError) as err:
        run_experiment(exp, tmp_path / "r5")
    [p] = err.value.problems
    assert p.field == "fork.model.name" and p.line == 10 and "prices" in p.message


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch):
    """Tells the first prefix and the first arm to wait (so the runner can be killed while each
    runs); every later caller finishes at once."""
    seen: list[str] = []

    def handler(req, n):
        who = "prefix" if req.case_input == "prefix" else "arm"
        first = who not in seen
        seen.append(who)
        return Answer("wait" if first else "go", model="scripted-model")

    with ScriptedServer(handler) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        yield srv


def _run_until(exp: Path, out: Path, ready) -> None:
    """Start ``exp run`` in a subprocess, SIGKILL it once ``ready()`` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "assay", "exp", "run", str(exp), "--out",
                             str(out), "-j", "1"], env={**os.environ, "NO_COLOR": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if ready():
            break
        if proc.poll() is not None:
            pytest.fail("the runner ended early: " + proc.stderr.read().decode()[-2000:])
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("never ready: " + proc.stderr.read().decode()[-2000:])
    assert own_processes(out.parent, "fork_agent.py"), "the scan must see the running agent"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(1.0)
    assert own_processes(out.parent, "fork_agent.py") == []  # the sandbox died with its runner


@needs_bwrap
def test_kill_mid_prefix_and_mid_arm_then_resume(tmp_path: Path, upstream) -> None:
    exp = _experiment(tmp_path, fork=FORK_WITH_MODEL, reps=1, model=True, concurrency=1)
    out = tmp_path / "run"
    base = out / "forks" / TASK / "0"

    def prefix_running() -> bool:
        return (base / "a1" / "prefix.json").is_file() and len(upstream.chat_requests()) >= 1

    _run_until(exp, out, prefix_running)
    assert json.loads((base / "a1" / "prefix.json").read_text())["status"] == "running"
    assert not (base / "a1" / "state.json").exists()

    def arm_running() -> bool:
        return any(r.case_input.startswith("arm") for r in upstream.chat_requests())

    # first resume: the dead prefix is kept (marked interrupted), a new prefix attempt freezes
    # the state, then the first arm starts and is killed mid-run
    _run_until(exp, out, arm_running)
    a1 = json.loads((base / "a1" / "prefix.json").read_text())
    assert a1["status"] == "interrupted" and "runner_restart" in a1["error"]
    state = json.loads((base / "a2" / "state.json").read_text())
    prefix_calls = [r for r in upstream.chat_requests() if r.case_input == "prefix"]
    assert len(prefix_calls) == 2

    # second resume: the frozen state is reused, no prefix runs again
    res = subprocess.run([sys.executable, "-m", "assay", "exp", "run", str(exp), "--out",
                          str(out), "-j", "1"], env={**os.environ, "NO_COLOR": "1"},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in base.iterdir()) == ["a1", "a2"]
    assert len([r for r in upstream.chat_requests() if r.case_input == "prefix"]) == 2
    for arm in ("a", "b"):
        trial = _graded(out, arm, 0)
        assert trial["fork"]["state_digest"] == state["state_digest"], arm
        assert trial["fork"]["dir"] == f"forks/{TASK}/0/a2"
        assert trial["grade"]["accepted"] is True
    # the prefix talked through the gateway, with its own ledger; its cost is reported apart
    # from the arms' and counted in the run's spending
    ledger = [json.loads(x) for x in (base / "a2" / "model_calls.jsonl").read_text().splitlines()]
    assert len(ledger) == 1 and ledger[0]["status"] == 200 and ledger[0]["cost_usd"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    last = manifest["sessions"][-1]
    assert last["fork"]["prefix_runs_this_session"] == 0
    assert last["fork"]["cost_usd"] > 0
    report = json.loads((out / "report.json").read_text())
    assert report["fork"]["cost_usd"] == last["fork"]["cost_usd"]
    from assay.runner.experiment import spent_so_far

    arms_cost = sum(report["arms"][a]["cost_usd"] or 0 for a in ("a", "b"))
    assert spent_so_far(out)[0] == pytest.approx(arms_cost + report["fork"]["cost_usd"])
    for p in out.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p
