"""Per-attempt limits and the running totals they are checked against.

Kept apart from the server so the rule can be read on one screen: totals grow only from what
the upstream reported (unknown usage adds nothing and marks the totals as a lower bound), a
limit is checked after every call, and once one is reached it stays reached: every later call
of the attempt is refused, whatever arrives. A call already under way when the limit is reached
by another one is let finish (its tokens are spent either way), and so is a streamed answer:
its usage arrives with its last event, so it is counted then, never cut off mid-answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

from assay.models.prices import ModelPrice, Usage
from assay.records.ledger import LimitName


@dataclass(frozen=True)
class Limits:
    """What one attempt may spend; None is "no limit"."""

    # every token processed, as reported: input + output for OpenAI's APIs (cached and
    # reasoning tokens are inside those), input + cache reads + cache writes + output for
    # Anthropic's (separate counts there)
    tokens: int | None = None
    cost_usd: float | None = None
    # completed assistant responses
    assistant_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "cost_usd", "assistant_steps"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"limit {name!r} must be a number >= 0, not {value!r}")


class AttemptUsage(TypedDict):
    """What the runner reads about an attempt (``Gateway.attempt_usage``)."""

    calls: int
    input: int
    cached_input: int
    # cache writes (Anthropic), a count apart from input
    cache_write_input: int
    output: int
    reasoning: int
    # what the tokens limit is checked against (see Limits.tokens)
    tokens: int
    # a lower bound when cost_complete is False
    cost_usd: float
    cost_complete: bool
    usage_missing_calls: int
    assistant_steps: int
    # > 0: the upstream could not be reached at all (the runner's infra_error signal)
    upstream_unreachable_calls: int
    exhausted: LimitName | None


@dataclass
class Totals:
    """What an attempt has used so far, as the ledger says."""

    calls: int = 0
    input: int = 0
    cached_input: int = 0
    cache_write_input: int = 0
    output: int = 0
    reasoning: int = 0
    # every token processed, each once (Usage.known_tokens), as the tokens limit counts them
    tokens: int = 0
    cost_usd: float = 0.0
    # False once any call's cost is unknown: cost_usd is then a lower bound.
    cost_complete: bool = True
    usage_missing_calls: int = 0
    assistant_steps: int = 0
    upstream_unreachable_calls: int = 0


@dataclass
class Budget:
    """An attempt's limits, totals, and which limit (if any) has been reached."""

    limits: Limits
    price: ModelPrice | None
    totals: Totals = field(default_factory=Totals)
    exhausted: LimitName | None = None

    def add(self, usage: Usage | None, cost: float | None, *, metered: bool, step: bool,
            usage_missing: bool, unreachable: bool) -> LimitName | None:
        """Count one finished call; returns the limit it reached, if it reached one."""
        t = self.totals
        t.calls += 1
        if usage is not None:
            t.input += usage.input or 0
            t.cached_input += usage.cached_input or 0
            t.cache_write_input += usage.cache_write or 0
            t.output += usage.output or 0
            t.reasoning += usage.reasoning or 0
            t.tokens += usage.known_tokens
        if usage_missing:
            t.usage_missing_calls += 1
        if metered and cost is None:
            t.cost_complete = False
        if cost is not None:
            t.cost_usd += cost
        if step:
            t.assistant_steps += 1
        if unreachable:
            t.upstream_unreachable_calls += 1
        if self.exhausted is None:
            self.exhausted = self._reached()
            return self.exhausted
        return None

    def _reached(self) -> LimitName | None:
        lim, t = self.limits, self.totals
        if lim.tokens is not None and t.tokens >= lim.tokens:
            return "tokens"
        if lim.cost_usd is not None and t.cost_usd >= lim.cost_usd:
            return "cost_usd"
        if lim.assistant_steps is not None and t.assistant_steps >= lim.assistant_steps:
            return "assistant_steps"
        return None

    def refusal(self) -> str:
        """The message an agent reads once the attempt can make no more calls."""
        lim, t = self.limits, self.totals
        used: dict[str, Any] = {
            "tokens": f"{t.tokens} of {lim.tokens} tokens used",
            "cost_usd": f"${t.cost_usd:.6f} of ${lim.cost_usd} spent"
                        + ("" if t.cost_complete else " (at least)"),
            "assistant_steps": f"{t.assistant_steps} of {lim.assistant_steps} assistant "
                               "steps taken",
        }
        return (f"budget exhausted: {self.exhausted} limit reached ({used[self.exhausted or '']})"
                "; this attempt can make no more model calls")

    def summary(self) -> AttemptUsage:
        t = self.totals
        return {"calls": t.calls, "input": t.input, "cached_input": t.cached_input,
                "cache_write_input": t.cache_write_input, "output": t.output,
                "reasoning": t.reasoning, "tokens": t.tokens, "cost_usd": t.cost_usd,
                "cost_complete": t.cost_complete, "usage_missing_calls": t.usage_missing_calls,
                "assistant_steps": t.assistant_steps,
                "upstream_unreachable_calls": t.upstream_unreachable_calls,
                "exhausted": self.exhausted}
