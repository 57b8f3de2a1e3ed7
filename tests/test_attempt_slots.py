"""The scheduler's two limits (``runner/slots.py``): ``-j`` agents at once, and an attempt whose
artifact is frozen gives its slot to the next agent while it waits for one of ``verify_jobs``
verification slots. First the slots themselves with real threads, then a real experiment: real
runner, sandboxes and verifier, a verifier slow enough that lock step would show."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.runner.slots import AttemptSlots
from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


def test_a_frozen_attempt_frees_its_agent_slot_and_waits_for_a_verify_slot() -> None:
    slots = AttemptSlots(jobs=2, verify_jobs=1)
    a, b = slots.ticket(), slots.ticket()
    assert not slots.can_start()  # two agents: -j 2 is full
    inside, release = threading.Event(), threading.Event()

    def verify(ticket: object, seen: list[float]) -> None:
        with ticket.verifying():  # type: ignore[attr-defined]
            seen.append(time.monotonic())
            inside.set()
            release.wait(10)

    seen_a: list[float] = []
    ta = threading.Thread(target=verify, args=(a, seen_a))
    ta.start()
    assert inside.wait(10)
    assert slots.can_start()  # a's agent slot is free while it verifies
    c = slots.ticket()
    assert not slots.can_start()  # b and c are agents now
    inside.clear()
    seen_b: list[float] = []
    tb = threading.Thread(target=verify, args=(b, seen_b))
    tb.start()
    time.sleep(0.3)
    assert not seen_b  # one verify slot: b waits for a
    assert slots.can_start()  # yet b's agent slot is free already
    release.set()
    ta.join(10)
    tb.join(10)
    assert seen_b and seen_b[0] >= seen_a[0]
    for t in (a, b, c):
        t.end()
        t.end()  # idempotent: a done-callback after an earlier end frees nothing twice
    assert slots.can_start()
    assert slots._agents == 0 and slots._alive == 0


def test_waiting_verifications_hold_back_new_agents_at_twice_j() -> None:
    slots = AttemptSlots(jobs=2, verify_jobs=1)
    hold = threading.Event()
    tickets = [slots.ticket(), slots.ticket()]
    entered: list[int] = []

    def verify(i: int) -> None:
        with tickets[i].verifying():
            entered.append(i)
            hold.wait(10)

    threads = [threading.Thread(target=verify, args=(i,)) for i in range(2)]
    for th in threads:  # both frozen: one verifies, one waits
        th.start()
    time.sleep(0.3)
    assert len(entered) == 1
    tickets += [slots.ticket(), slots.ticket()]  # two new agents took the freed slots
    assert slots._alive == 4 and not slots.can_start()  # 2 x -j alive: nothing more starts
    hold.set()
    for th in threads:
        th.join(10)
    for t in tickets:
        t.end()
    assert slots.can_start() and slots._alive == 0


def test_without_a_gate_an_attempt_keeps_its_slot_to_the_end() -> None:
    """Ray: the attempt verifies on its worker, the driver's slot is held until it ends."""
    slots = AttemptSlots(jobs=1, verify_jobs=None)
    t = slots.ticket()
    with t.verifying():
        assert not slots.can_start()
    assert not slots.can_start()
    t.end()
    assert slots.can_start() and slots.max_alive == 1


def test_wait_wakes_on_a_freed_slot_not_only_on_a_poll() -> None:
    slots = AttemptSlots(jobs=1, verify_jobs=1)
    t = slots.ticket()
    timer = threading.Timer(0.1, t.end)
    timer.start()
    t0 = time.monotonic()
    slots.wait()
    assert time.monotonic() - t0 < 0.9  # the poll interval is 1 s
    timer.join()


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _slow_verifier_run(root: Path, *, sleep: float, reps: int, jobs: int,
                       verify_jobs: str) -> Path:
    """An experiment whose agent fixes at once and whose behaviour check first sleeps, run
    with ``--verify-jobs``; returns the run directory."""
    slow = (f"sleep {sleep:g}; PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider "
            "$ASSAY_TESTS/test_fix.py")
    make_bundle(root / "tasks" / "calc", behavior_cmd=slow)
    exp = root / "e.yaml"
    exp.write_text(f"name: slots\ntasks: [tasks]\nrepetitions: {reps}\nconcurrency: {jobs}\n"
                   "arms:\n  fixer:\n    agent: \"command:sed -i 's/return a - b/return a + b/' "
                   "src/calc/__init__.py\"\n")
    out = root / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out), "--verify-jobs", verify_jobs])
    assert res.code == 0, res.stderr
    return out


