"""Outcome classification: what an execution's exit, the watchdog and the kernel's evidence mean.

A pure function of plain values (no I/O, no process, no cgroup), so the rules that decide
whether a candidate failed, hit a limit or was let down by the sandbox can be read in one place
and tested from a table without running anything.

Classification (``ExecResult.reason``), first match wins:

``sandbox_error``
    bubblewrap did not start the command (bad mount, exec failure, cannot create namespaces), or
    the wrapper could not join a cgroup / set an rlimit, or (``network="model-proxy"``) the
    launcher in the sandbox did not hand over to the command (``setup_failure``: the forwarder
    did not start, or the command could not be executed; reported on a pipe the command never
    holds). Known from bwrap's ``--json-status-fd``:
    it reports ``exit-code`` only for a command it actually ran, and the command cannot write to
    that descriptor, so a program cannot fake this outcome by printing something.
``ok``
    exit status 0 and the watchdog did not fire.
``memory_limit``
    cgroup: the execution's cgroup ``oom_kill`` counter is non-zero (exact). rlimit: inferred from
    stderr (MemoryError, bad_alloc, V8 allocation failures), said so in ``detail``.
``process_limit``
    cgroup: ``pids.events`` ``max`` is non-zero, i.e. the kernel refused a fork (exact). rlimit:
    inferred from stderr (EAGAIN / BlockingIOError), said so in ``detail``.
``disk_limit``
    the writable folders held more than ``disk_mib`` (``evidence.disk_over_bytes``: the disk
    watcher found them over and killed the execution, or their size-limited filesystem was
    past it, whatever the exit status), or that filesystem had no inode left
    (``disk_inodes_full``), or the command died of SIGXFSZ (a file at the per-file limit,
    RLIMIT_FSIZE). Checked before ``ok``: a command that swallowed ``ENOSPC`` and exited 0
    still hit the limit.
``timeout``
    the watchdog fired, or the process died of SIGXCPU (``cpu_seconds``, in ``detail``).
``nonzero_exit``
    anything else: non-zero exit status or death by a signal we did not send.

bubblewrap reports a command killed by signal N as exit status 128+N; statuses 129..192 are
therefore decoded as "killed by signal" (``exit_code=None``); a program that literally calls
``exit(137)`` is indistinguishable and is reported as killed by SIGKILL.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from typing import Literal, NamedTuple

from assay.sandbox.limits import (
    MECH_DISK_IMAGE,
    MECH_RLIMIT_DATA,
    MECH_RLIMIT_NPROC,
    NOT_APPLIED,
)
from assay.sandbox.wrapper import WRAPPER_FAILED_EXIT, WRAPPER_MESSAGE_PREFIX

Reason = Literal["ok", "nonzero_exit", "timeout", "memory_limit", "process_limit",
                 "disk_limit", "sandbox_error"]
REASONS: tuple[str, ...] = (
    "ok",
    "nonzero_exit",
    "timeout",
    "memory_limit",
    "process_limit",
    "disk_limit",
    "sandbox_error",
)

_MAX_SIGNAL = 64

_MEMORY_ERROR_RE = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|out of memory|"
    r"Array buffer allocation failed|Fatal process OOM|allocation failed",
    re.IGNORECASE,
)
_FORK_ERROR_RE = re.compile(
    r"Resource temporarily unavailable|BlockingIOError|EAGAIN|fork: retry", re.IGNORECASE
)


class Outcome(NamedTuple):
    """The classified result: why it ended, and the status as the command would see it."""

    reason: Reason
    exit_code: int | None
    signal: str | None
    detail: str | None


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def classify(
    *,
    sandboxed: bool,
    returncode: int | None,
    bwrap_exit_code: int | None,
    timed_out: bool,
    evidence: Mapping[str, int],
    stderr_tail: str,
    memory_mechanism: str,
    pids_mechanism: str,
    cpu_seconds_mechanism: str,
    wall_seconds: float,
    cpu_seconds: int | None,
    setup_failure: str | None = None,
    disk_mib: int | None = None,
    disk_mechanism: str | None = None,
) -> Outcome:
    """Classify one finished execution; see the module docstring for the rules.

    ``returncode`` is the top process's (bwrap's monitor, or the command without isolation;
    ``None`` if it could not be reaped, read as SIGKILL). ``bwrap_exit_code`` is the
    ``exit-code`` bwrap reported on its status descriptor, ``None`` if it reported none (it
    never started the command, or was killed first). ``*_mechanism`` are the ``AppliedLimit``
    mechanisms; ``wall_seconds`` / ``cpu_seconds`` the requested limits, for ``detail``.
    ``setup_failure`` says why in-sandbox setup never handed over to the command (``None``: it
    did, or there was none): whatever happened after, the command did not run.
    ``disk_mechanism``: how ``disk_mib`` was held (the ``AppliedLimit`` mechanism)."""
    exit_code: int | None = None
    sig: str | None = None
    notes: list[str] = []
    started = True
    rc = returncode if returncode is not None else -signal.SIGKILL
    if sandboxed:
        code = bwrap_exit_code
        if code is not None:
            if 128 < code <= 128 + _MAX_SIGNAL:
                sig = signal_name(code - 128)
                notes.append(f"bubblewrap reported status {code}: killed by {sig}")
            else:
                exit_code = code
        elif (timed_out or evidence.get("oom_kills", 0) > 0
              or evidence.get("disk_over_bytes", 0) > 0
              or evidence.get("disk_inodes_full", 0) > 0):
            # we (the watchdog, the disk watcher) or the OOM killer killed bubblewrap itself
            # before it could report
            sig = signal_name(-rc) if rc < 0 else None
        else:
            started = False
    elif rc < 0:
        sig = signal_name(-rc)
    else:
        exit_code = rc
        if rc == WRAPPER_FAILED_EXIT and stderr_tail.lstrip().startswith(WRAPPER_MESSAGE_PREFIX):
            started = False

    def done(reason: Reason, why: str | None) -> Outcome:
        parts = ([why] if why else []) + notes
        return Outcome(reason, exit_code, sig, "; ".join(parts) or None)

    if setup_failure is not None:
        if timed_out:
            notes.append("the watchdog fired before the command started")
        return Outcome("sandbox_error", None, None, "; ".join([setup_failure, *notes]))
    if not started:
        last = stderr_tail.strip().splitlines()[-1:] or [f"wrapper exit status {rc}"]
        what = "bubblewrap did not start the command" if sandboxed else "the wrapper failed"
        return done("sandbox_error", f"{what}: {last[0]}")
    over = evidence.get("disk_over_bytes", 0)
    inodes_full = evidence.get("disk_inodes_full", 0) > 0
    if not timed_out and exit_code == 0 and not (over > 0 or inodes_full):
        if evidence.get("oom_kills", 0) or evidence.get("pid_limit_hits", 0):
            notes.append(f"exit 0 despite limit events {evidence}")
        return done("ok", None)
    oom = evidence.get("oom_kills", 0)
    if oom > 0:
        return done("memory_limit", f"cgroup OOM killer fired {oom} time(s) (oom_kill counter)")
    if memory_mechanism == MECH_RLIMIT_DATA:
        m = _MEMORY_ERROR_RE.search(stderr_tail)
        if m:
            return done(
                "memory_limit",
                f"inferred from stderr ({m.group(0)!r}); RLIMIT_DATA leaves no kernel record",
            )
    if over > 0 and disk_mechanism == MECH_DISK_IMAGE:
        return done("disk_limit", f"its writable folders took {over:,} bytes on disk, the "
                    f"limit of {disk_mib} MiB ({(disk_mib or 0) << 20:,} bytes) or more: writes "
                    "past it fail on its size-limited filesystem (ENOSPC), and it is ended "
                    "there")
    if over > 0:
        return done("disk_limit", f"its writable folders took {over:,} bytes on disk, over the "
                    f"limit of {disk_mib} MiB ({(disk_mib or 0) << 20:,} bytes); killed by the "
                    "disk watcher while it wrote")
    if inodes_full:
        return done("disk_limit", f"its writable folders used every inode of their "
                    f"size-limited filesystem ({disk_mib} MiB): no file could be made (ENOSPC)")
    refused = evidence.get("pid_limit_hits", 0)
    if refused > 0:
        return done("process_limit", f"{refused} fork(s) refused by pids.max (pids.events)")
    if pids_mechanism == MECH_RLIMIT_NPROC:
        m = _FORK_ERROR_RE.search(stderr_tail)
        if m:
            return done(
                "process_limit",
                f"inferred from stderr ({m.group(0)!r}); RLIMIT_NPROC leaves no kernel record",
            )
    if timed_out:
        throttled = evidence.get("cpu_throttled_periods", 0)
        if throttled:  # a starved run reads differently from a slow one
            notes.append(f"held back by the CPU quota in {throttled} period(s), "
                         f"{evidence.get('cpu_throttled_ms', 0)} ms in all")
        return done(
            "timeout",
            f"wall time limit of {wall_seconds:g} s exceeded; killed by the watchdog",
        )
    if sig == "SIGXFSZ" and disk_mib is not None:
        return done("disk_limit", f"a file reached the per-file limit of {disk_mib} MiB "
                    "(RLIMIT_FSIZE)")
    peak = evidence.get("disk_peak_bytes", 0)
    if disk_mib is not None and peak >= disk_mib << 20:  # a write failed with EFBIG
        return done("disk_limit", f"its writable folders took {peak:,} bytes on disk, the "
                    f"limit of {disk_mib} MiB: writes past it fail")
    if sig == "SIGXCPU" and cpu_seconds_mechanism != NOT_APPLIED:
        return done("timeout", f"CPU-time limit of {cpu_seconds} s exceeded (RLIMIT_CPU)")
    return done("nonzero_exit", None)
