"""``assay exp status`` through the real CLI, on state databases these tests build: counts,
the not-done lines, ``--all``, ``--json`` listing every trial; while a writer holds the database
(another process, mid-transaction), after a SIGKILL, and never writing to it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from support.other_user import readable_install, run_as_nobody

from assay.runner.state import DB_FILE, StateDB
from assay.suites.experiment import TrialKey

PLAN = [TrialKey(f"task-{i}", arm, rep) for i in range(3) for rep in range(2)
        for arm in ("base", "cand")]
IDENTITY = {"settings": {"name": "status-exp"}, "tasks": {}, "arms": {}}
SRC = str(Path(__file__).resolve().parents[1] / "src")


def build(root: Path) -> StateDB:
    """12 trials: 2 accepted, 1 rejected, 1 out of infra retries, 1 interrupted then running,
    1 verifying, 1 grader_error, the rest pending."""
    db = StateDB.open(root, IDENTITY, PLAN, retries_infra=0)

    def through(key: TrialKey, *states: str) -> object:
        a = db.begin_attempt(key)
        for s in states:
            a = db.move(a, s)
        return a

    for key in PLAN[:2]:
        db.grade_trial(through(key, "running", "freezing", "verifying"),  # type: ignore[arg-type]
                       accepted=True, failure_code=None, revision="v1")
    db.grade_trial(through(PLAN[2], "running", "freezing", "verifying"),  # type: ignore[arg-type]
                   accepted=False, failure_code="agent_timeout", revision="v1")
    db.finish_attempt(through(PLAN[3]), "infra_error", reason="sandbox failed")  # type: ignore[arg-type]
    db.finish_attempt(through(PLAN[4], "running"), "interrupted",  # type: ignore[arg-type]
                      reason="runner_restart")
    through(PLAN[4], "running")
    through(PLAN[5], "running", "freezing", "verifying")
    through(PLAN[6], "running", "freezing", "verifying", "grader_error")
    return db


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    build(tmp_path / "run").close()
    return tmp_path / "run"


def rows(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines() if line.startswith("task-")]


def test_text_counts_then_not_done_trials(run_dir: Path) -> None:
    res = run_cli(["exp", "status", str(run_dir)])
    assert res.code == 0, res.stderr
    out = res.stdout
    assert "experiment status-exp: 12 trials planned, 8 not done" in out
    assert "done 3" in out and "pending 5" in out and "infra_error 1" in out
    assert "agent_timeout 1" in out and "interrupted 1" in out
    # each failure under the arm it belongs to (PLAN[2] is base's, PLAN[3] cand's)
    failures = out[out.index("failures:"):out.index("attempts:")].splitlines()
    assert failures[1:] == [f"  {PLAN[2].arm}: agent_timeout 1",
                            f"  {PLAN[3].arm}: infra_error 1"], failures
    listed = rows(out)
    assert [(r[0], r[1], r[2]) for r in listed] == [(k.task, k.arm, str(k.rep))
                                                    for k in PLAN[4:]]
    by_key = {(r[0], r[1], r[2]): r for r in listed}
    assert by_key[("task-1", "base", "0")][3:5] == [
        "running", "a1 interrupted (runner_restart), a2 running"]
    assert by_key[("task-1", "base", "1")][3] == "grader_error"
    res = run_cli(["exp", "status", str(run_dir), "--all"])
    everything = rows(res.stdout)
    assert len(everything) == 12
    assert everything[2][3:] == ["done", "a1 done", "agent_timeout"]
    assert everything[0][5] == "accepted"
    assert everything[3][3:] == ["infra_error", "a1 infra_error (sandbox failed)", "infra_error"]


def test_json_lists_every_trial(run_dir: Path) -> None:
    res = run_cli(["exp", "status", str(run_dir), "--json"])
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    trials = data["trials"]
    assert [(t["task"], t["arm"], t["rep"]) for t in trials] == [tuple(k) for k in PLAN]
    assert all(set(t) == {"task", "arm", "rep", "state", "attempts", "accepted",
                          "failure_code"} for t in trials)
    assert trials[0]["accepted"] is True and trials[2]["accepted"] is False
    assert trials[2]["failure_code"] == "agent_timeout" and trials[7]["accepted"] is None
    assert trials[4]["attempts"] == [
        {"attempt": "a1", "state": "interrupted", "reason": "runner_restart"},
        {"attempt": "a2", "state": "running", "reason": None}]
    assert trials[11] == {"task": "task-2", "arm": "cand", "rep": 1, "state": "pending",
                          "attempts": [], "accepted": None, "failure_code": None}
    assert data["counts"]["planned"] == 12 and data["counts"]["trials"]["done"] == 3
    assert data["counts"]["failure_codes_by_arm"] == {PLAN[2].arm: {"agent_timeout": 1},
                                                      PLAN[3].arm: {"infra_error": 1}}


def _digests(run_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.iterdir()) if p.name.startswith(DB_FILE)}


def test_status_never_writes(run_dir: Path) -> None:
    before = _digests(run_dir)
    for args in ([], ["--all"], ["--json"]):
        assert run_cli(["exp", "status", str(run_dir), *args]).code == 0
    after = _digests(run_dir)
    assert after[DB_FILE] == before[DB_FILE]
    assert {k: v for k, v in after.items() if k in before} == before


def test_status_of_an_archived_read_only_run() -> None:
    """A directory the reader cannot write to (an archived run, after a clean shutdown so no
    -shm file exists): still readable. As root, the reader runs as nobody, against a readable
    copy of what the command imports (support/other_user.py), so the test also passes from a
    checkout in a directory nobody cannot enter."""
    import shutil
    import tempfile

    as_root = os.geteuid() == 0
    if as_root and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: cannot drop write permission")
    base = Path(tempfile.mkdtemp(prefix="assay-archived-"))
    try:
        base.chmod(0o755)
        build(base / "run").close()
        assert not (base / "run" / f"{DB_FILE}-shm").exists()
        argv = ["exp", "status", str(base / "run"), "--json"]
        if as_root:
            build(base / "probe").close()
            lib = readable_install(["exp", "status", str(base / "probe"), "--json"],
                                   base / "install")
        (base / "run").chmod(0o555)
        if as_root:
            res = run_as_nobody(lib, argv, cwd=base)
        else:
            res = subprocess.run([sys.executable, "-m", "assay", *argv], capture_output=True,
                                 text=True, timeout=60, check=False,
                                 env={**os.environ, "PYTHONPATH": SRC})
        assert res.returncode == 0, res.stderr
        assert len(json.loads(res.stdout)["trials"]) == 12
        assert not (base / "run" / f"{DB_FILE}-shm").exists()
    finally:
        (base / "run").chmod(0o755)
        shutil.rmtree(base)


def _writer(run_dir: Path) -> subprocess.Popen[str]:
    """A runner in another process, stopped inside a write transaction."""
    code = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
from test_exp_status import PLAN, IDENTITY
from assay.runner.state import StateDB
db = StateDB.open(Path({str(run_dir)!r}), IDENTITY, PLAN, retries_infra=0)
a = db.begin_attempt(PLAN[7])
with db._tx() as c:
    c.execute("UPDATE attempts SET state='running' WHERE id=?", (a.id,))
    print("in-transaction", flush=True)
    time.sleep(60)
"""
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "in-transaction"
    return proc


