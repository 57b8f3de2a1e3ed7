"""Pipe pumping: feed stdin, drain stdout/stderr into bounded tails, notice the top process exit.

One ``select`` loop over every descriptor of an execution, so a command that writes gigabytes,
never reads its stdin or holds its pipes open after exiting can neither block the caller nor make
it use unbounded memory: each stream keeps a count, the real last :data:`TAIL_BYTES`, and an
optional on-disk copy capped at ``Limits.output_bytes``.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from assay.sandbox.bwrap import parse_json_status

TAIL_BYTES = 4096
_CHUNK = 65536


class OutputSink:
    """One output stream: total count, bounded tail, and an optional capped file copy."""

    def __init__(self, path: Path | None, cap: int) -> None:
        self.total = 0
        self.tail = bytearray()
        self.path = path
        self.cap = cap
        self.kept = 0
        self.truncated = False
        self.fh: IO[bytes] | None = open(path, "wb") if path is not None else None

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        if self.fh is not None:
            room = self.cap - self.kept
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            if chunk:
                self.fh.write(chunk)
                self.kept += len(chunk)

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", errors="replace")

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


class PipePump:
    """Pumps stdin/stdout/stderr/status pipes and notices the exit of the top process."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin: bytes | None,
        out: OutputSink,
        err: OutputSink,
        status_fd: int | None,
    ) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.readers: set[int] = set()
        self.sinks: dict[int, OutputSink] = {}
        self.status = bytearray()
        self.status_fd = status_fd
        self.exited = False
        self.exit_time: float | None = None
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            assert stream is not None
            fd = stream.fileno()
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
            self.readers.add(fd)
            self.sinks[fd] = sink
        if status_fd is not None:
            self.sel.register(status_fd, selectors.EVENT_READ)
            self.readers.add(status_fd)
        self.stdin_fd: int | None = None
        self.stdin_data = memoryview(stdin or b"")
        if proc.stdin is not None:
            if stdin:
                self.stdin_fd = proc.stdin.fileno()
                os.set_blocking(self.stdin_fd, False)
                self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        self.pidfd: int | None
        try:
            self.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            self.pidfd = None

    def _close_stdin(self) -> None:
        if self.stdin_fd is not None:
            self.sel.unregister(self.stdin_fd)
            self.stdin_fd = None
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _close_reader(self, fd: int) -> None:
        self.sel.unregister(fd)
        self.readers.discard(fd)

    def _mark_exited(self) -> None:
        if not self.exited:
            self.exited = True
            self.exit_time = time.monotonic()
            if self.pidfd is not None:
                self.sel.unregister(self.pidfd)

    def pump(self, until: float, stop: Callable[[], bool]) -> None:
        while not stop():
            now = time.monotonic()
            if now >= until:
                return
            timeout = until - now
            if self.pidfd is None and not self.exited:
                timeout = min(timeout, 0.01)
            for key, _ in self.sel.select(timeout):
                fd = key.fd
                if fd == self.pidfd:
                    self._mark_exited()
                elif fd == self.stdin_fd:
                    try:
                        n = os.write(fd, self.stdin_data[:_CHUNK])
                        self.stdin_data = self.stdin_data[n:]
                        if not self.stdin_data:
                            self._close_stdin()
                    except BlockingIOError:
                        pass
                    except OSError:  # the command closed its stdin / exited
                        self._close_stdin()
                else:
                    try:
                        chunk = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        self._close_reader(fd)
                    elif fd == self.status_fd:
                        self.status += chunk
                    else:
                        self.sinks[fd].write(chunk)
            if self.pidfd is None and not self.exited and self.proc.poll() is not None:
                self._mark_exited()

    def status_docs(self) -> dict[str, Any]:
        """What bwrap reported on its status pipe so far (see ``parse_json_status``)."""
        return parse_json_status(bytes(self.status))

    def close(self) -> None:
        if self.stdin_fd is not None:
            self._close_stdin()
        for fd in list(self.readers):
            self._close_reader(fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.sel.close()
