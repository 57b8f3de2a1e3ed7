"""Latency as a report states it: nearest-rank percentiles and a histogram of every value.

The histogram lives in ``report.json`` (bins, not the values) so that ``report.html`` draws the
distribution from the report dict alone, and a run of 100,000 answers adds thirty counts to the
report, not 100,000 numbers. Bins have a round width (1, 2 or 5 times a power of ten) so their
edges read as plain numbers; at most :data:`MAX_BINS` of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from assay.stats import nearest_rank

MAX_BINS = 30


def bin_width(span: float) -> float:
    """The smallest round width (1, 2 or 5 × 10^k ms) that covers ``span`` in MAX_BINS bins."""
    if span <= 0:
        return 1.0
    raw = span / MAX_BINS
    k = math.floor(math.log10(raw))
    for exp in (k, k + 1):
        for m in (1, 2, 5):
            w = float(Decimal(m) * Decimal(10) ** exp)
            if w >= raw and math.floor(span / w) + 1 <= MAX_BINS:
                return w
    return float(Decimal(10) ** (k + 2))


def histogram(values: Sequence[float]) -> dict[str, Any] | None:
    """Counts of ``values`` in equal round-width bins; None for no values (nothing to draw)."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    w = bin_width(hi - lo)
    # In decimal arithmetic, so 0.3 / 0.1 is 3 and a value on an edge lands in the bin it opens.
    dw = Decimal(repr(w))
    start = Decimal(math.floor(Decimal(repr(lo)) / dw)) * dw
    n_bins = int((Decimal(repr(hi)) - start) // dw) + 1
    counts = [0] * n_bins
    for v in values:
        counts[min(int((Decimal(repr(v)) - start) // dw), n_bins - 1)] += 1
    return {"start_ms": float(start), "bin_ms": w, "counts": counts, "n": len(values)}


def latency_figures(values: Sequence[float]) -> dict[str, Any]:
    """The ``latency_ms`` object of a report: every figure None when nothing was measured."""
    return {
        "p50": nearest_rank(values, 50),
        "p95": nearest_rank(values, 95),
        "max": nearest_rank(values, 100),
        "p90": nearest_rank(values, 90),
        "p99": nearest_rank(values, 99),
        "histogram": histogram(values),
    }
