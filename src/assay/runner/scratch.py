"""Where an experiment's live workspaces and agent HOMEs are made: ``DIR/scratch``, beside the
evidence, never in the system's temporary directory.

A runner killed with SIGKILL cannot clean up after itself, and what it left in ``$TMPDIR``
nobody would ever find again (ten folders after five kills). Under the run directory, the next
start of the same run finds them: once :meth:`StateDB.recover` has closed the interrupted
attempts (their records, ledgers and agent logs stay in their attempt directories, which are
evidence and never deleted), nothing in ``scratch`` belongs to a living attempt, and it is
removed before the first new attempt starts. A run that ends normally leaves no ``scratch``.

The session's other temporary folders (the verifier's copies, test collection) go to
``scratch/tmp`` for the same reason (:func:`session_tempdir`). Two stay in the system's
temporary directory: the gateway's Unix socket folder (a socket path must be short), named in
``scratch`` so that the next start removes a killed runner's, and the process's copy of
``/etc`` for the sandboxes (made once per process, often before the session), named by its
process so that the next assay process removes a dead one's (``sandbox/bwrap.py``).

An attempt's scratch folder mirrors its attempt directory (``scratch/trials/<task>/<arm>/<rep>/
<label>``, a fork prefix's ``scratch/forks/...``), so what a resume removed can be named. The
sandbox binds only the workspace (at its work directory) and the HOME, never a parent: the
agent reaches nothing else of the run directory.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from assay.agents.mutants import clear_tree

SCRATCH = "scratch"


def attempt_scratch(out: Path, attempt_dir: Path) -> Path:
    """The scratch folder of the attempt (or fork prefix) whose directory is ``attempt_dir``
    (absolute, or relative to ``out``)."""
    rel = attempt_dir.relative_to(out) if attempt_dir.is_absolute() else attempt_dir
    return out / SCRATCH / rel


def left_behind(out: Path) -> list[str]:
    """The attempt folders (relative to ``scratch``) that still hold a workspace or HOME, and
    what is left in the session's ``tmp``."""
    root = out / SCRATCH
    if not root.is_dir():
        return []
    found = set()
    for holder in root.rglob("*"):
        if holder.is_dir() and not holder.is_symlink() and holder.name.startswith(
                ("assay-trial-", "assay-fork-")):
            found.add(str(holder.parent.relative_to(root)))
    session_tmp = root / SESSION_TMP
    if session_tmp.is_dir() and not session_tmp.is_symlink():
        found.update(f"{SESSION_TMP}/{p.name}" for p in session_tmp.iterdir())
    return sorted(found)


#: Under ``scratch``: every other temporary folder of the session (the verifier's private
#: copies, test collection), through :func:`session_tempdir`.
SESSION_TMP = "tmp"


@contextlib.contextmanager
def session_tempdir(out: Path) -> Iterator[Path]:
    """Point this process's temporary folders (``tempfile``) at ``DIR/scratch/tmp`` for the
    session, and back after it: the verifier and test collection make their own temporary
    folders, and a kill would otherwise strand them in ``$TMPDIR``. The runner
    owns the process while a session runs (its attempts are its threads), so the switch is
    only seen by its own work. Unix sockets are not made here (their path must stay short)."""
    root = out / SCRATCH / SESSION_TMP
    root.mkdir(parents=True, exist_ok=True)
    before = tempfile.tempdir
    tempfile.tempdir = str(root.resolve())
    try:
        yield root
    finally:
        tempfile.tempdir = before


def remove_scratch(out: Path) -> list[str]:
    """Remove everything under ``DIR/scratch``; return the attempt folders that still held a
    workspace or HOME. Only ever called while no attempt of this run is alive: before the
    first attempt of a session (after recovery) and after the last one ended."""
    gone = left_behind(out)
    root = out / SCRATCH
    if root.is_dir() and not root.is_symlink():
        clear_tree(root)
    elif root.is_symlink():
        root.unlink()
    return gone


__all__ = ["SCRATCH", "SESSION_TMP", "attempt_scratch", "left_behind", "remove_scratch",
           "session_tempdir"]
