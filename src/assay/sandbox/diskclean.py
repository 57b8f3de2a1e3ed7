"""Where disk images live, and their end: unmounted and deleted when an execution is done, or
by the next process when the one that made them was killed.

Why apart from :mod:`assay.sandbox.diskimage`: making an image and cleaning up after one run
at different times and in different processes (a killed runner's images are swept by the next
runner, before its first attempt). Images are named for the process that made them and its
start time (``<pid>-<start>-<12 hex>.img`` beside its mount point ``… .mnt``), so a live
process's are never touched and a reused pid is not mistaken for their maker. The unmount of
a finished image writes its filesystem back and its deletion frees its blocks, tens of
milliseconds on a loaded disk: a thread of its own does both (:func:`drain` waits for it; it
is drained at exit), so an attempt does not wait for them once its folders are back.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import threading
import uuid
from pathlib import Path

from assay.sandbox.cgroups import _started_at
from assay.sandbox.loopmount import unmount

#: Where the images and their mount points live (one folder per host, root's): the disk that
#: holds it loses at most the sum of the running executions' limits.
DISK_DIR_ENV = "ASSAY_DISK_DIR"
DEFAULT_DISK_DIR = Path("/var/tmp/assay-disk")
#: ``<pid>-<its start, s since the epoch>-<12 hex>.img`` and ``… .mnt``
_NAME = re.compile(r"(\d+)-(\d+)-[0-9a-f]{12}\.(img|mnt)")


def disk_dir() -> Path:
    return Path(os.environ.get(DISK_DIR_ENV) or DEFAULT_DISK_DIR)


def new_names() -> tuple[Path, Path]:
    """A new image's path and its mount point's, named for this process (and its start, so
    a reused pid is not taken for it) in :func:`disk_dir`."""
    home = disk_dir()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    stem = f"{os.getpid()}-{int(_started_at(os.getpid()) or 0)}-{uuid.uuid4().hex[:12]}"
    return home / f"{stem}.img", home / f"{stem}.mnt"


def mounts_under(path: Path) -> list[Path]:
    """The mount points at ``path`` or under it, in this process's mount namespace (our own
    names: no space or backslash to unescape)."""
    top = str(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            points = [line.split()[4] for line in fh]
    except OSError:
        return []
    return [Path(p) for p in dict.fromkeys(points) if p == top or p.startswith(top + "/")]


def mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point in this process's mount namespace."""
    return str(path) in map(str, mounts_under(path))


def unmount_all(path: Path) -> list[str]:
    """Unmount ``path`` and whatever is mounted under it, the deepest first."""
    warnings: list[str] = []
    for point in sorted(mounts_under(path), key=lambda p: -len(p.parts)):
        try:
            unmount(point)
        except OSError as exc:
            warnings.append(f"could not unmount {point}: {exc}")
    return warnings


def remove_image(image: Path, mount: Path) -> list[str]:
    """Unmount ``mount`` (lazily if busy: it goes when its last user does), delete both."""
    warnings = unmount_all(mount)
    with contextlib.suppress(FileNotFoundError):
        if not mounted(mount):
            mount.rmdir()
    with contextlib.suppress(FileNotFoundError):
        image.unlink()
    return warnings


class _Remover:
    """Unmounts and deletes finished images on a thread of its own: the unmount writes the
    filesystem back and the deletion frees its blocks, tens of milliseconds on a loaded disk
    that the attempt need not wait for (its folders are back already). What is still queued
    when the process is killed is an image of an ended process: the next one sweeps it."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Path, Path]] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.warnings: list[str] = []

    def put(self, image: Path, mount: Path) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="assay-disk-remover",
                                                daemon=True)
                self._thread.start()
        self._queue.put((image, mount))

    def _run(self) -> None:
        while True:
            image, mount = self._queue.get()
            try:
                self.warnings += remove_image(image, mount)
            except OSError as exc:
                self.warnings.append(f"could not remove {image}: {exc}")
            finally:
                del self.warnings[:-100]  # the latest hundred: bounded
                self._queue.task_done()

    def drain(self) -> None:
        self._queue.join()


_remover = _Remover()


def remove_later(image: Path, mount: Path) -> None:
    """Hand a finished image to the remover thread."""
    _remover.put(image, mount)


def drain() -> list[str]:
    """Wait until every finished image is unmounted and deleted; what went wrong doing so."""
    _remover.drain()
    return list(_remover.warnings)


atexit.register(drain)


def _owner_alive(pid: int, started: int) -> bool:
    """Whether the process that named an image still runs (a reused pid started later)."""
    now = _started_at(pid)
    return now is not None and abs(now - started) <= 1.0


def sweep_stale() -> list[str]:
    """Unmount and delete the images of assay processes that have ended (killed before they
    removed them). Returns the names removed; an image of a live process is left alone."""
    home = disk_dir()
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    swept: list[str] = []
    for name in names:
        m = _NAME.fullmatch(name)
        if m is None or m.group(3) != "img" or _owner_alive(int(m.group(1)), int(m.group(2))):
            continue
        stem = name[: -len(".img")]
        remove_image(home / name, home / f"{stem}.mnt")
        swept.append(stem)
    for name in names:  # a mount point whose image is gone (killed between the two)
        m = _NAME.fullmatch(name)
        if (m is not None and m.group(3) == "mnt" and name[:-4] not in swept
                and not _owner_alive(int(m.group(1)), int(m.group(2)))):
            remove_image(home / f"{name[:-4]}.img", home / name)
            swept.append(name[:-4])
    return swept


_sweep_lock = threading.Lock()
_swept: list[list[str]] = []


def sweep_stale_once() -> list[str]:
    """:func:`sweep_stale` the first time this process asks; later calls return that."""
    with _sweep_lock:
        if not _swept:
            _swept.append(sweep_stale())
        return list(_swept[0])
