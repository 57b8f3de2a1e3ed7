"""An attempt's own way into the gateway: one listening socket, accepted at a bounded pace.

Why a socket per attempt: on the shared socket a connection belongs to nobody until its
request head has been read and its token looked up, so an agent that opens thousands of
connections and never finishes a head holds the gateway's ceiling without counting against
any limit of its own (issue 35: another arm's agent then got 0 of 20 calls). A connection
accepted on an attempt's channel is that attempt's from its accept, before its first byte; the
sandbox binds only its own attempt's socket, so an agent cannot reach another's.

Why a pace: counting alone still lets an agent open and close connections as fast as it can,
and every accept costs the gateway's one loop some work that every other attempt waits behind.
The same way, a channel whose attempt already holds its most connections with an unfinished
request head accepts nothing until one completes or times out (``hold``): a flood of heads
waits in the kernel, while a real agent's burst of parallel connections is only delayed.

The channel takes at most ``rate`` new connections a second (a bucket of ``burst``); past it,
it stops reading its listening socket until the bucket has room again, so the rest wait in the
kernel's backlog (and a full backlog makes the agent's own ``connect`` wait or fail): they are
delayed, never lost, and the cost of a flood stays with the flooder. Real agents open a few
connections a second and keep them alive; the defaults are far above that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

#: New connections a second an attempt's channel accepts, and the burst it may open at once.
CONNECTION_RATE = 50.0
CONNECTION_BURST = 64
BACKLOG = 128
#: How often a held channel asks again whether it may accept.
HOLD_SECONDS = 0.05


class Channel:
    """A listening socket on the gateway's loop: a Unix socket at ``path``, or TCP on
    ``host`` (port chosen by the kernel, :attr:`address`). ``on_client`` gets each accepted
    socket (non-blocking); ``on_paced`` is told why each time the channel held connections
    back (``connection_rate``, or the reason ``hold`` gave: while ``hold()`` names one,
    nothing is accepted and it is asked again every ``HOLD_SECONDS``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_client: Callable[[socket.socket], None],
                 on_paced: Callable[[str], None], *, hold: Callable[[], str | None] | None = None,
                 path: Path | None = None, host: str = "127.0.0.1",
                 rate: float = CONNECTION_RATE, burst: int = CONNECTION_BURST) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a channel's rate must be above 0 and its burst at least 1")
        self.loop, self.on_client, self.on_paced = loop, on_client, on_paced
        self.path, self.rate, self.burst, self.hold = path, rate, burst, hold
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._resume: asyncio.TimerHandle | None = None
        self.accepted = 0
        self.paced = 0
        if path is not None:
            remove_socket(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(str(path))
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, 0))
            except BaseException:
                sock.close()
                raise
        sock.listen(BACKLOG)
        sock.setblocking(False)
        self.sock = sock
        self.address: tuple[str, int] | None = None if path is not None else sock.getsockname()
        self._reading = True
        loop.add_reader(sock.fileno(), self._accept)

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def _accept(self) -> None:
        """Take what is queued, as far as the bucket allows; then pause if it ran dry."""
        for _ in range(self.burst):
            why = self.hold() if self.hold is not None else None
            if why is not None:
                self._pause(HOLD_SECONDS, why)
                return
            self._refill()
            if self._tokens < 1.0:
                self._pause((1.0 - self._tokens) / self.rate, "connection_rate")
                return
            try:
                client, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. EMFILE: the gateway's ceiling, not this attempt's pace
                return
            self._tokens -= 1.0
            self.accepted += 1
            client.setblocking(False)
            self.on_client(client)

    def _pause(self, seconds: float, why: str) -> None:
        if not self._reading:
            return
        self._reading = False
        self.loop.remove_reader(self.sock.fileno())
        self.paced += 1
        self.on_paced(why)
        self._resume = self.loop.call_later(seconds, self._unpause)

    def _unpause(self) -> None:
        self._resume = None
        if self.sock.fileno() < 0 or self._reading:
            return
        self._reading = True
        self.loop.add_reader(self.sock.fileno(), self._accept)
        self._accept()

    def close(self) -> None:
        """Stop accepting (what waits in the backlog is refused by the kernel), remove the
        socket file. Connections already accepted are their owner's to close."""
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if self.sock.fileno() >= 0:
            if self._reading:
                self.loop.remove_reader(self.sock.fileno())
                self._reading = False
            self.sock.close()
        if self.path is not None:
            remove_socket(self.path)


def remove_socket(path: Path) -> None:
    """Remove a Unix socket, and nothing else that may sit at its path."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            os.unlink(path)
