"""Which attempts a run began, as its state database recorded them: what a report checks the
attempt directories on disk against.

A report is built from the records on disk, and an attempt directory deleted by hand (or lost
in a bad copy) leaves no record of its own behind: read from the directories alone, its trial
would look pending, or its cost complete. The state database (``state.sqlite``, in the run
directory, so it travels with it) holds a row for every attempt ever begun, made together with
its directory, so an attempt the database names and the disk lacks is an evidence gap. Only
that list is read here, read-only, by plain SQL (the runner owns the schema; a report must not
need the runner).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

#: The experiment's state database, in the run directory (``runner/state.py`` writes it).
STATE_DB = "state.sqlite"
#: The ``meta`` row of a database that makes each attempt's directory with its row; in an
#: older one an interrupted attempt may have died before its directory existed (no gap).
ATTEMPT_DIRS_META = ("attempt_dirs", "made_with_row")


def recorded_attempt_dirs(run_dir: Path) -> set[str] | None:
    """Every attempt directory (relative to ``run_dir``, as ``trials/T/A/R/aN``) the state
    database says was begun (in an older database, all but the interrupted ones); None when
    the run has no readable database (an outcomes file, a copy without it): then no gap can
    be told."""
    path = Path(run_dir) / STATE_DB
    if not path.is_file():
        return None
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    for extra in ("", "&immutable=1"):  # a WAL reader needs a -shm it may not be able to make
        try:
            conn = sqlite3.connect(uri + extra, uri=True, timeout=30)
        except sqlite3.Error:
            continue
        try:
            key, value = ATTEMPT_DIRS_META
            legacy = conn.execute("SELECT value FROM meta WHERE key=?",
                                  (key,)).fetchone() != (value,)
            return {str(Path(d)) for d, state in conn.execute("SELECT dir, state FROM attempts")
                    if not (legacy and state == "interrupted")}
        except sqlite3.Error:
            continue
        finally:
            conn.close()
    return None


__all__ = ["ATTEMPT_DIRS_META", "STATE_DB", "recorded_attempt_dirs"]
