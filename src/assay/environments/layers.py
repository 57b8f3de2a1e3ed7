"""Unpacking image layers (tar streams) into a root filesystem, one after another, safely.

A layer is a tar of the changes it makes to the layers below it: new and replaced files,
folders and links, and *whiteouts* (``.wh.<name>`` deletes ``<name>`` of a lower layer,
``.wh..wh..opq`` empties its folder of everything lower layers put there). The tar comes from
whoever built the image, so every entry is treated as an attack until shown otherwise:

- a path is split into its components and climbs nowhere: ``..`` is refused, a leading ``/``
  means the image's own root;
- every folder on the way to an entry is opened relative to its parent with ``O_NOFOLLOW``: an
  entry whose path goes *through* a symbolic link (``etc -> /`` from one layer, ``etc/passwd``
  from the next) is refused instead of written wherever the link points. The entry itself is
  always created fresh (``O_EXCL``) after whatever stood at its name was removed, so a link at
  the final name is replaced, never written through;
- a hard link must name a file already in the image, found the same way;
- setuid, setgid and sticky bits are stripped and counted; device nodes and fifos are skipped
  and counted (the sandbox gives ``/dev`` its own);
- every folder keeps ``u+rwx`` and every file ``u+r``, so the unpacker, the digest and the
  store's removal work as an unprivileged user; the same for every user, so the digest is too;
- entries, bytes of the decompressed stream (tar headers and padding included: what a
  decompression bomb inflates), bytes written, one file's size and path lengths are bounded
  (:mod:`assay.environments.limits`).

Owners, times and extended attributes are not kept: an unprivileged unpack cannot set owners,
and the sandbox runs everything as one uid anyway.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from assay.environments.limits import ImportLimits
from assay.environments.store import KnownFiles
from assay.environments.tarstream import Member, Readable, TarStream
from assay.errors import ImageRefused
from assay.suites.limits import describe_bytes

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Folder fds kept open at once by one unpacker (well under any open-files limit).
_MAX_CACHED_DIRS = 256


@dataclass
class UnpackCounts:
    """What the unpacker did over all layers; the adjustments end up in the image record."""

    entries: int = 0
    stream_bytes: int = 0
    written_bytes: int = 0
    mode_bits_stripped: int = 0
    special_files_skipped: int = 0
    whiteouts: int = 0
    stripped_examples: list[str] = field(default_factory=list)

    def adjustments(self) -> dict[str, int]:
        return {"mode_bits_stripped": self.mode_bits_stripped,
                "special_files_skipped": self.special_files_skipped}


class CountingReader:
    """The decompressed layer stream, counted against the image's byte bound as it is read:
    a bomb is stopped at the bound, never inflated past it. ``on_read`` sees each piece read
    (the unpack's progress)."""

    def __init__(self, raw: Readable, counts: UnpackCounts, limits: ImportLimits, what: str,
                 on_read: Callable[[bytes], object] | None = None) -> None:
        self.raw = raw
        self.counts = counts
        self.limits = limits
        self.what = what
        self.on_read = on_read

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = _CHUNK
        data = self.raw.read(n)
        self.counts.stream_bytes += len(data)
        if self.counts.stream_bytes > self.limits.image_bytes:
            raise ImageRefused(
                f"{self.what}: the layers expand past {describe_bytes(self.limits.image_bytes)},"
                " the limit of an unpacked image (a decompression bomb, or an image too large)")
        if self.on_read is not None:
            self.on_read(data)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


class Unpacker:
    """Applies layers, lowest first, to an empty root filesystem folder."""

    def __init__(self, rootfs: Path, limits: ImportLimits) -> None:
        self.rootfs = rootfs
        self.limits = limits
        self.counts = UnpackCounts()
        self._touched: set[str] = set()
        self._touched_dirs: set[str] = set()
        self._what = ""
        #: Folders already reached this layer (path components -> fd), so an entry beside the
        #: last one does not walk from the root again: the walk, one ``open`` a component,
        #: cost six opens an entry (measured: 36,000 of 42,000 for a 6,200-entry image). An fd
        #: names the folder itself, reached with ``O_NOFOLLOW``, so a link made later at its
        #: name cannot redirect it; whatever removes a folder (:meth:`_forget_dirs`) or
        #: whites out drops them all.
        self._dir_fds: dict[tuple[str, ...], int] = {}
        #: The content digest of every file written, by inode (:data:`store.KnownFiles`): the
        #: root filesystem's digest then needs no second read of what was just written.
        self.known: KnownFiles = {}

    # -- one layer ---------------------------------------------------------------------------

    def apply(self, stream: CountingReader, what: str) -> None:
        """Unpack one layer's decompressed tar stream; ``what`` names it in messages."""
        self._touched = set()
        self._touched_dirs = set()
        self._what = what
        tar = TarStream(stream, what)
        try:
            for info in tar:
                self._entry(tar, info)
        finally:
            self._forget_dirs()
        stream.drain()

    def _forget_dirs(self) -> None:
        """Close every cached folder fd (after a layer, or when a folder may have gone)."""
        fds, self._dir_fds = self._dir_fds, {}
        for fd in fds.values():
            os.close(fd)

    def _refuse(self, name: str, why: str) -> ImageRefused:
        return ImageRefused(f"{self._what}: entry {name!r}: {why}")

    def _parts(self, name: str) -> list[str]:
        raw = os.fsencode(name)
        if len(raw) > self.limits.path_bytes:
            raise self._refuse(name[:80] + "...", f"a path longer than "
                               f"{self.limits.path_bytes} bytes")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self._refuse(name, "a path with '..' (it would climb out of the image root)")
        for p in parts:
            # a character is at most 4 bytes encoded: most names need no encoding to tell
            if len(p) * 4 > self.limits.name_bytes and \
                    len(os.fsencode(p)) > self.limits.name_bytes:
                raise self._refuse(name, f"a name longer than {self.limits.name_bytes} bytes")
            if "\0" in p:
                raise self._refuse(name, "a NUL byte in the path")
        return parts

    def _entry(self, tar: TarStream, info: Member) -> None:
        self.counts.entries += 1
        if self.counts.entries > self.limits.entries:
            raise ImageRefused(f"{self._what}: more than {self.limits.entries:,} entries in the "
                               "image's layers (the limit of an image)")
        parts = self._parts(info.name)
        if not parts:
            if not info.isdir():
                raise self._refuse(info.name, "the image root itself as a non-folder")
            return
        base = parts[-1]
        if base.startswith(WHITEOUT):
            self.counts.whiteouts += 1
            self._whiteout(info.name, parts)
            return
        if info.ischr() or info.isblk() or info.isfifo():
            self.counts.special_files_skipped += 1
            return
        mode = info.mode & 0o7777
        if mode & 0o7000:
            self.counts.mode_bits_stripped += 1
            if len(self.counts.stripped_examples) < 5:
                self.counts.stripped_examples.append("/".join(parts))
            mode &= 0o777
        rel = "/".join(parts)
        with self._parent(info.name, parts[:-1], create=True) as dfd:
            if info.isdir():
                self._make_dir(dfd, base, mode | 0o700, info.name)
            elif info.isreg():
                self._make_file(tar, info, dfd, base, mode | 0o400)
            elif info.issym():
                target = info.linkname
                if len(os.fsencode(target)) > self.limits.link_target_bytes or "\0" in target:
                    raise self._refuse(info.name, "a symbolic link target longer than "
                                       f"{self.limits.link_target_bytes} bytes")
                try:
                    os.symlink(target, base, dir_fd=dfd)
                except FileExistsError:
                    self._clear(dfd, base, info.name, keep_dir=False)
                    os.symlink(target, base, dir_fd=dfd)
            elif info.islnk():
                self._make_hardlink(info, dfd, base)
            else:
                raise self._refuse(info.name, f"an entry of unknown tar type {info.type!r}")
        self._touch(rel)

    def _touch(self, rel: str) -> None:
        self._touched.add(rel)
        head = rel
        while "/" in head:
            head = head.rsplit("/", 1)[0]
            if head in self._touched_dirs:
                break
            self._touched_dirs.add(head)

    # -- finding folders without following links ---------------------------------------------

    @contextmanager
    def _parent(self, name: str, parents: list[str], *, create: bool) -> Iterator[int]:
        """An fd of the folder that holds ``name``, reached one component at a time with
        ``O_NOFOLLOW``: never through a symbolic link, never outside the root. The walk starts
        at the deepest folder of the path already reached this layer (:attr:`_dir_fds`)."""
        key = tuple(parents)
        start = len(parents)
        while start and key[:start] not in self._dir_fds:
            start -= 1
        if len(self._dir_fds) >= _MAX_CACHED_DIRS:
            self._forget_dirs()
            start = 0
        # the caller gets an fd of its own: a folder removed while it works (which empties
        # the cache) never closes the fd it is using
        fd = os.dup(self._dir_fds[key[:start]]) if start else os.open(self.rootfs, _DIR_FLAGS)
        try:
            for i, comp in enumerate(parents[start:], start):
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(comp, 0o700, dir_fd=fd)
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                    os.fchmod(nfd, 0o755)  # the same mode whatever the umask
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    where = "/".join(parents[:i + 1])
                    st = os.lstat(comp, dir_fd=fd)
                    if stat.S_ISLNK(st.st_mode):
                        target = os.readlink(comp, dir_fd=fd)
                        raise self._refuse(name, f"its path goes through the symbolic link "
                                           f"{where!r} (-> {target!r}); an image entry is "
                                           "never written through a link") from None
                    raise self._refuse(name, f"its folder {where!r} is a file in the "
                                       "image") from None
                os.close(fd)
                fd = nfd
                self._dir_fds[key[:i + 1]] = os.dup(fd)
            yield fd
        finally:
            os.close(fd)

    # -- making entries ----------------------------------------------------------------------

    def _clear(self, dfd: int, base: str, name: str, *, keep_dir: bool) -> bool:
        """Remove what stands at ``base`` (a lower layer's entry); True if a folder was kept."""
        try:
            st = os.lstat(base, dir_fd=dfd)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            if keep_dir:
                return True
            self._forget_dirs()  # a cached fd may be of a folder inside it
            shutil.rmtree(base, dir_fd=dfd)
        else:
            os.unlink(base, dir_fd=dfd)
        return False

    def _make_dir(self, dfd: int, base: str, mode: int, name: str) -> None:
        try:  # most names are new: a look before each would be a second lookup of nothing
            os.mkdir(base, 0o700, dir_fd=dfd)
        except FileExistsError:
            if not self._clear(dfd, base, name, keep_dir=True):
                os.mkdir(base, 0o700, dir_fd=dfd)
        fd = os.open(base, _DIR_FLAGS, dir_fd=dfd)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def _make_file(self, tar: TarStream, info: Member, dfd: int, base: str,
                   mode: int) -> None:
        if info.size > self.limits.file_bytes:
            raise self._refuse(info.name, f"a file of {describe_bytes(info.size)}, larger than "
                               f"the {describe_bytes(self.limits.file_bytes)} limit of one file")
        try:  # O_EXCL fails on whatever stands at the name (a link too): cleared, made again
            fd = os.open(base, _NEW_FILE, 0o600, dir_fd=dfd)
        except FileExistsError:
            self._clear(dfd, base, info.name, keep_dir=False)
            fd = os.open(base, _NEW_FILE, 0o600, dir_fd=dfd)
        content = hashlib.sha256()
        with os.fdopen(fd, "wb", buffering=0) as out:
            written = 0
            while chunk := tar.data(_CHUNK):
                written += len(chunk)
                self.counts.written_bytes += len(chunk)
                if written > self.limits.file_bytes:
                    raise self._refuse(info.name, "a file larger than the "
                                       f"{describe_bytes(self.limits.file_bytes)} limit")
                if self.counts.written_bytes > self.limits.image_bytes:
                    raise self._refuse(info.name, "the image grows past the "
                                       f"{describe_bytes(self.limits.image_bytes)} limit")
                content.update(chunk)
                _write_all(out.fileno(), chunk)
            os.fchmod(out.fileno(), mode)
            st = os.fstat(out.fileno())
            self.known[(st.st_dev, st.st_ino)] = (st.st_size, st.st_mtime_ns, content.hexdigest())

    def _make_hardlink(self, info: Member, dfd: int, base: str) -> None:
        tparts = self._parts(info.linkname)
        if not tparts:
            raise self._refuse(info.name, "a hard link to the image root")
        try:
            with self._parent(info.name, tparts[:-1], create=False) as tfd:
                try:
                    st = os.lstat(tparts[-1], dir_fd=tfd)
                except FileNotFoundError:
                    raise self._refuse(info.name, f"a hard link to {info.linkname!r}, which "
                                       "is not in the image") from None
                if stat.S_ISDIR(st.st_mode):
                    raise self._refuse(info.name, "a hard link to a folder")
                if _exists(dfd, base) and os.path.samestat(st, os.lstat(base, dir_fd=dfd)):
                    return  # the same file already (a link listed twice)
                self._clear(dfd, base, info.name, keep_dir=False)
                os.link(tparts[-1], base, src_dir_fd=tfd, dst_dir_fd=dfd,
                        follow_symlinks=False)
        except FileNotFoundError:
            raise self._refuse(info.name, f"a hard link to {info.linkname!r}, which is not in "
                               "the image") from None

    # -- whiteouts ---------------------------------------------------------------------------

    def _whiteout(self, name: str, parts: list[str]) -> None:
        self._forget_dirs()  # it removes entries of lower layers, folders among them
        base = parts[-1]
        parent_rel = "/".join(parts[:-1])
        try:
            with self._parent(name, parts[:-1], create=base == OPAQUE) as dfd:
                if base == OPAQUE:
                    self._empty_lower(dfd, parent_rel)
                    self._touch(f"{parent_rel}/{base}" if parent_rel else base)
                elif base.startswith(WHITEOUT + WHITEOUT):
                    return  # other aufs bookkeeping (.wh..wh.plnk): nothing to apply
                else:
                    victim = base[len(WHITEOUT):]
                    if victim in ("", ".", ".."):
                        raise self._refuse(name, f"a whiteout of {victim!r} (it would delete "
                                           "the folder itself or climb out of it)")
                    rel = f"{parent_rel}/{victim}" if parent_rel else victim
                    if rel in self._touched or rel in self._touched_dirs:
                        return  # only lower layers' entries are whited out
                    self._clear(dfd, victim, name, keep_dir=False)
        except FileNotFoundError:
            return  # the folder of a whiteout is not in the image: nothing to delete

    def _empty_lower(self, dfd: int, rel: str) -> None:
        """Remove what lower layers put in a folder, keeping what this layer wrote."""
        for child in os.listdir(dfd):
            crel = f"{rel}/{child}" if rel else child
            is_dir = stat.S_ISDIR(os.lstat(child, dir_fd=dfd).st_mode)
            if crel in self._touched_dirs and is_dir:
                cfd = os.open(child, _DIR_FLAGS, dir_fd=dfd)
                try:
                    self._empty_lower(cfd, crel)
                finally:
                    os.close(cfd)
            elif crel not in self._touched and crel not in self._touched_dirs:
                self._clear(dfd, child, crel, keep_dir=False)

    # -- after the layers --------------------------------------------------------------------

    def ensure_dir(self, path: str) -> None:
        """Create the image's working folder if no layer did (as a container runtime does),
        so the sandbox can mount the workspace there. A path through a link is left alone."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            return
        try:
            with self._parent(path, parts, create=True):
                pass
        except ImageRefused:
            return
        finally:
            self._forget_dirs()


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (a regular file may take fewer at once)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exists(dfd: int, base: str) -> bool:
    try:
        os.lstat(base, dir_fd=dfd)
    except FileNotFoundError:
        return False
    return True
