"""The state database on a real SQLite file: transitions, recovery after a crash (table-driven,
then real child processes killed with SIGKILL), uniqueness the schema enforces, a second writer
and a changed experiment refused."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.errors import NeverOverwrite, RecordError, RunConflict
from assay.runner.state import DB_FILE, Attempt, StateDB, TrialView
from assay.suites.experiment import TrialKey

PLAN = [TrialKey(f"t{i}", arm, rep) for i in range(4) for rep in range(2) for arm in ("A", "B")]
IDENTITY = {"file_sha256": "f" * 64, "settings": {"name": "exp"},
            "tasks": {f"t{i}": {"tests_digest": f"sha256:{i}"} for i in range(4)},
            "arms": {"A": {"agent": "nop"}, "B": {"agent": "oracle"}}}
SRC = str(Path(__file__).resolve().parents[1] / "src")


def open_db(root: Path, *, retries: int = 1, plan: list[TrialKey] = PLAN) -> StateDB:
    return StateDB.open(root, IDENTITY, plan, retries_infra=retries)


def to(db: StateDB, a: Attempt, *states: str) -> Attempt:
    for s in states:
        a = db.move(a, s, reason="pytest crashed" if s == "grader_error" else None)
    return a


def full_attempt(db: StateDB, key: TrialKey, accepted: bool = True) -> Attempt:
    a = to(db, db.begin_attempt(key), "running", "freezing", "verifying")
    db.grade_trial(a, accepted=accepted, failure_code=None if accepted else "behavior_failed",
                   revision="v1")
    return a


def trial_of(db: StateDB, key: TrialKey) -> TrialView:
    return next(t for t in db.trials() if t.key == key)


def test_a_trial_end_to_end_with_stage_timings(tmp_path: Path) -> None:
    with open_db(tmp_path) as db:
        assert db.pending() == PLAN and db.meta["name"] == "exp"
        a = db.begin_attempt(PLAN[0])
        assert (a.label, a.state, a.dir) == ("a1", "preparing", Path("trials/t0/A/0/a1"))
        time.sleep(0.05)
        a = db.move(a, "running")
        time.sleep(0.1)
        a = to(db, a, "freezing", "verifying")
        db.grade_trial(a, accepted=True, failure_code=None, revision="v1")
        [view] = [t for t in db.trials() if t.key == PLAN[0]]
        assert (view.state, view.accepted, view.grade_revision) == ("done", True, "v1")
        [att] = view.attempts
        assert att.state == "done" and att.ended_at is not None
        assert set(att.timings) == {"setup", "agent", "freeze", "verify"}
        assert att.timings["setup"] >= 0.05 and att.timings["agent"] >= 0.1
        assert db.pending() == PLAN[1:]
        c = db.counts()
        assert (c.planned, c.trials, c.attempts) == (16, {"done": 1, "pending": 15},
                                                     {"done": 1})


@pytest.mark.parametrize("steps, call, match", [
    ([], lambda db, a: db.move(a, "verifying"), "expected one of freezing"),
    ([], lambda db, a: db.move(a, "done"), "not a state"),
    (["running"], lambda db, a: db.grade_trial(a, accepted=True, failure_code=None,
                                               revision="v1"), "expected one of verifying"),
    (["running", "freezing", "verifying"],
     lambda db, a: db.finish_attempt(a, "interrupted", reason="x"), "is verifying"),
    ([], lambda db, a: db.finish_attempt(a, "done", reason="x"), "grade_trial"),
    ([], lambda db, a: db.begin_attempt(a.trial), "not pending"),
])
def test_illegal_transitions_are_refused_and_change_nothing(tmp_path: Path, steps: list[str],
                                                            call: object, match: str) -> None:
    with open_db(tmp_path) as db:
        a = to(db, db.begin_attempt(PLAN[0]), *steps)
        before = [(t.state, [x.state for x in t.attempts]) for t in db.trials()]
        with pytest.raises(ValueError, match=match):
            call(db, a)  # type: ignore[operator]
        assert [(t.state, [x.state for x in t.attempts]) for t in db.trials()] == before


def test_infra_errors_retry_with_new_ids_until_the_bound(tmp_path: Path) -> None:
    with open_db(tmp_path, retries=2) as db:
        labels = []
        for expected in ("pending", "pending", "infra_error"):
            a = db.begin_attempt(PLAN[0])
            labels.append(a.label)
            assert db.finish_attempt(a, "infra_error", reason="sandbox failed") == expected
        view = trial_of(db, PLAN[0])
        assert view.state == "infra_error" and view.failure_code == "infra_error"
        assert labels == ["a1", "a2", "a3"]
        assert [x.reason for x in view.attempts] == ["sandbox failed"] * 3
        assert PLAN[0] not in db.pending()
        # an interrupted attempt does not count against the infra bound
        a = db.begin_attempt(PLAN[1])
        assert db.finish_attempt(a, "interrupted", reason="user_interrupt") == "pending"
        a = db.begin_attempt(PLAN[1])
        assert a.label == "a2"
        assert db.counts().failures == {"infra_error": 1}


def _artifact(tmp_path: Path, a: Attempt) -> None:
    assert (tmp_path / a.dir).is_dir()  # made with its row
    (tmp_path / a.dir / "artifact.json").write_text("{}")


# (moves before the crash, artifact complete?) -> (attempt state, reason, trial state, verify?)
RECOVER_CASES = {
    "preparing": ([], False, ("interrupted", "runner_restart", "pending", False)),
    "running": (["running"], False, ("interrupted", "runner_restart", "pending", False)),
    "freezing, artifact incomplete": (["running", "freezing"], False,
                                      ("interrupted", "runner_restart", "pending", False)),
    "freezing, artifact complete": (["running", "freezing"], True,
                                    ("verifying", None, "verifying", True)),
    "verifying": (["running", "freezing", "verifying"], True,
                  ("verifying", None, "verifying", True)),
    "grader_error": (["running", "freezing", "verifying", "grader_error"], True,
                     ("grader_error", "pytest crashed", "grader_error", True)),
}


@pytest.mark.parametrize("name", sorted(RECOVER_CASES))
def test_recover(tmp_path: Path, name: str) -> None:
    moves, artifact, (a_state, reason, t_state, verify) = RECOVER_CASES[name]
    db = open_db(tmp_path)
    full_attempt(db, PLAN[1])  # a finished trial is left alone
    a = to(db, db.begin_attempt(PLAN[0]), *moves)
    if artifact:
        _artifact(tmp_path, a)
    db.close()  # the runner is gone; nothing else was written
    with open_db(tmp_path) as db:
        again = db.recover()
        view = trial_of(db, PLAN[0])
        [att] = view.attempts
        assert (att.state, att.reason, view.state) == (a_state, reason, t_state)
        assert [x.id for x in again] == ([a.id] if verify else [])
        assert trial_of(db, PLAN[1]).attempts[0].state == "done"
        assert (PLAN[0] in db.pending()) == (t_state == "pending")
        assert db.recover() == (again if verify else [])  # idempotent
        if t_state == "pending":  # the new attempt gets a new id; the old one is kept
            b = db.begin_attempt(PLAN[0])
            assert b.label == "a2" and b.dir != a.dir
            assert [x.label for x in trial_of(db, PLAN[0]).attempts] == ["a1", "a2"]
        else:  # verified again from the same artifact, never run again
            v = again[0]
            if v.state == "grader_error":
                v = db.move(v, "verifying")
                assert v.reason == "pytest crashed"  # what went wrong stays on record
            db.grade_trial(v, accepted=False, failure_code="behavior_failed", revision="v1")
            assert trial_of(db, PLAN[0]).state == "done"
            with pytest.raises(ValueError):
                db.begin_attempt(PLAN[0])


def test_no_trial_is_graded_twice_and_nothing_is_deleted(tmp_path: Path) -> None:
    with open_db(tmp_path) as db:
        a = full_attempt(db, PLAN[0])
        with pytest.raises(ValueError):  # the attempt is done
            db.grade_trial(a, accepted=False, failure_code=None, revision="v2")
    # even a second verifying attempt smuggled in by hand cannot add a grade
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("INSERT INTO attempts (trial, attempt, state, started_at, entered_at, dir) "
                 "VALUES (0, 'a9', 'verifying', 'x', 0, 'trials/t0/A/0/a9')")
    conn.commit()
    for sql in ("DELETE FROM attempts WHERE attempt='a1'", "DELETE FROM grades",
                "UPDATE grades SET accepted=0",
                "INSERT INTO attempts (trial, attempt, state, started_at, entered_at, dir) "
                "VALUES (0, 'a1', 'running', 'x', 0, 'elsewhere')",
                "INSERT INTO attempts (trial, attempt, state, started_at, entered_at, dir) "
                "VALUES (1, 'a1', 'running', 'x', 0, 'trials/t0/A/0/a1')"):
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute(sql)
    conn.close()
    with open_db(tmp_path) as db:
        [smuggled] = [x for x in trial_of(db, PLAN[0]).attempts if x.label == "a9"]
        with pytest.raises(NeverOverwrite, match="graded once"):
            db.grade_trial(smuggled, accepted=False, failure_code=None, revision="v2")
        view = trial_of(db, PLAN[0])
        assert (view.accepted, view.grade_revision) == (True, "v1")


def test_attempt_ids_are_unique_across_many_attempts(tmp_path: Path) -> None:
    with open_db(tmp_path, retries=100) as db:
        seen = set()
        for _ in range(5):
            for key in PLAN:
                a = db.begin_attempt(key)
                seen.add(a.id)
                seen.add(str(a.dir))
                db.finish_attempt(a, random.choice(["interrupted", "infra_error"]), reason="r")
        assert len(seen) == 2 * 5 * len(PLAN)
        for t in db.trials():
            assert [x.label for x in t.attempts] == [f"a{i}" for i in range(1, 6)]


def test_another_experiment_is_refused_naming_what_changed(tmp_path: Path) -> None:
    open_db(tmp_path).close()
    changed = json.loads(json.dumps(IDENTITY))
    changed["tasks"]["t2"]["tests_digest"] = "sha256:other"
    changed["arms"]["B"]["agent"] = "command:x"
    with pytest.raises(RunConflict) as info:
        StateDB.open(tmp_path, changed, PLAN, retries_infra=1)
    msg = str(info.value)
    assert "tasks.t2.tests_digest" in msg and "arms.B.agent" in msg and "t1" not in msg
    with pytest.raises(RunConflict, match="other trials"):
        StateDB.open(tmp_path, IDENTITY, PLAN[::-1], retries_infra=1)
    open_db(tmp_path).close()  # the same experiment still opens


def test_one_writer_at_a_time_and_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    db = open_db(tmp_path)
    with pytest.raises(RunConflict, match="another runner"):
        open_db(tmp_path)
    db.close()
    child = _child(tmp_path, "db = open_db(root); print('open', flush=True); time.sleep(60)")
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
        with pytest.raises(RunConflict):
            open_db(tmp_path)
    finally:
        child.kill()
        child.wait()
    open_db(tmp_path).close()


def test_bad_files_are_record_errors(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not found"):
        StateDB.open_readonly(tmp_path)
    (tmp_path / DB_FILE).write_bytes(b"not a database at all" * 100)
    with pytest.raises(RecordError, match="cannot be read"):
        StateDB.open_readonly(tmp_path)
    with pytest.raises(RecordError, match="cannot be read"):
        open_db(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    conn = sqlite3.connect(other / DB_FILE)
    conn.execute("CREATE TABLE x (y)")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="not an assay state"):
        open_db(other)
    newer = tmp_path / "newer"
    open_db(newer).close()
    conn = sqlite3.connect(newer / DB_FILE)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="newer"):
        open_db(newer)


def test_readonly_handle_never_writes(tmp_path: Path) -> None:
    with open_db(tmp_path) as db:
        full_attempt(db, PLAN[0])
        live = to(db, db.begin_attempt(PLAN[1]), "running")
        before = (tmp_path / DB_FILE).read_bytes()
        r = StateDB.open_readonly(tmp_path)  # while the writer is open (WAL)
        assert r.counts().trials == {"done": 1, "running": 1, "pending": 14}
        assert [t.state for t in r.trials(unfinished_only=True)][:1] == ["running"]
        with pytest.raises(ValueError, match="read-only"):
            r.move(live, "freezing")
        with pytest.raises(ValueError, match="read-only"):
            r.recover()
        r.close()
        assert (tmp_path / DB_FILE).read_bytes() == before


def test_workers_in_threads(tmp_path: Path) -> None:
    plan = [TrialKey(f"t{i}", a, 0) for i in range(40) for a in ("A", "B")]
    with StateDB.open(tmp_path, IDENTITY, plan, retries_infra=0) as db:
        errors: list[BaseException] = []

        def worker(keys: list[TrialKey]) -> None:
            try:
                for k in keys:
                    a = db.begin_attempt(k)
                    if k.task.endswith("3"):
                        db.finish_attempt(a, "interrupted", reason="user_interrupt")
                        a = db.begin_attempt(k)
                    full_attempt_from(db, a)
            except BaseException as exc:  # noqa: BLE001  (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(plan[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        c = db.counts()
        assert c.trials == {"done": 80} and c.attempts == {"done": 80, "interrupted": 8}


def full_attempt_from(db: StateDB, a: Attempt) -> None:
    a = to(db, a, "running", "freezing", "verifying")
    db.grade_trial(a, accepted=True, failure_code=None, revision="v1")


# -- real crashes ------------------------------------------------------------------------------

CHILD = """
import sys, time, random
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_state import open_db, to, full_attempt, PLAN
from assay.runner.state import StateDB
root = Path({root!r})
"""


def _child(root: Path, body: str) -> subprocess.Popen[str]:
    code = CHILD.format(tests=str(Path(__file__).parent), root=str(root)) + body
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=env)


def test_sigkill_mid_transaction_then_recover(tmp_path: Path) -> None:
    child = _child(tmp_path, """
