"""Deciding, per limit, which mechanism enforces it for one execution, and recording that.

The record must never claim more than the mechanism does, so each limit has its own planning
function that says both what is set and what the setting does *not* cover. Mechanisms, tried in
this order per limit; every limit ends up in the ``applied`` record with the mechanism that
actually enforced it, or ``"not_applied"`` with the reason:

``memory_mib``
    cgroup v2 ``memory.max`` (+ ``memory.swap.max = 0``), else cgroup v1 ``memory.limit_in_bytes``
    (+ ``memory.memsw.limit_in_bytes`` when swap accounting exists), else ``RLIMIT_DATA``
    ("rlimit_data"; per process, counts private writable mappings and brk, not shared memory, tmpfs
    or page cache). ``RLIMIT_AS`` is deliberately not used: V8 reserves large address ranges up
    front and node aborts at start under any modest ``RLIMIT_AS``.
``pids``
    cgroup v2/v1 ``pids.max``, else ``RLIMIT_NPROC`` ("rlimit_nproc"). The kernel counts
    RLIMIT_NPROC per *real uid*, host-wide, and never enforces it for real uid 0, so when assay
    runs as root it is reported ``not_applied`` (the sandbox's mapped ids,
    :mod:`assay.sandbox.userns`, would share one budget across every sandbox). For a non-root
    user it is set to the number of processes that uid already has plus ``pids``, and the note
    says that the budget is shared with every other process of that uid (including concurrent
    sandboxes). Both mechanisms count threads too.
    bubblewrap's own monitor and PID-1 reaper run inside the cgroup, so the cgroup limit is set
    to ``pids + 2`` to give the command the full ``pids`` it asked for (``pids + 3`` with the
    model-proxy forwarder, which is not the command's either).
``cpu_seconds``
    ``RLIMIT_CPU`` ("rlimit_cpu"): per process; SIGXCPU at the soft limit, SIGKILL one second
    later at the hard limit.
``cpu_cores``
    a CFS bandwidth quota, cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` over a 100 ms period:
    the whole execution may use ``cpu_cores`` CPUs' worth of time per period and is *throttled*
    (never killed) beyond it. There is no honest per-process fallback (affinity would pin to
    whole cores and can be undone by the child), so without a cgroup it is ``not_applied``. Only
    asked for when set, so executions without it do not pay for joining a third v1 cgroup.
``wall_seconds``
    the watchdog in :mod:`assay.sandbox.execute` ("watchdog").
``disk_mib``
    ``RLIMIT_FSIZE`` per file, and for the writable folders' total a size-limited ext4
    filesystem (``rlimit_fsize+ext4_image``, :mod:`assay.sandbox.diskimage`) or, where none
    can be made (the note says why), the disk watcher (``rlimit_fsize+disk_watch``).

``output_bytes`` has no planning function: it is not a kernel limit and has no entry in the
``applied`` record; the output sinks (:mod:`assay.sandbox.pipes`) apply it directly.

Every limit the shell wrapper sets is applied before ``exec`` of bubblewrap, so no
``preexec_fn`` (unsafe with threads) is needed.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from typing import NamedTuple

from assay.sandbox.cgroups import CPU_PERIOD_US, Cgroup, CgroupSet, open_cgroups, remove_cgroup
from assay.sandbox.evidence import read_evidence
from assay.sandbox.limits import (
    MECH_DISK,
    MECH_DISK_IMAGE,
    MECH_RLIMIT_CPU,
    MECH_RLIMIT_DATA,
    MECH_RLIMIT_NPROC,
    MECH_WATCHDOG,
    AppliedLimit,
    Limits,
    not_applied,
)
from assay.sandbox.wrapper import wrapper_argv

#: bubblewrap's outer monitor and its PID-1 reaper live in the execution's pids cgroup.
BWRAP_HELPER_PROCESSES = 2
_MIB = 1024 * 1024


class Planned(NamedTuple):
    """One limit's decision: its record, and the shell ``ulimit`` statements it needs."""

    applied: AppliedLimit
    ulimits: tuple[str, ...] = ()


