"""The one run loop of model runs: a run directory that refuses to mix runs, and a worker pool
that streams one row per unit of work to an append-only log.

Narrow and coding runs differ only in a small :class:`RunSpec`: what a unit of work is, how to
ask the model about it, and what to do with a row once it is on disk. Rows are the state: a unit
is done when it has a row without ``error``. Work is pulled lazily from an iterator by a fixed
number of workers, so memory stays flat for any suite size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from assay.errors import RunConflict
from assay.models.client import ChatClient, redact_url
from assay.records.base import Record
from assay.records.io import TORN_SUFFIX, JsonlAppender, iter_rows
from assay.records.layout import interrupted_start, standing_rows
from assay.records.manifest import (
    MANIFEST,
    ManifestWriter,
    check_row_schema,
    read_manifest,
    tool_identity,
    utc_now,
)
from assay.records.statuses import RunStatus, SuiteKind
from assay.runner.progress import NullProgress, Progress

T = TypeVar("T")
U = TypeVar("U", bound="Unit")
Row = dict[str, Any]

__all__ = ["Endpoint", "RunConflict", "RunResult", "RunSpec", "run_model", "standing_rows"]


class Unit(Protocol):
    @property
    def id(self) -> str: ...


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str = field(repr=False)  # never recorded anywhere
    api_key_env: str | None = None
    builtin: bool = False


@dataclass
class RunResult:
    run_dir: Path
    status: RunStatus
    rows_written: int
    infra_errors: int
    message: str | None = None


@dataclass(frozen=True)
class Transport:
    """How requests go out: the same for every kind of run."""

    concurrency: int
    timeout_s: float
    max_tries: int


@dataclass
class RunSpec(Generic[U]):
    """Everything a kind of run tells the loop.

    ``ask(client, unit, n)`` returns the row for pass ``n`` of ``unit`` (it never raises for a
    transport failure: that is a row with ``error``); ``after(row)`` runs once the row is on
    disk (coding runs grade the recorded answer there) and returns what the progress display
    shows; ``prepare(run_dir)`` runs once the run directory is open, before the first
    request."""

    kind: SuiteKind
    rows_file: str
    row_model: type[Record]
    units: Sequence[U]
    passes: int
    pass_field: str
    comparable: dict[str, Any]
    manifest: Callable[[], dict[str, Any]]
    limits: dict[str, Any]
    transport: Transport
    ask: Callable[[ChatClient, U, int], Awaitable[Row]]
    after: Callable[[Row], Awaitable[Row]] | None = None
    prepare: Callable[[Path], None] | None = None


def model_manifest(*, schema: str, kind: SuiteKind, run_id: str, endpoint: Endpoint,
                   suite: dict[str, Any], parameters: dict[str, Any], limits: dict[str, Any],
                   comparable: dict[str, Any], record_schemas: dict[str, str],
                   **extra: Any) -> dict[str, Any]:
    """The manifest every model run starts with; ``extra`` holds the kind's own top-level
    fields. The base URL is recorded without credentials, never the key."""
    return {
        "schema": schema,
        "kind": kind,
        "run_id": run_id,
        "assay": tool_identity(),
        "suite": suite,
        "model": {
            "requested": endpoint.model,
            "builtin": endpoint.builtin,
            "base_url": "(built-in, local)" if endpoint.builtin else redact_url(endpoint.base_url),
            "api_key_env": endpoint.api_key_env,
            "served_models": [],
            "system_fingerprints": [],
        },
        "parameters": parameters,
        **extra,
        "limits": limits,
        "comparable": comparable,
        "record_schemas": record_schemas,
        "started_at": utc_now(),
        "ended_at": None,
        "warnings": [],
        "sessions": [],
    }


def open_run_dir(run_dir: Path, kind: SuiteKind, comparable: dict[str, Any],
                 new_manifest: Callable[[], dict[str, Any]],
                 limits: dict[str, Any]) -> ManifestWriter:
    """Create a run directory, or re-open one for resume after checking it is the same run."""
    if (run_dir / MANIFEST).exists():
        old = read_manifest(run_dir)
        if old.get("kind") != kind:
            raise RunConflict(f"{run_dir} holds a {old.get('kind')!r} run, not a {kind} run")
        fresh = new_manifest()
        if old.get("schema") != fresh["schema"]:
            raise RunConflict(f"{run_dir} was written with {old.get('schema')}; this assay "
                              f"writes {fresh['schema']}: use a new --out directory")
        have = old.get("comparable", {})
        diffs = [k for k in comparable if have.get(k) != comparable[k]]
        if diffs:
            lines = [f"  {k}: was {have.get(k)!r}, now {comparable[k]!r}" for k in diffs]
            raise RunConflict(
                f"{run_dir} was started with different settings; refusing to mix rows:\n"
                + "\n".join(lines) + "\nUse a new --out directory for a new run.")
        old["limits"] = limits  # what this session applies; sessions record when it changed
        return ManifestWriter(run_dir, old)
    if run_dir.exists() and not interrupted_start(run_dir):
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


def done_keys(rows_path: Path, key: Callable[[dict[str, Any]], tuple[Any, ...]],
              row_model: type[Record] | None = None) -> set[Any]:
    """Units of work that already have an answer (each row validated when ``row_model`` is
    given); infra-error rows are redone."""
    out = set()
    # a torn last line is not an answer: the appender opened next keeps its bytes and says so
    for r in iter_rows(rows_path, on_torn=lambda _tail: None):
        if row_model is not None:
            row_model.read(r, rows_path)
        if not r.get("error"):
            out.add(key(r))
    return out


async def run_model(spec: RunSpec[Any], endpoint: Endpoint, run_dir: Path,
                    progress: Progress[Row] | None = None) -> RunResult:
    """Run (or resume) ``spec`` into ``run_dir``; the caller has validated everything.

    Raises a fatal :class:`~assay.errors.TransportError` before writing anything when nothing
    answers at the endpoint (:meth:`ChatClient.probe`)."""
    progress = progress or NullProgress()
    t = spec.transport
    client = ChatClient(endpoint.base_url, endpoint.api_key, endpoint.model,
                        timeout_s=t.timeout_s, max_tries=t.max_tries)
    try:
        # Before anything is written: a dead endpoint leaves no run directory of infra errors
        await client.probe()
        return await _run_with(client, spec, run_dir, progress)
    finally:
        await client.aclose()


async def _run_with(client: ChatClient, spec: RunSpec[Any], run_dir: Path,
                    progress: Progress[Row]) -> RunResult:
    manifest = open_run_dir(run_dir, spec.kind, spec.comparable, spec.manifest, spec.limits)
    if spec.prepare is not None:
        spec.prepare(run_dir)
    rows_path = run_dir / spec.rows_file
    check_row_schema(manifest.data, spec.rows_file, spec.row_model, run_dir / MANIFEST)
    field_name = spec.pass_field
    wanted = {(u.id, n) for u in spec.units for n in range(spec.passes)}
    done = done_keys(rows_path, lambda r: (r["id"], int(r[field_name])), spec.row_model) & wanted

    async def work(item: tuple[Any, int]) -> Row:
        return await spec.ask(client, item[0], item[1])

    return await drive(pending(spec.units, spec.passes, done), work, rows_path=rows_path,
                       manifest=manifest, progress=progress, total=len(wanted),
                       already_done=len(done), concurrency=spec.transport.concurrency,
                       after=spec.after)


async def drive(items: Iterable[T], work: Callable[[T], Awaitable[Row]], *,
                rows_path: Path, manifest: ManifestWriter, progress: Progress[Row], total: int,
                already_done: int, concurrency: int,
                after: Callable[[Row], Awaitable[Row]] | None = None) -> RunResult:
    """Run ``work`` over ``items`` with ``concurrency`` workers, appending each row as it
    arrives. A row with ``fatal`` set stops the pool: no point asking again with a bad key."""
    appender = JsonlAppender(rows_path)
    if appender.repaired_tail:
        progress.note(f"a torn last line ({len(appender.repaired_tail)} bytes) left by an "
                      f"interrupted run is kept in {rows_path.name}{TORN_SUFFIX}, not in the "
                      "rows; that item will be done again")
    todo: Iterator[T] = iter(items)
    stop = asyncio.Event()
    written = infra = 0
    fatal: str | None = None
    session = manifest.start_session()
    progress.start(total, already_done)
    served: set[tuple[Any, Any]] = set()

    async def worker() -> None:
        nonlocal written, infra, fatal
        while not stop.is_set():
            try:
                item = next(todo)
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
            pair = (row.get("served_model"), row.get("system_fingerprint"))
            if pair not in served:  # the manifest only changes on a new pair: skip the lookup
                served.add(pair)
                warning = manifest.note_served(*pair)
                if warning:
                    progress.note(warning)
            progress.advance(row if after is None else await after(row))

    status: RunStatus = "interrupted"
    try:
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        status = "aborted" if fatal else ("infra_errors" if infra else "complete")
    finally:
        appender.close()
        progress.finish()
        manifest.end_session(session, status, rows_written=written, infra_errors=infra)
    return RunResult(manifest.path.parent, status, written, infra, fatal)
