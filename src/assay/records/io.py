"""Durable file primitives: whole files are replaced atomically, raw rows are only ever appended.

Every number in a report must trace back to rows on disk, so the two ways we write are chosen for
what survives a crash: a reader never sees half a manifest (temp file, fsync, rename), and a
``kill -9`` loses at most the rows that had not been handed to the OS yet (each row is flushed
as it is written; fsync happens in small batches so durability does not cost throughput).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import NeverOverwrite, RecordError
from assay.records.clock import utc_now


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates files readable by the owner only; records are ordinary files and should get
# the mode any other file gets under the process umask.
_FILE_MODE = 0o666 & ~_umask()


def dumps_row(row: dict[str, Any]) -> str:
    """One JSON line; ``allow_nan=False`` because NaN is not JSON and would poison every reader."""
    return json.dumps(row, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _durable_temp(path: Path, text: str | Iterable[str]) -> str:
    """``text`` (or its pieces, in order) in a synced temporary file beside ``path``, ready to
    be renamed or linked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def atomic_write_text(path: Path, text: str | Iterable[str]) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never a mix.
    ``text`` may come in pieces (a big report written as it is serialised)."""
    tmp = _durable_temp(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_json(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A surrogate-escaped file name (not UTF-8 on disk) can only travel as an ASCII escape.
        text = json.dumps(data, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    atomic_write_text(path, text)


def read_json_file(path: Path) -> dict[str, Any]:
    """A whole-file JSON record; a corrupt or foreign one is a ``RecordError`` that names the
    file and the line, never a traceback."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: corrupt JSON record ({exc.msg})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a JSON object")
    return data


def write_new_text(path: Path, text: str) -> None:
    """Create ``path`` atomically and refuse to replace it: grades and other verdicts are never
    overwritten, a newer one goes beside the old one under a new name."""
    tmp = _durable_temp(path, text)
    try:
        os.link(tmp, path)  # fails with FileExistsError instead of replacing
    except FileExistsError:
        raise NeverOverwrite(f"{path} exists and is never overwritten") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class JsonlScan:
    """What was found in an append-only log: the complete rows, and whether the tail was torn."""

    rows: list[dict[str, Any]]
    torn_tail: bytes
    valid_bytes: int


def _parse_line(path: Path, lineno: int, line: bytes) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}:{lineno}: corrupt record line ({exc})") from exc
    if not isinstance(row, dict):
        raise ValueError(f"{path}:{lineno}: record is not a JSON object")
    return row


class TornRowWarning(UserWarning):
    """A log's last line was cut short (a write interrupted by a kill): shown, never silent."""


def iter_rows(path: Path, *,
              on_torn: Callable[[bytes], None] | None = None) -> Iterator[dict[str, Any]]:
    """Complete rows, one at a time, so a reader's memory does not grow with the log. A last
    line without its newline, or that does not parse, is a write cut short by a crash: it is
    not a row, but it is evidence that something was being written, so it is handed to
    ``on_torn`` (the ledger counts it as a call with unknown usage) or, without one, reported
    as a :class:`TornRowWarning` naming the file; never dropped in silence. A bad line in the
    middle is real corruption and raises."""
    if not path.exists():
        return
    with open(path, "rb") as fh:
        pending: bytes | None = None
        lineno = 0
        for line in fh:
            if pending is not None:
                yield _parse_line(path, lineno, pending)
            lineno += 1
            pending = line
        if pending is None:
            return
        if pending.endswith(b"\n"):
            try:
                row = _parse_line(path, lineno, pending)
            except ValueError:
                pass
            else:
                yield row
                return
        if on_torn is not None:
            on_torn(pending)
        else:
            warnings.warn(torn_message(path, lineno, pending), TornRowWarning, stacklevel=2)


def torn_message(path: Path, lineno: int, tail: bytes) -> str:
    """How a torn last line is reported, the same way by every reader."""
    return (f"{path}:{lineno}: the last line ({len(tail)} bytes) was cut short by a crash "
            "mid-write; it is not counted as a row")


def torn_tail(path: Path) -> tuple[int, bytes]:
    """(bytes of complete rows, torn last line) found by reading backwards from the end only:
    opening a large log to resume must not cost a pass over all of it."""
    if not path.exists():
        return 0, b""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        # Find the start of the last line: scan back in chunks for the newline before it.
        end = size
        if size and _byte_at(fh, size - 1) == b"\n":
            end = size - 1  # the last line is complete as far as newlines go; check it parses
        start = end
        chunk = 1 << 16
        while start > 0:
            read_from = max(0, start - chunk)
            fh.seek(read_from)
            block = fh.read(start - read_from)
            nl = block.rfind(b"\n")
            if nl != -1:
                start = read_from + nl + 1
                break
            start = read_from
        fh.seek(start)
        last = fh.read(size - start)
    if not last:
        return size, b""
    if last.endswith(b"\n"):
        try:
            row = json.loads(last)
            if isinstance(row, dict):
                return size, b""
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
    return start, last


def _byte_at(fh: Any, offset: int) -> bytes:
    fh.seek(offset)
    return fh.read(1)


def scan_jsonl(path: Path) -> JsonlScan:
    """Every complete row in memory, and the torn tail if any (small logs: grades, samples)."""
    valid, tail = torn_tail(path)
    return JsonlScan(list(iter_rows(path)), tail, valid)


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Complete rows only; a torn tail is reported as :func:`iter_rows` does."""
    yield from iter_rows(path)


#: Beside a log, the torn last lines its appender cut off before appending again.
TORN_SUFFIX = ".torn.jsonl"


def keep_torn(path: Path, offset: int, tail: bytes) -> None:
    """Keep a torn last line before the appender truncates it: one row in
    ``<log>.torn.jsonl`` (when, at which byte offset, how long, the bytes as text), so a
    repair drops nothing a later look could need."""
    side = path.with_name(path.name + TORN_SUFFIX)
    row = {"time": utc_now(), "offset": offset, "bytes": len(tail),
           "text": tail.decode("utf-8", "replace")}
    with open(side, "a", encoding="utf-8") as fh:
        fh.write(dumps_row(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class JsonlAppender:
    """Append-only JSONL writer: each row is flushed to the OS at once (a killed process loses
    nothing already written) and fsync'd at least every ``sync_every`` rows or ``sync_seconds``
    (a power cut loses at most one small batch). Opening it repairs a torn tail left by a crash,
    after keeping the torn bytes in ``<log>.torn.jsonl`` (:func:`keep_torn`)."""

    def __init__(self, path: Path, *, sync_every: int = 64, sync_seconds: float = 0.5) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        valid_bytes, self.repaired_tail = torn_tail(path)
        if self.repaired_tail:
            keep_torn(path, valid_bytes, self.repaired_tail)
            with open(path, "r+b") as fh:
                fh.truncate(valid_bytes)
                fh.flush()
                os.fsync(fh.fileno())
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        self._pending = 0
        self._last_sync = time.monotonic()
        self._sync_every = sync_every
        self._sync_seconds = sync_seconds

    def append(self, row: dict[str, Any]) -> None:
        self._fh.write(dumps_row(row) + "\n")
        self._fh.flush()
        self._pending += 1
        if self._pending >= self._sync_every or (
            time.monotonic() - self._last_sync >= self._sync_seconds
        ):
            self.sync()

    def sync(self) -> None:
        if self._pending:
            os.fsync(self._fh.fileno())
            self._pending = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        if not self._fh.closed:
            self.sync()
            self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
