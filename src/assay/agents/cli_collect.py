"""The steps every real agent CLI adapter takes the same way once its CLI has exited: the kept
stream read, digested and parsed by the CLI's own reader, the sandbox's verdict outranking the
CLI's, the reading settled into the execution's ``extra`` and status, and the CLI's usage claim
checked against the gateway's ledger.

Apart from ``cli_common`` (what an adapter needs while it launches the CLI) because this is the
other half of an adapter's life, the one that decides the record; one place, so that no adapter
can order the record's keys or word the sandbox's verdict its own way. Each adapter keeps only
what its CLI says differently: its stream reader, its status rules, its own keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from assay.agents.base import AgentRun
from assay.agents.cli_common import with_usage_check
from assay.records.statuses import ExecutionStatus


class _Reading(Protocol):
    def to_record(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Reading)

#: why a run the sandbox ended (watchdog kill, resource limit) keeps the sandbox's status
SANDBOX_DECIDED = "the sandbox decided"


def kept_stream(stdout: Path, report: dict[str, Any], read: Callable[[bytes], R]) -> R:
    """The kept stream as the CLI wrote it, parsed by the CLI's own reader, its reading and the
    digest of its bytes put into the report (``stream``, ``stream_sha256``, in that order), so
    the reading can be checked against the kept file. A missing file reads as empty, which
    every reader names (no terminal event): an evidence gap, not a crash."""
    try:
        raw = stdout.read_bytes()
    except OSError:
        raw = b""
    reading = read(raw)
    report["stream"] = reading.to_record()
    report["stream_sha256"] = hashlib.sha256(raw).hexdigest()
    return reading


def ended_by_sandbox(run: AgentRun) -> bool:
    """True when the sandbox, not the CLI, ended the run (watchdog kill, resource limit): then
    nothing the stream says outranks it; only an ordinary exit is the CLI's to explain."""
    return run.reason not in ("ok", "nonzero_exit")


def settle(run: AgentRun, report: dict[str, Any], anomalies: dict[str, int],
           status: ExecutionStatus, why: str, **more: Any) -> AgentRun:
    """The reading into ``run.extra`` (report, anomalies, evidence gap, then the adapter's own
    keys in the order given: the execution record's order) and the judged status onto the run;
    a changed status keeps the sandbox's detail after the reason, so neither account is lost."""
    run.extra = {"agent_report": report, "anomalies": anomalies,
                 "evidence_gap": bool(anomalies), **more}
    if status != run.status:
        run.detail = f"{why}; {run.detail}" if run.detail else why
        run.status = status
    return run


def reconcile_usage(execution: dict[str, Any], usage_check: Callable[..., dict[str, Any]],
                    *claim: Any) -> dict[str, Any]:
    """An adapter's ``reconcile``: its claim, as its own ``usage_check`` takes it, against the
    gateway's ledger (``model_usage``, always the check's last argument)."""
    return with_usage_check(execution, usage_check(*claim, execution.get("model_usage")))


def claimed_usage(execution: dict[str, Any]) -> Any:
    """The agent's own usage claim where the adapters that report more than it keep it
    (``agent_usage.usage``); None when it made none."""
    return (execution.get("agent_usage") or {}).get("usage")


__all__ = ["SANDBOX_DECIDED", "claimed_usage", "ended_by_sandbox", "kept_stream",
           "reconcile_usage", "settle"]
