"""What every real agent CLI adapter needs the same way: the CLI's own time limit below the
watchdog, digests and tails of files it leaves, its JSONL stream split into objects with the
breaks named, and its usage claim checked against the gateway's ledger.

One place, so that the adapters cannot drift apart on what "truncated", "disagrees" or "below
the watchdog" mean; each adapter keeps only what its CLI does differently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

_DIGESTS: dict[tuple[str, int, int], str] = {}


def timeout_seconds(wall: float) -> float:
    """The CLI's own limit: a margin below the watchdog (10 %, 2 to 30 s), so the CLI ends the
    turn itself and says so before the runner's SIGTERM arrives."""
    margin = min(max(2.0, 0.1 * wall), 30.0)
    return max(1.0, wall - margin)


def sha256_file(path: Path) -> str | None:
    """A file's sha256, read in blocks and kept per (path, size, mtime): a CLI binary of
    hundreds of MB is hashed once per build, not once per attempt. None when unreadable."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        try:
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return None
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def tail(path: Path, n: int = 2000) -> str:
    """The last ``n`` bytes of a file as text (stderr tails for the record)."""
    try:
        return path.read_bytes()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""


class _Reading(Protocol):
    lines: int
    anomalies: dict[str, int]

    def flag(self, name: str, note: str) -> None: ...


def parse_jsonl(raw: bytes, reading: _Reading, *,
                once: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """The stream's JSON objects with their line numbers. A last line without its newline is
    ``truncated_last_line`` (kept when it still parses); any other line that is not a JSON
    object is ``invalid_json_line`` and skipped. ``once``: each such name is flagged at most
    once. The stream is the agent's output, read as data, never evaluated."""
    chunks = raw.split(b"\n")
    ends_clean = raw.endswith(b"\n") or not raw
    if ends_clean:
        chunks = chunks[:-1]
    out: list[tuple[int, dict[str, Any]]] = []
    for n, chunk in enumerate(chunks, 1):
        reading.lines += 1
        last = n == len(chunks)
        try:
            obj = json.loads(chunk)
        except ValueError:
            obj = None
        if last and not ends_clean:
            reading.flag("truncated_last_line", f"line {n}: no newline at the end of the stream")
        elif not isinstance(obj, dict):
            name = "truncated_last_line" if last else "invalid_json_line"
            if not (once and name in reading.anomalies):
                reading.flag(name, f"line {n}: not a JSON object")
        if isinstance(obj, dict):
            out.append((n, obj))
    return out


def with_usage_check(execution: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """The execution record with the usage check beside it; a comparable claim that disagrees
    with the gateway's ledger is an anomaly and an evidence gap (the grade stands)."""
    out = {**execution, "usage_check": check}
    if check.get("comparable") and not check.get("agrees"):
        anomalies = dict(out.get("anomalies") or {})
        anomalies["usage_disagrees_with_gateway"] = 1
        out.update(anomalies=anomalies, evidence_gap=True)
    return out


__all__ = ["parse_jsonl", "sha256_file", "tail", "timeout_seconds", "with_usage_check"]
