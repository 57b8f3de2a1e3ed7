"""The gateway's book of attempts without a socket: who a key names, revocation, the
connection cap and the run's spending, decided by plain method calls.

The server's own tests (tests/test_gateway*.py) drive the same rules over real HTTP; these pin
the rules themselves, including the ones a server test reaches only with careful timing (many
threads charging at once, a revoked token read after the attempt ended)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from assay.models.gateway.book import TOKEN_PREFIX, AttemptBook
from assay.models.gateway.budget import Budget, Limits
from assay.models.prices import ModelPrice, Usage


@dataclass
class Entry:
    attempt_id: str
    budget: Budget = field(default_factory=lambda: Budget(Limits(), ModelPrice(1.0, 2.0)))
    open: bool = True
    connections: int = 0
    heads: int = 0


def test_a_token_names_its_attempt_until_revoked_then_says_revoked() -> None:
    book: AttemptBook[Entry] = AttemptBook()
    a, b = Entry("a"), Entry("b")
    ta, tb = book.issue(a), book.issue(b)
    assert ta.startswith(TOKEN_PREFIX) and ta != tb and len(ta) > 40
    assert book.caller([ta]).attempt is a
    # an Anthropic client sends a placeholder and the real key: the live one wins
    assert book.caller(["placeholder", tb]).attempt is b
    assert book.revoke(ta) is a and not a.open
    late = book.caller([ta])
    assert late.attempt is None and late.revoked_for == "a" and late.reason == "revoked_token"
    assert book.revoke(ta) is None  # idempotent
    assert book.caller(["sk-assay-guess"]).reason == "unknown_token"
    assert book.caller([]).reason == "no_token"
    with pytest.raises(ValueError, match="not a token"):
        book.revoke("sk-assay-never-issued")
    assert book.attempt_id_of([ta]) == "a" and book.attempt_id_of([tb]) == "b"
    assert book.open_count == 1


def test_an_attempt_id_is_entered_once() -> None:
    book: AttemptBook[Entry] = AttemptBook()
    book.issue(Entry("a"))
    with pytest.raises(ValueError, match="already opened"):
        book.check_new("a")
    with pytest.raises(ValueError, match="already opened"):
        book.issue(Entry("a"))


def test_the_connection_cap_counts_per_attempt() -> None:
    book: AttemptBook[Entry] = AttemptBook(connections_per_attempt=2)
    a, b = Entry("a"), Entry("b")
    book.issue(a)
    book.issue(b)
    assert book.hold_connection(a) and book.hold_connection(a)
    assert not book.hold_connection(a)      # a third is refused
    assert book.hold_connection(b)          # another attempt is not affected
    book.release_connection(a)
    assert book.hold_connection(a)
    with pytest.raises(ValueError):
        AttemptBook(connections_per_attempt=0)


def test_an_unpriced_metered_call_makes_the_total_a_lower_bound_never_a_zero() -> None:
    book: AttemptBook[Entry] = AttemptBook(total_cost_usd=1.0)
    a = Entry("a")
    token = book.issue(a)
    book.charge(a, Usage(input=1000, output=10), 0.4, metered=True, step=True,
                usage_missing=False, unreachable=False)
    assert book.spent() == pytest.approx(0.4) and book.spent_complete()
    book.charge(a, None, None, metered=True, step=True, usage_missing=True, unreachable=False)
    assert book.spent() == pytest.approx(0.4) and not book.spent_complete()
    assert not book.total_exhausted
    book.charge(a, Usage(input=1, output=1), 0.7, metered=True, step=True,
                usage_missing=False, unreachable=False)
    assert book.total_exhausted
    book.revoke(token)
    usage = book.usage(token)  # readable after the attempt ended, by token or id
    assert usage == book.usage("a")
    assert usage["calls"] == 3 and usage["usage_missing_calls"] == 1
    assert usage["cost_complete"] is False
    with pytest.raises(ValueError, match="no such attempt"):
        book.usage("nobody")


def test_a_step_limit_is_reported_by_the_call_that_reaches_it() -> None:
    book: AttemptBook[Entry] = AttemptBook()
    a = Entry("a", budget=Budget(Limits(assistant_steps=2), None))
    book.issue(a)
    kw = {"metered": False, "step": True, "usage_missing": False, "unreachable": False}
    assert book.charge(a, None, None, **kw) is None
    assert book.charge(a, None, None, **kw) == "assistant_steps"


def test_concurrent_charges_add_up_exactly() -> None:
    book: AttemptBook[Entry] = AttemptBook()
    entries = [Entry(f"a{i}") for i in range(4)]
    for e in entries:
        book.issue(e)

    def work(e: Entry) -> None:
        for _ in range(500):
            book.charge(e, Usage(input=1, output=1), 0.001, metered=True, step=True,
                        usage_missing=False, unreachable=False)
            assert book.hold_connection(e)
            book.release_connection(e)

    threads = [threading.Thread(target=work, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert book.spent() == pytest.approx(2.0)
    assert all(book.usage(e.attempt_id)["calls"] == 500 for e in entries)
    assert all(e.connections == 0 for e in entries)


def test_a_retired_attempt_keeps_its_usage_and_its_id_and_nothing_else() -> None:
    """A closed attempt whose files the server closed is retired: the book lets go of the
    entry (its ledger, transcript store, upstream: what made a long run's memory grow) and
    keeps its budget, so its usage is still read and its id still refused."""
    book: AttemptBook[Entry] = AttemptBook()
    a = Entry("a")
    ta = book.issue(a)
    book.charge(a, Usage(input=10, output=5), 0.25, metered=True, step=True,
                usage_missing=False, unreachable=False)
    book.retire(a)  # still open: never retired
    assert book.entries() == [a]
    assert book.revoke(ta) is a
    book.retire(a)
    assert book.entries() == [] and book.entry("a") is None
    assert book.usage(ta)["cost_usd"] == 0.25 and book.usage("a")["calls"] == 1
    assert book.caller([ta]).reason == "revoked_token"
    with pytest.raises(ValueError, match="already opened"):
        book.check_new("a")
    with pytest.raises(ValueError, match="already opened"):
        book.issue(Entry("a"))
    with pytest.raises(ValueError, match="no such attempt"):
        book.usage("b")
