"""A layer's stream read on a thread of its own, a few chunks ahead of the unpacker.

Unpacking a layer is two kinds of work in one loop: reading the blob (following skopeo's
copy as it grows, hashing it against its digest, inflating gzip, hashing the result against the
diff id) and writing the files it holds (parsing tar headers, creating files, hashing each
file's content for the root filesystem's digest). On one thread they took turns: for a
154 MiB image of 4,386 files pulled from a registry on loopback, 0.53 s of inflating and
0.2 s of hashing waited for the 1.5 s of writing, and the other way round. zlib and hashlib let
go of the interpreter lock while they work, so the first kind runs here on a second thread,
beside the second.

Nothing is checked less: the reading thread runs the same readers (size bound, blob digest,
decompression), the unpacker still counts every byte it takes against the image's bound, and
the thread is never more than ``depth`` chunks ahead of that count (a bomb is still stopped
within a few MiB of the bound). An exception the reading thread meets (a blob longer than its
descriptor, a damaged gzip stream, skopeo's copy written out of order) is raised by the read
that reaches it, in the unpacker's thread, as if it had read the stream itself. :meth:`close`
stops the thread and waits for it, so nothing reads the stream after it returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import IO, Any

__all__ = ["ReadAhead"]

_CHUNK = 1 << 20
_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class ReadAhead:
    """``source.read`` called on a thread of its own; :meth:`read` hands its chunks out in
    order. ``on_chunk`` sees each chunk on that thread, in order (a hash of the stream)."""

    def __init__(self, source: IO[bytes] | Any, *, chunk: int = _CHUNK, depth: int = 4,
                 on_chunk: Callable[[bytes], object] | None = None) -> None:
        self._source = source
        self._chunk = chunk
        self._on_chunk = on_chunk
        self._queue: queue.Queue[object] = queue.Queue(depth)
        self._stop = threading.Event()
        self._pending = b""
        self._offset = 0
        self._done = False
        self._thread = threading.Thread(target=self._run, name="assay-layer-reader",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                data = self._source.read(self._chunk)
                if not data:
                    self._put(_END)
                    return
                if self._on_chunk is not None:
                    self._on_chunk(data)
                self._put(data)
        except BaseException as exc:  # handed to the reader, raised in its thread
            self._put(_Failed(exc))

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def read(self, n: int = -1) -> bytes:
        """At most ``n`` bytes (a whole chunk when ``n`` < 0); empty at the end."""
        if self._offset >= len(self._pending):
            if self._done:
                return b""
            item = self._queue.get()
            if item is _END:
                self._done = True
                return b""
            if isinstance(item, _Failed):
                self._done = True
                raise item.exc
            assert isinstance(item, bytes)
            self._pending, self._offset = item, 0
        if self._offset == 0 and (n is None or n < 0 or n >= len(self._pending)):
            self._offset = len(self._pending)
            return self._pending  # the whole chunk, not copied
        end = len(self._pending) if n is None or n < 0 else self._offset + n
        got = self._pending[self._offset:end]
        self._offset += len(got)
        return got

    def close(self) -> None:
        """Stop the thread and wait for it (it ends at its next chunk, or when its read
        returns: a read of skopeo's copy ends when skopeo writes or ends)."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
