"""A fork experiment's shared starting state: the frozen ``state.tar`` of a prefix run, the
digests that prove two arms started from it, and the records that say how the prefix ended.

The state is everything an agent can leave behind in its sandbox that outlives it: the
workspace (mounted at the sandbox's workspace path) and its HOME (at ``AGENT_HOME``, where its
data, config, cache and state directories and session files live). ``/tmp`` and ``/dev/shm``
are private tmpfs mounts that die with the sandbox, so they are not part of it, and a prefix
that archives files must archive them under HOME. The tar holds ``workspace/…`` and ``home/…``,
so a restore puts each back at the host directory mounted where the agent expects it.

The digests are over the tree as listed (type, path, executable bit, content or link target,
directories included: an empty session directory is state too), not over the tar's bytes, so
the arm can recompute them from its restored copy and a match proves the copy, not just a
label copied from ``state.json``. Sockets, FIFOs and devices are listed as skipped, never kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from assay.errors import RecordError
from assay.records.artifact import list_tree
from assay.records.base import Record
from assay.records.ledger import ledger_totals
from assay.records.statuses import ExecutionStatus

FORKS = "forks"
STATE_TAR = "state.tar"
STATE_JSON = "state.json"
PREFIX_JSON = "prefix.json"
STATE_DIGEST_SCHEME = "assay.fork.state/1"


class ForkPrefix(Record):
    """``prefix.json``: one run of the prefix agent, written ``running`` before it starts and
    rewritten when it ends. ``state.json`` beside it, not this file, says the state is frozen."""

    model_config = ConfigDict(validate_assignment=True)  # the runner fills it in

    schema_name: ClassVar[str] = "assay.fork.prefix"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "forks/<task>/<rep>/<attempt>/prefix.json"

    schema_: str = Field(alias="schema")
    """``assay.fork.prefix/1``."""
    task: str
    """The task id."""
    rep: int
    """The repetition this prefix serves (every arm of it)."""
    attempt: str
    """``a1``, ``a2``, …: a new one after an interrupted or failed prefix, never reused."""
    prefix_agent: str
    """The agent spec that ran, as written in ``fork.prefix_agent``."""
    until: int | str
    """``fork.until`` as written: a step number or an event name, given as ASSAY_FORK_UNTIL."""
    model: str | None
    """The prefix's model (``fork.model.name``), None when it got none."""
    status: Literal["running", "frozen", "failed", "interrupted"]
    """``running`` while it runs; ``frozen`` once ``state.json`` exists; ``failed`` when it
    did not end with exit 0 or its state could not be frozen; ``interrupted`` when a later
    session found it running with no state (the runner had died)."""
    started_at: str
    """UTC time the prefix started."""
    ended_at: str | None = None
    """UTC time it ended (None while it runs or when the runner died)."""
    fixture_digest: str | None = None
    """The pristine starting tree's digest the prefix started from."""
    exit_code: int | None = None
    """The prefix agent's exit code."""
    wall_seconds: float | None = None
    """The prefix agent's wall time."""
    execution: dict[str, Any] | None = None
    """The prefix agent's execution record (status, reason, limits applied, evidence, model
    usage through the gateway), as for an arm's attempt."""
    error: str | None = None
    """Why it failed or was interrupted."""


class PrefixEnd(Record):
    """How the prefix that made a state ended."""

    status: ExecutionStatus
    """The execution status (``succeeded``: it exited 0, the contract for "reached until")."""
    exit_code: int | None
    """Its exit code."""
    wall_seconds: float | None
    """Its wall time in seconds."""
    ended_by: str | None = None
    """``agent`` (it exited) or ``watchdog``."""


class ForkState(Record):
    """``state.json``: the frozen state every arm of one (task, repetition) starts from; its
    existence is the commit point (written atomically, after ``state.tar``)."""

    schema_name: ClassVar[str] = "assay.fork.state"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "forks/<task>/<rep>/<attempt>/state.json"

    schema_: str = Field(alias="schema")
    """``assay.fork.state/1``."""
    task: str
    """The task id."""
    rep: int
    """The repetition."""
    attempt: str
    """The prefix attempt that made the state."""
    until: int | str
    """``fork.until`` as written."""
    state_digest: str
    """sha256 over the workspace and home digests (``assay.fork.state/1`` scheme): the one
    figure two arms' records must share."""
    workspace_digest: str
    """Digest of the workspace tree as the prefix left it."""
    home_digest: str
    """Digest of the agent's HOME as the prefix left it."""
    tar_sha256: str
    """sha256 of ``state.tar``'s bytes; a restore refuses a tar that does not match."""
    restored_at: dict[str, str]
    """Where each part goes back inside the sandbox: ``workspace`` and ``home`` paths."""
    files: int
    """Regular files kept, workspace and home together."""
    bytes: int
    """Their total size."""
    skipped: list[str]
    """Paths not kept (sockets, FIFOs, devices), as ``workspace/…`` or ``home/…``."""
    prefix: PrefixEnd
    """How the prefix ended."""
    frozen_at: str
    """UTC time the state was frozen."""


class ForkStart(Record):
    """In ``trial.json``: the shared state this attempt started from, recomputed from the
    restored copy before the agent started (a mismatch refuses the attempt)."""

    dir: str
    """The prefix's directory, relative to the run directory (``forks/<task>/<rep>/<a>``)."""
    until: int | str
    """``fork.until`` as written."""
    state_digest: str
    """The combined digest of the restored workspace and home; equal to the prefix's
    ``state.json`` and to every other arm's of the same (task, repetition)."""
    workspace_digest: str
    """Digest of the restored workspace."""
    home_digest: str
    """Digest of the restored HOME."""
    tar_sha256: str
    """sha256 of the ``state.tar`` restored from."""
    prefix_exit_code: int | None
    """How the prefix ended: its exit code."""
    prefix_wall_seconds: float | None
    """How long the prefix ran."""


