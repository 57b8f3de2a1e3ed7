"""Reading a layer's tar stream, one member at a time, with little work per member.

Why not :mod:`tarfile`: unpacking an image is a few thousand small files, and tarfile's stream
mode spent more time per member than the writing (issue 33's profile of a 4,400-member layer:
a third of the unpack in header parsing and 10 KiB reads through its stream layers, several
copies of every byte). Here the stream is read in 1 MiB pieces, a header is decoded with one
``struct`` call, and a file's bytes are handed out as views of those pieces, never copied.

What a header means is what :mod:`tarfile` (and Go's ``archive/tar``, which wrote most image
layers) make of it: the ustar ``prefix`` joined to the name; a GNU long name or link (``L``,
``K``) or a pax extended header (``x``; ``g`` for every later member) replacing the name, link
target or size of the member that follows; only regular files (and types no unpacker knows)
carry data. Stricter where they are lenient, never looser: a header whose checksum does not
match, a header or member cut short, a pax record that does not parse, a number that is not
octal or base-256, and sparse files (which no image builder writes) are refused with the
reason, where tarfile would end the archive early or guess. The members' *meaning* (paths,
links, whiteouts, limits) is checked by the unpacker (:mod:`.layers`), not here.
"""

from __future__ import annotations

import re
import struct
import tarfile
from collections.abc import Iterator
from typing import Protocol

from assay.errors import ImageRefused

__all__ = ["Member", "members"]

BLOCK = 512
_CHUNK = 1 << 20
#: name, mode, uid, gid, size, mtime, chksum, type, linkname, magic, version, uname, gname,
#: devmajor, devminor, prefix
_HEADER = struct.Struct("100s8s8s8s12s12s8sc100s6s2s32s32s8s8s155s")
_ZERO = bytes(BLOCK)
#: Longest GNU long name or pax header read (a path is bounded far lower by the unpacker).
MAX_EXTENDED = 1 << 20
_PAX_RECORD = re.compile(rb"(\d+) ")
_DATA_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_KNOWN_TYPES = (*_DATA_TYPES, tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE,
                tarfile.BLKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE)


class Readable(Protocol):
    def read(self, n: int = -1) -> bytes: ...


class Member(tarfile.TarInfo):
    """One member: a :class:`tarfile.TarInfo` (name, type, mode, size, link target) whose
    data, for a regular file, is read with :meth:`TarStream.data` before the next member."""


