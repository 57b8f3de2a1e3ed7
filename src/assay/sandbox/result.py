"""``ExecResult``: the one record every execution produces, whatever happened to it.

Its own module so graders, agents and reports can depend on the shape of a result without
importing the machinery that runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from assay.sandbox.limits import AppliedLimit
from assay.sandbox.outcome import Reason


@dataclass(frozen=True)
class ExecResult:
    """What happened to one execution. ``to_record()`` gives a JSON-ready dict."""

    argv: tuple[str, ...]
    isolation: Literal["bwrap", "none"]
    network: Literal["none", "host", "model-proxy"]
    reason: Reason
    exit_code: int | None
    signal: str | None
    wall_seconds: float
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int
    limits_applied: dict[str, AppliedLimit]
    evidence: dict[str, int] = field(default_factory=dict)
    detail: str | None = None
    workdir: str = ""
    sandbox_workdir: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    stdout_truncated: bool = False  # the record file kept fewer bytes than were written
    stderr_truncated: bool = False
    warnings: tuple[str, ...] = ()
    #: what the command could reach, for ``network="model-proxy"`` only (see
    #: :meth:`assay.sandbox.netproxy.ProxySession.record`); ``None`` (and no key in the
    #: record) for ``"none"`` and ``"host"``, whose records are unchanged.
    network_applied: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "argv": list(self.argv),
            "isolation": self.isolation,
            "network": self.network,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "wall_seconds": round(self.wall_seconds, 6),
            "timed_out": self.timed_out,
            "detail": self.detail,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "stdout_path": self.stdout_path,
            "stderr_path": self.stderr_path,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "limits_applied": {k: v.to_record() for k, v in self.limits_applied.items()},
            "evidence": dict(self.evidence),
            "workdir": self.workdir,
            "sandbox_workdir": self.sandbox_workdir,
            "warnings": list(self.warnings),
        }
        if self.network_applied is not None:
            record["network_applied"] = dict(self.network_applied)
        return record


def not_started(
    common: dict[str, Any],
    applied: dict[str, AppliedLimit],
    detail: str,
    *,
    wall_seconds: float,
    warnings: list[str],
) -> ExecResult:
    """The result of an execution that never got as far as running the command: a
    ``sandbox_error`` with nothing counted (``common`` holds the caller-side fields)."""
    return ExecResult(
        **common,
        reason="sandbox_error",
        exit_code=None,
        signal=None,
        wall_seconds=wall_seconds,
        timed_out=False,
        stdout_tail="",
        stderr_tail="",
        stdout_bytes=0,
        stderr_bytes=0,
        limits_applied=dict(applied),
        detail=detail,
        warnings=tuple(warnings),
    )