db = open_db(root)
a = to(db, db.begin_attempt(PLAN[0]), "running")
with db._tx() as c:  # the runner dies half-way through announcing the freeze
    c.execute("UPDATE attempts SET state='freezing' WHERE id=?", (a.id,))
    print("in-transaction", flush=True)
    time.sleep(60)
""")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "in-transaction"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with open_db(tmp_path) as db:
        [att] = trial_of(db, PLAN[0]).attempts
        assert att.state == "running"  # the uncommitted half never happened
        assert db.recover() == []
        view = trial_of(db, PLAN[0])
        assert view.state == "pending"
        assert [(x.state, x.reason) for x in view.attempts] == [
            ("interrupted", "runner_restart")]
        assert db.begin_attempt(PLAN[0]).label == "a2"


def _consistent(db: StateDB) -> None:
    """Every trial's state agrees with its attempts: at most one open attempt, and a trial is
    pending only when none is open, done only with a done attempt."""
    for t in db.trials():
        open_ = [a for a in t.attempts if a.state not in ("done", "interrupted", "infra_error")]
        assert len(open_) <= 1, t
        if open_:
            assert t.state == open_[0].state, t
        elif t.state == "done":
            assert [a.state for a in t.attempts].count("done") == 1, t
        else:
            assert t.state in ("pending", "infra_error"), t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_a_random_moment_then_resume_to_the_end(tmp_path: Path, seed: int) -> None:
    plan = [TrialKey(f"t{i}", a, r) for i in range(100) for a in ("A", "B") for r in range(2)]
    body = f"""
