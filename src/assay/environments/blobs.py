"""Reading the files of an image archive: a layout folder or a tar, each blob checked as it is
read.

An OCI image layout and a ``docker save`` archive are the same tree of named files whether they
sit in a folder or in a tar (plain, or gzip/xz/bzip2 as ``docker save | gzip`` makes it). A
:class:`BlobSource` hides which, so the importer asks for ``index.json`` or
``blobs/sha256/<hex>`` and gets a stream. Nothing read is trusted: names are looked up, never
joined into host paths unchecked; a stream that is read through :class:`VerifiedReader` is
hashed and counted on the way, refused the moment it runs past its declared size and refused at
its end when its digest differs.
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import lzma
import os
import posixpath
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any, Protocol, cast

from zlib_ng import gzip_ng, zlib_ng

from assay.environments.limits import ImportLimits
from assay.errors import ImageRefused
from assay.suites.limits import describe_bytes

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_CHUNK = 1 << 20
# Links between members of an archive tar (``docker save`` links identical layers) followed at
# most this many times.
_MAX_LINK_HOPS = 8
#: What inflating a damaged gzip stream with zlib-ng raises besides gzip's own OSError (its
#: type stub calls its error an instance: it is the class)
INFLATE_ERRORS: tuple[type[BaseException], ...] = (
    EOFError, cast("type[BaseException]", zlib_ng.error))


def short(digest: str) -> str:
    """``sha256:0123456789ab``: enough of a digest for a progress line."""
    return digest[:19]


def blob_name(digest: str) -> str:
    """Where a blob sits in an OCI layout; ``digest`` was checked against :data:`DIGEST_RE`."""
    return "blobs/sha256/" + digest.removeprefix("sha256:")


class BlobSource(Protocol):
    """The named files of an archive or layout folder."""

    label: str

    def has(self, name: str) -> bool: ...

    def size(self, name: str) -> int: ...

    def open(self, name: str) -> IO[bytes]: ...


def _normal(name: str) -> str | None:
    """``a/b`` from ``./a//b/``; None for a name that climbs out (``..``) or is empty."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


class DirSource:
    """An OCI layout (or an unpacked ``docker save``) in a folder. Every name resolves inside the
    folder and must be a regular file: a blob that is a link out of it, a fifo or a folder is
    refused, not followed or waited on."""

    def __init__(self, root: Path, prefix: str = "") -> None:
        self.root = root.resolve()
        self.prefix = prefix
        self.label = str(root)

    def _path(self, name: str) -> Path | None:
        rel = _normal(self.prefix + name)
        if rel is None:
            return None
        path = (self.root / rel).resolve()
        if path != self.root and self.root not in path.parents:
            return None
        return path

    def has(self, name: str) -> bool:
        path = self._path(name)
        return path is not None and path.is_file()

    def size(self, name: str) -> int:
        path = self._path(name)
        if path is None or not path.is_file():
            raise ImageRefused(f"{self.label}: {name} is missing")
        return path.stat().st_size

    def open(self, name: str) -> IO[bytes]:
        path = self._path(name)
        if path is None:
            raise ImageRefused(f"{self.label}: {name} is outside the layout folder")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ImageRefused(f"{self.label}: {name} is missing") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ImageRefused(f"{self.label}: {name} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")


