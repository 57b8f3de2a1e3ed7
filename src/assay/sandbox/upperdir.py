"""Carry an overlay's upper layer back onto the folder it covered.

Why: an execution's writable folders are overlays on its size-limited filesystem
(:mod:`assay.sandbox.diskimage`): the host folder is the lower layer, read as it is, and what
the command changed is in the upper layer, on the image. When it ends, the changes alone are
applied to the host folder (an agent that edits three files of a large repository costs three
copies, not two copies of the repository).

The upper layer is what the command made, so it is read as data: no link in it or in the host
folder is followed (a folder that replaced a link, or a link that replaced a folder, replaces
it on the host too); only folders, regular files, links and FIFOs are made (no device, no
socket); owners, modes and times are copied; files hard-linked within the layer stay linked.
Overlay's own marks: a whiteout (a character device 0:0) deletes the host's entry; a folder
marked opaque (``trusted.overlay.opaque``) replaces the host's folder whole. Extended
attributes are not carried (the overlay's own live there).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

OPAQUE = "trusted.overlay.opaque"


def _remove(path: str) -> None:
    """Remove whatever ``path`` is (nothing if there is none), never following a link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _attributes(info: os.stat_result, path: str) -> None:
    """Owner, mode and times of ``info`` onto ``path`` (a link: its owner and times only)."""
    os.chown(path, info.st_uid, info.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(path, stat.S_IMODE(info.st_mode))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def carry_back(upper: Path, folder: Path) -> list[str]:
    """Apply the upper layer ``upper`` onto ``folder``; what could not be carried (a device
    or socket the command made) is returned, one line each."""
    skipped: list[str] = []
    linked: dict[tuple[int, int], str] = {}

    def apply(src: str, dst: str) -> None:
        with os.scandir(src) as it:
            entries = list(it)
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            target = os.path.join(dst, entry.name)
            mode = info.st_mode
            if stat.S_ISCHR(mode) and info.st_rdev == 0:  # a whiteout: deleted
                _remove(target)
                continue
            if stat.S_ISDIR(mode):
                try:
                    here = os.lstat(target)
                except FileNotFoundError:
                    here = None
                if here is None or not stat.S_ISDIR(here.st_mode):
                    _remove(target)
                    os.mkdir(target, 0o700)
                elif _opaque(entry.path):  # the command's folder replaced the host's
                    shutil.rmtree(target)
                    os.mkdir(target, 0o700)
                apply(entry.path, target)
                _attributes(info, target)
                continue
            _remove(target)
            if stat.S_ISLNK(mode):
                os.symlink(os.readlink(entry.path), target)
            elif stat.S_ISREG(mode):
                key = (info.st_dev, info.st_ino)
                if info.st_nlink > 1 and key in linked:
                    os.link(linked[key], target)
                    continue
                shutil.copyfile(entry.path, target, follow_symlinks=False)
                linked[key] = target
            elif stat.S_ISFIFO(mode):
                os.mkfifo(target, 0o600)
            else:
                skipped.append(f"{target}: not carried back (a device or socket)")
                continue
            _attributes(info, target)

    apply(str(upper), str(folder))
    root = os.lstat(upper)
    _attributes(root, str(folder))
    return skipped
