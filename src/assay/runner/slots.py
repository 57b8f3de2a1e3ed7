"""How many attempts run at once: ``-j`` agents, and a few verifications beside them.

An agent mostly waits (on its model, on its own tools), a verifier mostly computes (the hidden
tests). Were an attempt to hold its ``-j`` slot until it is graded, attempts of similar length
would move in lock step (``-j`` agents wait together, then ``-j`` verifiers fight over the
cores together while no agent runs), and ``-j`` verifiers on a machine with fewer cores would
each run slower, spending their ``verifier_wall_seconds`` on waiting for a core: a correct
artifact could time out. So an attempt hands its agent slot back once its artifact is frozen,
then waits for one of ``verify_jobs`` verification slots (default: the usable cores, at most
``-j``). The wait is recorded apart from the verification's own time (the ``verify`` stage's
``queued_seconds`` in ``trial.json``), so a queue never reads as a slow verifier.

At most ``-j`` attempts wait for verification: when verifiers fall behind, new agents wait
rather than frozen artifacts pile up, so no more than ``2 × -j`` attempts are ever alive.
Executors whose attempts verify elsewhere (Ray: on the worker, within the resources the Ray
task asked for) keep their slot to the end; the scheduler then behaves exactly as before.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator

#: how long the scheduler sleeps between looks when nothing happens (a signal arriving in the
#: main thread is handled within this time even where a blocking wait would not wake for it)
_POLL_SECONDS = 1.0


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class AttemptSlots:
    """The scheduler's view: may another attempt start, and wake me when one may."""

    def __init__(self, jobs: int, verify_jobs: int | None) -> None:
        """``verify_jobs`` None: attempts keep their slot until they end (no verify gate)."""
        if jobs < 1 or (verify_jobs is not None and verify_jobs < 1):
            raise ValueError("jobs and verify_jobs must be at least 1")
        self.jobs = jobs
        self.verify_jobs = verify_jobs
        self._verify = (threading.BoundedSemaphore(verify_jobs) if verify_jobs is not None
                        else None)
        self._lock = threading.Lock()
        self._agents = 0  # attempts holding an agent slot
        self._alive = 0  # attempts not yet ended (agents + frozen ones waiting or verifying)
        self._events: queue.SimpleQueue[None] = queue.SimpleQueue()

    @property
    def max_alive(self) -> int:
        """Threads the scheduler's pool needs at most."""
        return self.jobs * 2 if self._verify is not None else self.jobs

    def can_start(self) -> bool:
        with self._lock:
            return self._agents < self.jobs and self._alive < self.max_alive

    def ticket(self) -> Ticket:
        """One new attempt's hold on an agent slot (call only when :meth:`can_start`)."""
        with self._lock:
            self._agents += 1
            self._alive += 1
        return Ticket(self)

    def wait(self) -> None:
        """Until some attempt freed its agent slot or ended (or a poll interval passed)."""
        with contextlib.suppress(queue.Empty):
            self._events.get(timeout=_POLL_SECONDS)
        with contextlib.suppress(queue.Empty):
            while True:  # several events at once: one look at the pool is enough
                self._events.get_nowait()

    def _free_agent(self) -> None:
        with self._lock:
            self._agents -= 1
        self._events.put(None)

    def _end(self) -> None:
        with self._lock:
            self._alive -= 1
        self._events.put(None)


class Ticket:
    """One attempt's place: its agent slot until its artifact is frozen, then a verify slot."""

    def __init__(self, slots: AttemptSlots) -> None:
        self._slots = slots
        self._agent_held = True
        self._ended = False
        self._lock = threading.Lock()

    def _give_back_agent(self) -> None:
        with self._lock:
            held, self._agent_held = self._agent_held, False
        if held:
            self._slots._free_agent()

    @contextlib.contextmanager
    def verifying(self) -> Iterator[None]:
        """Around the verify stage: the agent slot goes back first (the next agent may start
        now), then this waits for a verification slot when the scheduler has a gate."""
        gate = self._slots._verify
        if gate is None:
            yield
            return
        self._give_back_agent()
        with gate:
            yield

    def end(self, *_: object) -> None:
        """The attempt is over, however it ended (a done-callback of its future)."""
        self._give_back_agent()
        with self._lock:
            ended, self._ended = self._ended, True
        if not ended:
            self._slots._end()


__all__ = ["AttemptSlots", "Ticket", "usable_cores"]
