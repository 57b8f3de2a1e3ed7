"""Usage as the upstream reported it, and what it cost by the pinned price table.

A price table is pinned in the experiment (USD per million tokens) rather than looked up,
so the same ledger always prices to the same figure. Usage fields overlap (cached tokens are
part of the input, reasoning tokens part of the output), so each is kept as reported and the
cost formula uses each exactly once: the cached part of the input at ``cached_input``, the rest
of the input at ``input``, all of the output at ``output``. Unknown stays unknown: a call
without usage, or a model without a price, has no cost, never a cost of zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    """Token counts of one call as reported; None is "not reported", never zero."""

    input: int | None = None
    cached_input: int | None = None
    output: int | None = None
    reasoning: int | None = None

    @property
    def tokens(self) -> int | None:
        """input + output (cached and reasoning are parts of these, not added again)."""
        if self.input is None or self.output is None:
            return None
        return self.input + self.output


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens. ``cached_input`` None: the provider gives no cache discount, so
    cached tokens are billed as input."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"price {name!r} must be a finite number >= 0, not {value!r}")


PriceTable = Mapping[str, ModelPrice]


def price_table(raw: Mapping[str, ModelPrice | Mapping[str, Any]]) -> dict[str, ModelPrice]:
    """A price table from its experiment-file shape ``{model: {input, cached_input, output}}``."""
    table: dict[str, ModelPrice] = {}
    for model, entry in raw.items():
        if isinstance(entry, ModelPrice):
            table[model] = entry
            continue
        unknown = set(entry) - {"input", "output", "cached_input"}
        if unknown or "input" not in entry or "output" not in entry:
            raise ValueError(f"price of {model!r}: needs input and output (and optionally "
                             f"cached_input), got {sorted(entry)}")
        table[model] = ModelPrice(input=float(entry["input"]), output=float(entry["output"]),
                                  cached_input=None if entry.get("cached_input") is None
                                  else float(entry["cached_input"]))
    return table


def call_cost(usage: Usage | None, price: ModelPrice | None) -> float | None:
    """USD for one call; None when the usage or the price needed for it is unknown. A call
    that reported input and output but no cached figure is billed all at the input price
    (the provider said nothing about a discount)."""
    if usage is None or price is None or usage.input is None or usage.output is None:
        return None
    cached = min(usage.cached_input or 0, usage.input)
    cached_price = price.input if price.cached_input is None else price.cached_input
    dollars = ((usage.input - cached) * price.input + cached * cached_price
               + usage.output * price.output)
    return dollars / 1_000_000
