"""Limit planning, the cgroup evidence readers and the shell wrapper, each on its own.

Planning is checked per limit (what each mechanism claims, and what it says it does not cover);
the evidence readers read real files laid out as the kernel lays them out (v1 and v2), so "a
missing counter stays missing" is pinned without needing an OOM on this machine; the wrapper is
run by a real ``/bin/sh``. ``test_sandbox.py`` checks the same end to end through bubblewrap.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.sandbox import NOT_APPLIED, AppliedLimit, Limits
from assay.sandbox.cgroups import Cgroup, open_cgroups, remove_cgroup
from assay.sandbox.evidence import read_evidence
from assay.sandbox.outcome import classify
from assay.sandbox.plan import (
    cgroup_wants,
    cpu_quota_us,
    plan_cpu_cores,
    plan_cpu_seconds,
    plan_limits,
    plan_memory,
    plan_pids,
    plan_wall,
)
from assay.sandbox.wrapper import WRAPPER_FAILED_EXIT, WRAPPER_MESSAGE_PREFIX, wrapper_argv


def _clamped(res: int, value: int) -> int:
    hard = resource.getrlimit(res)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


# --------------------------------------------------------------------------------------------
# one planning function per limit


@pytest.mark.parametrize(("planned", "record"), [
    pytest.param(plan_memory(None, None, ""), {
        "value": None, "mechanism": NOT_APPLIED, "reason": "no memory limit requested"},
        id="memory-none"),
    pytest.param(plan_memory(64, "cgroup_v1", "ignored"), {"value": 64, "mechanism": "cgroup_v1"},
                 id="memory-cgroup"),
    pytest.param(plan_pids(None, None, ""), {
        "value": None, "mechanism": NOT_APPLIED, "reason": "no process limit requested"},
        id="pids-none"),
    pytest.param(plan_pids(10, "cgroup_v2", ""), {
        "value": 10, "mechanism": "cgroup_v2",
        "note": "counts threads; pids.max = 10 + 2 for bubblewrap's monitor and reaper"},
        id="pids-cgroup"),
    pytest.param(plan_cpu_seconds(None), {
        "value": None, "mechanism": NOT_APPLIED, "reason": "no CPU-time limit requested"},
        id="cpu-seconds-none"),
    pytest.param(plan_cpu_cores(None, "cgroup_v2", ""), {
        "value": None, "mechanism": NOT_APPLIED, "reason": "no CPU quota requested"},
        id="cpu-cores-none"),
    pytest.param(plan_cpu_cores(0.5, None, "no cpu hierarchy"), {
        "value": 0.5, "mechanism": NOT_APPLIED,
        "reason": "no cgroup cpu controller (no cpu hierarchy)"}, id="cpu-cores-no-cgroup"),
    pytest.param(plan_wall(7, 1.0), {
        "value": 7, "mechanism": "watchdog",
        "note": "SIGTERM to the command's processes, SIGKILL to all after 1 s"}, id="wall"),
])
def test_planned_record_without_rlimits(planned, record) -> None:
    assert planned.applied.to_record() == record
    assert planned.ulimits == ()


def test_memory_falls_back_to_rlimit_data_and_says_what_it_misses() -> None:
    planned = plan_memory(64, None, "no v2; no v1")
    kib = _clamped(resource.RLIMIT_DATA, 64 << 20) // 1024
    assert planned.ulimits == (f"ulimit -d {kib}",)
    assert planned.applied.mechanism == "rlimit_data" and planned.applied.value == kib // 1024
    assert "not shared memory, tmpfs or page cache" in (planned.applied.note or "")
    assert (planned.applied.note or "").endswith("no cgroup: no v2; no v1")


def test_pids_without_cgroup_is_honest_about_uid() -> None:
    planned = plan_pids(10, None, "no pids hierarchy")
    if os.getuid() == 0:
        assert planned.applied.mechanism == NOT_APPLIED and planned.ulimits == ()
        assert planned.applied.reason is not None
        assert planned.applied.reason.startswith("no cgroup (no pids hierarchy)")
        assert "uid 0" in planned.applied.reason
    else:
        assert planned.applied.mechanism == "rlimit_nproc"
        [stmt] = planned.ulimits
        assert stmt.startswith("ulimit -p ") and int(stmt.split()[-1]) > 10
        assert "shared with every other process" in (planned.applied.note or "")


def test_cpu_seconds_soft_then_hard_one_second_later() -> None:
    planned = plan_cpu_seconds(3)
    soft = _clamped(resource.RLIMIT_CPU, 3)
    hard = _clamped(resource.RLIMIT_CPU, soft + 1)
    assert planned.ulimits == (f"ulimit -S -t {soft}", f"ulimit -H -t {hard}")
    assert planned.applied == AppliedLimit(
        soft, "rlimit_cpu", note="per process: SIGXCPU at the limit, SIGKILL 1 s later")


def test_cpu_cores_under_a_cgroup_is_a_quota() -> None:
    planned = plan_cpu_cores(0.5, "cgroup_v1", "")
    assert planned.applied.mechanism == "cgroup_v1" and planned.applied.value == 0.5
    assert (planned.applied.note or "").startswith("CFS quota 50000 us per 100000 us period")
    assert cpu_quota_us(2) == 200_000
    assert cpu_quota_us(0.005) == 1000  # the kernel refuses quotas under 1 ms


def test_cgroup_wants_are_in_the_kernels_units() -> None:
    assert cgroup_wants(Limits(memory_mib=64, pids=10, cpu_cores=0.5)) == {
        "memory": 64 << 20, "pids": 12, "cpu": 50_000}
    assert cgroup_wants(Limits(memory_mib=None, pids=None)) == {}


def test_plan_without_cgroups_applies_rlimits_through_the_wrapper(tmp_path: Path) -> None:
    plan = plan_limits(Limits(wall_seconds=5, memory_mib=100, pids=20, cpu_seconds=4,
                              cpu_cores=1.0), use_cgroups=False, grace_seconds=1.0)
    try:
        assert plan.cgroups == []
        assert list(plan.applied) == ["memory_mib", "pids", "cpu_seconds", "cpu_cores",
                                      "wall_seconds", "disk_mib"]
        assert plan.ulimits[0] == "ulimit -c 0"
        assert "use_cgroups=False" in (plan.applied["memory_mib"].note or "")
        assert "use_cgroups=False" in (plan.applied["cpu_cores"].reason or "")
        assert plan.evidence() == {}  # no cgroup, no kernel record: nothing claimed
        out = subprocess.run(
            [*plan.wrapper_argv(), "sh", "-c", "ulimit -c; ulimit -d; ulimit -S -t"],
            capture_output=True, text=True, check=True, cwd=tmp_path).stdout.split()
        kib = _clamped(resource.RLIMIT_DATA, 100 << 20) // 1024
        assert out == ["0", str(kib), str(_clamped(resource.RLIMIT_CPU, 4))]
    finally:
        assert plan.cleanup() == []


# --------------------------------------------------------------------------------------------
# the wrapper, run by a real shell


def test_wrapper_joins_with_the_pid_that_becomes_the_command(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    out = subprocess.run([*wrapper_argv([str(procs)], []), "sh", "-c", "echo $$"],
                         capture_output=True, text=True, check=True).stdout
    assert procs.read_text().strip() == out.strip()


def test_wrapper_never_interpolates_cgroup_paths(tmp_path: Path) -> None:
    d = tmp_path / "x$(touch pwned)`touch pwned2`"
    d.mkdir()
    (d / "cgroup.procs").write_text("")
    subprocess.run([*wrapper_argv([str(d / "cgroup.procs")], []), "true"], check=True,
                   cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [d.name]
    assert (d / "cgroup.procs").read_text().strip().isdigit()


def test_wrapper_failure_is_classified_as_sandbox_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone" / "cgroup.procs")
    proc = subprocess.run([*wrapper_argv([missing], []), "sh", "-c", "echo ran"],
                          capture_output=True, text=True)
    assert proc.returncode == WRAPPER_FAILED_EXIT and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == f"{WRAPPER_MESSAGE_PREFIX} cannot join cgroup {missing}"
    outcome = classify(sandboxed=False, returncode=proc.returncode, bwrap_exit_code=None,
                       timed_out=False, evidence={}, stderr_tail=proc.stderr,
                       memory_mechanism="rlimit_data", pids_mechanism="not_applied",
                       cpu_seconds_mechanism="not_applied", wall_seconds=5.0, cpu_seconds=None)
    assert outcome.reason == "sandbox_error"
    assert outcome.detail == f"the wrapper failed: {WRAPPER_MESSAGE_PREFIX} cannot join cgroup "\
        f"{missing}"


def test_wrapper_failed_ulimit_stops_before_the_command() -> None:
    # a soft limit above the hard one is refused (EINVAL) for every user, root included
    stmts = ["ulimit -S -t 5", "ulimit -H -t 5", "ulimit -S -t 50"]
    proc = subprocess.run([*wrapper_argv([], stmts), "sh", "-c", "echo ran"],
                          capture_output=True, text=True)
    assert proc.returncode == WRAPPER_FAILED_EXIT and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == f"{WRAPPER_MESSAGE_PREFIX} cannot apply ulimit -S -t 50"


# --------------------------------------------------------------------------------------------
# evidence, from files laid out as the kernel writes them


def _cg(tmp_path: Path, version: int, controllers: tuple[str, ...],
        files: dict[str, str]) -> Cgroup:
    d = tmp_path / f"v{version}-{'-'.join(controllers)}"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    return Cgroup(version, d, controllers)


def test_v2_evidence(tmp_path: Path) -> None:
    cg = _cg(tmp_path, 2, ("cpu", "memory", "pids"), {
        "memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n",
        "memory.peak": "1234\n",
        "pids.events": "max 3\n",
        "pids.peak": "17\n",
        "cpu.stat": "usage_usec 900\nnr_periods 10\nnr_throttled 4\nthrottled_usec 25999\n",
    })
    assert read_evidence([cg]) == {
        "memory_limit_hits": 7, "oom_kills": 1, "memory_peak_bytes": 1234,
        "pid_limit_hits": 3, "pids_peak": 17,
        "cpu_throttled_periods": 4, "cpu_throttled_ms": 25,
    }


def test_v1_evidence_across_controllers(tmp_path: Path) -> None:
    mem = _cg(tmp_path, 1, ("memory",), {
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        "memory.max_usage_in_bytes": "999\n",
        "memory.failcnt": "5\n",  # not read: recent kernels leave it at 0 when the limit is hit
    })
    pids = _cg(tmp_path, 1, ("pids",), {"pids.events": "max 0\n"})
    cpu = _cg(tmp_path, 1, ("cpu",), {
        "cpu.stat": "nr_periods 10\nnr_throttled 4\nthrottled_time 3000000000\n"})
    assert read_evidence([mem, pids, cpu]) == {
        "oom_kills": 2, "memory_peak_bytes": 999, "pid_limit_hits": 0,
        "cpu_throttled_periods": 4, "cpu_throttled_ms": 3000,
    }


def test_missing_or_garbled_counters_stay_unknown(tmp_path: Path) -> None:
    empty = _cg(tmp_path, 2, ("memory", "pids", "cpu"), {})
    garbled = _cg(tmp_path, 1, ("pids", "memory"), {
        "pids.events": "max lots\n", "pids.peak": "max\n", "memory.oom_control": "oom_kill\n"})
    assert read_evidence([empty]) == {}
    assert read_evidence([garbled]) == {}
    # a controller the cgroup is not used for is not read, even if its files are there
    other = _cg(tmp_path, 1, ("cpu",), {"pids.events": "max 9\n"})
    assert read_evidence([other]) == {}


# --------------------------------------------------------------------------------------------
# real cgroups, where this machine offers them


def test_open_cgroups_configures_and_removes(tmp_path: Path) -> None:
    got = open_cgroups({"pids": 12})
    if "pids" not in got.mechanism:
        for cg in got.cgroups:
            remove_cgroup(cg)
        pytest.skip(f"no writable pids cgroup here: {got.why_not.get('pids')}")
    try:
        [cg] = got.cgroups
        assert got.mechanism["pids"] == ("cgroup_v2" if cg.version == 2 else "cgroup_v1")
        assert "pids" in cg.controllers and cg.path.name.startswith(f"assay-{os.getpid()}-")
        assert (cg.path / "pids.max").read_text().strip() == "12"
        assert cg.procs() == set()
        assert read_evidence([cg])["pid_limit_hits"] == 0
    finally:
        for cg in got.cgroups:
            assert remove_cgroup(cg) is None
    assert not any(cg.path.exists() for cg in got.cgroups)


# The owner: a process that makes an execution's cgroup, starts a child in it through the real
# wrapper (as the sandbox does before exec-ing bubblewrap) and then waits to be killed.
_OWNER = r"""
import json, subprocess, sys, time
from assay.sandbox.cgroups import open_cgroups
from assay.sandbox.wrapper import wrapper_argv
got = open_cgroups({"pids": 32})
if "pids" not in got.mechanism:
    print(json.dumps({"skip": got.why_not.get("pids")}), flush=True)
    sys.exit(0)
