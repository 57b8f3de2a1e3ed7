"""Append-only ledger files whose rows are durable without the model call waiting for a disk.

A row is handed to the kernel with one ``write`` on an ``O_APPEND`` descriptor before the agent
sees the answer it describes, so a ``kill -9`` of the runner loses nothing the agent saw. The
``fsync`` that makes it survive a power cut runs on one background thread for all ledgers of a
gateway, within ``SYNC_SECONDS``: an fsync can take milliseconds on a busy disk, and it must not
be added to the latency of every model call; waiting that long before each fsync lets the rows
of many calls share one (at hundreds of calls a second, an fsync per row kept the journal thread
busy on a 2-core machine). Closing a ledger syncs it first.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from assay.records.io import dumps_row, keep_torn, torn_tail

#: How long a written row may wait for its fsync (a power cut loses at most this much).
SYNC_SECONDS = 0.05


class LedgerFile:
    """One attempt's ``model_calls.jsonl``, open for appending until closed."""

    def __init__(self, path: Path, syncer: Syncer) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        valid, tail = torn_tail(path)
        if tail:  # a row cut short by a crash: kept beside the ledger, later rows must parse
            keep_torn(path, valid, tail)
            os.truncate(path, valid)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._lock = threading.Lock()
        self._dirty = False
        self._syncer = syncer

    def append(self, row: dict[str, Any]) -> None:
        data = (dumps_row(row) + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path}: ledger already closed")
            os.write(self._fd, data)
            self._dirty = True
        self._syncer.mark(self)

    def sync(self) -> None:
        with self._lock:
            if self._fd >= 0 and self._dirty:
                self._dirty = False
                fd = os.dup(self._fd)  # fsync outside the lock, so appends never wait on it
            else:
                return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.sync()
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0


class Syncer:
    """The one thread that fsyncs ledgers marked dirty, as soon as it can."""

    def __init__(self) -> None:
        self._dirty: set[LedgerFile] = set()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="assay-ledger-sync",
                                        daemon=True)
        self._thread.start()

    def mark(self, ledger: LedgerFile) -> None:
        with self._cond:
            self._dirty.add(ledger)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stop:
                    self._cond.wait()
                if not self._dirty and self._stop:
                    return
                stopping = self._stop
            if not stopping:
                time.sleep(SYNC_SECONDS)  # let more rows join this fsync
            with self._cond:
                batch, self._dirty = self._dirty, set()
            for ledger in batch:
                ledger.sync()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(10)