class TarStream:
    """The members of one tar stream, in order (:func:`members`)."""

    def __init__(self, raw: Readable, what: str) -> None:
        self.raw, self.what = raw, what
        self.buf: bytes = b""
        self.pos = 0
        self.offset = 0  # of the stream, for messages
        self.left = 0  # data bytes of the current member not yet read
        self.pad = 0

    def _refuse(self, why: str) -> ImageRefused:
        return ImageRefused(f"{self.what}: a damaged tar stream ({why} at byte "
                            f"{self.offset:,})")

    def _more(self) -> bool:
        chunk = self.raw.read(_CHUNK)
        if not chunk:
            return False
        self.buf = self.buf[self.pos:] + chunk if self.pos < len(self.buf) else chunk
        self.pos = 0
        return True

    def _take(self, n: int) -> bytes:
        """Exactly ``n`` bytes (fewer only at the stream's end)."""
        while len(self.buf) - self.pos < n and self._more():
            pass
        got = self.buf[self.pos:self.pos + n]
        self.pos += len(got)
        self.offset += len(got)
        return got

    def _skip(self, n: int) -> None:
        while n:
            if self.pos >= len(self.buf) and not self._more():
                raise self._refuse("the stream ends inside a member")
            k = min(n, len(self.buf) - self.pos)
            self.pos += k
            self.offset += k
            n -= k

    def data(self, n: int = _CHUNK) -> memoryview:
        """The current member's next bytes (at most ``n``; empty at its end): a view of the
        stream's buffer, valid until the next call."""
        if not self.left:
            return memoryview(b"")
        if self.pos >= len(self.buf) and not self._more():
            raise self._refuse("the stream ends inside a file")
        k = min(n, self.left, len(self.buf) - self.pos)
        view = memoryview(self.buf)[self.pos:self.pos + k]
        self.pos += k
        self.offset += k
        self.left -= k
        return view

    def _finish_member(self) -> None:
        while self.left:
            self.data()
        self._skip(self.pad)
        self.pad = 0

    def _extended(self, size: int) -> bytes:
        if size > MAX_EXTENDED:
            raise self._refuse(f"an extended header of {size:,} bytes")
        got = self._take(size)
        if len(got) != size:
            raise self._refuse("the stream ends inside an extended header")
        self._skip(-size % BLOCK)
        return got

    def __iter__(self) -> Iterator[Member]:
        glob: dict[str, str] = {}
        local: dict[str, str] = {}
        long_name: str | None = None
        long_link: str | None = None
        while True:
            self._finish_member()
            block = self._take(BLOCK)
            if not block or block == _ZERO:
                return  # the end (two zero blocks, or none: tarfile reads both as the end)
            if len(block) != BLOCK:
                raise self._refuse("a header cut short")
            f = _HEADER.unpack_from(block)
            checksum = self._number(f[6])
            if checksum != _unsigned_sum(block) and checksum != _signed_sum(block):
                raise self._refuse("a header whose checksum does not match")
            kind, size = f[7], self._number(f[4])
            if kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE):
                found = self._pax(self._extended(size))
                (glob if kind == tarfile.XGLTYPE else local).update(found)
                continue
            if kind in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                text = _nts(self._extended(size))
                if kind == tarfile.GNUTYPE_LONGNAME:
                    long_name = text
                else:
                    long_link = text
                continue
            if kind == tarfile.GNUTYPE_SPARSE:
                raise self._refuse("a sparse file (no image builder writes one)")
            name = _nts(f[0])
            if kind == tarfile.AREGTYPE and name.endswith("/"):
                kind = tarfile.DIRTYPE
            prefix = _nts(f[15])
            if prefix:
                name = prefix + "/" + name
            pax = {**glob, **local}
            if any(k.startswith("GNU.sparse.") for k in pax):
                raise self._refuse("a sparse file (no image builder writes one)")
            m = Member(pax.get("path", long_name if long_name is not None else name))
            m.type = kind
            m.mode = self._number(f[1])
            m.linkname = pax.get("linkpath", long_link if long_link is not None
                                 else _nts(f[8]))
            if "size" in pax:
                try:
                    size = int(pax["size"])
                except ValueError:
                    raise self._refuse(f"a pax size {pax['size'][:40]!r}") from None
            m.size = size
            local, long_name, long_link = {}, None, None
            carries = kind in _DATA_TYPES or kind not in _KNOWN_TYPES
            self.left = size if carries else 0
            self.pad = -size % BLOCK if carries else 0
            yield m

    def _number(self, field: bytes) -> int:
        """An octal number, or base-256 (a first byte of 0x80 or 0xff) as GNU writes big ones."""
        if field[:1] in (b"\x80", b"\xff"):
            n = int.from_bytes(field[1:], "big")
            return n - (256 ** (len(field) - 1)) if field[0] == 0xff else n
        text = field.split(b"\0", 1)[0].strip(b" \0")
        try:
            return int(text or b"0", 8)
        except ValueError:
            raise self._refuse(f"a header number {text[:20]!r} that is not octal") from None

    def _pax(self, data: bytes) -> dict[str, str]:
        """Records ``LEN KEY=VALUE\\n`` of a pax header, each whole and well formed."""
        found: dict[str, str] = {}
        pos = 0
        while pos < len(data):
            m = _PAX_RECORD.match(data, pos)
            if m is None or data[pos:pos + 1] == b"\0":
                if data[pos:].strip(b"\0"):
                    raise self._refuse("a pax header record that does not parse")
                break
            length = int(m.group(1))
            record = data[pos:pos + length]
            if length <= len(m.group(0)) or len(record) != length or not record.endswith(b"\n"):
                raise self._refuse("a pax header record of a wrong length")
            key, eq, value = record[len(m.group(0)):-1].partition(b"=")
            if not eq:
                raise self._refuse("a pax header record without '='")
            try:
                found[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
            except UnicodeDecodeError:
                raise self._refuse("a pax header key that is not UTF-8") from None
            pos += length
        return found


def members(raw: Readable, what: str) -> tuple[TarStream, Iterator[Member]]:
    """The stream (for :meth:`TarStream.data`) and its members."""
    stream = TarStream(raw, what)
    return stream, iter(stream)


def _nts(field: bytes) -> str:
    """A NUL-terminated header field as text (bytes that are not UTF-8 kept as
    surrogates, as tarfile and ``os.fsdecode`` do)."""
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _unsigned_sum(block: bytes) -> int:
    """The header's checksum as POSIX computes it (unsigned bytes, the field as spaces)."""
    return sum(block[:148]) + 256 + sum(block[156:])


def _signed_sum(block: bytes) -> int:
    """The same with signed bytes, as some old tars wrote it."""
    return _unsigned_sum(block) - 256 * sum(1 for b in block[:148] + block[156:] if b >= 128)
