"""The experiment's state: every trial and every attempt, in ``DIR/state.sqlite``.

The runner may be killed at any instant (``kill -9``, a reboot), so the rule is that **every
transition is committed before the action it announces**: an attempt is ``running`` in the
database before the agent starts, ``freezing`` before the workspace is read, ``verifying`` only
once its artifact is complete. After a crash the database therefore never claims less than was
done, and :meth:`StateDB.recover` can decide from it alone what to do next:

- ``preparing`` / ``running`` (and ``freezing`` with no complete artifact): closed as
  ``interrupted``, reason ``runner_restart``, kept forever; the trial is pending again and gets a
  new attempt (new id, new directory);
- ``freezing`` with a complete artifact, ``verifying``, ``grader_error``: the artifact is frozen,
  so the agent is **never run again**; these attempts are returned to be (re)verified.

The schema enforces what must never happen rather than trusting the caller: a grade per trial at
most (primary key), an attempt label per trial at most once, attempts and grades never deleted
or changed (triggers). WAL mode lets ``assay exp status`` read while a run writes.

Threads: one connection behind one lock. Transitions are single small transactions (well under
a millisecond of work plus one fsync), so serialising them costs nothing next to trials that run
minutes, and each stays one atomic step. One writer per database: :meth:`StateDB.open` takes an
exclusive ``flock`` on ``state.lock`` (released by the kernel when the process dies, even by
SIGKILL), so a second runner cannot "recover" attempts that are still running. Readers
(:meth:`StateDB.open_readonly`) take no lock and never write.

Over 400 lines because the schema, the transitions and the queries share one invariant (what a
state means) that is easier to check in one place than across three modules.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from assay.errors import NeverOverwrite, RecordError, RunConflict
from assay.records.artifact import ARTIFACT_JSON
from assay.records.clock import utc_now
from assay.records.state_index import ATTEMPT_DIRS_META, STATE_DB
from assay.records.statuses import (
    FLOW,
    TRIAL_FINAL,
    AttemptState,
    FailureCode,
    TrialFailureCode,
    TrialState,
)
from assay.suites.trial_key import TrialKey, identity_sha256

DB_FILE = STATE_DB
LOCK_FILE = "state.lock"
SCHEMA_VERSION = 1

# The states (``FLOW``: in flow order, an attempt is created ``preparing``; ``CLOSED``; a trial's
# ``TRIAL_FINAL``) are the ``Literal`` types of ``records.statuses``.
#: Frozen, no grade yet: verify again from the same artifact.
GRADER_ERROR: Final = "grader_error"
RUNNER_RESTART = "runner_restart"
#: In ``meta``: this database makes each attempt's directory with its row (see
#: :meth:`StateDB.begin_attempt`); the key and value live in ``records.state_index``.
ATTEMPT_DIRS_KEY, ATTEMPT_DIRS_WITH_ROWS = ATTEMPT_DIRS_META

_MOVES: dict[str, tuple[str, ...]] = {
    "preparing": ("running",),
    "running": ("freezing",),
    "freezing": ("verifying",),
    "verifying": (GRADER_ERROR,),
    GRADER_ERROR: ("verifying",),
}
_STAGE = {"preparing": "setup", "running": "agent", "freezing": "freeze", "verifying": "verify"}

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE trials (
    id INTEGER PRIMARY KEY,            -- position in the plan
    task TEXT NOT NULL, arm TEXT NOT NULL, rep INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    failure_code TEXT, accepted INTEGER, grade_revision TEXT, graded_at TEXT,
    attempts_made INTEGER NOT NULL DEFAULT 0,   -- only grows: attempt labels are never reused
    UNIQUE (task, arm, rep));
CREATE INDEX trials_by_state ON trials (state, id);
CREATE TABLE attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trial INTEGER NOT NULL REFERENCES trials (id),
    attempt TEXT NOT NULL,             -- a1, a2, ... within the trial
    state TEXT NOT NULL, reason TEXT,
    started_at TEXT NOT NULL, ended_at TEXT,
    entered_at REAL NOT NULL,          -- when the current state began (epoch seconds)
    timings TEXT NOT NULL DEFAULT '{}',
    dir TEXT NOT NULL UNIQUE,
    UNIQUE (trial, attempt));
CREATE INDEX attempts_by_trial ON attempts (trial, id);
CREATE INDEX attempts_by_state ON attempts (state);
CREATE TABLE grades (
    trial INTEGER PRIMARY KEY REFERENCES trials (id),   -- no trial is graded twice
    attempt INTEGER NOT NULL UNIQUE REFERENCES attempts (id),
    revision TEXT NOT NULL, accepted INTEGER, failure_code TEXT, graded_at TEXT NOT NULL);
CREATE TRIGGER attempts_never_deleted BEFORE DELETE ON attempts
    BEGIN SELECT RAISE(ABORT, 'an attempt is never deleted'); END;
CREATE TRIGGER grades_never_deleted BEFORE DELETE ON grades
    BEGIN SELECT RAISE(ABORT, 'a grade is never deleted'); END;
CREATE TRIGGER grades_never_changed BEFORE UPDATE ON grades
    BEGIN SELECT RAISE(ABORT, 'a grade is never changed'); END;
"""


