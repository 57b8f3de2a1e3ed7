"""CPU seconds spent on behalf of one pytest process, for ``ASSAY_TEST_CPU_LOG`` (conftest.py).

Two ways, the better one where the machine allows it:

- **a cgroup** (``cpuacct``, cgroup v1, writable: root on these machines). The process moves
  itself into ``/sys/fs/cgroup/cpuacct/assay-tests/<worker>-<pid>`` and every process it starts
  is born there: a sandbox's processes, an agent CLI and its threads, Ray's daemons, whether or
  not anybody waits for them. ``cpuacct.usage`` counts them all. On leaving, the process moves
  back to the root and removes its group.
- **rusage** otherwise: this process and the children it waited for. It misses what was never
  waited for (most of a sandbox's and an agent CLI's processes, Ray's), about half of what the
  machine spends on the suite.

Either way, a process another test left running counts against the test that runs now.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_group: Path | None = None
_tried = False


def _join_group() -> Path | None:
    """This process's own cpuacct group, made on first use; None where that cannot be done."""
    global _group, _tried
    if _tried:
        return _group
    _tried = True
    name = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}"
    group = CPUACCT / "assay-tests" / name
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return None
    _group = group
    return _group


def _usage() -> tuple[resource.struct_rusage, resource.struct_rusage]:
    return resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)


def method() -> str:
    """What :func:`cpu_seconds` counts, for the log."""
    return "cgroup" if _join_group() is not None else "rusage"


def cpu_seconds() -> float:
    """CPU seconds so far: the cgroup's (every process started from here) or rusage's."""
    group = _join_group()
    if group is not None:
        return int((group / "cpuacct.usage").read_text()) / 1e9
    own, kids = _usage()
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def blocks_written() -> int:
    """512-byte blocks this process and its waited-for children wrote (fsyncs and builds)."""
    own, kids = _usage()
    return own.ru_oublock + kids.ru_oublock


def leave() -> None:
    """Back to the root group, and the group removed (children still in it keep it: then it
    stays, empty groups cost nothing)."""
    global _group
    if _group is None:
        return
    try:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        _group.rmdir()
    except OSError:
        pass
    _group = None
