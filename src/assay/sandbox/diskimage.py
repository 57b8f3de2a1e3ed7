"""A size-limited filesystem per execution: what its writable folders change, on a sparse
ext4 image.

Why: the disk watcher (:mod:`assay.sandbox.diskwatch`) is a thread that walks folders; among
``make test``'s workers on two cores it was starved long enough for a writer of small files to
hold 174 MiB under a 64 MiB limit. A bound that holds whatever the load is the kernel's: each
writable folder of the execution (its workspace, HOME) is an overlay whose lower layer is the
host folder, read as it is, and whose upper layer, where every change lands, is on one ext4
filesystem of exactly the limit plus :data:`MARGIN` of room, in a sparse image file on the
host's disk, mounted through a loop device for the run. A write past the room fails
(``ENOSPC``) however fast it comes; the image never takes more of the host's disk than its
room and ext4's metadata. A poller (:class:`ImageWatch`, one ``statvfs`` every 50 ms: no walk)
ends the execution once the changes hold the limit, so it ends as ``disk_limit`` with the
figure rather than running on with failing writes; starved, it is late, but the bound holds.

When the execution ends the overlays are unmounted and the upper layers carried back onto the
host folders (:mod:`assay.sandbox.upperdir`: only what changed is copied), then the image is
unmounted (its loop device goes with it: autoclear) and deleted on a thread of its own. An
assay process killed meanwhile leaves its image mounted: :func:`sweep_stale` (run once per
process, before its first image) unmounts and deletes every image whose process has ended.

Sizing: ext4 keeps part of its size for itself (inode tables, 1/32 of it at one inode per
8 KiB; bitmaps; 2% or 16 MiB at most reserved against delayed-allocation failures). Each
limit's empty filesystem is made once (a template in :func:`disk_dir`): larger than the limit
by a generous estimate of that, the room past ``limit + MARGIN`` then taken by one
preallocated file outside the folders (``fallocate``: no byte of it written to the host's
disk), so the room is exact whatever mke2fs chose. An execution copies the template's written
blocks (about 150 KiB) instead of running mkfs.

Needs root, ``mkfs.ext4``, loop devices and overlayfs (:func:`unavailable` says which is
missing; the watcher is used then, said once in the log and in each execution's record).
Measured (``bench/disk_image_overhead.py``): 18-34 ms added to an execution on this loaded
two-core machine, 7-11 ms of it to make the image.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from assay.sandbox.bwrap import Mount
from assay.sandbox.cgroups import _started_at
from assay.sandbox.loopmount import bind, mount_image, mount_overlay, unmount
from assay.sandbox.upperdir import carry_back as carry_upper_back

#: Where the images and their mount points live (one folder per host, root's): the disk that
#: holds it loses at most the sum of the running executions' limits.
DISK_DIR_ENV = "ASSAY_DISK_DIR"
DEFAULT_DISK_DIR = Path("/var/tmp/assay-disk")
#: Room past the limit: the poller ends the execution once the changes hold the limit; the
#: kernel refuses writes past limit + MARGIN (room for the poller to see it).
MARGIN = 1024 * 1024
POLL_SECONDS = 0.05
#: One inode per this many bytes (node_modules, pip caches: many small files).
INODE_RATIO = 8192
_MIB = 1024 * 1024
_RUN_SECONDS = 60.0
#: ``<pid>-<its start, s since the epoch>-<12 hex>.img`` and ``… .mnt``
_NAME = re.compile(r"(\d+)-(\d+)-[0-9a-f]{12}\.(img|mnt)")
#: in a template's name: a change to how images are made makes new ones
TEMPLATE_VERSION = 1


def disk_dir() -> Path:
    return Path(os.environ.get(DISK_DIR_ENV) or DEFAULT_DISK_DIR)


_log = logging.getLogger(__name__)
_why_not: list[str | None] = []
_why_lock = threading.Lock()


def unavailable() -> str | None:
    """Why a size-limited filesystem cannot be made here (``None``: it can), decided once."""
    with _why_lock:
        if not _why_not:
            _why_not.append(_probe())
            if _why_not[0] is not None:  # said once; each execution's record says it too
                _log.warning("writes are bounded by the disk watcher, not the kernel: no "
                             "size-limited filesystem can be made here (%s)", _why_not[0])
        return _why_not[0]


def _probe() -> str | None:
    if os.geteuid() != 0:
        return "not root (mounting a loop device needs it)"
    for tool in ("mkfs.ext4",):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    # the kernel may still refuse (a container without CAP_SYS_ADMIN, no overlayfs): try one
    try:
        disk_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=disk_dir(), prefix="probe-") as folder:
            image = DiskImage.create(MARGIN, [Path(folder)])
            image.close()
            _remover.drain()
    except OSError as exc:
        return f"a loop-mounted ext4 image with an overlay could not be made: {exc}"
    return None


def open_for(limit_mib: int, folders: Sequence[Path]) -> tuple[DiskImage | None, str | None]:
    """The execution's image for ``folders`` (host folders it can write) under
    ``limit_mib``, or ``None`` and why not (then the disk watcher holds the limit)."""
    why = unavailable()
    if why is not None:
        return None, why
    resolved = [Path(f).resolve() for f in folders]
    for i, folder in enumerate(resolved):
        if not folder.is_dir():
            return None, f"a writable mount is not a folder: {folder}"
        if any(j != i and folder.is_relative_to(other) for j, other in enumerate(resolved)):
            return None, f"a writable folder lies inside another: {folder}"
    try:
        return DiskImage.create(limit_mib * _MIB, resolved), None
    except OSError as exc:
        return None, f"the image could not be made: {exc}"


def image_bytes(limit: int) -> int:
    """The image's size for ``limit`` bytes of room: generous (the excess is taken back by a
    preallocated file), rounded up to a MiB."""
    room = limit + MARGIN
    size = room + room // 16 + min(room // 40, 17 * _MIB) + 4 * _MIB
    return -(-size // _MIB) * _MIB


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=_RUN_SECONDS,
                          check=False)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(argv[:2])} exited {proc.returncode}: "
                      f"{(proc.stderr or proc.stdout).strip()[-300:]}")


def _room(path: Path) -> tuple[int, int, int]:
    """(bytes used, bytes available, inodes available) of the filesystem at ``path``."""
    vfs = os.statvfs(path)
    return ((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize,
            vfs.f_favail)


def _mounts_under(path: Path) -> list[Path]:
    """The mount points at ``path`` or under it, in this process's mount namespace (our own
    names: no space or backslash to unescape)."""
    top = str(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            points = [line.split()[4] for line in fh]
    except OSError:
        return []
    return [Path(p) for p in dict.fromkeys(points) if p == top or p.startswith(top + "/")]


def _mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point in this process's mount namespace."""
    return str(path) in map(str, _mounts_under(path))


