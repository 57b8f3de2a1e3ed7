"""Per-execution cgroups: find where this process lives, create children there, remove them.

Kept apart from planning because this is the only code that knows the kernel's file layout (v1
per-controller hierarchies vs the v2 unified one, mountinfo quirks inside containers); the planner
only asks "give me these controllers with these values" and gets back which version enforced
each, or why none could.

cgroups are created per execution as children of the cgroup the calling process already lives in
(per controller on v1), so the sandbox stays inside whatever accounting its parent is under; they
are removed after the run.

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
import re
import signal
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from assay.sandbox.limits import MECH_CGROUP_V1, MECH_CGROUP_V2

#: CFS bandwidth period for ``cpu_cores`` (the kernel default); quota = cores x period.
CPU_PERIOD_US = 100_000


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


def _new_name() -> str:
    return f"assay-{os.getpid()}-{uuid.uuid4().hex[:12]}"


#: an execution's cgroup: ``assay-<pid of the process that made it>-<12 hex>``
_NAME = re.compile(r"assay-(\d+)-[0-9a-f]{12}")


@dataclass
class Cgroup:
    """One cgroup directory created for one execution, and the controllers it is used for."""

    version: int
    path: Path
    controllers: tuple[str, ...]

    def procs(self) -> set[int]:
        try:
            return {int(x) for x in (self.path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return set()


def _try_cgroup_v2(want: set[str]) -> tuple[Cgroup | None, str]:
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
    return Cgroup(2, path, tuple(sorted(usable))), ""


def _try_cgroup_v1(controller: str) -> tuple[Cgroup | None, str]:
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
    return Cgroup(1, path, (controller,)), ""


def remove_cgroup(cg: Cgroup) -> str | None:
    """Kill what is left in ``cg`` and remove it; a problem is returned as a warning, because a
    leftover directory must not turn a finished execution into an error."""
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


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command's ")"
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _owner_alive(pid: int, cgroup: Path) -> bool:
    """Whether the process that made ``cgroup`` still runs: a process with its pid that
    started after the cgroup was made is another one (the pid was reused)."""
    started = _started_at(pid)
    if started is None:  # no such process (without procfs no cgroup is found to sweep)
        return False
    try:
        made = cgroup.stat().st_mtime
    except OSError:
        return True  # gone meanwhile: nothing to do
    return started <= made + 1.0


def _parent_dirs() -> list[tuple[int, Path]]:
    """Where this process creates its executions' cgroups: its own cgroup's directory in each
    mounted hierarchy (v2, and every v1 one)."""
    own = _own_cgroups()
    found: list[tuple[int, Path]] = []
    for h in _mounted_hierarchies():
        path = own.get("0::") if h.version == 2 else next(
            (own[c] for c in sorted(h.controllers) if c in own), None)
        if path is None:
            continue
        parent = _dir_for(h, path)
        if parent is not None and parent.is_dir() and (h.version, parent) not in found:
            found.append((h.version, parent))
    return found


@dataclass(frozen=True)
class Orphan:
    """One execution cgroup of an ended process, removed by :func:`sweep_orphans`."""

    cgroup: str
    killed: tuple[int, ...]
    """What still ran in it, ended with SIGKILL."""
    problem: str | None = None
    """Why the directory could not be removed, if it could not."""


def sweep_orphans() -> list[Orphan]:
    """Remove the execution cgroups left by an assay process that no longer exists, ending
    what still runs in them.

    A runner killed with SIGKILL never removes its executions' cgroups; bubblewrap's
    ``--die-with-parent`` ends their processes, except one that was killed in the instant
    between creating its namespace and arming that (its namespace's init then waits forever).
    The wrapper joins the cgroup before bubblewrap starts, so whatever is left is in it. Only
    cgroups named for a process that has ended are touched (a live one is left alone; a pid
    reused by a process that started after the cgroup was made does not count as its owner).
    Returns one entry per cgroup removed or not removable."""
    swept: list[Orphan] = []
    for version, parent in _parent_dirs():
        try:
            children = list(parent.iterdir())
        except OSError:
            continue
        for child in children:
            m = _NAME.fullmatch(child.name)
            if m is None or not child.is_dir() or _owner_alive(int(m.group(1)), child):
                continue
            cg = Cgroup(version, child, ())
            procs = tuple(sorted(cg.procs()))
            swept.append(Orphan(str(child), procs, remove_cgroup(cg)))
    return swept


_sweep_lock = threading.Lock()
_swept: list[Orphan] | None = None


def sweep_orphans_once() -> list[Orphan]:
    """:func:`sweep_orphans` the first time this process asks (before its first execution's
    cgroups are made); later calls return that first result."""
    global _swept
    with _sweep_lock:
        if _swept is None:
            _swept = sweep_orphans()
        return list(_swept)


def _configure(cg: Cgroup, controller: str, value: int) -> None:
    """Write one controller's limit (already in the kernel's unit) into a cgroup just created
    for it: bytes for ``memory``, ``pids.max`` for ``pids``, the quota in µs per
    :data:`CPU_PERIOD_US` for ``cpu``."""
    if controller == "memory":
        nbytes = str(value)
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
        _write(cg.path / "pids.max", str(value))
    elif controller == "cpu":
        if cg.version == 2:
            _write(cg.path / "cpu.max", f"{value} {CPU_PERIOD_US}")
        else:
            _write(cg.path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(cg.path / "cpu.cfs_quota_us", str(value))
    else:  # pragma: no cover - programming error
        raise ValueError(controller)


@dataclass
class CgroupSet:
    """What :func:`open_cgroups` got: the cgroups in use, the version that enforces each
    controller (``MECH_CGROUP_V2`` / ``MECH_CGROUP_V1``), and for every other controller asked
    for, why no cgroup could enforce it."""

    cgroups: list[Cgroup] = field(default_factory=list)
    mechanism: dict[str, str] = field(default_factory=dict)
    why_not: dict[str, str] = field(default_factory=dict)


def open_cgroups(want: Mapping[str, int]) -> CgroupSet:
    """Create cgroups enforcing ``want`` (controller -> value in the kernel's unit): one v2
    cgroup for every controller v2 offers, then one v1 cgroup per controller still missing.

    A cgroup whose writes failed is removed again; its controllers are reported in ``why_not``
    (each reason says what v2 and then v1 answered). On any exception every cgroup created so
    far is removed before it propagates."""
    sweep_orphans_once()
    got = CgroupSet()
    try:
        cg2, reason2 = _try_cgroup_v2(set(want))
        if cg2 is not None:
            got.cgroups.append(cg2)
            try:
                for c in cg2.controllers:
                    _configure(cg2, c, want[c])
                    got.mechanism[c] = MECH_CGROUP_V2
            except OSError as exc:
                for c in cg2.controllers:
                    got.mechanism.pop(c, None)
                    got.why_not[c] = f"cgroup v2 write failed: {exc}"
        for c in want:
            if c not in got.mechanism:
                got.why_not.setdefault(c, reason2 or f"cgroup v2 does not offer {c}")
        for c in want:
            if c in got.mechanism:
                continue
            cg1, reason1 = _try_cgroup_v1(c)
            if cg1 is None:
                got.why_not[c] = f"{got.why_not[c]}; {reason1}"
                continue
            got.cgroups.append(cg1)
            try:
                _configure(cg1, c, want[c])
                got.mechanism[c] = MECH_CGROUP_V1
            except OSError as exc:
                got.why_not[c] = f"{got.why_not[c]}; cgroup v1 write failed: {exc}"
    except BaseException:
        for cg in got.cgroups:
            remove_cgroup(cg)
        raise
    # drop cgroups we created but ended up not using (a failed write)
    used = set(got.mechanism)
    keep = []
    for cg in got.cgroups:
        if used & set(cg.controllers):
            keep.append(cg)
        else:
            remove_cgroup(cg)
    got.cgroups = keep
    return got
