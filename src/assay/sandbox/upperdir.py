"""Carry an overlay's upper layer back onto the folder it covered.

Why: an execution's writable folders are overlays on its size-limited filesystem
(:mod:`assay.sandbox.diskimage`): the host folder is the lower layer, read as it is, and what
the command changed is in the upper layer, on the image. When it ends, the changes alone are
applied to the host folder (an agent that edits three files of a large repository costs three
copies, not two copies of the repository).

The upper layer is what the command made, so it is read as data: every step goes through
folder descriptors (no path is resolved twice, no length limit on the tree's paths), no link
in it or in the host folder is followed (a folder that replaced a link, or a link that replaced
a folder, replaces it on the host too); only folders, regular files, links and FIFOs are made
(no device, no socket); owners, modes and times are copied; files hard-linked within the layer
stay linked. Folders deeper than :data:`MAX_DEPTH` are not carried (the freeze refuses a tree
past 128 levels anyway), each named in the warnings. Overlay's own marks: a whiteout (a
character device 0:0) deletes the host's entry; a folder marked opaque
(``trusted.overlay.opaque``) replaces the host's folder whole; a folder the command renamed or
moved (``trusted.overlay.redirect``: its content is still the lower folder's, under the old
name) is copied whole from the overlay's view before it is unmounted (:func:`stage_moved`).
Extended attributes are not carried (the overlay's own live there).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

OPAQUE = "trusted.overlay.opaque"
REDIRECT = "trusted.overlay.redirect"
#: Folder levels carried back (two descriptors open per level while it is walked; the
#: freeze refuses past 128).
MAX_DEPTH = 140
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY = 1 << 20


def _remove(parent: int, name: str) -> None:
    """Remove ``name`` in the folder ``parent`` whatever it is (nothing if there is none),
    never following a link."""
    try:
        info = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)


def _attributes(info: os.stat_result, fd: int) -> None:
    """Owner, mode and times of ``info`` onto the open file or folder ``fd``."""
    os.fchown(fd, info.st_uid, info.st_gid)
    os.fchmod(fd, stat.S_IMODE(info.st_mode))
    os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))


def _copy_file(src_dir: int, dst_dir: int, name: str, info: os.stat_result) -> None:
    source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            # sendfile: copy_file_range answers 0 between two filesystems on some kernels
            while os.sendfile(target, source, None, _COPY) > 0:
                pass
            _attributes(info, target)
        finally:
            os.close(target)
    finally:
        os.close(source)


def _opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE) == b"y"
    except OSError:
        return False


def _redirected(fd: int) -> bool:
    try:
        os.getxattr(fd, REDIRECT)
    except OSError:
        return False
    return True


def stage_moved(upper: Path, view: Path, folder: Path) -> dict[tuple[str, ...], Path]:
    """Folders the command renamed or moved (an upper folder with a redirect: its content is
    still the lower folder's, under its old name), each copied whole from the overlay's
    ``view`` while it is mounted into a staging folder beside ``folder`` (the same disk: put
    in place by a rename). Returns where each went, by its path in the layer."""
    found: list[tuple[str, ...]] = []

    def walk(fd: int, rel: tuple[str, ...]) -> None:
        with os.scandir(fd) as it:
            names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for name in names:
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                if _redirected(sub):
                    found.append((*rel, name))  # its inside comes with it, from the view
                elif len(rel) + 1 < MAX_DEPTH:
                    walk(sub, (*rel, name))
            finally:
                os.close(sub)

    top = os.open(upper, _DIR)
    try:
        walk(top, ())
    finally:
        os.close(top)
    staged: dict[tuple[str, ...], Path] = {}
    try:
        for rel in found:
            staging = folder.parent / f".{folder.name}.moved-{uuid.uuid4().hex[:12]}"
            proc = subprocess.run(["cp", "-a", "--", str(view.joinpath(*rel)), str(staging)],
                                  capture_output=True, text=True, timeout=3600, check=False)
            if proc.returncode != 0:
                raise OSError(f"could not copy the moved folder {'/'.join(rel)}: "
                              f"{proc.stderr.strip()[-300:]}")
            staged[rel] = staging
    except BaseException:
        for staging in staged.values():
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return staged


def carry_back(upper: Path, folder: Path,
               moved: dict[tuple[str, ...], Path] | None = None) -> list[str]:
    """Apply the upper layer ``upper`` onto ``folder``; ``moved``: the folders
    :func:`stage_moved` staged, renamed into place. What was not carried (a device or socket
    the command made, a folder past :data:`MAX_DEPTH`) is returned, one line each."""
    skipped: list[str] = []
    moved = dict(moved or {})
    linked: dict[tuple[int, int], str] = {}  # a hard-linked file's first copy, from the root

    def apply(src_dir: int, dst_dir: int, rel: tuple[str, ...], root: int) -> None:
        with os.scandir(src_dir) as it:
            names = [entry.name for entry in it]
        for name in names:
            info = os.lstat(name, dir_fd=src_dir)
            mode = info.st_mode
            where = "/".join((str(folder), *rel, name))
            if stat.S_ISCHR(mode) and info.st_rdev == 0:  # a whiteout: deleted
                _remove(dst_dir, name)
            elif stat.S_ISDIR(mode) and (*rel, name) in moved:
                _remove(dst_dir, name)
                os.rename(moved.pop((*rel, name)), name, dst_dir_fd=dst_dir)
            elif stat.S_ISDIR(mode):
                if len(rel) + 1 >= MAX_DEPTH:
                    skipped.append(f"{where}: deeper than {MAX_DEPTH} folders, not carried")
                    continue
                _folder(src_dir, dst_dir, name, info, (*rel, name), root)
            else:
                _remove(dst_dir, name)
                if not _entry(src_dir, dst_dir, name, info, (*rel, name), root):
                    skipped.append(f"{where}: not carried back (a device or socket)")

    def _folder(src_dir: int, dst_dir: int, name: str, info: os.stat_result,
                rel: tuple[str, ...], root: int) -> None:
        sub_src = os.open(name, _DIR, dir_fd=src_dir)
        try:
            try:
                here: os.stat_result | None = os.lstat(name, dir_fd=dst_dir)
            except FileNotFoundError:
                here = None
            # new, or the command's folder replaced the host's (opaque): made afresh
            if here is None or not stat.S_ISDIR(here.st_mode) or _opaque(sub_src):
                _remove(dst_dir, name)
                os.mkdir(name, 0o700, dir_fd=dst_dir)
            sub_dst = os.open(name, _DIR, dir_fd=dst_dir)
            try:
                apply(sub_src, sub_dst, rel, root)
                _attributes(info, sub_dst)
            finally:
                os.close(sub_dst)
        finally:
            os.close(sub_src)

    def _entry(src_dir: int, dst_dir: int, name: str, info: os.stat_result,
               rel: tuple[str, ...], root: int) -> bool:
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            os.symlink(os.readlink(name, dir_fd=src_dir), name, dir_fd=dst_dir)
            os.chown(name, info.st_uid, info.st_gid, dir_fd=dst_dir, follow_symlinks=False)
            os.utime(name, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=dst_dir,
                     follow_symlinks=False)
        elif stat.S_ISREG(mode):
            key = (info.st_dev, info.st_ino)
            if info.st_nlink > 1 and key in linked:
                try:  # through folders this carry made or checked: no link among them
                    os.link(linked[key], name, src_dir_fd=root, dst_dir_fd=dst_dir,
                            follow_symlinks=False)
                    return True
                except OSError:  # a path past the system's length: a copy instead
                    pass
            _copy_file(src_dir, dst_dir, name, info)
            if info.st_nlink > 1:
                linked.setdefault(key, "/".join(rel))
        elif stat.S_ISFIFO(mode):
            os.mkfifo(name, 0o600, dir_fd=dst_dir)
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=dst_dir)
            try:
                _attributes(info, fd)
            finally:
                os.close(fd)
        else:
            return False
        return True

    src = os.open(upper, _DIR)
    try:
        dst = os.open(folder, _DIR)
        try:
            apply(src, dst, (), dst)
            _attributes(os.fstat(src), dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
        for staging in moved.values():  # not placed (an error on the way): not left behind
            shutil.rmtree(staging, ignore_errors=True)
    return skipped
