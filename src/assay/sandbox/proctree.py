"""Finding and signalling every process of one execution, so none outlives it.

Under bubblewrap the command's processes live in a PID namespace whose PID 1 is bwrap's reaper:
killing that PID 1 makes the kernel kill everything left in the namespace at once (a process
that ignores SIGTERM, forks, or calls setsid cannot escape it). Without isolation the same is done
with the process group and the execution's cgroups. Kept apart from the watchdog so the *who* of
killing is separate from the *when*.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable


def descendants(root: int) -> set[int]:
    """All processes below ``root`` (by scanning /proc; only used when killing)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                data = fh.read()
            ppid = int(data[data.rfind(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def kill(pids: set[int], sig: int) -> None:
    """Signal each of ``pids``; one that is already gone is not an error."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


class ProcessTree:
    """The processes of one execution: the top process ``top`` (bwrap's monitor, or the command
    itself without isolation), the namespace's PID 1 once bwrap has reported it (``ns_init``),
    and whatever is in the execution's cgroups (``cgroup_procs``)."""

    def __init__(
        self,
        top: int,
        *,
        sandboxed: bool,
        ns_init: Callable[[], int | None],
        cgroup_procs: Callable[[], set[int]],
    ) -> None:
        self.top = top
        self.sandboxed = sandboxed
        self.ns_init = ns_init
        self.cgroup_procs = cgroup_procs

    def signal_command(self, sig: int) -> None:
        """SIGTERM/SIGKILL to the command's processes, not (yet) to bwrap's own two."""
        init = self.ns_init()
        targets = descendants(init or self.top) | self.cgroup_procs()
        if self.sandboxed:
            targets -= {self.top, init}
        else:
            targets.add(self.top)
            _killpg(self.top, sig)
        kill(targets, sig)

    def kill_everything(self) -> None:
        init = self.ns_init()
        if init is not None:
            kill({init}, signal.SIGKILL)  # PID 1 gone => the kernel kills the whole namespace
        kill({self.top}, signal.SIGKILL)
        if not self.sandboxed:
            _killpg(self.top, signal.SIGKILL)
        kill(descendants(self.top) | self.cgroup_procs(), signal.SIGKILL)

    def kill_leftovers(self) -> None:
        """After the top process is gone. Under bwrap the namespace died with it; without
        isolation, whatever it left running in its process group or cgroups is killed now."""
        if not self.sandboxed:
            _killpg(self.top, signal.SIGKILL)
        kill(self.cgroup_procs() - {self.top}, signal.SIGKILL)
