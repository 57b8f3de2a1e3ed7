"""What the kernel recorded about one execution, read from its cgroups after the run.

These counters are why an outcome can be called exact rather than guessed, so reading them is
kept in one place, one reader per controller whatever the cgroup version, and only counters the
mechanism really provides are reported (a missing file stays missing, never a zero):

* memory: cgroup ``oom_kill`` counter (v2 ``memory.events``, v1 ``memory.oom_control``) is an
  exact kernel record that the OOM killer fired inside this execution's cgroup. v2's
  ``memory.events`` ``max`` (limit reached, reclaim may have coped) is recorded as supporting
  evidence; v1's ``memory.failcnt`` is not, because recent kernels leave it at 0 even when the
  limit is hit.
  Under ``rlimit_data`` the kernel keeps no record: allocations just fail, and the outcome can only
  be *inferred* from the program's stderr (``MemoryError``, ``bad_alloc``, V8's allocation failure
  messages); :mod:`assay.sandbox.outcome` says so in ``detail``.
* processes: ``pids.events`` ``max`` counts forks refused by the limit (v1 and v2). Under
  ``rlimit_nproc`` only stderr inference (EAGAIN / BlockingIOError) is possible.
* CPU quota: ``cpu.stat`` ``nr_throttled`` (periods in which the quota ran out) and the time
  spent throttled, so a slow run can be told apart from a starved one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from assay.sandbox.cgroups import Cgroup


def _read_kv(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_evidence(cgroups: Iterable[Cgroup]) -> dict[str, int]:
    """Kernel counters of every controller the execution's cgroups enforce."""
    ev: dict[str, int] = {}
    for cg in cgroups:
        if "memory" in cg.controllers:
            memory_evidence(cg, ev)
        if "pids" in cg.controllers:
            pids_evidence(cg.path, ev)
        if "cpu" in cg.controllers:
            cpu_evidence(cg.path, ev)
    return ev


def memory_evidence(cg: Cgroup, ev: dict[str, int]) -> None:
    """OOM kills and the peak; v2 also says how often the limit was reached."""
    if cg.version == 2:
        events = _read_kv(cg.path / "memory.events")
        if "max" in events:
            ev["memory_limit_hits"] = events["max"]
        peak_file = "memory.peak"
    else:
        events = _read_kv(cg.path / "memory.oom_control")
        # memory.failcnt is not read: on this kernel generation it stays 0 even when the
        # limit is hit (seen on 6.18), so it would be a misleading "no".
        peak_file = "memory.max_usage_in_bytes"
    if "oom_kill" in events:
        ev["oom_kills"] = events["oom_kill"]
    peak = _read_int(cg.path / peak_file)
    if peak is not None:
        ev["memory_peak_bytes"] = peak


def pids_evidence(path: Path, ev: dict[str, int]) -> None:
    """Refused forks and the peak count: the same files under cgroup v1 and v2."""
    events = _read_kv(path / "pids.events")
    if "max" in events:
        ev["pid_limit_hits"] = events["max"]
    peak = _read_int(path / "pids.peak")
    if peak is not None:
        ev["pids_peak"] = peak


def cpu_evidence(path: Path, ev: dict[str, int]) -> None:
    """Periods throttled by the quota and the time lost to it (v2 in µs, v1 in ns)."""
    stat = _read_kv(path / "cpu.stat")
    if "nr_throttled" in stat:
        ev["cpu_throttled_periods"] = stat["nr_throttled"]
    if "throttled_usec" in stat:
        ev["cpu_throttled_ms"] = stat["throttled_usec"] // 1000
    elif "throttled_time" in stat:
        ev["cpu_throttled_ms"] = stat["throttled_time"] // 1_000_000
