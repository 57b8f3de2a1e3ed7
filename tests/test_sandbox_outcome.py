"""Outcome classification as a table: one row per distinct path through ``classify``.

``classify`` is pure, so every rule (and every precedence between rules) is pinned here without
running a process; ``test_sandbox.py`` checks the same outcomes end to end against real programs.
Each row gives the facts an execution ends with and the exact (reason, exit_code, signal, detail)
it must be recorded as.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from assay.sandbox import REASONS
from assay.sandbox.outcome import Outcome, classify

WALL = "wall time limit of 10 s exceeded; killed by the watchdog"

#: A sandboxed execution that exited 0 under cgroup limits; rows override what differs.
BASE: dict[str, Any] = dict(
    sandboxed=True,
    returncode=0,
    bwrap_exit_code=0,
    timed_out=False,
    evidence={},
    stderr_tail="",
    memory_mechanism="cgroup_v2",
    pids_mechanism="cgroup_v2",
    cpu_seconds_mechanism="not_applied",
    wall_seconds=10.0,
    cpu_seconds=None,
)

#: (id, facts that differ from BASE, expected (reason, exit_code, signal, detail))
TABLE: list[tuple[str, dict[str, Any], tuple[str, int | None, str | None, str | None]]] = [
    # --- ok, and limit evidence that did not change the exit
    ("ok", {}, ("ok", 0, None, None)),
    ("ok-with-zero-counters", dict(evidence={"oom_kills": 0, "pid_limit_hits": 0,
                                             "memory_peak_bytes": 4096}),
     ("ok", 0, None, None)),
    ("oom-evidence-with-exit-0-is-ok-and-says-so", dict(evidence={"oom_kills": 1}),
     ("ok", 0, None, "exit 0 despite limit events {'oom_kills': 1}")),
    ("refused-fork-with-exit-0-is-ok-and-says-so", dict(evidence={"pid_limit_hits": 2}),
     ("ok", 0, None, "exit 0 despite limit events {'pid_limit_hits': 2}")),
    # --- plain failures and bwrap's 128+N status decoding
    ("nonzero-exit", dict(returncode=1, bwrap_exit_code=1), ("nonzero_exit", 1, None, None)),
    ("status-128-is-an-exit-status", dict(returncode=128, bwrap_exit_code=128),
     ("nonzero_exit", 128, None, None)),
    ("status-137-is-sigkill", dict(returncode=137, bwrap_exit_code=137),
     ("nonzero_exit", None, "SIGKILL", "bubblewrap reported status 137: killed by SIGKILL")),
    ("status-192-is-the-last-signal", dict(returncode=192, bwrap_exit_code=192),
     ("nonzero_exit", None, "SIGRTMAX", "bubblewrap reported status 192: killed by SIGRTMAX")),
    ("status-193-is-an-exit-status", dict(returncode=193, bwrap_exit_code=193),
     ("nonzero_exit", 193, None, None)),
    ("unnamed-signal-gets-a-number", dict(returncode=168, bwrap_exit_code=168),
     ("nonzero_exit", None, "SIG40", "bubblewrap reported status 168: killed by SIG40")),
    # --- sandbox_error: bwrap never reported an exit-code
    ("bwrap-did-not-start-the-command",
     dict(returncode=1, bwrap_exit_code=None,
          stderr_tail="bwrap: Can't mount proc on /newroot/proc\n"),
     ("sandbox_error", None, None,
      "bubblewrap did not start the command: bwrap: Can't mount proc on /newroot/proc")),
    ("bwrap-failed-silently", dict(returncode=1, bwrap_exit_code=None),
     ("sandbox_error", None, None, "bubblewrap did not start the command: wrapper exit status 1")),
    ("wrapper-could-not-join-cgroup", dict(
        returncode=125, bwrap_exit_code=None,
        stderr_tail="assay-sandbox: cannot join cgroup /sys/fs/cgroup/x/cgroup.procs\n"),
     ("sandbox_error", None, None, "bubblewrap did not start the command: assay-sandbox: "
      "cannot join cgroup /sys/fs/cgroup/x/cgroup.procs")),
    ("sandbox-error-beats-limit-evidence",
     dict(returncode=1, bwrap_exit_code=None, evidence={"pid_limit_hits": 4}),
     ("sandbox_error", None, None, "bubblewrap did not start the command: wrapper exit status 1")),
    ("command-printing-the-wrapper-message-cannot-fake-sandbox-error", dict(
        returncode=125, bwrap_exit_code=125, stderr_tail="assay-sandbox: cannot join cgroup /x"),
     ("nonzero_exit", 125, None, None)),
    # --- timeout (watchdog)
    ("watchdog-killed-bwrap-before-it-reported",
     dict(returncode=-9, bwrap_exit_code=None, timed_out=True),
     ("timeout", None, "SIGKILL", WALL)),
    ("watchdog-fired-bwrap-exited-without-report",
     dict(returncode=1, bwrap_exit_code=None, timed_out=True),
     ("timeout", None, None, WALL)),
    ("signal-after-the-deadline-is-timeout",
     dict(returncode=143, bwrap_exit_code=143, timed_out=True),
     ("timeout", None, "SIGTERM", f"{WALL}; bubblewrap reported status 143: killed by SIGTERM")),
    ("exit-0-after-the-deadline-is-timeout", dict(timed_out=True), ("timeout", 0, None, WALL)),
    ("exit-1-after-the-deadline-is-timeout", dict(returncode=1, bwrap_exit_code=1, timed_out=True),
     ("timeout", 1, None, WALL)),
    ("fractional-wall-limit-in-detail",
     dict(returncode=-9, bwrap_exit_code=None, timed_out=True, wall_seconds=0.25),
     ("timeout", None, "SIGKILL", "wall time limit of 0.25 s exceeded; killed by the watchdog")),
    ("timeout-held-back-by-the-cpu-quota", dict(
        returncode=137, bwrap_exit_code=137, timed_out=True,
        evidence={"cpu_throttled_periods": 12, "cpu_throttled_ms": 480}),
     ("timeout", None, "SIGKILL", f"{WALL}; bubblewrap reported status 137: killed by SIGKILL; "
      "held back by the CPU quota in 12 period(s), 480 ms in all")),
    ("timeout-under-a-quota-that-never-throttled", dict(
        returncode=-9, bwrap_exit_code=None, timed_out=True,
        evidence={"cpu_throttled_periods": 0, "cpu_throttled_ms": 0}),
     ("timeout", None, "SIGKILL", WALL)),
    # --- timeout (RLIMIT_CPU)
    ("sigxcpu-under-rlimit-cpu", dict(
        returncode=152, bwrap_exit_code=152, cpu_seconds_mechanism="rlimit_cpu", cpu_seconds=5),
     ("timeout", None, "SIGXCPU", "CPU-time limit of 5 s exceeded (RLIMIT_CPU); "
      "bubblewrap reported status 152: killed by SIGXCPU")),
    ("sigxcpu-without-a-cpu-limit-is-not-ours", dict(returncode=152, bwrap_exit_code=152),
     ("nonzero_exit", None, "SIGXCPU", "bubblewrap reported status 152: killed by SIGXCPU")),
    # --- memory_limit
    ("cgroup-oom-kill", dict(returncode=137, bwrap_exit_code=137, evidence={"oom_kills": 1}),
     ("memory_limit", None, "SIGKILL", "cgroup OOM killer fired 1 time(s) (oom_kill counter); "
      "bubblewrap reported status 137: killed by SIGKILL")),
    ("oom-killer-took-bwrap-before-it-reported",
     dict(returncode=-9, bwrap_exit_code=None, evidence={"oom_kills": 2}),
     ("memory_limit", None, "SIGKILL", "cgroup OOM killer fired 2 time(s) (oom_kill counter)")),
    ("oom-beats-timeout", dict(returncode=137, bwrap_exit_code=137, timed_out=True,
                               evidence={"oom_kills": 1}),
     ("memory_limit", None, "SIGKILL", "cgroup OOM killer fired 1 time(s) (oom_kill counter); "
      "bubblewrap reported status 137: killed by SIGKILL")),
    ("oom-beats-refused-forks", dict(returncode=1, bwrap_exit_code=1,
                                     evidence={"oom_kills": 1, "pid_limit_hits": 3}),
     ("memory_limit", 1, None, "cgroup OOM killer fired 1 time(s) (oom_kill counter)")),
    ("memory-error-inferred-under-rlimit-data", dict(
        returncode=1, bwrap_exit_code=1, memory_mechanism="rlimit_data",
        stderr_tail="Traceback (most recent call last):\nMemoryError\n"),
     ("memory_limit", 1, None,
      "inferred from stderr ('MemoryError'); RLIMIT_DATA leaves no kernel record")),
    ("v8-allocation-failure-inferred-under-rlimit-data", dict(
        returncode=134, bwrap_exit_code=134, memory_mechanism="rlimit_data",
        stderr_tail="FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of "
        "memory\n"),
     ("memory_limit", None, "SIGABRT", "inferred from stderr ('Allocation failed'); RLIMIT_DATA "
      "leaves no kernel record; bubblewrap reported status 134: killed by SIGABRT")),
    ("memory-error-under-a-cgroup-is-not-inferred", dict(
        returncode=1, bwrap_exit_code=1, stderr_tail="MemoryError\n"),
     ("nonzero_exit", 1, None, None)),
    # --- process_limit
    ("pids-max-refused-forks", dict(returncode=1, bwrap_exit_code=1,
                                    evidence={"pid_limit_hits": 3}),
     ("process_limit", 1, None, "3 fork(s) refused by pids.max (pids.events)")),
    ("refused-forks-beat-timeout", dict(returncode=-9, bwrap_exit_code=None, timed_out=True,
                                        evidence={"pid_limit_hits": 1}),
     ("process_limit", None, "SIGKILL", "1 fork(s) refused by pids.max (pids.events)")),
    ("fork-error-inferred-under-rlimit-nproc", dict(
        returncode=1, bwrap_exit_code=1, pids_mechanism="rlimit_nproc",
        stderr_tail="BlockingIOError: [Errno 11] Resource temporarily unavailable\n"),
     ("process_limit", 1, None,
      "inferred from stderr ('BlockingIOError'); RLIMIT_NPROC leaves no kernel record")),
    ("fork-error-not-inferred-when-no-pids-limit-applied", dict(
        returncode=1, bwrap_exit_code=1, pids_mechanism="not_applied",
        stderr_tail="BlockingIOError: [Errno 11] Resource temporarily unavailable\n"),
     ("nonzero_exit", 1, None, None)),
    ("rlimit-data-without-a-memory-message-falls-through-to-pids", dict(
        returncode=1, bwrap_exit_code=1, memory_mechanism="rlimit_data",
        evidence={"pid_limit_hits": 1}),
     ("process_limit", 1, None, "1 fork(s) refused by pids.max (pids.events)")),
    # --- isolation="none": the return code is the command's own
    ("plain-ok", dict(sandboxed=False, bwrap_exit_code=None), ("ok", 0, None, None)),
    ("plain-ignores-any-bwrap-status", dict(sandboxed=False, returncode=3, bwrap_exit_code=0),
     ("nonzero_exit", 3, None, None)),
    ("plain-killed-by-a-signal", dict(sandboxed=False, returncode=-15, bwrap_exit_code=None),
     ("nonzero_exit", None, "SIGTERM", None)),
    ("plain-unreaped-counts-as-sigkill", dict(sandboxed=False, returncode=None,
                                              bwrap_exit_code=None),
     ("nonzero_exit", None, "SIGKILL", None)),
    ("plain-timeout", dict(sandboxed=False, returncode=-15, bwrap_exit_code=None, timed_out=True),
     ("timeout", None, "SIGTERM", WALL)),
    ("plain-oom-kill", dict(sandboxed=False, returncode=-9, bwrap_exit_code=None,
                            evidence={"oom_kills": 1}),
     ("memory_limit", None, "SIGKILL", "cgroup OOM killer fired 1 time(s) (oom_kill counter)")),
    ("plain-wrapper-failed", dict(
        sandboxed=False, returncode=125, bwrap_exit_code=None,
        stderr_tail="  assay-sandbox: cannot apply ulimit -d 1024\n"),
     ("sandbox_error", 125, None,
      "the wrapper failed: assay-sandbox: cannot apply ulimit -d 1024")),
    ("plain-125-without-the-wrapper-message", dict(
        sandboxed=False, returncode=125, bwrap_exit_code=None, stderr_tail="boom\n"),
     ("nonzero_exit", 125, None, None)),
    # --- disk_limit: the disk watcher's kill (bwrap killed before it reported), a file at the
    # per-file limit (SIGXFSZ), a write refused there (EFBIG: the folders at the limit)
    ("disk-watcher-killed-bwrap", dict(returncode=-9, bwrap_exit_code=None, disk_mib=64,
                                       evidence={"disk_over_bytes": 70_000_000}),
     ("disk_limit", None, "SIGKILL", "its writable folders took 70,000,000 bytes on disk, "
      "over the limit of 64 MiB (67,108,864 bytes); killed by the disk watcher while it "
      "wrote")),
    ("file-at-the-per-file-limit", dict(returncode=153, bwrap_exit_code=153, disk_mib=64),
     ("disk_limit", None, "SIGXFSZ", "a file reached the per-file limit of 64 MiB "
      "(RLIMIT_FSIZE); bubblewrap reported status 153: killed by SIGXFSZ")),
    ("write-refused-at-the-limit", dict(returncode=1, bwrap_exit_code=1, disk_mib=64,
                                        evidence={"disk_peak_bytes": 64 << 20}),
     ("disk_limit", 1, None, "its writable folders took 67,108,864 bytes on disk, the limit "
      "of 64 MiB: writes past it fail")),
    # the size-limited filesystem: the poller's kill at the limit, an ENOSPC the command
    # swallowed before exiting 0 (still the limit, not a success), no inode left
    ("disk-image-poller-killed-bwrap", dict(
        returncode=-9, bwrap_exit_code=None, disk_mib=64, disk_mechanism="rlimit_fsize+ext4_image",
        evidence={"disk_over_bytes": 64 << 20}),
     ("disk_limit", None, "SIGKILL", "its writable folders took 67,108,864 bytes on disk, the "
      "limit of 64 MiB (67,108,864 bytes) or more: writes past it fail on its size-limited "
      "filesystem (ENOSPC), and it is ended there")),
    ("disk-image-enospc-swallowed-exit-0", dict(
        disk_mib=64, disk_mechanism="rlimit_fsize+ext4_image",
        evidence={"disk_over_bytes": 65 << 20}),
     ("disk_limit", 0, None, "its writable folders took 68,157,440 bytes on disk, the limit "
      "of 64 MiB (67,108,864 bytes) or more: writes past it fail on its size-limited "
      "filesystem (ENOSPC), and it is ended there")),
    ("disk-image-no-inode-left", dict(
        returncode=1, bwrap_exit_code=1, disk_mib=64, disk_mechanism="rlimit_fsize+ext4_image",
        evidence={"disk_inodes_full": 1, "disk_peak_bytes": 40 << 20}),
     ("disk_limit", 1, None, "its writable folders used every inode of their size-limited "
      "filesystem (64 MiB): no file could be made (ENOSPC)")),
    ("sigxfsz-without-a-disk-limit", dict(returncode=153, bwrap_exit_code=153),
     ("nonzero_exit", None, "SIGXFSZ", "bubblewrap reported status 153: killed by SIGXFSZ")),
]


@pytest.mark.parametrize(("facts", "expected"), [pytest.param(f, e, id=i) for i, f, e in TABLE])
def test_classify(facts: dict[str, Any], expected: tuple[str, int | None, str | None, str | None]
                  ) -> None:
    got = classify(**{**BASE, **facts})
    assert isinstance(got, Outcome)
    assert tuple(got) == expected


def test_every_reason_has_a_row_and_rows_are_distinct() -> None:
    assert {e[0] for _, _, e in TABLE} == set(REASONS)
    ids = [i for i, _, _ in TABLE]
    assert len(ids) == len(set(ids))
    facts = [repr(sorted(f.items())) for _, f, _ in TABLE]
    assert len(facts) == len(set(facts))


def test_classify_is_pure() -> None:
    """Same facts, same answer; the evidence passed in is not changed."""
    facts = {**BASE, "evidence": {"oom_kills": 1, "pid_limit_hits": 1}}
    before = copy.deepcopy(facts)
    first = classify(**facts)
    assert classify(**facts) == first
    assert facts == before
