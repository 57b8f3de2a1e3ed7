"""What ``assay exp run`` says while it runs: a plain line per finished trial on stderr.

An experiment runs for hours, often in a CI log with no terminal, so each line carries what a
person watching wants without a second command: how far (trials done of planned, elapsed time,
an ETA from this session's pace), what it costs (spend against ``total_cost_usd`` when set,
else spend so far; a call with no price leaves the figure a lower bound or unknown, never
$0), and how each arm does so far (accepted of graded trials, the report's "pass rate of
graded"; infrastructure errors are not graded and not counted).

Plain lines, one a trial, but never more than one a ``min_gap`` seconds: trials that end
closer together than that are folded into the next line ("+3 more: 2 accepted, 1 rejected"),
so a run of fast trials writes at most 60 lines a minute at the default gap, and the last
trial's line, or :meth:`LineProgress.finish`, always reports the final state.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from assay.api.options import clock_text, eta_text

if TYPE_CHECKING:
    from assay.api import TrialDone

#: seconds between two trial lines at least (trials in between are folded into the next)
MIN_GAP_SECONDS = 1.0

SpendReader = Callable[[], tuple[float, bool]]
"""Returns (USD spent by the whole run so far, whether every call's cost was known)."""

_VERIFIED_PREFIXES = ("re-verified: ", "worker lost, verified here: ")


def verdict_of(outcome: str) -> bool | None:
    """True for an accepted trial, False for a rejected one, None for anything without a
    verdict (infra or grader errors, retries)."""
    for prefix in _VERIFIED_PREFIXES:
        outcome = outcome.removeprefix(prefix)
    if outcome == "accepted":
        return True
    if outcome.startswith("rejected"):
        return False
    return None


def spend_text(spent: float, complete: bool, cap: float | None,
               unpriced: list[str] | None = None) -> str:
    """Spend so far, against the cap when there is one. A call without a price makes the sum
    a lower bound, and with nothing priced at all the spend is unknown, never $0."""
    no_price = f"no price for {', '.join(unpriced)}" if unpriced else "some calls have no price"
    if complete:
        text = f"spent ${spent:.4f}"
    elif spent > 0:
        text = f"spent at least ${spent:.4f} ({no_price})"
    else:
        text = f"spent unknown ({no_price})"
    if cap is None:
        return text + " so far"
    shown = f"{100 * spent / cap:.0f}%, " if cap > 0 and (complete or spent > 0) else ""
    return text + f" of the ${cap:g} cap" + (f" ({shown.removesuffix(', ')})" if shown else "")


class LineProgress:
    """The ``exp run`` progress display: a ``Progress`` of trials (``assay.api.Progress``, told
    each :class:`~assay.api.TrialDone`)."""

    def __init__(self, before_first_result: Callable[[], object] | None = None, *,
                 out_dir: Path | None = None, write: Callable[[str], None] | None = None,
                 min_gap: float = MIN_GAP_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = 0
        self.done = 0
        # Called once, before the first trial's outcome is printed: a verdict on a holdout
        # task reaching the screen is its results being shown (runner/holdout.record_shown).
        self.before_first_result = before_first_result
        self.out_dir = out_dir
        self._write = write
        self.min_gap = min_gap
        self.clock = clock
        self.t0 = clock()
        self.done_at_start = 0
        self.last_line: float | None = None
        self.held: Counter[str] = Counter()
        self.held_last: tuple[str, str] | None = None  # the newest folded trial, its kind
        self.arms: dict[str, list[int]] = {}  # arm -> [accepted, graded]
        self.read_spend: SpendReader | None = None
        self.cap: float | None = None
        self.unpriced: list[str] = []

    # ------------------------------------------------------------------ runner hooks

    def watch_spend(self, read: SpendReader, cap: float | None,
                    unpriced: list[str] | None = None) -> None:
        """The runner hands over how to read the run's spend, its cap and the models that
        have no price, before the first trial."""
        self.read_spend, self.cap, self.unpriced = read, cap, list(unpriced or [])

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self.done_at_start = done
        self.t0 = self.clock()
        self._load_arms()
        self._print(f"experiment: {total} trials planned, {done} already done")

    def advance(self, item: TrialDone) -> None:
        key, outcome = item.key, item.outcome
        if self.before_first_result is not None:
            first, self.before_first_result = self.before_first_result, None
            first()
        reverified = outcome.startswith("re-verified")
        if not reverified and "retry" not in outcome:
            self.done += 1
        verdict = verdict_of(outcome)
        if verdict is not None and not reverified:  # a re-verified trial is in the prior
            tally = self.arms.setdefault(str(key.arm), [0, 0])
            tally[0] += int(verdict)
            tally[1] += 1
        line = f"{key.task} {key.arm} rep {key.rep}: {outcome}"
        now = self.clock()
        last = self.total and self.done >= self.total
        if (self.last_line is not None and now - self.last_line < self.min_gap
                and not last and not reverified):
            self.held[_short(outcome)] += 1
            self.held_last = (line, _short(outcome))
            return
        self._emit(line, now)

    def note(self, message: str) -> None:
        self._print(message)

    def finish(self) -> None:
        """Report trials folded since the last line (the run ended or was interrupted)."""
        if self.held_last is not None:
            line, kind = self.held_last
            self.held[kind] -= 1  # the line names this trial itself
            self.held = +self.held
            self._emit(line, self.clock())

    # ------------------------------------------------------------------ the line

    def status_line(self, trial: str, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = now - self.t0
        finished = self.done - self.done_at_start
        left = max(self.total - self.done, 0)
        if not left:
            eta = "ETA 0s"
        elif finished > 0:
            eta = f"ETA {eta_text(elapsed, finished, left)}"
        else:
            eta = "ETA unknown"
        pct = f" {100 * self.done / self.total:.0f}%" if self.total else ""
        parts = [f"[{self.done}/{self.total}{pct}] {clock_text(elapsed)} elapsed, {eta}", trial]
        if self.held:
            n = sum(self.held.values())
            parts[-1] += (f" (+{n} more: "
                          + ", ".join(f"{v} {k}" for k, v in self.held.most_common()) + ")")
        if self.read_spend is not None:
            spent, complete = self.read_spend()
            parts.append(spend_text(spent, complete, self.cap, self.unpriced))
        if self.arms:
            parts.append("pass rate so far: " + ", ".join(
                f"{arm} " + (f"{100 * a / g:.0f}% ({a}/{g})" if g else "n/a (0 graded)")
                for arm, (a, g) in self.arms.items()))
        return " · ".join(parts)

    def _emit(self, trial: str, now: float) -> None:
        self._print(self.status_line(trial, now))
        self.last_line = now
        self.held.clear()
        self.held_last = None

    def _print(self, text: str) -> None:
        if self._write is not None:
            self._write(text)
            return
        from assay.cli.app import err

        err.print(text, highlight=False, markup=False, soft_wrap=True)

    def _load_arms(self) -> None:
        """Every arm, in the experiment's order, with what earlier sessions graded: a resumed
        run's pass rates so far include them."""
        if self.out_dir is not None:
            from assay.api.experiment_run import arm_tallies

            self.arms = arm_tallies(self.out_dir)


def _short(outcome: str) -> str:
    """An outcome as counted in a folded line: ``rejected:no_change`` -> ``rejected``."""
    verdict = verdict_of(outcome)
    if verdict is not None:
        return "accepted" if verdict else "rejected"
    return outcome.split(" (")[0]
