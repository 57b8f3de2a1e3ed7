"""Writes bounded while the command runs: the bytes its writable host folders hold, watched.

Why: the workspace limit (``resources.workspace_mib``) used to be measured only at the freeze,
so an agent that wrote 3 GB (or looped a log until its wall budget) filled the disk that holds
the run's ``state.sqlite``, its records and every other trial's workspace before anything
stopped it. Two mechanisms, both recorded as applied:

- the kernel's per-file limit, ``RLIMIT_FSIZE`` (``ulimit -f``, set by the wrapper): no single
  file of the execution grows past the limit (a write past it fails, ``SIGXFSZ``);
- this watcher, for the total: a thread that reads the free space of each filesystem holding a
  watched folder every ``POLL_SECONDS`` (one ``statvfs``, microseconds) and walks the folders
  (``st_blocks``: what they really take on the disk) when the filesystem lost half the room
  left under the limit since the last walk, and at least every second (every 20 walks' time
  for a large tree, so a walk costs at most 5% of a core). Over the limit, the command is
  killed (the execution's ``disk_limit``, ``resource_limit`` for a trial) with the figure.

The free space is the whole disk's: another writer costs walks, and another process deleting
files cannot hide this one's writes for longer than a second. What the disk lost while a walk
ran is added to the walk's figure (it may have landed in folders the walk had passed): near
the limit, another writer's bytes of that moment count against the command. The disk loses at
most the limit plus what is written while one walk runs: measured in
``tests/test_sandbox_disk.py``. A tree of more than ``MAX_ENTRIES`` entries counts as over (its
walk alone would be a denial of service).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

POLL_SECONDS = 0.05
#: The longest time between two walks (when a walk takes more than 1/20 of it: 20 walks' time).
EVERY_SECONDS = 1.0
#: Entries a walk reads before it calls the tree over the limit whatever its size.
MAX_ENTRIES = 1_000_000


def disk_usage(paths: Sequence[Path], max_entries: int = MAX_ENTRIES) -> tuple[int, int]:
    """(bytes the trees under ``paths`` take on disk, entries seen); never follows a link,
    never crosses into another filesystem; stops counting entries past ``max_entries``."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(p) for p in paths]
    while stack and entries <= max_entries:
        top = stack.pop()
        try:
            info = os.lstat(top)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        total += info.st_blocks * 512
        entries += 1
        if not stat.S_ISDIR(info.st_mode):
            continue
        try:
            with os.scandir(top) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        if st.st_dev == info.st_dev:
                            stack.append(entry.path)
                    elif st.st_nlink == 1 or (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
        except OSError:
            continue
    return total, entries


def _free(paths: Sequence[Path]) -> int:
    """Free bytes over the distinct filesystems holding ``paths``."""
    free, devices = 0, set()
    for path in paths:
        try:
            dev = os.stat(path).st_dev
            if dev in devices:
                continue
            devices.add(dev)
            vfs = os.statvfs(path)
        except OSError:
            continue
        free += vfs.f_bavail * vfs.f_frsize
    return free


class DiskWatch:
    """Watch ``paths`` against ``limit_bytes``; ``on_over(figure)`` once when over. Start
    with :meth:`start`, end with :meth:`stop` (joined)."""

    def __init__(self, paths: Sequence[Path], limit_bytes: int,
                 on_over: Callable[[int], None], *, poll: float = POLL_SECONDS) -> None:
        self.paths = [Path(p) for p in paths]
        self.limit = limit_bytes
        self.on_over = on_over
        self.poll = poll
        self.over: int | None = None
        self.walks = 0
        self.walk_seconds = 0.0
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="assay-disk-watch", daemon=True)

    def start(self) -> DiskWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the watch; unless it found the folders over, one last walk, so ``peak`` holds
        what they took at the end too (the polls walk only when the disk filled)."""
        self._stop.set()
        self._thread.join(30)
        if self.over is None:
            self._walk()

    def _walk(self) -> int:
        self.walks += 1
        started = time.monotonic()
        used, entries = disk_usage(self.paths)
        if entries > MAX_ENTRIES:
            used = max(used, self.limit + 1)
        self.peak = max(self.peak, used)
        self.walk_seconds = time.monotonic() - started
        return used

    def _run(self) -> None:
        used = self._walk()
        free, walked = _free(self.paths), time.monotonic()
        while not self._stop.wait(self.poll):
            now = _free(self.paths)
            # Walk when the disk lost half the room left (a fast writer is caught early), or
            # at least every EVERY_SECONDS (the free space is the whole disk's: another
            # process deleting files there hides this one's writes), spaced to 20 walks'
            # time so a large tree does not cost more than 5% of a core.
            due = walked + max(EVERY_SECONDS, 20 * self.walk_seconds)
            if 2 * (free - now) < (self.limit - used) and time.monotonic() < due:
                continue
            before = _free(self.paths)
            used = self._walk()
            after = _free(self.paths)
            # what the disk lost while the walk ran may have landed behind it: counted too
            # (a walk of a large tree takes long enough for a fast writer to go far past)
            figure = used + max(0, before - after)
            if figure > self.limit:
                self.over = figure
                self.on_over(figure)
                return
            free, walked = after, time.monotonic()  # a new baseline
