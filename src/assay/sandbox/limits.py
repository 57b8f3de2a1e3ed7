"""Resource limits for sandboxed executions, how they are applied, and the record of what was.

Mechanisms, tried in this order per limit; every limit ends up in the ``applied`` record with the
mechanism that *actually* enforced it, or ``"not_applied"`` with the reason:

``memory_mib``
    cgroup v2 ``memory.max`` (+ ``memory.swap.max = 0``), else cgroup v1 ``memory.limit_in_bytes``
    (+ ``memory.memsw.limit_in_bytes`` when swap accounting exists), else ``RLIMIT_DATA``
    ("rlimit_data"; per process, counts private writable mappings and brk, not shared memory, tmpfs
    or page cache). ``RLIMIT_AS`` is deliberately not used: V8 reserves large address ranges up
    front and node aborts at start under any modest ``RLIMIT_AS``.
``pids``
    cgroup v2/v1 ``pids.max``, else ``RLIMIT_NPROC`` ("rlimit_nproc"). The kernel counts
    RLIMIT_NPROC per *real uid*, host-wide, and never enforces it for real uid 0, so when the
    sandbox runs as root (its processes map to host uid 0 even inside bubblewrap's user namespace)
    it is reported ``not_applied``. For a non-root user it is set to the number of processes that
    uid already has plus ``pids``, and the note says that the budget is shared with every other
    process of that uid (including concurrent sandboxes). Both mechanisms count threads too.
    bubblewrap's own monitor and PID-1 reaper run inside the cgroup, so the cgroup limit is set
    to ``pids + 2`` to give the command the full ``pids`` it asked for.
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
    the watchdog in :mod:`assay.sandbox.run` ("watchdog").

How outcomes are detected (see :meth:`LimitPlan.evidence`):

* memory: cgroup ``oom_kill`` counter (v2 ``memory.events``, v1 ``memory.oom_control``) is an
  exact kernel record that the OOM killer fired inside this execution's cgroup. v2's
  ``memory.events`` ``max`` (limit reached, reclaim may have coped) is recorded as supporting
  evidence; v1's ``memory.failcnt`` is not, because recent kernels leave it at 0 even when the
  limit is hit.
  Under ``rlimit_data`` the kernel keeps no record: allocations just fail, and the outcome can only
  be *inferred* from the program's stderr (``MemoryError``, ``bad_alloc``, V8's allocation failure
  messages); the run module says so in ``detail``.
* processes: ``pids.events`` ``max`` counts forks refused by the limit (v1 and v2). Under
  ``rlimit_nproc`` only stderr inference (EAGAIN / BlockingIOError) is possible.
* CPU quota: ``cpu.stat`` ``nr_throttled`` (periods in which the quota ran out) and the time
  spent throttled, so a slow run can be told apart from a starved one.

cgroups are created per execution as children of the cgroup the calling process already lives in
(per controller on v1), so the sandbox stays inside whatever accounting its parent is under; they
are removed after the run. Every limit the shell wrapper sets is applied before ``exec`` of
bubblewrap, so no ``preexec_fn`` (unsafe with threads) is needed.

Cost: creating, reading and removing the cgroups is well under a millisecond, but moving the
wrapper into a v1 cgroup (writing ``cgroup.procs``) makes the kernel wait for an RCU grace period
(``cgroup_threadgroup_rwsem``), measured at ~10-15 ms on the development VM. That is most of the
sandbox's per-execution overhead; ``use_cgroups=False`` avoids it at the price of the weaker
rlimit fallback. (cgroup v2's ``CLONE_INTO_CGROUP`` or the ``favordynmods`` mount option would
avoid it too; neither is available through bubblewrap/v1 here.)
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MECH_CGROUP_V2 = "cgroup_v2"
MECH_CGROUP_V1 = "cgroup_v1"
MECH_RLIMIT_DATA = "rlimit_data"
MECH_RLIMIT_NPROC = "rlimit_nproc"
MECH_RLIMIT_CPU = "rlimit_cpu"
MECH_WATCHDOG = "watchdog"
#: CFS bandwidth period for ``cpu_cores`` (the kernel default); quota = cores x period.
CPU_PERIOD_US = 100_000
NOT_APPLIED = "not_applied"

#: bubblewrap's outer monitor and its PID-1 reaper live in the execution's pids cgroup.
BWRAP_HELPER_PROCESSES = 2
#: exit status of the shell wrapper when it could not apply a limit (checked by the runner).
WRAPPER_FAILED_EXIT = 125
WRAPPER_MESSAGE_PREFIX = "assay-sandbox:"

_CGROUP_ROOT = Path("/sys/fs/cgroup")


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

    def __post_init__(self) -> None:
        if not self.wall_seconds > 0:
            raise ValueError("wall_seconds must be > 0")
        for name in ("memory_mib", "pids", "cpu_seconds"):
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


def _not_applied(value: float | int | None, reason: str) -> AppliedLimit:
    return AppliedLimit(value=value, mechanism=NOT_APPLIED, reason=reason)


# --------------------------------------------------------------------------------------------
# cgroup discovery


@dataclass(frozen=True)
class _Hierarchy:
    version: int
    mountpoint: Path
    mount_root: str  # the cgroup path the mount shows at its mountpoint (not "/" in containers)
    controllers: frozenset[str]  # v1: controllers bound to this mount; v2: empty (read per dir)


@functools.lru_cache(maxsize=1)
def _mounted_hierarchies() -> tuple[_Hierarchy, ...]:
    """cgroup mounts of this mount namespace (read once: they do not move under a running
    process, and parsing mountinfo on every execution cost more than the rest of the setup)."""
    found: list[_Hierarchy] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        fstype, super_opts = rfields[0], rfields[2]
        mountpoint = Path(fields[4].replace("\\040", " "))
        if fstype == "cgroup2":
            found.append(_Hierarchy(2, mountpoint, fields[3], frozenset()))
        elif fstype == "cgroup":
            opts = frozenset(super_opts.split(","))
            found.append(_Hierarchy(1, mountpoint, fields[3], opts))
    return tuple(found)


def _own_cgroups() -> dict[str, str]:
    """Map "0::" (v2) or each v1 controller name to this process's cgroup path."""
    own: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier_id, controllers, path = parts
        if hier_id == "0" and controllers == "":
            own["0::"] = path
        else:
            for c in controllers.split(","):
                if c:
                    own[c] = path
    return own