@dataclass(frozen=True)
class Attempt:
    """One try of a trial, as the database holds it."""

    id: int
    label: str
    trial: TrialKey
    state: AttemptState
    reason: str | None
    rel_dir: str
    """Relative to the run directory: ``trials/<task>/<arm>/<rep>/<label>``."""
    started_at: str
    ended_at: str | None = None
    timings_json: str = "{}"
    """Seconds per stage (setup, agent, freeze, verify), as stored; decoded on demand because
    listing 100,000 trials should not decode what it does not show."""

    @property
    def dir(self) -> Path:
        return Path(self.rel_dir)

    @property
    def timings(self) -> dict[str, float]:
        return json.loads(self.timings_json)


class TrialView(NamedTuple):
    """One trial with all its attempts, oldest first. A named tuple rather than a frozen
    dataclass: ``exp status`` builds one per trial, and at 100,000 trials a frozen
    dataclass's field-by-field ``__init__`` was a third of the listing's time."""

    key: TrialKey
    state: TrialState
    failure_code: TrialFailureCode | None
    accepted: bool | None
    grade_revision: str | None
    graded_at: str | None
    attempts: list[Attempt]


@dataclass(frozen=True)
class Counts:
    planned: int
    trials: dict[TrialState, int]
    failures: dict[FailureCode, int]
    attempts: dict[AttemptState, int]


def plan_sha256(plan: Sequence[TrialKey]) -> str:
    h = hashlib.sha256()
    for k in plan:
        h.update(f"{k.task}\0{k.arm}\0{k.rep}\n".encode())
    return h.hexdigest()