def _names() -> tuple[Path, Path]:
    """A new image's path and its mount point's, named for this process (and its start, so
    a reused pid is not taken for it) in :func:`disk_dir`."""
    home = disk_dir()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    stem = f"{os.getpid()}-{int(_started_at(os.getpid()) or 0)}-{uuid.uuid4().hex[:12]}"
    return home / f"{stem}.img", home / f"{stem}.mnt"


def _template(limit: int) -> Path:
    """The empty filesystem for ``limit`` (made once, kept in :func:`disk_dir`): mkfs, the
    room past ``limit + MARGIN`` taken by a preallocated file. An execution copies it (its
    written blocks only, about 150 KiB) rather than running mkfs."""
    path = disk_dir() / f"template-{TEMPLATE_VERSION}-{os.getuid()}-{limit}.img"
    if path.exists():
        return path
    image, mount = _names()
    try:
        with open(image, "xb") as fh:
            fh.truncate(image_bytes(limit))
        _run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-i", str(INODE_RATIO),
              "-O", "^has_journal,^resize_inode",
              "-E", f"lazy_itable_init=1,root_owner={os.getuid()}:{os.getgid()}", str(image)])
        mount.mkdir(mode=0o700)
        mount_image(image, mount)
        try:
            excess = _room(mount)[1] - (limit + MARGIN)
            if excess < 0:
                raise OSError(f"an image of {image_bytes(limit)} bytes has "
                              f"{excess + limit + MARGIN} bytes of room, under the "
                              f"{limit + MARGIN} asked")
            if excess > 0:  # allocated, never written: no byte of the host's disk
                fd = os.open(mount / "reserved", os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    os.posix_fallocate(fd, 0, excess)
                finally:
                    os.close(fd)
        finally:
            unmount(mount)
        os.replace(image, path)  # whole or not at all, whoever made it first
    finally:
        _remove(image, mount)
    return path


def _sparse_copy(source: Path, dest: Path) -> None:
    """Copy ``source`` to the new file ``dest``, its holes left holes."""
    with open(source, "rb") as src, open(dest, "xb") as out:
        size = os.fstat(src.fileno()).st_size
        out.truncate(size)
        offset = 0
        while offset < size:
            try:
                data = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past offset
                break
            hole = os.lseek(src.fileno(), data, os.SEEK_HOLE)
            while data < hole:
                copied = os.copy_file_range(src.fileno(), out.fileno(), hole - data, data, data)
                if copied <= 0:
                    raise OSError(f"could not copy {source} at byte {data}")
                data += copied
            offset = hole


def _overlay(root: Path, i: int, folder: Path) -> Path:
    """``folder`` as the lower layer of an overlay whose upper layer is on the image at
    ``root``: the view the sandbox binds (``root/v<i>``); its changes land in ``root/u<i>``."""
    lower, upper, work, view = (root / f"{k}{i}" for k in "luwv")
    for made in (lower, work, view):
        made.mkdir(mode=0o700)
    info = os.stat(folder)
    upper.mkdir()  # the view's own folder: the host folder's owner, mode and times
    os.chown(upper, info.st_uid, info.st_gid)
    os.chmod(upper, info.st_mode & 0o7777)
    os.utime(upper, ns=(info.st_atime_ns, info.st_mtime_ns))
    bind(folder, lower)
    mount_overlay(lower, upper, work, view)
    return view


def _unmount_all(path: Path) -> list[str]:
    """Unmount ``path`` and whatever is mounted under it, the deepest first."""
    warnings: list[str] = []
    for point in sorted(_mounts_under(path), key=lambda p: -len(p.parts)):
        try:
            unmount(point)
        except OSError as exc:
            warnings.append(f"could not unmount {point}: {exc}")
    return warnings


@dataclass
class DiskImage:
    """One execution's filesystem: ``inside[i]`` holds a copy of ``folders[i]`` for the run.
    Make it with :meth:`create`; :meth:`close` carries the folders back and removes it."""

    limit: int
    folders: list[Path]
    image: Path
    mount: Path
    #: what the empty filesystem used (its root folder, ``lost+found``): not the command's
    base_used: int = 0
    inside: list[Path] = field(default_factory=list)
    setup_ms: float = 0.0
    _closed: bool = False

    @classmethod
    def create(cls, limit: int, folders: Sequence[Path]) -> DiskImage:
        """A copy of the limit's template image, mounted, an overlay of each of ``folders``
        on it. Raises ``OSError`` (with everything it made removed) when any step fails."""
        sweep_stale_once()
        started = time.monotonic()
        template = _template(limit)
        made = cls(limit, [Path(f) for f in folders], *_names())
        try:
            _sparse_copy(template, made.image)
            made.mount.mkdir(mode=0o700)
            mount_image(made.image, made.mount)
            avail = _room(made.mount)[1]
            if avail != limit + MARGIN:
                raise OSError(f"the image {template} has {avail} bytes of room, not the "
                              f"{limit + MARGIN} asked")
            for i, folder in enumerate(made.folders):
                made.inside.append(_overlay(made.mount, i, folder))
            made.base_used = _room(made.mount)[0]  # the layers' own folders: not the command's
        except BaseException:
            made.close(carry_back=False)
            raise
        made.setup_ms = (time.monotonic() - started) * 1000
        return made

    def bound(self, workdir: Path, mounts: Sequence[Mount]) -> tuple[Path, list[Mount]]:
        """What the sandbox binds instead: the copy of ``workdir`` and of each writable
        mount's folder (in the order :meth:`create` was given them: ``workdir`` first)."""
        copies = iter(self.inside[1:])
        swapped = [dataclasses.replace(m, source=next(copies)) if m.writable else m
                   for m in mounts]
        return self.inside[0], swapped

    def used(self) -> tuple[int, int]:
        """(bytes the folders hold on the filesystem, inodes left: a new file needs one)."""
        used, _avail, inodes = _room(self.mount)
        return max(0, used - self.base_used), inodes

    def host_bytes(self) -> int:
        """What the image file takes on the host's disk now."""
        try:
            return os.stat(self.image).st_blocks * 512
        except OSError:
            return 0

    def close(self, *, carry_back: bool = True) -> list[str]:
        """Carry the folders back (unless ``carry_back`` is false), then hand the image to
        the remover (unmounted and deleted in the background: :func:`drain` waits for it).
        Returns warnings; every step is tried whatever the one before did."""
        if self._closed:
            return []
        self._closed = True
        warnings: list[str] = []
        for view in self.inside:  # the command is gone: nothing changes the layers now
            warnings += _unmount_all(view)
        if carry_back:
            for i, folder in enumerate(self.folders[: len(self.inside)]):
                try:
                    warnings += carry_upper_back(self.mount / f"u{i}", folder)
                except OSError as exc:
                    warnings.append(f"could not carry {folder} back from its disk image: {exc}")
        _remover.put(self.image, self.mount)
        return warnings


def _remove(image: Path, mount: Path) -> list[str]:
    """Unmount ``mount`` (lazily if busy: it goes when its last user does), delete both."""
    warnings = _unmount_all(mount)
    with contextlib.suppress(FileNotFoundError):
        if not _mounted(mount):
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
                self.warnings += _remove(image, mount)
            except OSError as exc:
                self.warnings.append(f"could not remove {image}: {exc}")
            finally:
                del self.warnings[:-100]  # the latest hundred: bounded
                self._queue.task_done()

    def drain(self) -> None:
        self._queue.join()


_remover = _Remover()


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
        _remove(home / name, home / f"{stem}.mnt")
        swept.append(stem)
    for name in names:  # a mount point whose image is gone (killed between the two)
        m = _NAME.fullmatch(name)
        if (m is not None and m.group(3) == "mnt" and name[:-4] not in swept
                and not _owner_alive(int(m.group(1)), int(m.group(2)))):
            _remove(home / f"{name[:-4]}.img", home / name)
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


class ImageWatch:
    """Poll one :class:`DiskImage`: ``on_over(figure)`` once the folders hold its limit or
    more (``over``, the figure) or no inode is left (``inodes_full``: no file can be made,
    whatever the bytes). ``peak`` and ``host_peak`` (the image file on the host's disk) are
    the largest figures seen."""

    def __init__(self, image: DiskImage, on_over: Callable[[int], None], *,
                 poll: float | None = None) -> None:
        self.image = image
        self.on_over = on_over
        self.poll = POLL_SECONDS if poll is None else poll
        self.over: int | None = None
        self.inodes_full = False
        self.peak = 0
        self.host_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="assay-disk-image",
                                        daemon=True)

    def start(self) -> ImageWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the poll; one last look, so a command that filled it and exited between two
        polls is still seen over."""
        self._stop.set()
        self._thread.join(30)
        if self.over is None and not self.inodes_full:
            self._look()

    def _look(self) -> bool:
        try:
            used, inodes = self.image.used()
        except OSError:
            return False
        self.peak = max(self.peak, used)
        self.host_peak = max(self.host_peak, self.image.host_bytes())
        if used >= self.image.limit:  # the next write would be past it: ended at the limit
            self.over = used
        self.inodes_full = inodes == 0
        return self.over is not None or self.inodes_full

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            if self._look():
                self.on_over(self.peak)
                return
