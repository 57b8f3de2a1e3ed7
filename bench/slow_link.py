"""A TCP relay on loopback that carries at most a given number of bytes a second towards the
client: the link between a machine and a registry, for the benches that pull images.

A registry on loopback answers as fast as the disk and the CPU allow (several hundred MB/s
here); a public registry reaches a machine over a link of tens to a few hundred MB/s. What a
pull costs beside its client's own copy depends on which: on loopback the copy is bound by
CPU, so every second the puller spends unpacking shows; over a real link both wait for bytes,
and work done while they arrive is hidden. The bench measures both, at the rates it is given,
with both clients going through the same relay.

The rate is shared by every connection (one link, not one per connection), counted on what the
server sends; what the client sends (requests) passes at once. Each direction is one thread
copying 64 KiB at a time, so the relay itself costs little CPU at the rates measured.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

__all__ = ["SlowLink"]

CHUNK = 64 * 1024


class _Bucket:
    """Tokens in bytes, refilled at ``rate`` a second; at most 10 ms worth (and one chunk) is
    held, so a link left idle between two pulls does not let the next one burst ahead."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.burst = max(float(CHUNK), rate / 100)
        self.tokens = 0.0
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        """Wait until ``n`` bytes may pass."""
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= n:
                    self.tokens -= n
                    return
                wait = (n - self.tokens) / self.rate
            time.sleep(wait)


class SlowLink:
    """Listens on ``127.0.0.1:port`` and relays each connection to ``target`` (host, port),
    server-to-client bytes at most ``rate`` a second (``None``: as fast as they come)."""

    def __init__(self, target: tuple[str, int], rate: float | None) -> None:
        self.target = target
        self.bucket = _Bucket(rate) if rate else None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.host = f"127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="slow-link").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for src, dst, limit in ((client, server, None), (server, client, self.bucket)):
                threading.Thread(target=self._pump, args=(src, dst, limit), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, bucket: _Bucket | None) -> None:
        try:
            while data := src.recv(CHUNK):
                if bucket is not None:
                    bucket.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def __enter__(self) -> SlowLink:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
