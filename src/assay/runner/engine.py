"""What every run shares: a run directory that refuses to mix runs, and a worker pool that
streams one row per unit of work to an append-only log.

Rows are the state: a unit of work is done when it has a row without ``error``. Work is pulled
lazily from an iterator by a fixed number of workers, so memory stays flat for any suite size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from assay.errors import RunConflict
from assay.records.io import JsonlAppender, iter_rows
from assay.records.layout import standing_rows
from assay.records.manifest import MANIFEST, ManifestWriter, read_manifest

T = TypeVar("T")
__all__ = ["standing_rows"]


class Progress(Protocol):
    def start(self, total: int, done: int) -> None: ...
    def advance(self, row: dict[str, Any]) -> None: ...
    def warn(self, message: str) -> None: ...
    def finish(self) -> None: ...


class NullProgress:
    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, row: dict[str, Any]) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass
class RunResult:
    run_dir: Path
    status: str  # "complete", "infra_errors", "aborted", "interrupted"
    rows_written: int
    infra_errors: int
    message: str | None = None


def open_run_dir(run_dir: Path, kind: str, comparable: dict[str, Any],
                 new_manifest: Callable[[], dict[str, Any]],
                 limits: dict[str, Any]) -> ManifestWriter:
    """Create a run directory, or re-open one for resume after checking it is the same run."""
    if (run_dir / MANIFEST).exists():
        old = read_manifest(run_dir)
        if old.get("kind") != kind:
            raise RunConflict(f"{run_dir} holds a {old.get('kind')!r} run, not a {kind} run")
        have = old.get("comparable", {})
        diffs = [k for k in comparable if have.get(k) != comparable[k]]
        if diffs:
            lines = [f"  {k}: was {have.get(k)!r}, now {comparable[k]!r}" for k in diffs]
            raise RunConflict(
                f"{run_dir} was started with different settings; refusing to mix rows:\n"
                + "\n".join(lines) + "\nUse a new --out directory for a new run.")
        old["limits"] = limits  # what this session applies; sessions record when it changed
        return ManifestWriter(run_dir, old)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise RunConflict(f"{run_dir} exists, is not empty and has no {MANIFEST}")
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = ManifestWriter(run_dir, new_manifest())
    writer.save()
    return writer


def pending(units: Iterable[Any], passes: int, done: set[tuple[str, int]]
            ) -> Iterator[tuple[Any, int]]:
    """(unit, pass) pairs still to do, pass by pass, so an interrupted run has whole passes."""
    units = list(units)
    for n in range(passes):
        for unit in units:
            if (unit.id, n) not in done:
                yield unit, n


def done_keys(rows_path: Path, key: Callable[[dict[str, Any]], tuple[Any, ...]]) -> set[Any]:
    """Units of work that already have an answer; infra-error rows are redone."""
    return {key(r) for r in iter_rows(rows_path) if not r.get("error")}


async def drive(items: Iterable[T], work: Callable[[T], Awaitable[dict[str, Any]]], *,
                rows_path: Path, manifest: ManifestWriter, progress: Progress, total: int,
                already_done: int, concurrency: int) -> RunResult:
    """Run ``work`` over ``items`` with ``concurrency`` workers, appending each row as it
    arrives. A row with ``fatal`` set stops the pool: no point asking again with a bad key."""
    appender = JsonlAppender(rows_path)
    if appender.repaired_tail:
        progress.warn(f"dropped a torn last line ({len(appender.repaired_tail)} bytes) left by "
                      "an interrupted run; that item will be done again")
    pending: Iterator[T] = iter(items)
    stop = asyncio.Event()
    written = infra = 0
    fatal: str | None = None
    session = manifest.start_session()
    progress.start(total, already_done)

    async def worker() -> None:
        nonlocal written, infra, fatal
        while not stop.is_set():
            try:
                item = next(pending)
            except StopIteration:
                return
            row = await work(item)
            appender.append(row)
            written += 1
            if row.get("error"):
                infra += 1
                if row.get("fatal"):
                    fatal = row["error"]
                    stop.set()
            warning = manifest.note_served(row.get("served_model"),
                                           row.get("system_fingerprint"))
            if warning:
                progress.warn(warning)
            progress.advance(row)

    status = "interrupted"
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        status = "aborted" if fatal else ("infra_errors" if infra else "complete")
    finally:
        appender.close()
        progress.finish()
        manifest.end_session(session, status, rows_written=written, infra_errors=infra)
    return RunResult(manifest.path.parent, status, written, infra, fatal)
