"""Usage as the upstream reported it, and what it cost by the pinned price table.

A price table is pinned in the experiment (USD per million tokens) rather than looked up,
so the same ledger always prices to the same figure. Usage fields overlap differently per API,
so each is kept as reported and the cost formula uses each token exactly once:

- OpenAI (chat completions, Responses): cached tokens are *part of* the input, reasoning tokens
  part of the output. Cost = the cached part of the input at ``cached_input``, the rest of the
  input at ``input``, all of the output at ``output``.
- Anthropic Messages: ``input_tokens``, ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` are three *separate* counts (``cached_in_input`` False).
  Cost = input at ``input``, cache reads at ``cached_input``, cache writes at ``cache_write``,
  output at ``output``. Thinking tokens are inside ``output_tokens`` and not reported apart.

Unknown stays unknown: a call without usage, or a model without a price, has no cost, never a
cost of zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The largest token count one call may report. No model's context comes near it; JSON allows
#: a number of 4,300 digits, whose cost overflows a float, so a larger count is no count (not
#: reported: the usage is incomplete).
MAX_COUNT = 10**12


@dataclass(frozen=True)
class Usage:
    """Token counts of one call as reported; None is "not reported", never zero."""

    input: int | None = None
    cached_input: int | None = None
    output: int | None = None
    reasoning: int | None = None
    # Tokens written to the prompt cache (Anthropic ``cache_creation_input_tokens``).
    cache_write: int | None = None
    # True (OpenAI): ``cached_input`` is part of ``input``. False (Anthropic): input, cache
    # reads and cache writes are separate counts.
    cached_in_input: bool = True

    @property
    def complete(self) -> bool:
        """Input and output were both reported (what a cost needs)."""
        return self.input is not None and self.output is not None

    @property
    def tokens(self) -> int | None:
        """Every token the call processed, each once: OpenAI input + output (cached and
        reasoning are parts of these, not added again); Anthropic input + cache reads + cache
        writes + output. None when input or output was not reported."""
        if self.input is None or self.output is None:
            return None
        return self.known_tokens

    @property
    def known_tokens(self) -> int:
        """``tokens`` counting what was reported (a lower bound when not ``complete``)."""
        total = (self.input or 0) + (self.output or 0)
        if not self.cached_in_input:
            total += (self.cached_input or 0) + (self.cache_write or 0)
        return total


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens. ``cached_input`` None: the provider gives no cache discount, so
    cached tokens are billed as input. ``cache_write`` None: cache writes (Anthropic) are billed
    as input (Anthropic charges 1.25x input for them: pin it to be exact)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input", "cache_write"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"price {name!r} must be a finite number >= 0, not {value!r}")


PriceTable = Mapping[str, ModelPrice]


def price_table(raw: Mapping[str, ModelPrice | Mapping[str, Any]]) -> dict[str, ModelPrice]:
    """A price table from its experiment-file shape
    ``{model: {input, cached_input, output, cache_write}}``."""
    table: dict[str, ModelPrice] = {}
    for model, entry in raw.items():
        if isinstance(entry, ModelPrice):
            table[model] = entry
            continue
        unknown = set(entry) - {"input", "output", "cached_input", "cache_write"}
        if unknown or "input" not in entry or "output" not in entry:
            raise ValueError(f"price of {model!r}: needs input and output (and optionally "
                             f"cached_input, cache_write), got {sorted(entry)}")
        table[model] = ModelPrice(
            input=float(entry["input"]), output=float(entry["output"]),
            cached_input=_optional(entry.get("cached_input")),
            cache_write=_optional(entry.get("cache_write")))
    return table


def call_cost(usage: Usage | None, price: ModelPrice | None) -> float | None:
    """USD for one call; None when the usage or the price needed for it is unknown. A call
    that reported input and output but no cached figure is billed all at the input price
    (the provider said nothing about a discount)."""
    if usage is None or price is None or usage.input is None or usage.output is None:
        return None
    cached_price = price.input if price.cached_input is None else price.cached_input
    if usage.cached_in_input:
        cached = min(usage.cached_input or 0, usage.input)
        dollars = ((usage.input - cached) * price.input + cached * cached_price
                   + usage.output * price.output)
    else:
        write_price = price.input if price.cache_write is None else price.cache_write
        dollars = (usage.input * price.input + (usage.cached_input or 0) * cached_price
                   + (usage.cache_write or 0) * write_price + usage.output * price.output)
    return dollars / 1_000_000


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)
