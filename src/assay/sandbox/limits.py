"""What an execution may use, and the record of how each limit was really enforced.

This is the vocabulary shared by the caller, the planner and the result: a caller says what it
wants in :class:`Limits`; every execution answers, per limit, with an :class:`AppliedLimit` naming
the mechanism that *actually* enforced it (one of the ``MECH_*`` names) or :data:`NOT_APPLIED` with
the reason. Keeping it apart from the machinery means a report or a grader can read the record
without importing cgroup code. How each limit is decided is in :mod:`assay.sandbox.plan`; the
cgroups themselves in :mod:`assay.sandbox.cgroups`; what the kernel recorded in
:mod:`assay.sandbox.evidence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MECH_CGROUP_V2 = "cgroup_v2"
MECH_CGROUP_V1 = "cgroup_v1"
MECH_RLIMIT_DATA = "rlimit_data"
MECH_RLIMIT_NPROC = "rlimit_nproc"
MECH_RLIMIT_CPU = "rlimit_cpu"
#: RLIMIT_FSIZE per file, and :mod:`assay.sandbox.diskwatch` for the total
MECH_DISK = "rlimit_fsize+disk_watch"
#: RLIMIT_FSIZE per file, the total held by a size-limited filesystem
#: (:mod:`assay.sandbox.diskimage`)
MECH_DISK_IMAGE = "rlimit_fsize+ext4_image"
MECH_WATCHDOG = "watchdog"
NOT_APPLIED = "not_applied"


@dataclass(frozen=True)
class Limits:
    """What an execution may use. ``None`` means "do not limit" (recorded as not applied)."""

    wall_seconds: float = 30.0
    memory_mib: int | None = 1024
    pids: int | None = 256
    cpu_seconds: int | None = None
    #: CPUs' worth of time per scheduling period (e.g. 0.5 or 2); throttles, never kills.
    cpu_cores: float | None = None
    #: cap on what is *kept* per stream in ``record_dir``; everything is still counted and the tail
    #: is always the real last bytes.
    output_bytes: int = 16 * 1024 * 1024
    #: the most the execution's writable host folders (its work directory and writable mounts)
    #: may take on disk together while it runs; past it the execution is killed
    #: (``disk_limit``). No single file grows past it either (RLIMIT_FSIZE).
    disk_mib: int | None = None

    def __post_init__(self) -> None:
        if not self.wall_seconds > 0:
            raise ValueError("wall_seconds must be > 0")
        for name in ("memory_mib", "pids", "cpu_seconds", "disk_mib"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive int or None")
        if self.cpu_cores is not None and not (
            isinstance(self.cpu_cores, int | float) and self.cpu_cores >= 0.01
        ):
            raise ValueError("cpu_cores must be a number >= 0.01 or None")
        if not isinstance(self.output_bytes, int) or self.output_bytes < 0:
            raise ValueError("output_bytes must be a non-negative int")


@dataclass(frozen=True)
class AppliedLimit:
    """One entry of ``ExecResult.limits_applied``."""

    value: float | int | None
    mechanism: str
    reason: str | None = None  # why it was not applied
    note: str | None = None  # scope/caveat of the mechanism that was used

    @property
    def applied(self) -> bool:
        return self.mechanism != NOT_APPLIED

    def to_record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "mechanism": self.mechanism}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.note is not None:
            out["note"] = self.note
        return out


def not_applied(value: float | int | None, reason: str) -> AppliedLimit:
    return AppliedLimit(value=value, mechanism=NOT_APPLIED, reason=reason)