[cg] = got.cgroups
child = subprocess.Popen(wrapper_argv([str(cg.path / "cgroup.procs")], []) + ["sleep", "300"],
                         start_new_session=True)
while child.pid not in cg.procs():
    time.sleep(0.01)
print(json.dumps({"cgroup": str(cg.path), "child": child.pid}), flush=True)
time.sleep(300)
"""


def _owner() -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    if "skip" in info:
        proc.wait(10)
        pytest.skip(f"no writable pids cgroup here: {info['skip']}")
    return proc, info


def _ended(pid: int, timeout: float = 10) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_killed_owners_cgroup_is_swept_and_what_runs_in_it_ended() -> None:
    """A runner killed with SIGKILL leaves its executions' cgroups, and whatever its sandbox
    could not take down with it; the next assay process removes both. A live owner's cgroup
    is left alone."""
    from assay.sandbox.cgroups import sweep_orphans

    dead, dead_info = _owner()
    live, live_info = _owner()
    try:
        dead.kill()
        dead.wait(10)
        orphan_pid = int(dead_info["child"])  # type: ignore[call-overload]
        os.kill(orphan_pid, 0)  # outlived its owner: the case the sweep is for
        swept = {o.cgroup: o for o in sweep_orphans()}
        assert dead_info["cgroup"] in swept and live_info["cgroup"] not in swept
        assert swept[str(dead_info["cgroup"])].killed == (orphan_pid,)
        assert swept[str(dead_info["cgroup"])].problem is None
        assert not Path(str(dead_info["cgroup"])).exists()
        assert _ended(orphan_pid)
        assert Path(str(live_info["cgroup"])).is_dir()  # its owner still runs
        os.kill(int(live_info["child"]), 0)  # type: ignore[call-overload]
    finally:
        live.kill()
        live.wait(10)
        for o in sweep_orphans():  # the live owner's, now that it is dead too
            assert o.problem is None
    assert not Path(str(live_info["cgroup"])).exists()


def test_a_pid_reused_after_the_cgroup_was_made_is_not_its_owner(tmp_path: Path) -> None:
    """The owner test reads the cgroup's time against the process's start: this process
    started before a directory made now, and after one made an hour ago."""
    from assay.sandbox.cgroups import _owner_alive

    made = tmp_path / f"assay-{os.getpid()}-0123456789ab"
    made.mkdir()
    assert _owner_alive(os.getpid(), made)
    hour_ago = time.time() - 3600
    os.utime(made, (hour_ago, hour_ago))
    assert not _owner_alive(os.getpid(), made)  # this pid's process is younger: reused
    child = subprocess.Popen(["true"])
    child.wait()
    assert not _owner_alive(child.pid, made)  # no such process at all
