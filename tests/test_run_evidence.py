"""Evidence that survives a kill and a careless hand, with real parts: a real ``exp run``
(scripted upstream, the real gateway, real bubblewrap sandboxes, the real verifier and state
database), killed with SIGKILL, a ledger cut mid-row, an attempt directory deleted.

- A torn last ledger row is a call with unknown usage: the cost is a lower bound with its
  reason in report.json, report.md, report.html and ``exp compare``.
- A killed runner's workspaces and HOMEs live in ``DIR/scratch`` (never in ``$TMPDIR``) and
  the next start removes them once the interrupted attempts are closed; their attempt
  directories (records, ledgers, agent logs) stay.
- A deleted attempt directory is an evidence gap in ``exp status``, ``exp report`` and
  ``exp compare``, and ``exp run`` (resume) exits 2 naming it instead of calling the run
  complete.

Reduced form: three kills. The full form kills more often:
``ASSAY_EVIDENCE_KILLS=10 pytest tests/test_run_evidence.py -k kill``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.procscan import own_processes
from support.scripted_server import Answer, ScriptedServer
from test_experiment_run import _attempt_states, _experiment, needs_bwrap, upstream  # noqa: F401

from assay.sandbox import diskclean, diskimage

#: Kills of the runner in the kill test; the full form: ASSAY_EVIDENCE_KILLS=10.
KILLS = int(os.environ.get("ASSAY_EVIDENCE_KILLS", "3"))


def _assay(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assay", *args], env=env, capture_output=True,
                          text=True, timeout=600, **kw)


def _leftovers(tmpdir: Path) -> list[str]:
    """What a runner could leave in the temporary directory: workspaces, HOMEs, fork states."""
    return sorted(p.name for p in tmpdir.iterdir()
                  if p.name.startswith(("assay-trial-", "assay-fork-")))


# ------------------------------------------------------------------------ torn ledger row


@needs_bwrap
def test_a_torn_ledger_row_is_a_call_with_unknown_usage(tmp_path: Path, upstream) -> None:  # noqa: F811
    exp = _experiment(tmp_path, reps=2)
    out = tmp_path / "run"
    assert run_cli(["exp", "run", str(exp), "--out", str(out)]).code == 0
    ledgers = sorted(out.glob("trials/calc-001/asks/*/a1/model_calls.jsonl"))
    assert len(ledgers) == 2
    whole = json.loads(ledgers[0].read_text())
    assert whole["cost_usd"] > 0
    # the runner killed while the gateway wrote the row: half of it reached the disk
    raw = ledgers[0].read_bytes()
    ledgers[0].write_bytes(raw[: len(raw) // 2])
    kept = json.loads(ledgers[1].read_text())["cost_usd"]

    res = run_cli(["exp", "report", str(out)])
    assert res.code == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    asks = rep["arms"]["asks"]
    # the cut call still counts as a call: its usage and cost are unknown, not zero
    assert asks["calls"] == 2 and asks["usage_missing_calls"] == 1
    assert asks["torn_ledger_rows"] == 1 and asks["cost_complete"] is False
    assert asks["cost_usd"] == pytest.approx(kept)
    assert "cut short" in asks["cost_note"] and asks["cost_note"].startswith("lower bound")
    md = (out / "report.md").read_text()
    assert "(lower bound)" in md and "cut short" in md
    assert "cut short" in (out / "report.html").read_text()
    # exp compare: the arm's cost per completed task is a lower bound
    cmp = run_cli(["exp", "compare", str(out), "--a", "idle", "--b", "asks", "--json"])
    assert cmp.code in (0, 1), cmp.stderr
    cost = json.loads(cmp.stdout)["cost"]["asks"]
    assert cost["complete"] is False and cost["status"] == "lower_bound"
    # a resumed run's budget reads the same ledgers: what was spent is a lower bound too
    from assay.runner.experiment import spent_so_far

    spent, complete = spent_so_far(out)
    assert spent == pytest.approx(kept) and complete is False


# ------------------------------------------------------------- a killed runner's leftovers


@pytest.fixture
def waits_first(monkeypatch: pytest.MonkeyPatch):
    """The first KILLS answers tell the agent to wait (the runner is killed while it does);
    every later one lets it finish at once."""
    calls: list[int] = []

    def handler(req, n):
        calls.append(1)
        return Answer("use plus then wait" if len(calls) <= KILLS else "use plus",
                      model="scripted-model")

    with ScriptedServer(handler) as srv:
        monkeypatch.setenv("TEST_UPSTREAM", srv.base_url)
        monkeypatch.setenv("TEST_KEY", SECRET)
        yield srv


def _ledger_rows(out: Path) -> int:
    """Whole rows in the ledgers of every attempt of the arm that calls the model."""
    return sum(p.read_bytes().count(b"\n")
               for p in out.glob("trials/calc-001/asks/0/*/model_calls.jsonl"))


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
@needs_bwrap
def test_kill_9_leaves_no_workspace_behind(tmp_path: Path, waits_first) -> None:
    srv = waits_first
    exp = _experiment(tmp_path, reps=1)
    out = tmp_path / "run"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    disks = tmp_path / "disks"  # the attempts' size-limited filesystems (sandbox/diskimage)
    images = diskimage.unavailable() is None
    env = {**os.environ, "NO_COLOR": "1", "TMPDIR": str(tmpdir), diskclean.DISK_DIR_ENV: str(disks)}
    for kill in range(1, KILLS + 1):
        proc = subprocess.Popen([sys.executable, "-m", "assay", "exp", "run", str(exp),
                                 "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # the call answered and its ledger row written, not only sent: the upstream sees the
            # request before the gateway writes the row, and a kill in between (a loaded
            # machine) leaves that attempt's ledger empty, which is honest but not this scenario
            if len(srv.chat_requests()) >= kill and any(
                    s == "running" for _, s in _attempt_states(out)) and _ledger_rows(out) >= kill:
                break
            time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail("no attempt started running: " + proc.stderr.read().decode()[-2000:])
        assert own_processes(tmp_path, "agent.py"), "the agent must be running when killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stderr.close()
        # what the killed runner left is where the next start finds it, not in $TMPDIR
        assert _leftovers(tmpdir) == []
        assert list((out / "scratch").rglob("assay-trial-*")), "the workspace lives in scratch"
        # the gateway's socket folder (a socket path must be short, it is named in scratch)
        # and the killed process's /etc copy (removed by the next process that makes one)
        assert all(p.name.startswith(("assay-gw-", "assay-sandbox-etc-"))
                   for p in tmpdir.iterdir()), sorted(p.name for p in tmpdir.iterdir())
        if images:  # the running agent's image, left mounted by the kill
            assert [p for p in disks.glob("*.mnt") if diskclean.mounted(p)]

    res = _assay(["exp", "run", str(exp), "--out", str(out)], env)
    assert res.returncode == 0, res.stderr
    assert "removed the workspaces and HOMEs" in res.stderr
    assert not (out / "scratch").exists()
    # nothing at all of four runners (three killed) in $TMPDIR: no workspace, HOME, verifier
    # copy, sandbox /etc or gateway socket folder
    assert sorted(p.name for p in tmpdir.iterdir()) == []
    # nor of their disk images: unmounted and deleted by the next start, no loop device left
    assert [p.name for p in disks.glob("[0-9]*")] == []
    assert not any(str(disks) in line for line in Path("/proc/self/mountinfo").open())
    assert not [b for b in Path("/sys/block").glob("loop*/loop/backing_file")
                if b.read_text().startswith(f"{disks}/")]
    # every interrupted attempt's evidence is kept: its record, ledger and agent log
    manifest = json.loads((out / "manifest.json").read_text())
    last = manifest["sessions"][-1]
    assert last["status"] == "complete" and last["scratch_removed"]
    with sqlite3.connect(out / "state.sqlite") as c:  # the idle arm's may be interrupted too
        interrupted = [r[0] for r in c.execute(
            "SELECT a.attempt FROM attempts a JOIN trials t ON t.id = a.trial "
            "WHERE t.arm = 'asks' AND a.state = 'interrupted'")]
    assert len(interrupted) == KILLS
    for label in interrupted:
        adir = out / "trials" / "calc-001" / "asks" / "0" / label
        assert (adir / "trial.json").is_file() and (adir / "model_calls.jsonl").is_file()
        assert json.loads((adir / "model_calls.jsonl").read_text())["status"] == 200
    rep = json.loads((out / "report.json").read_text())
    assert rep["arms"]["asks"]["interrupted_attempts"] == KILLS
    assert rep["arms"]["asks"]["accepted"] == 1


# ------------------------------------------------------------------ a deleted attempt dir


@needs_bwrap
def test_a_deleted_attempt_directory_is_an_evidence_gap(tmp_path: Path, upstream) -> None:  # noqa: F811
    import shutil

    exp = _experiment(tmp_path, reps=2)
    out = tmp_path / "run"
    assert run_cli(["exp", "run", str(exp), "--out", str(out)]).code == 0
    lost = out / "trials" / "calc-001" / "asks" / "1" / "a1"
    assert (lost / "trial.json").is_file()
    shutil.rmtree(lost)
    rel = "trials/calc-001/asks/1/a1"

    status = run_cli(["exp", "status", str(out)])
    assert status.code == 0
    assert "evidence gaps: 1 attempt directory is gone" in status.stdout and rel in status.stdout
    assert "4 trials planned, 0 not done, 1 with evidence lost (not complete)" in status.stdout
    line = [x for x in status.stdout.splitlines() if x.startswith("calc-001\tasks\t1\t")]
    assert line and "evidence_gap" in line[0] and "directory gone" in line[0]
    js = json.loads(run_cli(["exp", "status", str(out), "--json"]).stdout)
    assert js["evidence_gaps"] == [rel] and js["counts"]["evidence_gaps"] == 1
    trial = [t for t in js["trials"] if (t["arm"], t["rep"]) == ("asks", 1)][0]
    assert trial["state"] == "evidence_gap" and trial["attempts"][0]["evidence"] == "missing"

    assert run_cli(["exp", "report", str(out)]).code == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["evidence_gaps"] == [rel]
    row = [t for t in rep["trials"] if (t["arm"], t["rep"]) == ("asks", 1)][0]
    assert row["state"] == "evidence_gap" and row["accepted"] is None  # never pending
    asks = rep["arms"]["asks"]
    assert asks["graded"] == 1 and asks["evidence_gaps"] == 1 and asks["cost_complete"] is False
    assert "evidence gap" in asks["cost_note"]
    assert "evidence gap: 1 attempt directory is gone" in (out / "report.md").read_text()
    assert rel in (out / "report.html").read_text()

    cmp = run_cli(["exp", "compare", str(out), "--a", "idle", "--b", "asks"])
    assert cmp.code in (0, 1), cmp.stderr
    assert "evidence gap" in " ".join(cmp.stdout.split()) and rel in cmp.stdout

    # resuming does not call it complete: it names the lost attempt and exits 2
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    said = " ".join(res.stderr.split())
    assert res.code == 2, res.stderr
    assert "evidence lost" in said and rel in said
    assert len(upstream.chat_requests()) == 2  # nothing was run again
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sessions"][-1]["status"] == "evidence_gaps"


# ------------------------------------------------------------ the run directory, unreachable

PROBE = r'''
import json, os
out = OUT_DIR
found = []
for top in sorted(os.listdir("/")):
    if top in ("proc", "sys", "dev", "usr"):
        continue
    for d, dirs, files in os.walk("/" + top):
        found += [os.path.join(d, f) for f in files
                  if f in ("state.sqlite", "manifest.json", "experiment.yaml", "trial.json")]
print("PROBE " + json.dumps({
    "run_dir_seen": [p for p in (out, out + "/state.sqlite", out + "/scratch", out + "/trials")
                     if os.path.exists(p)],
    "above_workspace": sorted(os.listdir(os.path.dirname(os.getcwd()))),
    "found": found, "cwd": os.getcwd()}))
'''


@needs_bwrap
def test_the_agent_reaches_nothing_of_the_run_directory(tmp_path: Path) -> None:
    """The workspace lives in DIR/scratch, but the sandbox binds only it (at its work
    directory) and the HOME: neither the run directory's path nor any record in it is
    visible inside."""
    from support.bundles import make_bundle

    from assay.sandbox import SANDBOX_WORKDIR
    from assay.suites.bundle import set_fixture_digest, tree_digest

    out = tmp_path / "run"
    bundle = make_bundle(tmp_path / "tasks" / "calc")
    (bundle / "repo" / "probe.py").write_text(PROBE.replace("OUT_DIR", repr(str(out))))
    set_fixture_digest(bundle, tree_digest(bundle / "repo"))
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: probe\ntasks: [tasks]\nrepetitions: 1\nseed: 1\narms:\n"
                   "  probe:\n    agent: \"command:python3 probe.py\"\n"
                   "  idle:\n    agent: nop\n")
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    log = (out / "trials" / "calc-001" / "probe" / "0" / "a1" / "agent" / "stdout.log")
    line = [x for x in log.read_text().splitlines() if x.startswith("PROBE ")]
    assert line, log.read_text()[-2000:]
    seen = json.loads(line[0][6:])
    assert seen["cwd"] == SANDBOX_WORKDIR
    assert seen["run_dir_seen"] == [] and seen["found"] == []
    assert "scratch" not in seen["above_workspace"] and "trials" not in seen["above_workspace"]
