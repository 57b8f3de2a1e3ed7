"""What names one trial, and the digest of an experiment's identity.

Apart from ``suites/experiment.py`` (which loads and validates experiment files with pydantic
and the bundles) because the state database needs only these two, and ``exp status`` on a
large run should not pay for the rest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple


class TrialKey(NamedTuple):
    """One trial: an arm at a task, repetition ``rep`` (from 0)."""

    task: str
    arm: str
    rep: int


def identity_sha256(identity: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of an identity (sorted keys, no spaces)."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


__all__ = ["TrialKey", "identity_sha256"]