class TarSource:
    """An OCI layout or ``docker save`` archive in one tar file: members found by their
    normalised name, links between members followed inside the tar only."""

    def __init__(self, tar: tarfile.TarFile, label: str,
                 members: dict[str, tarfile.TarInfo], prefix: str = "") -> None:
        self.tar = tar
        self.label = label
        self.members = members
        self.prefix = prefix

    @classmethod
    def scan(cls, tar: tarfile.TarFile, label: str, limits: ImportLimits) -> TarSource:
        """Index the members once (headers only; contents are skipped by seeking)."""
        members: dict[str, tarfile.TarInfo] = {}
        count = 0
        while (info := tar.next()) is not None:
            count += 1
            if count > limits.archive_members:
                raise ImageRefused(f"{label}: more than {limits.archive_members:,} members "
                                   "(the limit of an image archive)")
            name = _normal(info.name)
            if name is not None:
                members[name] = info
        # The index above is the only copy kept. ``members`` is TarFile's own list of what it
        # has read; typeshed leaves that attribute out.
        tar.members = []  # type: ignore[attr-defined]
        return cls(tar, label, members)

    def top_folders(self) -> set[str]:
        return {n.split("/", 1)[0] for n in self.members}

    def _find(self, name: str) -> tarfile.TarInfo | None:
        key = _normal(self.prefix + name)
        for _ in range(_MAX_LINK_HOPS):
            if key is None:
                return None
            info = self.members.get(key)
            if info is None or not info.issym():
                return info
            key = _normal(posixpath.normpath(posixpath.join(posixpath.dirname(key),
                                                            info.linkname)))
        return None

    def has(self, name: str) -> bool:
        info = self._find(name)
        return info is not None and (info.isreg() or info.islnk())

    def size(self, name: str) -> int:
        info = self._find(name)
        if info is None or not (info.isreg() or info.islnk()):
            raise ImageRefused(f"{self.label}: {name} is missing")
        if info.islnk():
            target = self.members.get(_normal(info.linkname) or "")
            if target is None:
                raise ImageRefused(f"{self.label}: {name} links to a missing member")
            return target.size
        return info.size

    def open(self, name: str) -> IO[bytes]:
        info = self._find(name)
        if info is None:
            raise ImageRefused(f"{self.label}: {name} is missing")
        if not (info.isreg() or info.islnk()):
            raise ImageRefused(f"{self.label}: {name} is not a regular file")
        if info.islnk():
            target = self.members.get(_normal(info.linkname) or "")
            if target is None or not target.isreg():
                raise ImageRefused(f"{self.label}: {name} links to a missing member")
            info = target
        fh = self.tar.extractfile(info)
        assert fh is not None
        return fh


def _magic(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(6)


_COMPRESSED = {b"\x1f\x8b": gzip_ng.open, b"\xfd7zXZ": lzma.open, b"BZh": bz2.open}
_ARCHIVE_ERRORS: tuple[type[BaseException], ...] = (OSError, lzma.LZMAError, *INFLATE_ERRORS)


@contextmanager
def open_source(path: Path, limits: ImportLimits, scratch: Path) -> Iterator[BlobSource]:
    """The archive or layout at ``path``. A compressed tar is first expanded (bounded) into a
    temporary file under ``scratch``, because reading members of a compressed stream out of
    order means decompressing it again for each."""
    if path.is_dir():
        source: BlobSource = DirSource(path)
        yield _descend(source, path)
        return
    if not path.is_file():
        raise ImageRefused(f"{path}: no such file or folder")
    size = path.stat().st_size
    if size > limits.archive_bytes:
        raise ImageRefused(f"{path}: {describe_bytes(size)}, larger than the "
                           f"{describe_bytes(limits.archive_bytes)} limit of an image archive")
    with ExitStack() as stack:
        head = _magic(path)
        opener = next((o for m, o in _COMPRESSED.items() if head.startswith(m)), None)
        tar_path = path
        if opener is not None:
            scratch.mkdir(parents=True, exist_ok=True)
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="archive-",
                                                                  dir=scratch))
            tar_path = Path(tmp) / "archive.tar"
            _expand(path, tar_path, opener, limits)
        try:
            tar = stack.enter_context(tarfile.open(tar_path, "r:"))
        except (tarfile.TarError, OSError) as exc:
            raise ImageRefused(f"{path}: not an OCI layout folder, an OCI layout tar or a "
                               f"docker save archive ({exc})") from None
        try:
            yield _descend(TarSource.scan(tar, str(path), limits), path)
        except tarfile.TarError as exc:
            raise ImageRefused(f"{path}: a damaged tar ({exc})") from None