@needs_bwrap
def test_a_new_agent_starts_while_earlier_attempts_wait_to_verify(tmp_path: Path) -> None:
    """-j 2 with one verify slot and a verifier that takes a second: the second wave's agents
    start while the first wave verifies, verifications never overlap, and the wait is recorded
    apart from the verification's own time."""
    out = _slow_verifier_run(tmp_path, sleep=1, reps=4, jobs=2, verify_jobs="1")
    trials = [json.loads(p.read_text()) for p in out.glob("trials/*/*/*/a*/trial.json")]
    assert len(trials) == 4 and all(t["grade"]["accepted"] for t in trials)
    spans = {}
    for t in trials:
        st = {s["name"]: s for s in t["stages"]}
        v = st["verify"]
        assert v["seconds"] >= 1 and v["queued_seconds"] is not None
        start = _ts(v["started_at"])
        spans[t["rep"]] = {"agent": _ts(st["agent"]["started_at"]),
                           "verify": (start, start + v["seconds"]),
                           "queued": v["queued_seconds"]}
    verify = sorted(s["verify"] for s in spans.values())
    for (_, end), (start, _) in zip(verify, verify[1:], strict=False):
        assert start >= end - 0.05, verify  # one at a time (clock granularity aside)
    # some attempt waited for the slot, and that wait is not in its verify seconds
    assert max(s["queued"] for s in spans.values()) > 0.5
    # some agent started while another attempt was verifying: no lock step
    assert any(lo < s["agent"] < hi for s in spans.values()
               for lo, hi in (o["verify"] for o in spans.values())), spans
    session = json.loads((out / "manifest.json").read_text())["sessions"][-1]
    assert session["verify_jobs"] == 1 and session["jobs"] == 2


@needs_bwrap
def test_verify_jobs_is_refused_with_ray_and_below_zero(tmp_path: Path) -> None:
    make_bundle(tmp_path / "tasks" / "calc")
    exp = tmp_path / "e.yaml"
    exp.write_text("name: r\ntasks: [tasks]\nrepetitions: 1\narms:\n  idle:\n    agent: nop\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(tmp_path / "run"), "--verify-jobs", "-1"])
    assert res.code == 2
    from assay.errors import InputError
    from assay.runner.experiment import ExperimentRunner
    from assay.suites.experiment import load_experiment

    with pytest.raises(InputError, match="--verify-jobs is for --executor local"):
        ExperimentRunner(load_experiment(exp), tmp_path / "run", executor="ray", verify_jobs=2)
    assert not (tmp_path / "run").exists()


@needs_bwrap
def test_verify_jobs_0_keeps_each_slot_until_graded(tmp_path: Path) -> None:
    """No gate: -j 1 runs one attempt at a time from start to grade, so no agent starts while
    another attempt verifies (the behaviour before the gate, and how Ray attempts run)."""
    out = _slow_verifier_run(tmp_path, sleep=0.5, reps=2, jobs=1, verify_jobs="0")
    spans = []
    for p in out.glob("trials/*/*/*/a*/trial.json"):
        st = {s["name"]: s for s in json.loads(p.read_text())["stages"]}
        v = st["verify"]
        spans.append((_ts(st["agent"]["started_at"]), _ts(v["started_at"]) + v["seconds"]))
    (a0, end0), (a1, _) = sorted(spans)
    assert a1 >= end0 - 0.05  # the second agent started after the first was graded
    session = json.loads((out / "manifest.json").read_text())["sessions"][-1]
    assert session["verify_jobs"] is None


@needs_bwrap
def test_an_attempt_whose_future_reads_done_before_its_callbacks_ran_frees_its_slot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A future reads as done before its done-callbacks have run, and a thread can be put off
    between the two for as long as the machine pleases (under load in CI it was). Here every
    future's callbacks are put off by 1.5 s, longer than the scheduler's one-second poll: the
    scheduler wakes, sees the only attempt done, and must still start the next trial instead
    of ending the run with it pending (it ended exit 3, one of two trials never started)."""
    from concurrent.futures import Future

    invoke = Future._invoke_callbacks  # type: ignore[attr-defined]

    def late(self: Future[object]) -> None:
        time.sleep(1.5)
        invoke(self)

    monkeypatch.setattr(Future, "_invoke_callbacks", late)
    out = _slow_verifier_run(tmp_path, sleep=0, reps=3, jobs=1, verify_jobs="0")
    trials = [json.loads(p.read_text()) for p in out.glob("trials/*/*/*/a*/trial.json")]
    assert sorted(t["rep"] for t in trials) == [0, 1, 2]
    assert all(t["grade"]["accepted"] for t in trials)