def _changes(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two identities differ, so a refusal can say what changed."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            p = f"{prefix}.{k}" if prefix else str(k)
            if k not in old:
                out.append(f"{p} added")
            elif k not in new:
                out.append(f"{p} removed")
            else:
                out += _changes(old[k], new[k], p)
        return out
    if old == new:
        return []

    def short(v: Any) -> str:
        s = json.dumps(v, sort_keys=True)
        return s if len(s) <= 60 else s[:57] + "..."

    return [f"{prefix}: {short(old)} -> {short(new)}"]


class StateDB:
    """The state of one experiment run. Use :meth:`open` (the runner) or
    :meth:`open_readonly` (status, reports)."""

    def __init__(self, conn: sqlite3.Connection, root: Path, *, writable: bool,
                 lock_fd: int | None = None) -> None:
        self._conn = conn
        self.root = root
        self.writable = writable
        self._lock = threading.RLock()
        self._lock_fd = lock_fd
        self._meta = dict(conn.execute("SELECT key, value FROM meta"))
        self.retries_infra = int(self._meta.get("retries_infra", "0"))

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path, identity: dict[str, Any], plan: Sequence[TrialKey], *,
             retries_infra: int = 0) -> StateDB:
        """Create ``root/state.sqlite`` with every planned trial pending, or reopen it after
        checking it belongs to the same experiment (else ``RunConflict`` naming what changed)."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise RunConflict(f"{root}: another runner is using this run directory") from None
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(root / DB_FILE, readonly=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" not in tables:
                if tables:
                    raise RecordError(f"{root / DB_FILE}: not an assay state database")
                _create(conn, identity, plan, retries_infra)
            db = cls(conn, root, writable=True, lock_fd=lock_fd)
            db._check_same(identity, plan)
            return db
        except BaseException as exc:
            if conn is not None:
                conn.close()
            os.close(lock_fd)
            if isinstance(exc, sqlite3.DatabaseError):
                raise RecordError(f"{root / DB_FILE}: cannot be read as a state database: "
                                  f"{exc}") from None
            raise

    @classmethod
    def open_readonly(cls, root: Path) -> StateDB:
        """Read a run's state, live or after a crash, without writing to it."""
        path = Path(root) / DB_FILE
        if not path.is_file():
            raise RecordError(f"{path}: not found: not an experiment run directory")
        conn = _connect(path, readonly=True)
        try:
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            except sqlite3.OperationalError:
                # A WAL reader needs a -shm file beside the database; after a clean shutdown it
                # is gone, and in a directory this user cannot write (an archived run, another
                # user's) it cannot be made: read the file as it is, as an immutable snapshot.
                conn.close()
                conn = _connect(path, readonly=True, immutable=True)
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" not in tables:
                raise RecordError(f"{path}: not an assay state database (no experiment "
                                  "state written yet)")
            return cls(conn, Path(root), writable=False)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise RecordError(f"{path}: cannot be read as a state database: "
                                  f"{exc}") from None
            raise

    def _check_same(self, identity: dict[str, Any], plan: Sequence[TrialKey]) -> None:
        version = int(self._meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise RecordError(f"{self.root / DB_FILE}: written with state schema {version}, "
                              f"newer than this assay reads ({SCHEMA_VERSION})")
        if self._meta["identity_sha256"] != identity_sha256(identity):
            old = json.loads(self._meta["identity"])
            changed = _changes(old, identity) or ["the identity hash"]
            bar = [c for c in changed if c.startswith("settings.bar")]
            if bar:  # named first: a bar moved after scores exist is the change that matters
                changed = bar + [c for c in changed if c not in bar]
            shown = "; ".join(changed[:8]) + (f"; and {len(changed) - 8} more"
                                              if len(changed) > 8 else "")
            why = (" The bar is fixed before the first trial: it cannot be added or changed "
                   "once the run has started." if bar else "")
            raise RunConflict(f"{self.root} holds another experiment: {shown}.{why} Run the "
                              "changed experiment into a new --out directory.")
        if self._meta["plan_sha256"] != plan_sha256(plan):
            raise RunConflict(f"{self.root}: the same experiment now plans other trials "
                              "(a different assay version?); refusing to mix two schedules")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> StateDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def meta(self) -> dict[str, str]:
        return dict(self._meta)

    # -- transitions -----------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if not self.writable:
            raise ValueError("this state database was opened read-only")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _trial_id(self, c: sqlite3.Connection, key: TrialKey) -> tuple[int, str, int]:
        row = c.execute("SELECT id, state, attempts_made FROM trials WHERE task=? AND arm=? "
                        "AND rep=?", (key.task, key.arm, key.rep)).fetchone()
        if row is None:
            raise ValueError(f"no planned trial {key}")
        return row

    def begin_attempt(self, trial: TrialKey) -> Attempt:
        """A new attempt of a pending trial, committed ``preparing`` together with its
        directory: the directory is made inside the transaction, so a directory is never
        without its row, a row never without its directory (a missing one was deleted: an
        evidence gap, ``exp status``), and a label is never used twice. A kill between the
        two leaves an empty directory with no row, which the next attempt takes."""
        with self._tx() as c:
            tid, state, made = self._trial_id(c, trial)
            if state != "pending":
                raise ValueError(f"trial {trial} is {state}, not pending")
            label = f"a{made + 1}"
            rel = Path("trials", trial.task, trial.arm, str(trial.rep), label)
            now = utc_now()
            cur = c.execute("INSERT INTO attempts (trial, attempt, state, started_at, "
                            "entered_at, dir) VALUES (?, ?, 'preparing', ?, ?, ?)",
                            (tid, label, now, time.time(), str(rel)))
            c.execute("UPDATE trials SET state='preparing', attempts_made=? WHERE id=?",
                      (made + 1, tid))
            _new_attempt_dir(self.root / rel)
            assert cur.lastrowid is not None
            return Attempt(cur.lastrowid, label, trial, "preparing", None, str(rel), now)

    def _leave(self, c: sqlite3.Connection, attempt: Attempt,
               allowed: Sequence[str]) -> tuple[int, str, dict[str, float]]:
        row = c.execute("SELECT trial, state, entered_at, timings FROM attempts WHERE id=?",
                        (attempt.id,)).fetchone()
        if row is None:
            raise ValueError(f"no attempt {attempt.id}")
        tid, state, entered, timings_json = row
        if state not in allowed:
            raise ValueError(f"attempt {attempt.trial}/{attempt.label} is {state}; "
                             f"expected one of {', '.join(allowed)}")
        timings = json.loads(timings_json)
        stage = _STAGE.get(state)
        if stage:
            timings[stage] = round(timings.get(stage, 0.0) + time.time() - entered, 3)
        return tid, state, timings

    def move(self, attempt: Attempt, state: AttemptState, *, reason: str | None = None) -> Attempt:
        """Announce the next stage; commit it, then do it. Stage time is measured from the
        transitions themselves (setup, agent, freeze, verify)."""
        with self._tx() as c:
            allowed = [s for s, nexts in _MOVES.items() if state in nexts]
            if not allowed:
                raise ValueError(f"{state!r} is not a state an attempt moves to with move()")
            tid, _, timings = self._leave(c, attempt, allowed)
            # a reason is kept until a new one is given: re-verifying after a grader error
            # still shows what went wrong the first time
            c.execute("UPDATE attempts SET state=?, reason=COALESCE(?, reason), entered_at=?, "
                      "timings=? WHERE id=?", (state, reason, time.time(), json.dumps(timings),
                                               attempt.id))
            c.execute("UPDATE trials SET state=? WHERE id=?", (state, tid))
        return _replace(attempt, state=state, reason=reason or attempt.reason,
                        timings_json=json.dumps(timings))

    def finish_attempt(self, attempt: Attempt, state: AttemptState, *, reason: str,
                       code: TrialFailureCode = "infra_error") -> TrialState:
        """Close an attempt without a grade (``interrupted`` or ``infra_error``) and return its
        trial's new state: ``pending`` (a new attempt will come) or, once ``retries_infra``
        new attempts were spent on infrastructure failures, ``infra_error`` for good, with
        ``code`` (``agent_start_failed``, ``model_unavailable``, else ``infra_error``) as the
        trial's failure code."""
        if state not in ("interrupted", "infra_error"):
            raise ValueError("finish_attempt closes as interrupted or infra_error; a graded "
                             "attempt goes through grade_trial")
        with self._tx() as c:
            # a frozen artifact is never run again: only a grade closes a verifying attempt
            tid, _, timings = self._leave(c, attempt, FLOW[:3])
            c.execute("UPDATE attempts SET state=?, reason=?, ended_at=?, timings=? WHERE id=?",
                      (state, reason, utc_now(), json.dumps(timings), attempt.id))
            trial_state: TrialState = "pending"
            failure: TrialFailureCode | None = None
            if state == "infra_error":
                (infra,) = c.execute("SELECT count(*) FROM attempts WHERE trial=? AND "
                                     "state='infra_error'", (tid,)).fetchone()
                if infra > self.retries_infra:
                    trial_state, failure = "infra_error", code
            c.execute("UPDATE trials SET state=?, failure_code=? WHERE id=?",
                      (trial_state, failure, tid))
        return trial_state

    def grade_trial(self, attempt: Attempt, *, accepted: bool | None,
                    failure_code: str | None, revision: str,
                    graded_at: str | None = None) -> None:
        """Record the one grade of a trial from its verifying attempt; a second grade of the
        same trial is refused by the schema (``NeverOverwrite``)."""
        graded_at = graded_at or utc_now()
        acc = None if accepted is None else int(accepted)
        with self._tx() as c:
            tid, _, timings = self._leave(c, attempt, ("verifying",))
            try:
                c.execute("INSERT INTO grades (trial, attempt, revision, accepted, failure_code,"
                          " graded_at) VALUES (?, ?, ?, ?, ?, ?)",
                          (tid, attempt.id, revision, acc, failure_code, graded_at))
            except sqlite3.IntegrityError:
                raise NeverOverwrite(f"trial {attempt.trial} is already graded: a trial is "
                                     "graded once") from None
            c.execute("UPDATE attempts SET state='done', ended_at=?, timings=? WHERE id=?",
                      (utc_now(), json.dumps(timings), attempt.id))
            c.execute("UPDATE trials SET state='done', failure_code=?, accepted=?, "
                      "grade_revision=?, graded_at=? WHERE id=?",
                      (failure_code, acc, revision, graded_at, tid))

    def recover(self, is_frozen: Callable[[Attempt], bool] | None = None) -> list[Attempt]:
        """Make the state true again after a crash; return the attempts to (re)verify.

        ``is_frozen`` says whether a ``freezing`` attempt's artifact is complete (default:
        its ``artifact.json``, written last and atomically by the freeze, exists)."""
        def default(a: Attempt) -> bool:
            return (self.root / a.dir / ARTIFACT_JSON).is_file()

        frozen = is_frozen or default
        to_verify: list[Attempt] = []
        with self._tx() as c:
            rows = c.execute(_ATTEMPT_SELECT + " WHERE a.state IN (?, ?, ?, ?, ?) ORDER BY t.id",
                             (*FLOW, GRADER_ERROR)).fetchall()
            for row in rows:
                a = _attempt(row)
                if a.state in ("verifying", GRADER_ERROR):
                    to_verify.append(a)
                elif a.state == "freezing" and frozen(a):
                    c.execute("UPDATE attempts SET state='verifying', entered_at=? WHERE id=?",
                              (time.time(), a.id))
                    c.execute("UPDATE trials SET state='verifying' WHERE task=? AND arm=? AND "
                              "rep=?", a.trial)
                    to_verify.append(_replace(a, state="verifying"))
                else:  # the process that ran it is gone; when it ended is not known
                    c.execute("UPDATE attempts SET state='interrupted', reason=? WHERE id=?",
                              (RUNNER_RESTART, a.id))
                    c.execute("UPDATE trials SET state='pending' WHERE task=? AND arm=? AND "
                              "rep=?", a.trial)
        return to_verify

    # -- a sequential bar's looks ---------------------------------------------------------

    def record_look(self, look: dict[str, Any]) -> None:
        """Commit one look of a sequential bar (``runner/sequential.py``) before its decision
        takes effect: after a kill the next session reads it back instead of deciding again.
        ``look["index"]`` is unique: a look is taken once."""
        with self._tx() as c:
            c.execute(_LOOKS_TABLE)
            try:
                c.execute("INSERT INTO looks (idx, body, taken_at) VALUES (?, ?, ?)",
                          (int(look["index"]), json.dumps(look, sort_keys=True), utc_now()))
            except sqlite3.IntegrityError:
                raise NeverOverwrite(f"look {look['index']} is already recorded: a look is "
                                     "taken once") from None

    def looks(self) -> list[dict[str, Any]]:
        """The looks recorded so far, in order (none before the first, or without the table:
        a run without a sequential bar never makes it)."""
        with self._lock, self._snapshot() as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
            if "looks" not in tables:
                return []
            rows = c.execute("SELECT body FROM looks ORDER BY idx").fetchall()
        return [json.loads(r[0]) for r in rows]

    # -- queries ---------------------------------------------------------------------------

    def pending(self, limit: int | None = None) -> list[TrialKey]:
        """Trials waiting for a new attempt, in plan order."""
        with self._lock:
            rows = self._conn.execute("SELECT task, arm, rep FROM trials WHERE state='pending' "
                                      "ORDER BY id LIMIT ?", (-1 if limit is None else limit,))
            return [TrialKey(*r) for r in rows]

    def evidence_gaps(self) -> list[Attempt]:
        """Attempts whose directory is gone (deleted by hand, a bad copy): their records,
        ledger and grades are lost. Every attempt's directory is made with its row
        (:meth:`begin_attempt`), so a missing one is never "not started yet"; such a trial is
        neither pending nor complete, whatever its row says. (A database from before that rule
        has no ``attempt_dirs`` in its meta: there an interrupted attempt may have died before
        its directory existed, and is not counted.)"""
        with self._lock, self._snapshot() as c:
            rows = c.execute(_ATTEMPT_SELECT + " ORDER BY t.id, a.id").fetchall()
        legacy = self._meta.get(ATTEMPT_DIRS_KEY) != ATTEMPT_DIRS_WITH_ROWS
        return [a for a in map(_attempt, rows) if not (self.root / a.dir).is_dir()
                and not (legacy and a.state == "interrupted")]

    def counts(self) -> Counts:
        with self._lock, self._snapshot() as c:
            trials = dict(c.execute("SELECT state, count(*) FROM trials GROUP BY state"))
            failures = dict(c.execute("SELECT failure_code, count(*) FROM trials WHERE "
                                      "failure_code IS NOT NULL GROUP BY failure_code"))
            attempts = dict(c.execute("SELECT state, count(*) FROM attempts GROUP BY state"))
        return Counts(sum(trials.values()), trials, failures, attempts)

    def failures_by_arm(self) -> dict[str, dict[str, int]]:
        """Failure codes counted per arm (``exp status``: a failure belongs to an arm, and two
        arms failing alike is another story than one arm failing)."""
        out: dict[str, dict[str, int]] = {}
        with self._lock, self._snapshot() as c:
            for arm, code, n in c.execute("SELECT arm, failure_code, count(*) FROM trials "
                                          "WHERE failure_code IS NOT NULL GROUP BY arm, "
                                          "failure_code ORDER BY min(id)"):
                out.setdefault(str(arm), {})[str(code)] = int(n)
        return out

    def trials(self, *, unfinished_only: bool = False) -> Iterator[TrialView]:
        """Every trial (or only those not in a final state) with its attempts, in plan order.

        Read-only handles stream from one snapshot (memory stays flat at any size); the
        runner's own handle returns a list, so a half-read iterator never holds the lock."""
        if self.writable:
            with self._lock:
                return iter(list(self._iter_trials(unfinished_only)))
        return self._iter_trials(unfinished_only)

    def _iter_trials(self, unfinished_only: bool) -> Iterator[TrialView]:
        where = (f" WHERE t.state NOT IN ({', '.join('?' * len(TRIAL_FINAL))})"
                 if unfinished_only else "")
        args = TRIAL_FINAL if unfinished_only else ()
        with self._snapshot() as c:  # one snapshot for both cursors
            trials = c.execute("SELECT t.id, t.task, t.arm, t.rep, t.state, t.failure_code, "
                               "t.accepted, t.grade_revision, t.graded_at FROM trials t"
                               + where + " ORDER BY t.id", args)
            attempts = c.execute(_ATTEMPT_SELECT + where + " ORDER BY t.id, a.id", args)
            pending = next(attempts, None)
            for tid, task, arm, rep, state, code, acc, rev, graded in trials:
                mine = []
                while pending is not None and pending[0] == tid:
                    mine.append(_attempt(pending))
                    pending = next(attempts, None)
                yield TrialView(TrialKey(task, arm, rep), state, code,
                                None if acc is None else bool(acc), rev, graded, mine)

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction on a read-only handle, so several queries see one instant of a
        database the runner keeps writing; the runner's own handle reads under its lock."""
        c = self._conn
        if self.writable:
            yield c
            return
        c.execute("BEGIN")
        try:
            yield c
        finally:
            if c.in_transaction:
                c.execute("COMMIT")


#: made by the first look (runs without a sequential bar never have it, so their databases
#: stay as they were); a row is never changed or deleted
_LOOKS_TABLE = ("CREATE TABLE IF NOT EXISTS looks (idx INTEGER PRIMARY KEY, body TEXT NOT NULL, "
                "taken_at TEXT NOT NULL)")

_ATTEMPT_SELECT = ("SELECT t.id, t.task, t.arm, t.rep, a.id, a.attempt, a.state, a.reason, "
                   "a.dir, a.started_at, a.ended_at, a.timings FROM attempts a "
                   "JOIN trials t ON t.id = a.trial")


def _new_attempt_dir(path: Path) -> None:
    """The attempt's directory, new or empty (left by a kill before its row was committed);
    one that holds anything belongs to another attempt and is never reused."""
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise NeverOverwrite(f"{path} already holds files: an attempt directory is never "
                             "reused")


def _attempt(row: Sequence[Any]) -> Attempt:
    _, task, arm, rep, aid, label, state, reason, rel, started, ended, timings = row
    return Attempt(aid, label, TrialKey(task, arm, rep), state, reason, rel, started, ended,
                   timings)


def _replace(a: Attempt, **changes: Any) -> Attempt:
    from dataclasses import replace

    return replace(a, **changes)


def _connect(path: Path, *, readonly: bool, immutable: bool = False) -> sqlite3.Connection:
    from urllib.parse import quote

    uri = "file:" + quote(str(path.resolve())) + ("?mode=ro" if readonly else "")
    if immutable:
        uri += "&immutable=1"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                           timeout=30)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _create(conn: sqlite3.Connection, identity: dict[str, Any], plan: Sequence[TrialKey],
            retries_infra: int) -> None:
    """Schema, meta and every planned trial in one transaction: a crash leaves all or none."""
    if len(set(plan)) != len(plan):
        raise ValueError("the plan names a trial twice")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _SCHEMA.split(";\n"):  # no statement of the schema ends a line in ';'
            if stmt.strip():
                conn.execute(stmt)
        meta = {"schema_version": str(SCHEMA_VERSION), "identity": json.dumps(identity),
                "identity_sha256": identity_sha256(identity), "plan_sha256": plan_sha256(plan),
                "retries_infra": str(retries_infra), "created_at": utc_now(),
                "name": str(identity.get("settings", {}).get("name", "")),
                ATTEMPT_DIRS_KEY: ATTEMPT_DIRS_WITH_ROWS}
        conn.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        conn.executemany("INSERT INTO trials (id, task, arm, rep) VALUES (?, ?, ?, ?)",
                         ((i, k.task, k.arm, k.rep) for i, k in enumerate(plan)))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
