"""Finding a test's own leftover processes without mistaking another run's for them.

A "nothing outlives the runner" check used to be ``pgrep -f agent.py``: on a machine where
another test session (or CI job, or developer) runs sandboxes at the same time, it sees their
live agents and fails a run that left nothing behind. A process is this test's when its command
line holds the needle *and* it can be tied to the test's own temporary directory: its command
line, its working directory, or one of its mounts (a sandbox binds its workspace, which lives
under the test's directory, so ``/proc/PID/mountinfo`` names it even after the runner died).
The mounts count only for a process in a mount namespace other than this one's: the host's
own table lists what a killed runner left mounted there until the next start sweeps it (its
workspace's disk image, as root), and then every host process whose command line holds the
needle looked like the test's. Ray's raylet, whose command line names the dashboard's
``agent.py``, failed a "nothing outlives the runner" check that way when the Ray tests ran
beside it.
"""

from __future__ import annotations

import os
from pathlib import Path


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _namespace(pid: str) -> str:
    """The process's mount namespace (empty where it cannot be read)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _marker(root: Path) -> bytes:
    """The last two parts of the test's directory (``pytest-7/test_x0``): unique to one pytest
    session, and still found when the mount table shows the path relative to a tmpfs root."""
    parts = root.resolve().parts
    return "/".join(parts[-2:]).encode()


def own_processes(root: Path, needle: str | bytes) -> list[int]:
    """PIDs whose command line contains ``needle`` and that belong to ``root``'s test."""
    want = needle.encode() if isinstance(needle, str) else needle
    marker = _marker(root)
    own_mounts = _namespace("self")
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmd = _read(f"/proc/{entry.name}/cmdline").replace(b"\0", b" ")  # as pgrep -f sees it
        if want not in cmd:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd").encode()
        except OSError:
            cwd = b""
        if marker in cmd or marker in cwd or (
                _namespace(entry.name) != own_mounts
                and marker in _read(f"/proc/{entry.name}/mountinfo")):
            found.append(int(entry.name))
    return found


def _cmdline(pid: int | str) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ")[:160].decode(errors="replace")


def describe(pids: list[int]) -> str:
    """What a failed check shows of each process left: its state, parent, namespaces' pids and
    where the kernel has it waiting (a process the kernel is still taking down shows ``D`` or
    ``Z`` and the call it is stuck in)."""
    lines = []
    for pid in pids:
        status = {k: v.strip() for k, _, v in (
            line.partition(":") for line in _read(f"/proc/{pid}/status").decode().splitlines())}
        parent = status.get("PPid", "?")
        wchan = _read(f"/proc/{pid}/wchan").decode(errors="replace")
        lines.append(f"pid {pid}: state {status.get('State', '?')}, parent {parent} "
                     f"({_cmdline(parent)}), NSpid {status.get('NSpid', '?')}, "
                     f"wchan {wchan!r}, cmd {_cmdline(pid)}")
    return "\n".join(lines)