def _dir_for(h: _Hierarchy, own_path: str) -> Path | None:
    root = h.mount_root.rstrip("/")
    if root and own_path != root and not own_path.startswith(root + "/"):
        return None  # our cgroup is not visible under this mount
    rel = own_path[len(root) :].lstrip("/")
    return h.mountpoint / rel if rel else h.mountpoint


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


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


def _new_name() -> str:
    return f"assay-{os.getpid()}-{uuid.uuid4().hex[:12]}"


@dataclass
class _Cgroup:
    version: int
    path: Path
    controllers: tuple[str, ...]

    def procs(self) -> set[int]:
        try:
            return {int(x) for x in (self.path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return set()


def _try_cgroup_v2(want: set[str]) -> tuple[_Cgroup | None, str]:
    hiers = [h for h in _mounted_hierarchies() if h.version == 2]
    own = _own_cgroups().get("0::")
    if not hiers or own is None:
        return None, "no cgroup v2 hierarchy mounted"
    parent = None
    for h in hiers:
        parent = _dir_for(h, own)
        if parent is not None and (parent / "cgroup.controllers").exists():
            break
        parent = None
    if parent is None:
        return None, "own cgroup v2 directory not found"
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
    except OSError as exc:
        return None, f"cannot read {parent}/cgroup.controllers: {exc}"
    usable = want & available
    if not usable:
        return None, f"cgroup v2 at {parent} does not offer {'/'.join(sorted(want))}"
    try:
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        missing = usable - enabled
        if missing:
            # Only possible for a delegated cgroup without processes of its own ("no internal
            # processes" rule); fails with EBUSY otherwise, which is reported as the reason.
            _write(parent / "cgroup.subtree_control", " ".join("+" + c for c in sorted(missing)))
    except OSError as exc:
        return None, f"cannot enable {sorted(usable)} in {parent}/cgroup.subtree_control: {exc}"
    path = parent / _new_name()
    try:
        path.mkdir()
    except OSError as exc:
        return None, f"cannot create cgroup v2 directory under {parent}: {exc}"
    return _Cgroup(2, path, tuple(sorted(usable))), ""


def _try_cgroup_v1(controller: str) -> tuple[_Cgroup | None, str]:
    hier = next(
        (h for h in _mounted_hierarchies() if h.version == 1 and controller in h.controllers),
        None,
    )
    if hier is None:
        return None, f"no cgroup v1 {controller} hierarchy mounted"
    own = _own_cgroups().get(controller)
    if own is None:
        return None, f"process is not in a cgroup v1 {controller} hierarchy"
    parent = _dir_for(hier, own)
    if parent is None or not parent.is_dir():
        return None, f"own cgroup v1 {controller} directory not visible"
    path = parent / _new_name()
    try:
        path.mkdir()
    except OSError as exc:
        return None, f"cannot create cgroup v1 {controller} directory under {parent}: {exc}"
    return _Cgroup(1, path, (controller,)), ""


def _rmdir_cgroup(cg: _Cgroup) -> str | None:
    deadline = time.monotonic() + 2.0
    while True:
        for pid in cg.procs():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            cg.path.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            if time.monotonic() > deadline:
                return f"could not remove cgroup {cg.path}: {exc}"
            time.sleep(0.005)


# --------------------------------------------------------------------------------------------
# the plan for one execution


@dataclass
class LimitPlan:
    """Limits resolved for one execution: the ``applied`` record, the cgroups created for it and
    the shell prefix that joins them and sets rlimits before ``exec``-ing the command."""

    applied: dict[str, AppliedLimit]
    cgroups: list[_Cgroup] = field(default_factory=list)
    ulimits: list[str] = field(default_factory=list)  # shell statements, integers only

    @property
    def memory_mechanism(self) -> str:
        return self.applied["memory_mib"].mechanism

    @property
    def pids_mechanism(self) -> str:
        return self.applied["pids"].mechanism

    def wrapper_argv(self) -> list[str]:
        """``/bin/sh -c SCRIPT``: join each cgroup, set rlimits, then ``exec "$@"``.

        The cgroup files are passed as positional arguments, the rlimit statements only contain
        integers, so nothing from the caller is interpolated into the script."""
        fail = f'echo "{WRAPPER_MESSAGE_PREFIX} $1" >&2; exit {WRAPPER_FAILED_EXIT}'
        lines = [
            "n=$1; shift",
            'while [ "$n" -gt 0 ]; do',
            f'  echo $$ > "$1" || {{ set -- "cannot join cgroup $1"; {fail}; }}',
            "  shift; n=$((n-1))",
            "done",
        ]
        for stmt in self.ulimits:
            lines.append(f'{stmt} || {{ set -- "cannot apply {stmt}"; {fail}; }}')
        lines.append('exec "$@"')
        procs = [str(cg.path / "cgroup.procs") for cg in self.cgroups]
        return ["/bin/sh", "-c", "\n".join(lines), "assay-sandbox", str(len(procs)), *procs]

    def procs(self) -> set[int]:
        out: set[int] = set()
        for cg in self.cgroups:
            out |= cg.procs()
        return out

    def evidence(self) -> dict[str, int]:
        """Kernel counters read after the run (only those the mechanism provides)."""
        ev: dict[str, int] = {}
        for cg in self.cgroups:
            if "memory" in cg.controllers:
                _memory_evidence(cg, ev)
            if "pids" in cg.controllers:
                _pids_evidence(cg.path, ev)
            if "cpu" in cg.controllers:
                _cpu_evidence(cg.path, ev)
        return ev

    def cleanup(self) -> list[str]:
        """Kill anything left in the cgroups and remove them. Returns warnings (empty if clean)."""
        warnings = []
        for cg in self.cgroups:
            problem = _rmdir_cgroup(cg)
            if problem:
                warnings.append(problem)
        self.cgroups = []
        return warnings


def _memory_evidence(cg: _Cgroup, ev: dict[str, int]) -> None:
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


def _pids_evidence(path: Path, ev: dict[str, int]) -> None:
    """Refused forks and the peak count: the same files under cgroup v1 and v2."""
    events = _read_kv(path / "pids.events")
    if "max" in events:
        ev["pid_limit_hits"] = events["max"]
    peak = _read_int(path / "pids.peak")
    if peak is not None:
        ev["pids_peak"] = peak


def _cpu_evidence(path: Path, ev: dict[str, int]) -> None:
    """Periods throttled by the quota and the time lost to it (v2 in µs, v1 in ns)."""
    stat = _read_kv(path / "cpu.stat")
    if "nr_throttled" in stat:
        ev["cpu_throttled_periods"] = stat["nr_throttled"]
    if "throttled_usec" in stat:
        ev["cpu_throttled_ms"] = stat["throttled_usec"] // 1000
    elif "throttled_time" in stat:
        ev["cpu_throttled_ms"] = stat["throttled_time"] // 1_000_000


def _cpu_quota_us(cores: float) -> int:
    return max(1000, round(cores * CPU_PERIOD_US))  # the kernel refuses quotas under 1 ms


def _configure(cg: _Cgroup, controller: str, value: float) -> None:
    """Write one controller's limit into a cgroup just created for it (v1 or v2 files)."""
    if controller == "memory":
        nbytes = str(int(value) * 1024 * 1024)
        if cg.version == 2:
            _write(cg.path / "memory.max", nbytes)
            if (cg.path / "memory.swap.max").exists():
                _write(cg.path / "memory.swap.max", "0")
        else:
            _write(cg.path / "memory.limit_in_bytes", nbytes)
            if (cg.path / "memory.memsw.limit_in_bytes").exists():
                try:  # memory+swap, so the limit cannot be dodged by swapping
                    _write(cg.path / "memory.memsw.limit_in_bytes", nbytes)
                except OSError:
                    pass
    elif controller == "pids":
        _write(cg.path / "pids.max", str(int(value) + BWRAP_HELPER_PROCESSES))
    elif controller == "cpu":
        quota = _cpu_quota_us(value)
        if cg.version == 2:
            _write(cg.path / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
            _write(cg.path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(cg.path / "cpu.cfs_quota_us", str(quota))
    else:  # pragma: no cover - programming error
        raise ValueError(controller)


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


def plan_limits(limits: Limits, *, use_cgroups: bool = True, grace_seconds: float) -> LimitPlan:
    """Create the cgroups for one execution (if possible) and decide the rlimit fallbacks.

    ``use_cgroups=False`` forces the rlimit fallback (used by tests to check that nothing is
    claimed that the fallback does not do). The caller must call :meth:`LimitPlan.cleanup`."""
    applied: dict[str, AppliedLimit] = {}
    plan = LimitPlan(applied=applied)
    plan.ulimits.append("ulimit -c 0")  # no core dumps into the work directory

    want: dict[str, float] = {}
    if limits.memory_mib is not None:
        want["memory"] = limits.memory_mib
    if limits.pids is not None:
        want["pids"] = limits.pids
    if limits.cpu_cores is not None:
        want["cpu"] = limits.cpu_cores

    mechanism: dict[str, str] = {}
    why_not: dict[str, str] = {}
    try:
        if want and use_cgroups:
            cg2, reason2 = _try_cgroup_v2(set(want))
            if cg2 is not None:
                plan.cgroups.append(cg2)
                try:
                    for c in cg2.controllers:
                        _configure(cg2, c, want[c])
                        mechanism[c] = MECH_CGROUP_V2
                except OSError as exc:
                    for c in cg2.controllers:
                        mechanism.pop(c, None)
                        why_not[c] = f"cgroup v2 write failed: {exc}"
            for c in want:
                if c not in mechanism:
                    why_not.setdefault(c, reason2 or f"cgroup v2 does not offer {c}")
            for c in want:
                if c in mechanism:
                    continue
                cg1, reason1 = _try_cgroup_v1(c)
                if cg1 is None:
                    why_not[c] = f"{why_not[c]}; {reason1}"
                    continue
                plan.cgroups.append(cg1)
                try:
                    _configure(cg1, c, want[c])
                    mechanism[c] = MECH_CGROUP_V1
                except OSError as exc:
                    why_not[c] = f"{why_not[c]}; cgroup v1 write failed: {exc}"
        elif want:
            for c in want:
                why_not[c] = "cgroups disabled by the caller (use_cgroups=False)"
    except BaseException:
        plan.cleanup()
        raise
    # drop cgroups we created but ended up not using (a failed write)
    used = set(mechanism)
    keep = []
    for cg in plan.cgroups:
        if used & set(cg.controllers):
            keep.append(cg)
        else:
            _rmdir_cgroup(cg)
    plan.cgroups = keep

    # memory
    if limits.memory_mib is None:
        applied["memory_mib"] = _not_applied(None, "no memory limit requested")
    elif "memory" in mechanism:
        applied["memory_mib"] = AppliedLimit(limits.memory_mib, mechanism["memory"])
    else:
        kib = _clamp_to_hard(resource.RLIMIT_DATA, limits.memory_mib * 1024 * 1024) // 1024
        plan.ulimits.append(f"ulimit -d {kib}")
        applied["memory_mib"] = AppliedLimit(
            kib // 1024,
            MECH_RLIMIT_DATA,
            note=(
                "per process, private writable memory only (not shared memory, tmpfs or page "
                f"cache); no cgroup: {why_not.get('memory', '')}"
            ),
        )

    # processes
    if limits.pids is None:
        applied["pids"] = _not_applied(None, "no process limit requested")
    elif "pids" in mechanism:
        applied["pids"] = AppliedLimit(
            limits.pids,
            mechanism["pids"],
            note=f"counts threads; pids.max = {limits.pids} + {BWRAP_HELPER_PROCESSES} "
            "for bubblewrap's monitor and reaper",
        )
    elif os.getuid() == 0:
        applied["pids"] = _not_applied(
            limits.pids,
            "no cgroup (" + why_not.get("pids", "") + "); RLIMIT_NPROC is not enforced for real "
            "uid 0 and the sandbox runs as host root",
        )
    else:
        existing = _uid_process_count(os.getuid())
        n = _clamp_to_hard(resource.RLIMIT_NPROC, existing + limits.pids)
        plan.ulimits.append(f"ulimit -p {n}")
        applied["pids"] = AppliedLimit(
            limits.pids,
            MECH_RLIMIT_NPROC,
            note=(
                f"RLIMIT_NPROC={n} = {existing} processes uid {os.getuid()} already had + "
                f"{limits.pids}; counted per real uid host-wide, shared with every other process "
                "of that uid (including concurrent sandboxes); counts threads"
            ),
        )

    # cpu
    if limits.cpu_seconds is None:
        applied["cpu_seconds"] = _not_applied(None, "no CPU-time limit requested")
    else:
        soft = _clamp_to_hard(resource.RLIMIT_CPU, limits.cpu_seconds)
        hard = _clamp_to_hard(resource.RLIMIT_CPU, soft + 1)
        plan.ulimits.append(f"ulimit -S -t {soft}")
        plan.ulimits.append(f"ulimit -H -t {hard}")
        applied["cpu_seconds"] = AppliedLimit(
            soft,
            MECH_RLIMIT_CPU,
            note="per process: SIGXCPU at the limit, SIGKILL 1 s later",
        )

    # cpu bandwidth
    if limits.cpu_cores is None:
        applied["cpu_cores"] = _not_applied(None, "no CPU quota requested")
    elif "cpu" in mechanism:
        quota = _cpu_quota_us(limits.cpu_cores)
        applied["cpu_cores"] = AppliedLimit(
            limits.cpu_cores,
            mechanism["cpu"],
            note=f"CFS quota {quota} us per {CPU_PERIOD_US} us period for the whole execution "
            f"(host has {os.cpu_count()} CPUs); throttled, not killed",
        )
    else:
        applied["cpu_cores"] = _not_applied(
            limits.cpu_cores, "no cgroup cpu controller (" + why_not.get("cpu", "") + ")")

    applied["wall_seconds"] = AppliedLimit(
        limits.wall_seconds,
        MECH_WATCHDOG,
        note=f"SIGTERM to the command's processes, SIGKILL to all after {grace_seconds:g} s",
    )
    return plan
