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
unmounted (its loop device goes with it: autoclear) and deleted on a thread of its own, and
a killed process's images are swept by the next (:mod:`assay.sandbox.diskclean`).

Sizing: ext4 keeps part of its size for itself (inode tables, 1/32 of it at one inode per
8 KiB; bitmaps; 2% or 16 MiB at most reserved against delayed-allocation failures). Each
limit's empty filesystem is made once (a template in :func:`disk_dir`): larger than the limit
by a generous estimate of that, the room past ``limit + MARGIN`` then taken by one
preallocated file outside the folders (``fallocate``: no byte of it written to the host's
disk), so the room is exact whatever mke2fs chose. An execution copies the template's written
blocks (about 150 KiB) instead of running mkfs.

Needs root, ``mkfs.ext4``, loop devices and overlayfs (:func:`unavailable` says which is
missing; the watcher is used then, said once in the log and in each execution's record).
Measured (``bench/disk_image_overhead.py``): 18-39 ms added to an execution on this loaded
two-core machine, 7-12 ms of it to make the image.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from assay.sandbox.bwrap import Mount
from assay.sandbox.diskclean import (
    disk_dir,
    drain,
    new_names,
    remove_image,
    remove_later,
    sweep_stale_once,
    unmount_all,
)
from assay.sandbox.loopmount import bind, mount_image, mount_overlay, unmount
from assay.sandbox.upperdir import carry_back as carry_upper_back
from assay.sandbox.upperdir import stage_moved

#: Room past the limit: the poller ends the execution once the changes hold the limit; the
#: kernel refuses writes past limit + MARGIN (room for the poller to see it).
MARGIN = 1024 * 1024
POLL_SECONDS = 0.05
#: One inode per this many bytes (node_modules, pip caches: many small files).
INODE_RATIO = 8192
_MIB = 1024 * 1024
_RUN_SECONDS = 60.0
#: in a template's name: a change to how images are made makes new ones
TEMPLATE_VERSION = 1


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
            drain()
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


def _template(limit: int) -> Path:
    """The empty filesystem for ``limit`` (made once, kept in :func:`disk_dir`): mkfs, the
    room past ``limit + MARGIN`` taken by a preallocated file. An execution copies it (its
    written blocks only, about 150 KiB) rather than running mkfs."""
    path = disk_dir() / f"template-{TEMPLATE_VERSION}-{os.getuid()}-{limit}.img"
    if path.exists():
        return path
    image, mount = new_names()
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
        remove_image(image, mount)
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
    _closed: bool = False

    @classmethod
    def create(cls, limit: int, folders: Sequence[Path]) -> DiskImage:
        """A copy of the limit's template image, mounted, an overlay of each of ``folders``
        on it. Raises ``OSError`` (with everything it made removed) when any step fails."""
        sweep_stale_once()
        template = _template(limit)
        made = cls(limit, [Path(f) for f in folders], *new_names())
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
        the remover (unmounted and deleted in the background; ``diskclean.drain`` waits for
        it). Returns warnings; every step is tried whatever the one before did."""
        if self._closed:
            return []
        self._closed = True
        warnings: list[str] = []
        moved: list[dict[tuple[str, ...], Path]] = []
        for i, folder in enumerate(self.folders[: len(self.inside)] if carry_back else []):
            try:  # the folders it renamed, read through the view while it is there
                moved.append(stage_moved(self.mount / f"u{i}", self.inside[i], folder))
            except OSError as exc:
                moved.append({})
                warnings.append(f"could not carry {folder}'s moved folders back: {exc}")
        for view in self.inside:  # the command is gone: nothing changes the layers now
            warnings += unmount_all(view)
        for i, folder in enumerate(self.folders[: len(moved)]):
            try:
                warnings += carry_upper_back(self.mount / f"u{i}", folder, moved[i])
            except OSError as exc:
                warnings.append(f"could not carry {folder} back from its disk image: {exc}")
        remove_later(self.image, self.mount)
        return warnings


class ImageWatch:
    """Poll one :class:`DiskImage`: ``on_over(figure)`` once the folders hold its limit or
    more (``over``, the figure) or no inode is left (``inodes_full``: no file can be made,
    whatever the bytes). ``peak`` is the largest figure seen."""

    def __init__(self, image: DiskImage, on_over: Callable[[int], None], *,
                 poll: float | None = None) -> None:
        self.image = image
        self.on_over = on_over
        self.poll = POLL_SECONDS if poll is None else poll
        self.over: int | None = None
        self.inodes_full = False
        self.peak = 0
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
        if used >= self.image.limit:  # the next write would be past it: ended at the limit
            self.over = used
        self.inodes_full = inodes == 0
        return self.over is not None or self.inodes_full

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            if self._look():
                self.on_over(self.peak)
                return
