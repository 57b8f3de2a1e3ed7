"""The one progress protocol: what a display of any long run is told.

A narrow or coding run advances by rows (each answered case or sample, a dict as written to
its JSONL file); an experiment by trials (:class:`TrialDone`, a trial key and its outcome in
words). Both tell the display the same four things: how much there is and how much was already
done (``start``), each item as it ends (``advance``), facts a person should see (``note``: a
torn row repaired, a served model changed, workspaces removed), and the end (``finish``,
also after an interrupt, so a display that folds lines can say what it held back).

An experiment's display may also have ``watch_spend(read, cap, unpriced)``: it is then handed,
before ``start``, a function returning (USD spent by the whole run, whether every cost was
known), the run's cap and the arms' models that have no price.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from assay.suites.experiment import TrialKey

Item = TypeVar("Item", contravariant=True)


class Progress(Protocol[Item]):
    def start(self, total: int, done: int) -> None: ...
    def advance(self, item: Item) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self) -> None: ...


@dataclass(frozen=True)
class TrialDone:
    """One trial's attempt ended: ``outcome`` is ``accepted``, ``rejected:<code>``,
    ``infra_error (...)``, with ``(will retry)`` when it runs again, or prefixed
    ``re-verified: `` when a frozen artifact was graded again after a restart."""

    key: TrialKey
    outcome: str


class NullProgress:
    """A display that shows nothing: the library is silent unless given one."""

    def start(self, total: int, done: int) -> None:
        pass

    def advance(self, item: Any) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def finish(self) -> None:
        pass


__all__ = ["NullProgress", "Progress", "TrialDone"]