@dataclass
class LimitPlan:
    """Limits resolved for one execution: the ``applied`` record, the cgroups created for it and
    the shell prefix that joins them and sets rlimits before ``exec``-ing the command."""

    applied: dict[str, AppliedLimit]
    cgroups: list[Cgroup] = field(default_factory=list)
    ulimits: list[str] = field(default_factory=list)  # shell statements, integers only

    @property
    def memory_mechanism(self) -> str:
        return self.applied["memory_mib"].mechanism

    @property
    def pids_mechanism(self) -> str:
        return self.applied["pids"].mechanism

    def wrapper_argv(self) -> list[str]:
        """The :mod:`assay.sandbox.wrapper` prefix for this plan's cgroups and rlimits."""
        return wrapper_argv([str(cg.path / "cgroup.procs") for cg in self.cgroups], self.ulimits)

    def procs(self) -> set[int]:
        out: set[int] = set()
        for cg in self.cgroups:
            out |= cg.procs()
        return out

    def evidence(self) -> dict[str, int]:
        """Kernel counters read after the run (only those the mechanism provides)."""
        return read_evidence(self.cgroups)

    def cleanup(self) -> list[str]:
        """Kill anything left in the cgroups and remove them. Returns warnings (empty if clean)."""
        warnings = []
        for cg in self.cgroups:
            problem = remove_cgroup(cg)
            if problem:
                warnings.append(problem)
        self.cgroups = []
        return warnings


def cpu_quota_us(cores: float) -> int:
    return max(1000, round(cores * CPU_PERIOD_US))  # the kernel refuses quotas under 1 ms


def cgroup_wants(limits: Limits, *, forwarder: bool = False) -> dict[str, int]:
    """The cgroup controllers this execution asks for, each with the value the kernel file
    takes (bytes, ``pids.max``, quota µs); limits set to ``None`` ask for nothing.
    ``forwarder``: the model-proxy forwarder, one more process that is not the command's."""
    want: dict[str, int] = {}
    if limits.memory_mib is not None:
        want["memory"] = limits.memory_mib * _MIB
    if limits.pids is not None:
        want["pids"] = limits.pids + BWRAP_HELPER_PROCESSES + (1 if forwarder else 0)
    if limits.cpu_cores is not None:
        want["cpu"] = cpu_quota_us(limits.cpu_cores)
    return want


