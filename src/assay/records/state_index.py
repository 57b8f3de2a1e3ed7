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


def recorded_attempt_dirs(run_dir: Path) -> set[str] | None:
    """Every attempt directory (relative to ``run_dir``, as ``trials/T/A/R/aN``) the state
    database says was begun; None when the run has no readable database (an outcomes file,
    a copy without it): then no gap can be told, which the caller says."""
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
            return {str(Path(r[0])) for r in conn.execute("SELECT dir FROM attempts")}
        except sqlite3.Error:
            continue
        finally:
            conn.close()
    return None


__all__ = ["STATE_DB", "recorded_attempt_dirs"]
