"""What every real agent CLI adapter needs the same way: the CLI an agent spec names, the
gateway's model it is given (or the refusal when the arm has none), the CLI's own time limit
below the watchdog, digests and tails of files it leaves, its JSONL stream split into objects
with the breaks named and noted, and its usage claim checked against the gateway's ledger.

One place, so that the adapters cannot drift apart on what "truncated", "disagrees" or "below
the watchdog" mean; each adapter keeps only what its CLI does differently.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from assay.agents.base import AgentRun

_DIGESTS: dict[tuple[str, int, int], str] = {}


def find_cli(name: str, spec: str, bin_env: str, default: Callable[[], Path], hint: str) -> Path:
    """The CLI an agent spec names: ``<name>:<path>``, else ``$<bin_env>``, else the pinned
    install (``default``). Anything but an executable file is refused at experiment load
    (ValueError), with ``hint`` (how to get one) only when the pinned install is what is
    missing: a path the user gave is named, not second-guessed."""
    given = spec.split(":", 1)[1].strip() if ":" in spec else ""
    raw = given or os.environ.get(bin_env, "")
    path = Path(raw).expanduser() if raw else default()
    if not path.is_file() or not os.access(path, os.X_OK):
        how = "" if raw else f" ({hint})"
        raise ValueError(f"{name}: {path} is not an executable file{how}")
    return path


def gateway_model(model_env: Mapping[str, str]) -> tuple[str, str] | None:
    """The gateway's OpenAI-style base URL and the model name of the attempt, or None when the
    arm gave the agent no model (no URL, no name or no scoped token: nothing it could call)."""
    base, model = model_env.get("OPENAI_BASE_URL"), model_env.get("ASSAY_MODEL")
    if not base or not model or "OPENAI_API_KEY" not in model_env:
        return None
    return base, model


def needs_model(name: str) -> AgentRun:
    """The run an agent without a model ends as: the arm is misconfigured (ours to fix), said
    before the CLI starts."""
    return AgentRun(status="infra_error",
                    detail=f"{name} needs a model: run it in an experiment arm with a model, "
                           "whose gateway gives it one")


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


def note_anomaly(anomalies: dict[str, int], notes: list[str], known: Collection[str],
                 name: str, note: str) -> None:
    """Count a stream departure by its name (one of the reader's ``known`` names: a misspelt
    one is a bug here, not an anomaly of the agent) and keep the first 20 notes, so one broken
    stream cannot fill the record."""
    assert name in known, name
    anomalies[name] = anomalies.get(name, 0) + 1
    if len(notes) < 20:
        notes.append(note)


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


def not_comparable(claim: Any, gateway: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why a usage claim cannot be checked against the ledger (no claim, no ledger, calls the
    gateway saw without usage: unknown stays unknown), or None when it can."""
    if not isinstance(claim, dict) or gateway is None:
        return {"comparable": False, "reason": "no usage claim" if gateway is not None
                else "no gateway ledger for this attempt"}
    if gateway.get("usage_missing_calls"):
        return {"comparable": False, "reason": "the gateway saw calls without usage"}
    return None


def with_usage_check(execution: dict[str, Any], check: dict[str, Any]) -> dict[str, Any]:
    """The execution record with the usage check beside it; a comparable claim that disagrees
    with the gateway's ledger is an anomaly and an evidence gap (the grade stands)."""
    out = {**execution, "usage_check": check}
    if check.get("comparable") and not check.get("agrees"):
        anomalies = dict(out.get("anomalies") or {})
        anomalies["usage_disagrees_with_gateway"] = 1
        out.update(anomalies=anomalies, evidence_gap=True)
    return out


__all__ = ["find_cli", "gateway_model", "needs_model", "not_comparable", "note_anomaly",
           "parse_jsonl", "sha256_file", "tail", "timeout_seconds", "with_usage_check"]
