"""An image of one store carried to another as bounded chunks, verified by its digest on arrival.

Why: a Ray worker runs a task pinned to an image that exists only in the driver's store (imported
from an archive, built from a recipe or a Dockerfile there). Rebuilding the source on the worker
would not give the same image (a Debian archive moves, a base is re-pulled), and an archive the
driver imported may not exist anywhere else. So the driver sends the stored root filesystem
itself: :func:`pack_image` writes it as one tar stream cut into chunks of :data:`CHUNK_BYTES`
(each handed to ``put``: the Ray executor puts each in the object store), and
:func:`receive_image` on the worker reads the chunks back in order into a staging folder of its
own store, walks the result with the store's own digest and places it under its final name only
when that digest is the one the driver's record names (:meth:`ImageStore.adopt`). Nothing that
did not match, nothing half-received, ever sits under a final name.

This module knows nothing of Ray: the chunks are plain bytes, so the verify-and-place step is
tested with a chunk changed on the way, without a cluster.

What is carried is exactly what :func:`~assay.environments.store.tree_digest` reads: folders,
regular files and symbolic links with their permission bits (set-id bits included: the digest
counts them) and contents or targets. Owners and times are not (the digest leaves them out). A
stored image holds nothing else (the unpackers refuse devices and fifos); one that does is
refused on the driver, naming the entry.

The stream from the object store is untrusted until its digest is shown: every member's path is
split and checked (no ``..``, no absolute name, its parent a folder this stream made, so nothing
is written through a link), only the three kinds above are accepted, each file is created fresh
(``O_EXCL``, ``O_NOFOLLOW``), and entries, bytes, path and link lengths are bounded by the same
:class:`~assay.environments.limits.ImportLimits` an archive import is held to. Before anything is
fetched, the store's file system must have room for the image's bytes plus
:data:`ROOM_MARGIN_BYTES`.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Generic, TypeVar

from assay.environments.limits import ImportLimits
from assay.environments.store import EnvironmentImage, ImageStore
from assay.errors import ImageRefused, ImageUnavailable
from assay.suites.limits import MIB, describe_bytes

__all__ = ["CHUNK_BYTES", "ROOM_MARGIN_BYTES", "pack_image", "receive_image"]

#: Bytes of one chunk (one object in Ray's object store): large enough that a 2 GiB image is
#: 32 objects, small enough that the driver and a worker each hold one at a time in memory.
CHUNK_BYTES = 64 * MIB
#: Free bytes a store's file system must have beyond the image's own before a fetch starts
#: (folders' blocks, the record, the file system's own reserve).
ROOM_MARGIN_BYTES = 64 * MIB

T = TypeVar("T")
_COPY = 1 << 20


class _ChunkWriter(io.RawIOBase, Generic[T]):
    """A writable stream that hands every :data:`CHUNK_BYTES` written to ``put``."""

    def __init__(self, put: Callable[[bytes], T], chunk_bytes: int) -> None:
        self._put = put
        self._size = chunk_bytes
        self._buf = bytearray()
        self.out: list[T] = []
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._buf += b
        self.total += len(b)
        while len(self._buf) >= self._size:
            self.out.append(self._put(bytes(self._buf[:self._size])))
            del self._buf[:self._size]
        return len(b)

    def finish(self) -> None:
        if self._buf:
            self.out.append(self._put(bytes(self._buf)))
            self._buf.clear()


def pack_image(store: ImageStore, image: EnvironmentImage, put: Callable[[bytes], T], *,
               chunk_bytes: int = CHUNK_BYTES) -> tuple[list[T], int]:
    """The stored ``image`` as a tar stream cut into chunks, each passed to ``put`` as it fills
    (so at most one chunk is held here); returns what ``put`` returned, in order, and the
    stream's bytes. Members are written parents first, in the digest's sorted order."""
    root = store.rootfs(image.digest)
    if store.get(image.digest) is None or not root.is_dir():
        raise ImageUnavailable(f"the image {image.digest} is not in the image store "
                               f"({store.root}) to send")
    sink = _ChunkWriter(put, chunk_bytes)
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel, st in _walk(root):
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime, info.uid, info.gid = stat.S_IMODE(st.st_mode), 0, 0, 0
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(root / rel)
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with open(root / rel, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                raise ImageRefused(f"the image {image.digest} holds {rel}, neither a folder, "
                                   "a file nor a link: it cannot be sent to another store")
    sink.finish()
    return sink.out, sink.total


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (relative path, lstat), a folder before what it holds."""
    stack = [""]
    while stack:
        rel = stack.pop()
        here = root / rel if rel else root
        for name in sorted(os.listdir(here)):
            sub = f"{rel}/{name}" if rel else name
            st = os.lstat(root / sub)
            yield sub, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(sub)


