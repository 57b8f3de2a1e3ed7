"""The gateway's book of attempts: scoped tokens, revocation, connection counts and spending.

Every decision the gateway takes about *who* is calling (a live token, a revoked one, one it
never issued), *how many* connections an attempt may hold, and *how much* the run has spent
lives here, behind one lock, with no socket, loop or file in sight: the rules can be tested by
calling methods, and the server (``gateway``) only asks the book and acts on the answer.

An entry is whatever the server keeps per attempt (its ledger, upstream, budget...); the book
needs only the few fields :class:`Entry` names. A revoked token stays known (mapped to its
attempt id) for the life of the gateway, so a late call with it is told "revoked", never
"unknown", and the attempt's usage stays readable after it closed. Once the server has closed
a revoked attempt's files it :meth:`retire`s it: the book then keeps its id and its budget
(a few hundred bytes) and lets go of the entry (ledger, transcript store, upstream, calls), so
a run of twenty thousand attempts does not hold twenty thousand of them.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from assay.models.gateway.budget import AttemptUsage, Budget
from assay.models.prices import Usage
from assay.records.ledger import LimitName

TOKEN_PREFIX = "sk-assay-"


class Entry(Protocol):
    """What the book reads and writes of an attempt."""

    attempt_id: str
    budget: Budget
    open: bool
    connections: int
    heads: int


E = TypeVar("E", bound=Entry)


@dataclass(frozen=True)
class Caller(Generic[E]):
    """Who a request's keys name: a live attempt (and the token that named it), or the id of
    the attempt a revoked token belonged to, or nobody (``token`` is the first key given)."""

    attempt: E | None
    token: str | None
    revoked_for: str | None

    @property
    def reason(self) -> str:
        """Why an unauthenticated caller is refused: ``no_token``, ``revoked_token`` or
        ``unknown_token``."""
        if not self.token:
            return "no_token"
        return "revoked_token" if self.revoked_for is not None else "unknown_token"


@dataclass(frozen=True)
class Refusal:
    """Why a connection was not admitted: the gateway event's reason, the limit that applied
    and what the attempt held."""

    reason: Literal["connection_cap", "gateway_share", "head_cap"]
    limit: int
    figure: int


class AttemptBook(Generic[E]):
    """Tokens, attempts and the run's spending. Thread-safe: every method takes the lock."""

    def __init__(self, *, total_cost_usd: float | None = None,
                 connections_per_attempt: int = 32, heads_per_attempt: int = 16) -> None:
        if connections_per_attempt < 1:
            raise ValueError("connections_per_attempt must be at least 1")
        if heads_per_attempt < 1:
            raise ValueError("heads_per_attempt must be at least 1")
        self.total_cost_usd = total_cost_usd
        self.connections_per_attempt = connections_per_attempt
        self.heads_per_attempt = heads_per_attempt
        self._lock = threading.Lock()
        self._tokens: dict[str, E] = {}
        self._revoked: dict[str, str] = {}
        self._attempts: dict[str, E] = {}
        #: attempts closed and retired: only their budgets, for ``usage``
        self._retired: dict[str, Budget] = {}
        self._spent = 0.0
        self._spent_complete = True

    # ----------------------------------------------------------------------------- tokens

    def check_new(self, attempt_id: str) -> None:
        """Refuse an attempt id this book has seen (its records would be shared)."""
        with self._lock:
            if attempt_id in self._attempts or attempt_id in self._retired:
                raise ValueError(f"attempt {attempt_id!r} was already opened on this gateway")

    def issue(self, entry: E, token: str | None = None) -> str:
        """Enter a new attempt and return its scoped token (random unless given)."""
        token = token or new_token()
        with self._lock:
            if entry.attempt_id in self._attempts or entry.attempt_id in self._retired:
                raise ValueError(f"attempt {entry.attempt_id!r} was already opened on this "
                                 "gateway")
            if token in self._tokens or token in self._revoked:
                raise ValueError("token already issued")
            self._attempts[entry.attempt_id] = entry
            self._tokens[token] = entry
        return token

    def revoke(self, token: str) -> E | None:
        """End a token: the attempt it named (now closed), or None if it was already revoked.
        A token this book never issued is a caller's mistake (``ValueError``)."""
        with self._lock:
            entry = self._tokens.pop(token, None)
            if entry is None:
                if token in self._revoked:
                    return None
                raise ValueError("close_attempt: not a token of this gateway")
            self._revoked[token] = entry.attempt_id
            entry.open = False
            return entry

    def retire(self, entry: E) -> None:
        """Let go of a revoked attempt whose files are closed, keeping its budget (its usage
        stays readable); a live one is never retired."""
        with self._lock:
            if entry.open or self._attempts.get(entry.attempt_id) is not entry:
                return
            del self._attempts[entry.attempt_id]
            self._retired[entry.attempt_id] = entry.budget

    def revoke_all(self) -> None:
        """Every live token revoked (the gateway is stopping)."""
        with self._lock:
            for token, entry in self._tokens.items():
                self._revoked[token] = entry.attempt_id
                entry.open = False
            self._tokens.clear()

    def caller(self, candidates: Sequence[str]) -> Caller[E]:
        """Who the request's keys name. A client may send two keys (an Anthropic client's
        ``x-api-key`` and a bearer placeholder): the first live one wins; failing that, the
        first revoked one says whose attempt ended."""
        with self._lock:
            for candidate in candidates:
                entry = self._tokens.get(candidate)
                if entry is not None:
                    return Caller(entry, candidate, None)
            for candidate in candidates:
                revoked_for = self._revoked.get(candidate)
                if revoked_for is not None:
                    return Caller(None, candidate, revoked_for)
        return Caller(None, candidates[0] if candidates else None, None)

    def attempt_id_of(self, candidates: Sequence[str]) -> str | None:
        """The attempt a refused request's keys belong to, live or revoked (for its event)."""
        caller = self.caller(candidates)
        if caller.attempt is not None:
            return caller.attempt.attempt_id
        return caller.revoked_for

    def entry(self, token_or_id: str) -> E | None:
        """An attempt by live token, revoked token or attempt id."""
        with self._lock:
            return self._tokens.get(token_or_id) or self._attempts.get(
                self._revoked.get(token_or_id, token_or_id))

    def entries(self) -> list[E]:
        """The attempts not yet retired (open, or closed with files the server still holds)."""
        with self._lock:
            return list(self._attempts.values())

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._tokens)

    # ------------------------------------------------------------------------ connections

    def hold_connection(self, entry: E) -> bool:
        """Count one more agent connection against the attempt; False when it already holds
        ``connections_per_attempt`` (the connection is then refused)."""
        with self._lock:
            if entry.connections >= self.connections_per_attempt:
                return False
            entry.connections += 1
            return True

    def release_connection(self, entry: E) -> None:
        with self._lock:
            entry.connections -= 1

    def admit(self, entry: E, share: int) -> Refusal | None:
        """Count a connection accepted on the attempt's own channel, before its first byte:
        one connection more and one unfinished head more. The refusal when the attempt
        already holds ``connections_per_attempt`` connections (``connection_cap``), or its
        ``share`` of the gateway-wide ceiling when that is lower (``gateway_share``), or
        ``heads_per_attempt`` connections whose head is not complete (``head_cap``)."""
        with self._lock:
            cap = min(self.connections_per_attempt, share)
            if entry.connections >= cap:
                if cap == self.connections_per_attempt:
                    return Refusal("connection_cap", cap, entry.connections)
                return Refusal("gateway_share", cap, entry.connections)
            if entry.heads >= self.heads_per_attempt:
                return Refusal("head_cap", self.heads_per_attempt, entry.heads)
            entry.connections += 1
            entry.heads += 1
            return None

    def head_changed(self, entry: E, delta: int) -> None:
        """One of the attempt's connections began (+1) or finished (-1) a request head."""
        with self._lock:
            entry.heads += delta

    # --------------------------------------------------------------------------- spending

    def charge(self, entry: E, usage: Usage | None, cost: float | None, *, metered: bool,
               step: bool, usage_missing: bool, unreachable: bool) -> LimitName | None:
        """Count one finished call against its attempt's budget and the run's spending; the
        limit it reached, if any. An unpriced metered call makes the run's figure a lower
        bound (``spent_complete`` False), never a zero."""
        with self._lock:
            reached = entry.budget.add(usage, cost, metered=metered, step=step,
                                       usage_missing=usage_missing, unreachable=unreachable)
            if cost is not None:
                self._spent += cost
            elif metered:
                self._spent_complete = False
            return reached

    def usage(self, token_or_id: str) -> AttemptUsage:
        entry = self.entry(token_or_id)
        with self._lock:
            budget = entry.budget if entry is not None else self._retired.get(
                self._revoked.get(token_or_id, token_or_id))
            if budget is None:
                raise ValueError("attempt_usage: no such attempt or token")
            return budget.summary()

    def spent(self) -> float:
        with self._lock:
            return self._spent

    def spent_complete(self) -> bool:
        with self._lock:
            return self._spent_complete

    @property
    def total_exhausted(self) -> bool:
        with self._lock:
            return self.total_cost_usd is not None and self._spent >= self.total_cost_usd


def new_token() -> str:
    """A scoped token: unguessable, and recognisable as assay's in a leaked log."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)