from assay.suites.experiment import TrialKey
plan = [TrialKey(f"t{{i}}", a, r) for i in range(100) for a in ("A", "B") for r in range(2)]
db = open_db(root, plan=plan)
rng = random.Random({seed})
for i, key in enumerate(plan):
    a = db.begin_attempt(key)
    if rng.random() < 0.2:
        db.finish_attempt(a, "infra_error", reason="flaky")
        a = db.begin_attempt(key)
    a = to(db, a, "running", "freezing", "verifying")
    db.grade_trial(a, accepted=rng.random() < 0.5, failure_code=None, revision="v1")
    print(i, flush=True)
"""
    # killed once it reports trial k graded, a random instant later: whatever transition of
    # the trials after k it is in the middle of, however loaded the machine
    rng = random.Random(seed)
    k = rng.randrange(3, 150)
    child = _child(tmp_path, body)
    assert child.stdout is not None
    while (line := child.stdout.readline()) and int(line) < k:
        pass
    time.sleep(rng.uniform(0.0, 0.01))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert line, "the child ended before it was killed"
    with open_db(tmp_path, plan=plan) as db:
        _consistent(db)
        done = db.counts().trials.get("done", 0)
        assert k < done < len(plan), f"the kill missed the run: {done} done, k={k}"
        graded_before = {t.key: t.accepted for t in db.trials() if t.state == "done"}
        for a in db.recover():  # frozen: verified again, never run again
            db.grade_trial(a, accepted=False, failure_code=None, revision="v1")
        _consistent(db)
        while left := db.pending():
            for key in left:
                a = db.begin_attempt(key)
                full_attempt_from(db, a)
        _consistent(db)
        views = list(db.trials())
        assert all(t.state in ("done", "infra_error") for t in views)
        # nothing graded before the crash was graded again
        assert {t.key: t.accepted for t in views if t.key in graded_before} == graded_before
        assert sum(1 for t in views if t.state == "done") == db.counts().attempts["done"]


def test_an_experiment_file_frozen_into_the_state_and_a_changed_one_refused(
        tmp_path: Path) -> None:
    from support.bundles import make_bundle

    from assay.suites.experiment import load_experiment, plan

    for tid in ("calc-a", "calc-b"):
        make_bundle(tmp_path / "tasks" / tid, task_id=tid)
    text = ("name: e\ntasks: [tasks]\nrepetitions: 2\nseed: 3\n"
            "arms:\n  base: {agent: nop}\n  cand: {agent: oracle}\n")
    (tmp_path / "experiment.yaml").write_text(text)

    def open_run() -> StateDB:
        exp = load_experiment(tmp_path / "experiment.yaml")
        return StateDB.open(tmp_path / "run", exp.identity, plan(exp),
                            retries_infra=exp.spec.retries.infra)

    with open_run() as db:
        assert db.pending() == plan(load_experiment(tmp_path / "experiment.yaml"))
        assert db.counts().planned == 8 and db.retries_infra == 2
    open_run().close()  # the same file resumes
    (tmp_path / "experiment.yaml").write_text(text.replace("repetitions: 2", "repetitions: 3"))
    with pytest.raises(RunConflict, match="settings.repetitions: 2 -> 3"):
        open_run()
    (tmp_path / "experiment.yaml").write_text(text)
    (tmp_path / "tasks/calc-b/tests/test_fix.py").write_text("def test_x():\n    pass\n")
    with pytest.raises(RunConflict) as info:
        open_run()
    assert "tasks.calc-b.tests_digest" in str(info.value) and "calc-a" not in str(info.value)


def test_an_attempt_directory_comes_with_its_row_and_a_missing_one_is_a_gap(
        tmp_path: Path) -> None:
    db = open_db(tmp_path)
    a = db.begin_attempt(PLAN[0])
    assert (tmp_path / a.dir).is_dir() and not any((tmp_path / a.dir).iterdir())
    # a kill between the directory and the commit leaves an empty directory: taken; one that
    # holds anything belongs to no row and is never reused (nothing is committed then)
    (tmp_path / "trials" / "t0" / "B" / "0" / "a1").mkdir(parents=True)
    assert db.begin_attempt(PLAN[1]).label == "a1"
    held = tmp_path / "trials" / "t1" / "A" / "0" / "a1"
    held.mkdir(parents=True)
    (held / "trial.json").write_text("{}")
    with pytest.raises(NeverOverwrite, match="never reused"):
        db.begin_attempt(TrialKey("t1", "A", 0))
    assert trial_of(db, TrialKey("t1", "A", 0)).state == "pending"
    assert db.evidence_gaps() == []
    full_attempt(db, PLAN[2])
    done = trial_of(db, PLAN[2]).attempts[0]
    import shutil

    shutil.rmtree(tmp_path / done.dir)
    assert [g.dir for g in db.evidence_gaps()] == [done.dir]
    db.close()
    with StateDB.open_readonly(tmp_path) as ro:
        assert [g.label for g in ro.evidence_gaps()] == ["a1"]


def test_a_database_from_before_dirs_came_with_rows_counts_no_interrupted_attempt_as_a_gap(
        tmp_path: Path) -> None:
    """There a runner killed between the row and the directory left an interrupted attempt
    that never had one: not evidence lost. Graded attempts still count."""
    import shutil

    from assay.records.state_index import recorded_attempt_dirs

    db = open_db(tmp_path)
    a = db.begin_attempt(PLAN[0])
    full_attempt(db, PLAN[1])
    db.close()
    with sqlite3.connect(tmp_path / DB_FILE) as c:
        c.execute("DELETE FROM meta WHERE key='attempt_dirs'")
    shutil.rmtree(tmp_path / "trials")
    db = open_db(tmp_path)
    assert db.recover() == []  # a1 of PLAN[0] is interrupted now
    gaps = db.evidence_gaps()
    assert [(g.trial, g.state) for g in gaps] == [(PLAN[1], "done")]
    assert recorded_attempt_dirs(tmp_path) == {str(gaps[0].dir)}
    assert a.dir not in [g.dir for g in gaps]
    db.close()
