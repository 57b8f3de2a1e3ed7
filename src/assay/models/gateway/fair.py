"""A fair share of one upstream: requests in flight per attempt, and turns across attempts.

Why: attempts of both arms share one upstream and usually one key, so one provider rate limit.
Budgets bound each attempt's tokens and cost, not how many requests it keeps in flight; an
agent that bursts a hundred calls used up the key's rate and the other arm's calls came back
429 and counted against that arm. Here every call to an upstream takes a slot first:

- an attempt holds at most ``per_attempt`` calls in flight (``limits.concurrent_requests``);
  a call past it waits for one of its own to finish (it is never refused for it);
- once the upstream has answered 429 (or 529, "overloaded"), the upstream is saturated for the
  time its ``Retry-After`` says (1 s when it says nothing; 0.1 to 30 s): meanwhile each attempt
  holds at most one call in flight, and waiting calls are let through round-robin, one attempt
  after another, so an attempt's burst waits behind the others rather than pushing them into
  429s;
- each call notes what was in flight when it went (its own, everyone's), so a 429 can be told
  apart: ``others`` when other attempts had calls in flight and this attempt held no more than
  its equal part of them, ``own`` otherwise (the ledger's ``throttled_by``).

Single-threaded: it lives on the gateway's loop and is only touched from there.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

#: Calls one attempt may have in flight to its upstream at once, unless the experiment says.
#: Far above what real agent CLIs reach (Claude Code with parallel subagents stays near ten);
#: the gateway's 32 connections per attempt bound it anyway.
CONCURRENT_REQUESTS = 16
#: Statuses that say the upstream is saturated: rate limited, or (Anthropic) overloaded.
THROTTLED = frozenset({429, 529})
_DEFAULT_BACKOFF = 1.0
_MIN_BACKOFF, _MAX_BACKOFF = 0.1, 30.0

ThrottledBy = Literal["own", "others"]


@dataclass
class Slot:
    """One call's place: who holds it and what was in flight when it went."""

    attempt_id: str
    own: int = 0  # this attempt's calls in flight, this one included
    total: int = 0  # every attempt's calls in flight to the upstream, this one included
    attempts: int = 0  # attempts with calls in flight
    waited: float = 0.0  # seconds it waited for its turn
    released: bool = False

    def throttled_by(self) -> ThrottledBy:
        """Whose traffic a 429 to this call is put down to (see the module's docstring)."""
        others = self.total - self.own
        if others > 0 and self.own <= self.total / max(self.attempts, 1):
            return "others"
        return "own"


class FairGate:
    """The slots of one upstream."""

    def __init__(self, per_attempt: int = CONCURRENT_REQUESTS) -> None:
        if per_attempt < 1:
            raise ValueError("concurrent_requests must be at least 1")
        self.per_attempt = per_attempt
        self.inflight: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[asyncio.Future[None], Slot]]] = {}
        self._turns: deque[str] = deque()  # attempts with waiting calls, in turn order
        self.saturated_until = 0.0
        self._wake: asyncio.TimerHandle | None = None
        self.throttles = 0  # how many times the upstream said it was saturated

    @property
    def saturated(self) -> bool:
        return time.monotonic() < self.saturated_until

    def _cap(self) -> int:
        return 1 if self.saturated else self.per_attempt

    def _may_go(self, attempt_id: str) -> bool:
        return self.inflight.get(attempt_id, 0) < self._cap()

    async def acquire(self, attempt_id: str) -> Slot:
        """Wait for this attempt's turn; the slot is :meth:`release`-d when the call ends.
        An attempt under its cap goes at once (the others waiting are at theirs); one at its
        cap queues behind its own earlier calls."""
        slot = Slot(attempt_id)
        started = time.monotonic()
        if attempt_id not in self._waiting and self._may_go(attempt_id):
            self._take(slot)
            return slot
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(attempt_id, deque())
        queue.append((future, slot))
        if attempt_id not in self._turns:
            self._turns.append(attempt_id)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted, then cancelled
                self.release(slot)
            else:
                self._forget(attempt_id, future)
            raise
        slot.waited = time.monotonic() - started
        return slot

    def _take(self, slot: Slot) -> None:
        self.inflight[slot.attempt_id] = self.inflight.get(slot.attempt_id, 0) + 1
        slot.own = self.inflight[slot.attempt_id]
        slot.total = sum(self.inflight.values())
        slot.attempts = sum(1 for n in self.inflight.values() if n > 0)

    def _forget(self, attempt_id: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(attempt_id)
        if queue is None:
            return
        for item in list(queue):
            if item[0] is future:
                queue.remove(item)
        if not queue:
            self._waiting.pop(attempt_id, None)
            if attempt_id in self._turns:
                self._turns.remove(attempt_id)

    def release(self, slot: Slot) -> None:
        """The call ended: its slot goes to the next attempt in turn that may go."""
        if slot.released:
            return
        slot.released = True
        left = self.inflight.get(slot.attempt_id, 1) - 1
        if left > 0:
            self.inflight[slot.attempt_id] = left
        else:
            self.inflight.pop(slot.attempt_id, None)
        self._dispatch()

    def _dispatch(self) -> None:
        """Grant waiting calls round-robin: one for each attempt in turn that may go."""
        progressed = True
        while progressed and self._turns:
            progressed = False
            for _ in range(len(self._turns)):
                attempt_id = self._turns[0]
                self._turns.rotate(-1)
                if not self._may_go(attempt_id):
                    continue
                queue = self._waiting[attempt_id]
                future, slot = queue.popleft()
                if not queue:
                    del self._waiting[attempt_id]
                    self._turns.remove(attempt_id)
                self._take(slot)
                future.set_result(None)
                progressed = True
                break

    def throttled(self, retry_after: str | None) -> None:
        """The upstream answered 429/529: saturated for ``Retry-After`` seconds (bounded)."""
        self.throttles += 1
        try:
            seconds = float(retry_after) if retry_after else _DEFAULT_BACKOFF
        except ValueError:
            seconds = _DEFAULT_BACKOFF  # an HTTP date, or nonsense: the default
        seconds = min(max(seconds, _MIN_BACKOFF), _MAX_BACKOFF)
        self.saturated_until = max(self.saturated_until, time.monotonic() + seconds)
        if self._wake is not None:
            self._wake.cancel()
        loop = asyncio.get_running_loop()
        self._wake = loop.call_later(self.saturated_until - time.monotonic() + 0.001,
                                     self._dispatch)