def _uid_process_count(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _clamp_to_hard(res: int, value: int) -> int:
    _soft, hard = resource.getrlimit(res)
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def plan_memory(memory_mib: int | None, cgroup: str | None, why_not: str) -> Planned:
    """A cgroup if one enforces ``memory``, else ``RLIMIT_DATA`` with what it does not count."""
    if memory_mib is None:
        return Planned(not_applied(None, "no memory limit requested"))
    if cgroup is not None:
        return Planned(AppliedLimit(memory_mib, cgroup))
    kib = _clamp_to_hard(resource.RLIMIT_DATA, memory_mib * _MIB) // 1024
    note = ("per process, private writable memory only (not shared memory, tmpfs or page "
            f"cache); no cgroup: {why_not}")
    return Planned(AppliedLimit(kib // 1024, MECH_RLIMIT_DATA, note=note), (f"ulimit -d {kib}",))


def plan_pids(pids: int | None, cgroup: str | None, why_not: str, *,
              forwarder: bool = False) -> Planned:
    """A cgroup if one enforces ``pids``, else ``RLIMIT_NPROC`` on top of what the uid already
    runs, or nothing for root (the kernel ignores RLIMIT_NPROC for real uid 0). ``forwarder``
    (model-proxy) adds its one process to the budget, so the command keeps all of ``pids``."""
    if pids is None:
        return Planned(not_applied(None, "no process limit requested"))
    if cgroup is not None:
        if forwarder:
            why = (f"{BWRAP_HELPER_PROCESSES + 1} for bubblewrap's monitor and reaper and the "
                   "model-proxy forwarder")
        else:
            why = f"{BWRAP_HELPER_PROCESSES} for bubblewrap's monitor and reaper"
        return Planned(AppliedLimit(pids, cgroup,
                                    note=f"counts threads; pids.max = {pids} + {why}"))
    uid = os.getuid()
    if uid == 0:
        return Planned(not_applied(
            pids,
            "no cgroup (" + why_not + "); RLIMIT_NPROC is not enforced for real "
            "uid 0, which assay runs as (the sandbox's mapped ids share one host uid across "
            "sandboxes)",
        ))
    existing = _uid_process_count(uid)
    extra = 1 if forwarder else 0
    n = _clamp_to_hard(resource.RLIMIT_NPROC, existing + pids + extra)
    plus = " + 1 for the model-proxy forwarder" if extra else ""
    note = (f"RLIMIT_NPROC={n} = {existing} processes uid {uid} already had + "
            f"{pids}{plus}; counted per real uid host-wide, shared with every other process "
            "of that uid (including concurrent sandboxes); counts threads")
    return Planned(AppliedLimit(pids, MECH_RLIMIT_NPROC, note=note), (f"ulimit -p {n}",))


def plan_cpu_seconds(cpu_seconds: int | None) -> Planned:
    """``RLIMIT_CPU``: soft at the limit (SIGXCPU), hard one second later (SIGKILL)."""
    if cpu_seconds is None:
        return Planned(not_applied(None, "no CPU-time limit requested"))
    soft = _clamp_to_hard(resource.RLIMIT_CPU, cpu_seconds)
    hard = _clamp_to_hard(resource.RLIMIT_CPU, soft + 1)
    return Planned(
        AppliedLimit(soft, MECH_RLIMIT_CPU,
                     note="per process: SIGXCPU at the limit, SIGKILL 1 s later"),
        (f"ulimit -S -t {soft}", f"ulimit -H -t {hard}"),
    )


def plan_cpu_cores(cpu_cores: float | None, cgroup: str | None, why_not: str) -> Planned:
    """A CFS quota if a cgroup enforces ``cpu``; there is no honest fallback."""
    if cpu_cores is None:
        return Planned(not_applied(None, "no CPU quota requested"))
    if cgroup is None:
        return Planned(not_applied(cpu_cores, "no cgroup cpu controller (" + why_not + ")"))
    return Planned(AppliedLimit(
        cpu_cores, cgroup,
        note=f"CFS quota {cpu_quota_us(cpu_cores)} us per {CPU_PERIOD_US} us period for the "
        f"whole execution (host has {os.cpu_count()} CPUs); throttled, not killed",
    ))


def plan_wall(wall_seconds: float, grace_seconds: float) -> Planned:
    """Always the watchdog; the note says how it kills."""
    return Planned(AppliedLimit(
        wall_seconds, MECH_WATCHDOG,
        note=f"SIGTERM to the command's processes, SIGKILL to all after {grace_seconds:g} s",
    ))


def plan_disk(mib: int | None, no_image: str | None = "not asked") -> Planned:
    """Bytes on disk: RLIMIT_FSIZE (``ulimit -f``, 512-byte blocks in ``/bin/sh``) for each
    file; for the writable folders' total a size-limited filesystem
    (:mod:`assay.sandbox.diskimage`), or the disk watcher (:mod:`assay.sandbox.diskwatch`)
    where ``no_image`` says why there is none."""
    if mib is None:
        return Planned(not_applied(None, "no disk limit asked"))
    per_file = "no file of the execution grows past it (RLIMIT_FSIZE: the write fails, SIGXFSZ)"
    if no_image is None:
        return Planned(AppliedLimit(mib, MECH_DISK_IMAGE, note=(
            f"{per_file}; its writable folders are on an ext4 filesystem of {mib} MiB + 1 MiB "
            "(a sparse image, loop-mounted): a write past it fails (ENOSPC), and it is ended "
            "once they hold more than the limit")), (f"ulimit -f {mib * 2048}",))
    note = (f"{per_file}; its writable folders together are watched while it runs and it is "
            f"killed past it (no size-limited filesystem: {no_image})")
    return Planned(AppliedLimit(mib, MECH_DISK, note=note), (f"ulimit -f {mib * 2048}",))


def plan_limits(limits: Limits, *, use_cgroups: bool = True, grace_seconds: float,
                forwarder: bool = False, no_disk_image: str | None = "not asked") -> LimitPlan:
    """Create the cgroups for one execution (if possible) and decide the rlimit fallbacks.

    ``use_cgroups=False`` forces the rlimit fallback (used by tests to check that nothing is
    claimed that the fallback does not do). ``forwarder``: the execution also runs the
    model-proxy forwarder (one process more in the pids budget). ``no_disk_image``: why the
    writable folders are not on a size-limited filesystem (``None``: they are). The caller must call
    :meth:`LimitPlan.cleanup`."""
    want = cgroup_wants(limits, forwarder=forwarder)
    if want and use_cgroups:
        got = open_cgroups(want)
    else:
        got = CgroupSet(why_not={c: "cgroups disabled by the caller (use_cgroups=False)"
                                 for c in want})
    mech, why = got.mechanism.get, got.why_not.get
    try:
        decided = {
            "memory_mib": plan_memory(limits.memory_mib, mech("memory"), why("memory", "")),
            "pids": plan_pids(limits.pids, mech("pids"), why("pids", ""), forwarder=forwarder),
            "cpu_seconds": plan_cpu_seconds(limits.cpu_seconds),
            "cpu_cores": plan_cpu_cores(limits.cpu_cores, mech("cpu"), why("cpu", "")),
            "wall_seconds": plan_wall(limits.wall_seconds, grace_seconds),
            "disk_mib": plan_disk(limits.disk_mib, no_disk_image),
        }
    except BaseException:  # the caller never gets a plan to clean up
        for cg in got.cgroups:
            remove_cgroup(cg)
        raise
    plan = LimitPlan(applied={k: d.applied for k, d in decided.items()}, cgroups=got.cgroups,
                     ulimits=["ulimit -c 0"])  # no core dumps into the work directory
    for d in decided.values():
        plan.ulimits.extend(d.ulimits)
    return plan
