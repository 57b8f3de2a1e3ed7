"""Narrow-run rows built through the record model the runner writes with, for tests that check
report figures against worked numbers."""

from __future__ import annotations

from typing import Any

from assay.records.narrow import NarrowRow

U1 = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
U2 = {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}


def narrow_row(cid: str, expected: str, label: str, latency: float | None, usage: dict | None, *,
               repeat: int = 0, attempts: int = 1, first: str | None = None,
               invalid: str | None = None, error: str | None = None) -> dict[str, Any]:
    """One raw_predictions row as the runner writes it; ``error`` makes it an infra error (no
    verdict)."""
    return NarrowRow(id=cid, repeat=repeat, expected=expected, raw="x", raws=["x"] * attempts,
                     label=label, correct=None if error else label == expected,
                     attempts=attempts, invalid_reason=invalid, first_invalid_reason=first,
                     latency_ms=latency, usage=usage, served_model="m", error=error,
                     tries=[]).to_row()