class _ChunkReader(io.RawIOBase):
    """The chunks, in order, read as one stream; each chunk and the whole stream bounded."""

    def __init__(self, chunks: Iterable[bytes], what: str, max_chunk: int,
                 max_total: int) -> None:
        self._chunks = iter(chunks)
        self._buf = memoryview(b"")
        self._what, self._max_chunk, self._max_total = what, max_chunk, max_total
        self.total = 0
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self.count += 1
            if len(chunk) > self._max_chunk:
                raise ImageRefused(f"{self._what}: chunk {self.count} is "
                                   f"{describe_bytes(len(chunk))}, over the "
                                   f"{describe_bytes(self._max_chunk)} a chunk may be")
            self.total += len(chunk)
            if self.total > self._max_total:
                raise ImageRefused(f"{self._what}: the stream passed "
                                   f"{describe_bytes(self._max_total)}, the bound of an image")
            self._buf = memoryview(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def receive_image(store: ImageStore, image: EnvironmentImage, chunks: Iterable[bytes], *,
                  limits: ImportLimits | None = None,
                  chunk_bytes: int = CHUNK_BYTES) -> EnvironmentImage:
    """Unpack the chunks :func:`pack_image` made of ``image`` into a staging folder of
    ``store``, check the tree's digest against ``image.digest`` and place it (with the driver's
    record as it is). ``chunks`` is consumed lazily: nothing is fetched when the store has no
    room. Raises :class:`ImageRefused` (a stream that does not match, or breaks a rule) or
    :class:`ImageUnavailable` (no room); either way nothing of it stays in the store."""
    limits = limits or ImportLimits()
    what = f"the image {image.digest} ({image.source_label or image.source_kind})"
    found = store.get(image.digest)
    if found is not None:
        return found
    _check_room(store, image, what)
    reader = _ChunkReader(chunks, what, chunk_bytes, limits.image_bytes)
    with store.staging() as rootfs:
        try:
            _unpack(io.BufferedReader(reader, _COPY), rootfs, what, limits)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ImageUnavailable(f"{what}: no room in {store.root} while it arrived "
                                       f"({exc.strerror})") from None
            raise
        except tarfile.TarError as exc:
            raise ImageRefused(f"{what}: what arrived is not the tar it was sent as "
                               f"({exc}; {reader.count} chunks, "
                               f"{describe_bytes(reader.total)} read)") from None
        return store.adopt(rootfs, image)


def _check_room(store: ImageStore, image: EnvironmentImage, what: str) -> None:
    at = store.root
    while not at.exists() and at != at.parent:
        at = at.parent
    free = shutil.disk_usage(at).free
    need = image.bytes + ROOM_MARGIN_BYTES
    if free < need:
        raise ImageUnavailable(f"{what}: no room: it needs {describe_bytes(need)} in "
                               f"{store.root}, which has {describe_bytes(free)} free")


def _unpack(stream: IO[bytes], rootfs: Path, what: str, limits: ImportLimits) -> None:
    """The members into ``rootfs`` (an empty folder), each checked first; folders' own modes
    are set last, deepest first, so a read-only folder is still filled."""
    dirs: set[str] = {""}
    modes: list[tuple[str, int]] = []
    entries = written = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            entries += 1
            if entries > limits.entries:
                raise ImageRefused(f"{what}: more than {limits.entries} entries")
            rel = _checked_name(info.name, what, limits)
            parent = posixpath.dirname(rel)
            if parent not in dirs:
                raise ImageRefused(f"{what}: {rel!r} does not come after its folder (a link "
                                   "or nothing stands there): refused")
            path = rootfs / rel
            mode = stat.S_IMODE(info.mode)
            if info.isdir():
                os.mkdir(path, 0o700)
                dirs.add(rel)
                modes.append((rel, mode))
            elif info.issym():
                if len(info.linkname.encode("utf-8", "surrogateescape")) > \
                        limits.link_target_bytes:
                    raise ImageRefused(f"{what}: the link {rel!r} has a target over "
                                       f"{limits.link_target_bytes} bytes")
                os.symlink(info.linkname, path)
            elif info.isreg():
                if info.size > limits.file_bytes:
                    raise ImageRefused(f"{what}: {rel!r} is {describe_bytes(info.size)}, over "
                                       f"the {describe_bytes(limits.file_bytes)} of one file")
                written += info.size
                if written > limits.image_bytes:
                    raise ImageRefused(f"{what}: its files pass "
                                       f"{describe_bytes(limits.image_bytes)}")
                _write_file(tar, info, path, mode)
            else:
                raise ImageRefused(f"{what}: {rel!r} is neither a folder, a file nor a link "
                                   "(an image sent between stores holds no other kind)")
    for rel, mode in sorted(modes, key=lambda m: m[0].count("/"), reverse=True):
        os.chmod(rootfs / rel, mode)


def _checked_name(name: str, what: str, limits: ImportLimits) -> str:
    if len(name.encode("utf-8", "surrogateescape")) > limits.path_bytes:
        raise ImageRefused(f"{what}: a path over {limits.path_bytes} bytes")
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ImageRefused(f"{what}: the member {name!r} is not a plain relative path: refused")
    if any(len(p.encode("utf-8", "surrogateescape")) > limits.name_bytes for p in parts):
        raise ImageRefused(f"{what}: a name in {name!r} is over {limits.name_bytes} bytes")
    return name


def _write_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path, mode: int) -> None:
    src = tar.extractfile(info)
    assert src is not None  # a regular member always has a body
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        left = info.size
        while left:
            data = src.read(min(_COPY, left))
            if not data:
                raise ImageRefused(f"{info.name!r} ended before its {info.size} bytes")
            _write_all(fd, data)
            left -= len(data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
