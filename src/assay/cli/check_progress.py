"""What ``assay task check`` (and ``exp report`` on a large run, and ``env build``) says while
it runs, and what ``task check``'s figures mean once it is done.

A bundle's self-test is some twenty sandboxed trials, and a suite's is hundreds: a plain line on
stderr per finished trial (how far, which bundle and which agent or mutant, what it said, the
elapsed time and an ETA from this run's pace) shows life in a terminal and in a CI log alike.
Lines are written whole, never wrapped, so a bundle or mutant name can be found with grep.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from assay.api.options import clock_text, eta_text

if TYPE_CHECKING:
    from assay.api.tasks import CheckProgress


def progress_line(step: CheckProgress) -> str:
    """``[5/24] 12s, ETA 40s · duration-parse-001 · mutant fake_output: rejected:…``."""
    left = step.total - step.done
    eta = f"ETA {eta_text(step.elapsed_seconds, step.done, left)}" if left else "done"
    who = step.label.replace("mutant:", "mutant ", 1)
    return (f"[{step.done}/{step.total}] {clock_text(step.elapsed_seconds)}, {eta} · "
            f"{step.task} · {who}: {step.said}")


def line_writer(write: Callable[[str], object] | None = None) -> Callable[[CheckProgress], None]:
    """A ``progress`` callback for ``check_tasks`` writing one line a trial (stderr)."""
    def emit(text: str) -> object:
        sys.stderr.write(text)
        return sys.stderr.flush()

    sink = write or emit

    def told(step: CheckProgress) -> None:
        sink(progress_line(step) + "\n")
    return told


def legend(reruns: int, mutants: bool) -> list[str]:
    """What the table's columns mean, in plain words: printed under it."""
    lines = ["nop: an agent that changes nothing must fail the behavior check, or the task "
             "tests nothing.",
             f"oracle N/{reruns}: the task's reference solution (solution/) was accepted in "
             f"N of {reruns} runs, each in a fresh workspace: {reruns}/{reruns} is ok, fewer "
             "is flaky, 0 is broken."]
    if mutants:
        lines.append("mutants rejected N/M: M built-in bad agents (a faked test output, deleted "
                     "or neutered tests, a hang, ...) that the grader must each reject, N "
                     "were; one accepted is a defect in the grader. n/a: nothing in this task "
                     "for that attack.")
    return lines


#: a command quicker than this says nothing while it runs; a slower one a line this often
QUIET_SECONDS = 2.0


def step_writer(what: str, write: Callable[[str], object] | None = None,
                clock: Callable[[], float] = time.monotonic) -> Callable[[str], None]:
    """A ``progress`` callback for steps told as text (``trial pages 120/3000``): silent for
    the first ``QUIET_SECONDS``, then a line on stderr at most every ``QUIET_SECONDS`` with the
    elapsed time and, for a step of the form ``name done/total``, an ETA from the pace."""
    started = clock()
    last = [started]
    first_count: dict[str, tuple[float, int]] = {}

    def emit(text: str) -> object:
        sys.stderr.write(text)
        return sys.stderr.flush()

    sink = write or emit

    def told(step: str) -> None:
        now = clock()
        name, _, frac = step.rpartition(" ")
        eta = ""
        if "/" in frac and frac.replace("/", "").isdigit():
            done, total = (int(x) for x in frac.split("/"))
            t0, d0 = first_count.setdefault(name, (now, done))
            if done > d0 and now > t0:
                eta = f", ETA {eta_text(now - t0, done - d0, total - done)}"
        if now - started < QUIET_SECONDS or now - last[0] < QUIET_SECONDS:
            return
        last[0] = now
        sink(f"{what}: {step} · {clock_text(now - started)}{eta}\n")
    return told


def timed(say: Callable[[str], object],
          clock: Callable[[], float] = time.monotonic) -> Callable[[str], None]:
    """Each progress line with the time since the command started in front (``1m05s step
    3/7 apt: ...``): an image build's lines already say which step of how many; the time says
    how long each took."""
    started = clock()

    def told(line: str) -> None:
        say(f"{clock_text(clock() - started):>6} {line}")
    return told