def state_tree_digest(root: Path) -> str:
    """``sha256:`` over the sorted listing of ``root``: directories included, permission bits
    beyond the executable bit left out (a restore through tar may clear group/other write)."""
    h = hashlib.sha256()
    for e in list_tree(root):
        if e["type"] == "other":
            continue
        exe = "x" if int(e["mode"], 8) & 0o111 and e["type"] == "file" else "-"
        content = e.get("sha256") or e.get("target") or ""
        h.update(f"{e['type']}\0{e['path']}\0{exe}\0{content}\n".encode(errors="surrogateescape"))
    return "sha256:" + h.hexdigest()


def combined_digest(workspace_digest: str, home_digest: str) -> str:
    blob = f"{STATE_DIGEST_SCHEME}\nworkspace {workspace_digest}\nhome {home_digest}\n"
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def digests(workspace: Path, home: Path) -> dict[str, str]:
    """The three digests of a state, live or restored."""
    wd, hd = state_tree_digest(workspace), state_tree_digest(home)
    return {"state_digest": combined_digest(wd, hd), "workspace_digest": wd, "home_digest": hd}


def freeze_state(workspace: Path, home: Path, fork_dir: Path) -> dict[str, Any]:
    """Write ``state.tar`` (atomically) and return its digests and counts; ``state.json`` is
    the caller's, written after this returns."""
    parts = {"workspace": workspace, "home": home}
    listed = {name: list_tree(root) for name, root in parts.items()}
    fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".tar", dir=fork_dir)
    os.close(fd)
    skipped: list[str] = []
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name, root in parts.items():
                tar.add(root, arcname=name, recursive=False)
                for e in listed[name]:
                    if e["type"] == "other":
                        skipped.append(f"{name}/{e['path']}")
                        continue
                    tar.add(root / e["path"], arcname=f"{name}/{e['path']}", recursive=False)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
            tar_sha = hashlib.file_digest(fh, "sha256").hexdigest()
        os.replace(tmp, fork_dir / STATE_TAR)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    files = [e for entries in listed.values() for e in entries if e["type"] == "file"]
    return {**digests(workspace, home), "tar_sha256": tar_sha, "files": len(files),
            "bytes": sum(e["size"] or 0 for e in files), "skipped": skipped}


def _restore_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``tar`` filter (no absolute names, no ``..``, no write through a link that
    leaves ``dest``, no setuid, setgid or sticky bit) less one of its changes: it also clears
    the group and other write bits, and a repository checked out under umask 002 has them on
    every file, so each arm's copy differed from the frozen state and a protected file read as
    changed (``protected_file_changed`` on every trial). Those bits go back as frozen."""
    safe = tarfile.tar_filter(member, dest)
    if safe is None or member.mode is None or safe.mode is None:
        return safe
    keep = member.mode & (stat.S_IWGRP | stat.S_IWOTH)
    return safe.replace(mode=safe.mode | keep, deep=False) if keep else safe


def restore_state(fork_dir: Path, tar_sha256: str, workspace: Path, home: Path) -> dict[str, str]:
    """Replace ``workspace`` and ``home`` with the frozen state and return the digests of the
    restored copy. The filter (:func:`_restore_filter`) refuses absolute names, ``..`` and
    writes through links that leave the staging directory: the prefix chose every name in the
    archive."""
    tar_path = fork_dir / STATE_TAR
    with open(tar_path, "rb") as fh:
        got = hashlib.file_digest(fh, "sha256").hexdigest()
    if got != tar_sha256:
        raise RecordError(f"{tar_path}: sha256 {got} is not the frozen state's {tar_sha256}")
    stage = Path(tempfile.mkdtemp(prefix=".fork-restore-", dir=workspace.parent))
    try:
        with tarfile.open(tar_path) as tar:
            for m in tar.getmembers():
                if m.name.split("/", 1)[0] not in ("workspace", "home"):
                    raise RecordError(f"{tar_path}: unexpected member {m.name!r}")
            tar.extractall(stage, filter=_restore_filter)
        for part, target in (("workspace", workspace), ("home", home)):
            if target.exists():
                shutil.rmtree(target)
            os.replace(stage / part, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return digests(workspace, home)


def fork_totals(run_dir: Path) -> dict[str, Any]:
    """What a run's prefixes add up to, from their directories and ledgers on disk: reported
    apart from the arms' (the arms did not choose to spend it), counted in the run's total."""
    attempts = frozen = calls = 0
    cost, complete = 0.0, True
    for d in sorted((run_dir / FORKS).glob("*/*/a*")):
        if not d.is_dir():
            continue
        attempts += 1
        frozen += (d / STATE_JSON).is_file()
        sums = ledger_totals(d / "model_calls.jsonl")
        calls += sums["calls"]
        cost += sums["cost_usd"]
        complete = complete and not sums["usage_missing_calls"] and not sums["unpriced_calls"]
    return {"prefix_attempts": attempts, "frozen_states": frozen, "calls": calls,
            "cost_usd": round(cost, 6) if calls else None, "cost_complete": complete}


__all__ = ["FORKS", "PREFIX_JSON", "STATE_JSON", "STATE_TAR", "ForkPrefix", "ForkStart",
           "ForkState", "PrefixEnd", "combined_digest", "digests", "fork_totals",
           "freeze_state", "restore_state", "state_tree_digest"]