def _status_subprocess(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", "exp", "status", str(run_dir), *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": SRC})


def test_status_while_a_runner_writes_and_after_it_is_killed(run_dir: Path) -> None:
    writer = _writer(run_dir)
    try:
        res = _status_subprocess(run_dir, "--json")
        assert res.returncode == 0, res.stderr
        [t] = [t for t in json.loads(res.stdout)["trials"] if tuple(t.values())[:3] ==
               tuple(PLAN[7])]
        # committed: the attempt began; not yet committed: its move to running
        assert t["state"] == "preparing" and t["attempts"][0]["state"] == "preparing"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    res = _status_subprocess(run_dir)
    assert res.returncode == 0, res.stderr
    [line] = [r for r in rows(res.stdout) if r[:3] == ["task-1", "cand", "1"]]
    assert line[3:5] == ["preparing", "a1 preparing"]


def test_bad_run_directories_exit_2_without_a_traceback(tmp_path: Path) -> None:
    res = run_cli(["exp", "status", str(tmp_path / "missing")])
    assert res.code == 2 and "not an experiment run directory" in " ".join(res.stderr.split())
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / DB_FILE).write_text("this is not sqlite " * 50)
    res = _status_subprocess(tmp_path / "junk")
    assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout
    assert "cannot be read" in res.stderr