def _expand(src: Path, dst: Path, opener: Any, limits: ImportLimits) -> None:
    total = 0
    try:
        with opener(src, "rb") as fin, open(dst, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                total += len(chunk)
                if total > limits.archive_bytes:
                    raise ImageRefused(
                        f"{src}: expands past {describe_bytes(limits.archive_bytes)}, the limit "
                        "of an image archive")
                fout.write(chunk)
    except _ARCHIVE_ERRORS as exc:
        raise ImageRefused(f"{src}: a damaged compressed archive ({exc})") from None


def _descend(source: BlobSource, path: Path) -> BlobSource:
    """A tar of a layout folder (``tar cf img.tar img/``) holds everything under one top
    folder; look there when the top level holds neither ``index.json`` nor ``manifest.json``."""
    if source.has("index.json") or source.has("manifest.json"):
        return source
    if isinstance(source, TarSource):
        tops = source.top_folders()
        if len(tops) == 1:
            inner = TarSource(source.tar, source.label, source.members, tops.pop() + "/")
            if inner.has("index.json") or inner.has("manifest.json"):
                return inner
    raise ImageRefused(f"{path}: not an OCI image layout (no index.json) and not a docker save "
                       "archive (no manifest.json)")


class VerifiedReader(io.RawIOBase):
    """A blob read once, hashed and counted on the way. Past ``size`` bytes it refuses at once
    (a blob that never ends cannot fill the disk first); :meth:`finish` reads what is left and
    refuses a short blob or a digest that differs. ``digest`` or ``size`` may be unknown
    (``None``) for a layer of an old ``docker save``, which its diff id checks instead."""

    def __init__(self, raw: IO[bytes], *, what: str, digest: str | None,
                 size: int | None) -> None:
        super().__init__()
        self.raw = raw
        self.what = what
        self.digest = digest
        self.expected_size = size
        self.hash = hashlib.sha256()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.raw.read(len(view))
        n = len(data)
        if n:
            self.count += n
            if self.expected_size is not None and self.count > self.expected_size:
                raise ImageRefused(f"{self.what}: longer than the {self.expected_size:,} bytes "
                                   "its descriptor gives")
            self.hash.update(data)
            view[:n] = data
        return n

    def finish(self) -> str:
        """Drain, check size and digest; the ``sha256:`` of what was read."""
        while self.read(_CHUNK):
            pass
        if self.expected_size is not None and self.count != self.expected_size:
            raise ImageRefused(f"{self.what}: {self.count:,} bytes, but its descriptor gives "
                               f"{self.expected_size:,}")
        got = "sha256:" + self.hash.hexdigest()
        if self.digest is not None and got != self.digest:
            raise ImageRefused(f"{self.what}: its content has digest {got}, not {self.digest} "
                               "(a damaged or altered blob)")
        return got


def read_json(source: BlobSource, name: str, limits: ImportLimits, *,
              digest: str | None = None, size: int | None = None,
              what: str | None = None) -> object:
    """A small JSON document of the image, bounded, its digest checked before it is parsed."""
    what = what or f"{source.label}: {name}"
    if size is not None and size > limits.json_bytes:
        raise ImageRefused(f"{what}: {describe_bytes(size)}, larger than the "
                           f"{describe_bytes(limits.json_bytes)} limit of an image's JSON file")
    buf = bytearray()
    with source.open(name) as raw:
        reader = VerifiedReader(raw, what=what, digest=digest, size=size)
        while chunk := reader.read(_CHUNK):
            buf += chunk
            if len(buf) > limits.json_bytes:
                raise ImageRefused(f"{what}: larger than the "
                                   f"{describe_bytes(limits.json_bytes)} limit of an image's "
                                   "JSON file")
        reader.finish()
    try:
        return json.loads(bytes(buf).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ImageRefused(f"{what}: not valid JSON ({str(exc)[:200]})") from None
