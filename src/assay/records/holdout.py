"""The holdout ledger: one row for every time a run touched a holdout split, or showed its
results, kept beside the bundles (``<folder>/.assay/holdout-ledger.jsonl``).

A holdout set is only worth something while its results have not steered the work they judge.
That cannot be enforced after the fact, only made visible: so every look is written down where
the team that owns the tasks commits them, and every report of a run says how often the set
has been looked at and by what. The file lives outside any run directory and for longer than
one assay version, so, unlike the JSONL rows of a run, each row carries its own ``schema``.

A **look** is one run (its absolute directory and its experiment identity) that included the
holdout tasks; a resumed run appends another ``run`` row but is the same look. The counting
lives here, beside the rows, because both the runner (to refuse a look past the allowance) and
the report (to rebuild the count from disk) need exactly the same rule.

Rows are appended under an exclusive ``flock`` on the ledger itself, so two runs starting at
once cannot both take the last allowed look, and each is fsync'd before the run goes on: a
look that happened is never lost to a crash. A torn last line (a write cut short) is skipped by
the reader and cut off by the next append (``records/io.py``); it is not evidence of anything.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from assay.errors import RecordError
from assay.records.base import Record
from assay.records.io import JsonlAppender, iter_rows, torn_tail

LEDGER_DIR = ".assay"
LEDGER_FILE = "holdout-ledger.jsonl"


def ledger_path(folder: Path) -> Path:
    """The ledger of the bundles kept in ``folder`` (their parent folder)."""
    return Path(folder) / LEDGER_DIR / LEDGER_FILE


class ArmLook(Record):
    """One arm as it was frozen for the run: what the candidate was."""

    identity: dict[str, Any]
    """The arm's identity from the experiment (agent spec, model name and protocol, params;
    never a key), exactly as in the run's ``manifest.json``."""
    sha256: str
    """SHA-256 of the identity's canonical JSON (sorted keys, no spaces): two rows name the
    same candidate when these match."""


class HoldoutLook(Record):
    """One row of the holdout ledger: a run session that started on holdout tasks (``run``),
    or a command that showed such a run's results (``shown``)."""

    schema_name: ClassVar[str] = "assay.holdout.look"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = ".assay/holdout-ledger.jsonl (beside the bundles)"

    schema_: str = Field(alias="schema")
    """``assay.holdout.look/1``: the ledger outlives any one run and assay version, so each row
    names its own schema."""
    when: str
    """When the row was written, ISO 8601 UTC."""
    user: str | None
    """The login name of the process's real user, from the OS user database (never from an
    environment variable); null when the uid has no entry."""
    host: str
    """The machine's host name, from the OS."""
    event: Literal["run", "shown"]
    """``run``: an ``exp run`` session started on the run (a resume writes one too, and is not
    a new look); ``shown``: a command showed the run's results to a person."""
    shown: bool
    """Whether this row records results being shown (false for ``run`` rows: a session writes
    its row before any trial has a result)."""
    command: str | None = None
    """The assay command that wrote the row (``exp run``, ``exp report``, ...), when known."""
    experiment: str
    """The experiment's name."""
    experiment_identity_sha256: str
    """The run's experiment identity (``manifest.json`` ``identity_sha256``); with ``run_dir``
    it names the look."""
    run_dir: str
    """The run directory, absolute."""
    arms: dict[str, ArmLook]
    """Each arm by name, with its frozen identity."""
    tasks: list[str]
    """The holdout task ids the run included (all of them, also those kept in other folders)."""
    holdout_reuse: bool = False
    """Whether the session was started with ``--holdout-reuse`` (a look past the allowance)."""


def arm_look(identity: dict[str, Any]) -> ArmLook:
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return ArmLook(identity=identity, sha256=hashlib.sha256(blob.encode()).hexdigest())


def who() -> tuple[str | None, str]:
    """(user, host) from the OS: ``$USER`` could say anything, and env vars may hold secrets."""
    try:
        user: str | None = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = None
    return user, socket.gethostname()


def read_looks(path: Path) -> list[HoldoutLook]:
    """Every complete row of a ledger (none when it does not exist); a torn last line is
    left out and reported (``records.io.iter_rows``), a corrupt middle line or a row of a
    newer schema is a ``RecordError``."""
    out = []
    try:
        for n, row in enumerate(iter_rows(path), 1):
            where = f"{path}: row {n}"
            HoldoutLook.check_schema_id(row.get("schema"), where)
            out.append(HoldoutLook.read(row, where))
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    return out


def has_torn_tail(path: Path) -> bool:
    return bool(path.exists() and torn_tail(path)[1])


@contextmanager
def locked(paths: Iterable[Path]) -> Iterator[None]:
    """Exclusive locks on each ledger (created if missing), taken in a fixed order so two
    runs over overlapping folders cannot deadlock; held across read, decide and append."""
    handles = []
    try:
        for p in sorted({Path(p) for p in paths}):
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                fh = open(p, "ab")  # noqa: SIM115 - held until the lock is released
            except OSError as exc:
                raise RecordError(f"{p}: cannot open the holdout ledger ({exc.strerror}); a "
                                  "look at a holdout is not taken unrecorded") from None
            handles.append(fh)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        for fh in reversed(handles):
            fh.close()  # closing releases the lock


def append_look(path: Path, look: HoldoutLook) -> None:
    """Append one row, flushed and fsync'd before returning (call under :func:`locked`)."""
    try:
        with JsonlAppender(path, sync_every=1) as out:
            out.append(look.model_dump(mode="json", by_alias=True))
    except OSError as exc:
        raise RecordError(f"{path}: cannot append to the holdout ledger ({exc})") from None


@dataclass
class Look:
    """One distinct run over the holdout: its first ``run`` row, and whether any row says its
    results were shown."""

    first: HoldoutLook
    shown: bool = False
    sessions: int = 0
    new_candidate: bool = False
    """True when this look's arms include an identity no earlier look had."""
    arm_shas: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        return self.first.run_dir, self.first.experiment_identity_sha256


def looks_at(rows: Iterable[HoldoutLook], tasks: Iterable[str]) -> list[Look]:
    """The distinct runs, in the order they first appear, that included any of ``tasks``. Rows
    from several ledgers may be passed together: the same run in two ledgers is one look."""
    wanted = set(tasks)
    by_key: dict[tuple[str, str], Look] = {}
    shown: set[tuple[str, str]] = set()
    once: set[tuple[str, str, str, str]] = set()
    for row in sorted(rows, key=lambda r: r.when):
        key = (row.run_dir, row.experiment_identity_sha256)
        if not wanted.intersection(row.tasks) or (*key, row.when, row.event) in once:
            continue  # not this holdout, or the same row read from a second folder's ledger
        once.add((*key, row.when, row.event))
        if row.event == "shown" or row.shown:
            shown.add(key)
        if row.event != "run":
            continue
        if key not in by_key:
            by_key[key] = Look(first=row, arm_shas={a.sha256 for a in row.arms.values()})
        by_key[key].sessions += 1
    seen: set[str] = set()
    out = list(by_key.values())
    for i, look in enumerate(out):
        look.shown = look.key in shown
        look.new_candidate = i > 0 and not look.arm_shas <= seen
        seen |= look.arm_shas
    return out


__all__ = ["ArmLook", "HoldoutLook", "Look", "append_look", "arm_look", "ledger_path",
           "locked", "looks_at", "read_looks", "who"]
