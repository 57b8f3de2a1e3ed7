"""One execution from ``Popen`` to ``ExecResult``: start, watch the wall clock, kill, collect.

Watchdog: when ``wall_seconds`` expire, SIGTERM goes to every process of the command (found as
descendants of the namespace's PID 1, plus the members of the execution's cgroups); after
:data:`KILL_GRACE_SECONDS` SIGKILL goes to bwrap's PID 1 and monitor, which makes the kernel kill
everything left in the PID namespace at once (a process that ignores SIGTERM, forks, or calls
setsid cannot escape it). With ``isolation="none"`` the same is done with the process group and the
cgroups instead of the namespace (:mod:`assay.sandbox.proctree`). Whatever happened is then
classified by the pure :func:`assay.sandbox.outcome.classify`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from assay.sandbox.diskimage import DiskImage, ImageWatch
from assay.sandbox.diskwatch import DiskWatch
from assay.sandbox.limits import Limits
from assay.sandbox.outcome import classify
from assay.sandbox.pipes import OutputSink, PipePump
from assay.sandbox.plan import LimitPlan
from assay.sandbox.proctree import ProcessTree
from assay.sandbox.result import ExecResult, not_started

KILL_GRACE_SECONDS = 1.0
_DRAIN_SECONDS = 1.0
#: how long to wait for the top process after SIGKILL, and to reap it, before giving up.
_REAP_SECONDS = 10.0


def execute(
    *,
    plan: LimitPlan,
    command: list[str],
    cwd: str,
    popen_env: dict[str, str],
    pass_fds: tuple[int, ...],
    owned_fds: list[int],
    status_fd: int | None,
    stdin: bytes | None,
    limits: Limits,
    sandboxed: bool,
    out: OutputSink,
    err: OutputSink,
    warnings: list[str],
    common: dict[str, Any],
    setup_check: Callable[[], str | None] | None = None,
    grace_seconds: float = KILL_GRACE_SECONDS,
    writable: Sequence[Path] = (),
    disk: DiskImage | None = None,
) -> ExecResult:
    """Run ``command`` (the wrapper prefix included) to its end under the watchdog.

    ``setup_check``, called once the command is gone, says why in-sandbox setup (the
    model-proxy launcher) did not hand over to the command, or ``None`` if it did.
    ``writable``: the host folders the command can write, watched against
    ``limits.disk_mib`` while it runs (:mod:`assay.sandbox.diskwatch`); or, with ``disk``
    (the size-limited filesystem they are on for the run), that filesystem polled
    (:mod:`assay.sandbox.diskimage`).

    ``pass_fds`` are closed here once the child has them and removed from ``owned_fds``, which
    the caller closes; the sinks and the plan's cgroups stay the caller's to close."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=popen_env,
            pass_fds=pass_fds,
            start_new_session=True,
        )
    except OSError as exc:
        return not_started(common, plan.applied, f"could not start {command[0]}: {exc}",
                           wall_seconds=time.monotonic() - start, warnings=warnings)
    # The child has its copies. Close ours now (the write end of the status pipe must only be
    # open in bwrap, or its EOF never comes) and forget them, so nothing is closed twice.
    for fd in pass_fds:
        owned_fds.remove(fd)
        os.close(fd)
    pump = PipePump(proc, stdin, out, err, status_fd)

    def ns_init() -> int | None:
        pid = pump.status_docs().get("child-pid") if sandboxed else None
        return pid if isinstance(pid, int) and pid > 0 else None

    tree = ProcessTree(proc.pid, sandboxed=sandboxed, ns_init=ns_init, cgroup_procs=plan.procs)
    timed_out = False
    watch: DiskWatch | ImageWatch | None = None
    if limits.disk_mib is not None and disk is not None:
        watch = ImageWatch(disk, lambda _figure: tree.kill_everything()).start()
    elif limits.disk_mib is not None and writable:
        watch = DiskWatch(writable, limits.disk_mib * 1024 * 1024,
                          lambda _figure: tree.kill_everything()).start()
    try:
        pump.pump(start + limits.wall_seconds, lambda: pump.exited)
        if not pump.exited:
            timed_out = True
            tree.signal_command(signal.SIGTERM)
            pump.pump(time.monotonic() + grace_seconds, lambda: pump.exited)
            if not pump.exited:
                tree.kill_everything()
                pump.pump(time.monotonic() + _REAP_SECONDS, lambda: pump.exited)
        tree.kill_leftovers()
        pump.pump(time.monotonic() + _DRAIN_SECONDS, lambda: not pump.readers)
        if pump.readers:
            warnings.append("output pipes were still held open after the command ended")
    except BaseException:
        tree.kill_everything()
        raise
    finally:
        if watch is not None:
            watch.stop()
        pump.close()
        try:
            proc.wait(timeout=_REAP_SECONDS)
        except subprocess.TimeoutExpired:
            warnings.append(f"process {proc.pid} could not be reaped")
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    end = pump.exit_time or time.monotonic()
    evidence = plan.evidence()
    if watch is not None:  # the watcher's figures: what the writable folders took on disk
        evidence["disk_peak_bytes"] = watch.peak
        if watch.over is not None:
            evidence["disk_over_bytes"] = watch.over
        if isinstance(watch, ImageWatch) and watch.inodes_full:
            evidence["disk_inodes_full"] = 1
    warnings += plan.cleanup()
    status = pump.status_docs() if sandboxed else {}
    code = status.get("exit-code")
    applied = plan.applied
    outcome = classify(
        sandboxed=sandboxed,
        returncode=proc.returncode,
        bwrap_exit_code=code if isinstance(code, int) else None,
        timed_out=timed_out,
        evidence=evidence,
        stderr_tail=err.text(),
        memory_mechanism=applied["memory_mib"].mechanism,
        pids_mechanism=applied["pids"].mechanism,
        cpu_seconds_mechanism=applied["cpu_seconds"].mechanism,
        wall_seconds=limits.wall_seconds,
        cpu_seconds=limits.cpu_seconds,
        setup_failure=setup_check() if setup_check is not None else None,
        disk_mib=limits.disk_mib,
        disk_mechanism=applied["disk_mib"].mechanism,
    )
    return ExecResult(
        **common,
        reason=outcome.reason,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        wall_seconds=end - start,
        timed_out=timed_out,
        stdout_tail=out.text(),
        stderr_tail=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        limits_applied=dict(applied),
        evidence=evidence,
        detail=outcome.detail,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        warnings=tuple(warnings),
    )
