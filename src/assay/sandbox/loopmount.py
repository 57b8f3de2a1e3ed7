"""Mount a filesystem image through a loop device, and unmount it, with the system calls.

Why not ``mount -o loop``: every execution with a disk limit mounts one image
(:mod:`assay.sandbox.diskimage`), and ``mount(8)``/``umount(8)`` cost two processes, 20-30 ms
each on a loaded machine, most of the per-execution overhead. Here: ``LOOP_CTL_GET_FREE``, one
``LOOP_CONFIGURE`` (Linux 5.8+; the backing file and the autoclear flag set at once, so no
instant exists where a killed process leaves a device that is not freed with its mount) and
``mount(2)``; ``umount2(2)`` at the end frees the device (autoclear). On a kernel without
``LOOP_CONFIGURE`` the commands are used instead.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import subprocess
from pathlib import Path

LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR = 4
MS_NOSUID, MS_NODEV, MS_NOATIME = 2, 4, 1024
MNT_DETACH = 2
#: ext4's own option: the inode tables are never zeroed in the background (the image stays
#: sparse: a table is written only where an inode is used)
DATA = b"noinit_itable"
_TRIES = 20
_TIMEOUT = 60.0

_libc = ctypes.CDLL(None, use_errno=True)


def _loop_config(fd: int) -> bytes:
    """``struct loop_config``: the backing descriptor, the block size (0: the default) and a
    ``struct loop_info64`` with only ``lo_flags`` set, then eight reserved u64."""
    info = struct.pack("=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR,
                       b"", b"", b"", 0, 0)
    return struct.pack("=II", fd, 0) + info + bytes(64)


def _command(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise OSError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")


def mount_image(image: Path, target: Path) -> None:
    """Mount the ext4 ``image`` at ``target`` (nodev, nosuid, noatime). Raises ``OSError``."""
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(_TRIES):  # another process may take the free device first
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
                try:
                    loop = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.ioctl(loop, LOOP_CONFIGURE, _loop_config(backing))
                except OSError as exc:
                    os.close(loop)
                    if exc.errno == errno.EBUSY:
                        continue
                    if exc.errno in (errno.EINVAL, errno.ENOTTY):  # before Linux 5.8
                        _command(["mount", "-o", "loop,nodev,nosuid,noatime,"
                                  + DATA.decode(), str(image), str(target)])
                        return
                    raise
                try:  # the mount holds the device; closing ours leaves it to the mount
                    if _libc.mount(f"/dev/loop{number}".encode(), str(target).encode(),
                                   b"ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, DATA) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"mount {image} on {target}: {os.strerror(err)}")
                finally:
                    os.close(loop)  # autoclear: without a mount the device is freed here
                return
            raise OSError(errno.EBUSY, f"no free loop device after {_TRIES} tries")
        finally:
            os.close(control)
    finally:
        os.close(backing)


def unmount(target: Path) -> None:
    """Unmount ``target``; lazily if it is busy (it goes when its last user does)."""
    if _libc.umount2(str(target).encode(), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EBUSY and _libc.umount2(str(target).encode(), MNT_DETACH) == 0:
        return
    err = ctypes.get_errno() if err == errno.EBUSY else err
    raise OSError(err, f"umount {target}: {os.strerror(err)}")


MS_BIND = 4096


def bind(source: Path, target: Path) -> None:
    """Bind ``source`` at ``target`` (an overlay's lower layer under a path of our own
    naming: no comma or colon of a host path reaches the overlay's options)."""
    if _libc.mount(str(source).encode(), str(target).encode(), None, MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind {source} on {target}: {os.strerror(err)}")


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    """An overlay at ``target``: ``lower`` read as it is, every change written to ``upper``
    (whole files: no metacopy; no index; a renamed folder recorded by a redirect, so that
    ``rename(2)`` of a folder works as on a plain disk), which
    :mod:`assay.sandbox.upperdir` carries back."""
    data = (f"lowerdir={lower},upperdir={upper},workdir={work},"
            "redirect_dir=on,metacopy=off,index=off,xino=off")
    if _libc.mount(b"overlay", str(target).encode(), b"overlay", MS_NOSUID | MS_NODEV,
                   data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"overlay on {target}: {os.strerror(err)}")
