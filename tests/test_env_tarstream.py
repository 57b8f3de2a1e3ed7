"""The layer tar reader (``environments/tarstream.py``, issue 33's pull speed) against Python's
own :mod:`tarfile`: the same members (name, type, mode, size, link target, bytes) from tars in
every format image builders write (ustar with a prefix, GNU long names and links, pax with
per-member and global headers, base-256 sizes, names that are not UTF-8), and a refusal with
the reason for what tarfile would silently cut short or guess at (a bad checksum, a header or
file cut short, a pax record that does not parse, a sparse file).

Pure Python in memory, no image: well under a CPU-second. What the members then do to a root
filesystem (escapes, links, whiteouts, bombs) is tests/test_env_oci.py's, which now runs
through this reader too.
"""

from __future__ import annotations

import io
import tarfile

import pytest

from assay.environments.tarstream import TarStream
from assay.errors import ImageRefused

Row = tuple[str, bytes, int, int, str, bytes]


def _tar(fmt: int, fill: list[tuple[tarfile.TarInfo, bytes]], **kw: object) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, **kw) as tar:  # type: ignore[call-overload]
        for info, data in fill:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, data: bytes = b"", mode: int = 0o644,
          link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def _by_tarfile(raw: bytes) -> list[Row]:
    rows = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r|") as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isreg() else None
            rows.append((m.name.rstrip("/"), m.type, m.mode, m.size, m.linkname,
                         f.read() if f else b""))
    return rows


def _by_stream(raw: bytes, chunk: int = 1 << 20) -> list[Row]:
    class Reader:  # hands out the stream in pieces of ``chunk`` bytes, as a decompressor does
        def __init__(self) -> None:
            self.pos = 0

        def read(self, n: int = -1) -> bytes:
            got = raw[self.pos:self.pos + min(n, chunk)]
            self.pos += len(got)
            return got

    stream = TarStream(Reader(), "layer")
    rows = []
    for m in stream:
        data = b""
        if m.isreg():
            while piece := stream.data(7):
                data += bytes(piece)
        rows.append((m.name.rstrip("/"), m.type, m.mode, m.size, m.linkname, data))
    return rows


MEMBERS = [
    _info("etc", tarfile.DIRTYPE, mode=0o755),
    _info("etc/hostname", data=b"box\n"),
    _info("usr/bin/tool", data=b"#!/bin/sh\n" * 100, mode=0o4755),
    _info("usr/lib/" + "deep/" * 30 + "file.so", data=b"x" * 513),  # > 100 chars: prefix/long
    _info("usr/bin/alias", tarfile.SYMTYPE, link="/usr/" + "long-target/" * 12 + "tool"),
    _info("usr/bin/again", tarfile.LNKTYPE, link="usr/bin/tool"),
    _info("etc/.wh.removed"),
    _info("dev/null", tarfile.CHRTYPE),
    _info("run/fifo", tarfile.FIFOTYPE),
    _info("empty", data=b""),
    _info("caf\udce9/latin-1 name", data=b"\xe9"),  # not UTF-8 on disk: kept as surrogates
]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_every_format_reads_as_tarfile_reads_it(fmt: int) -> None:
    members = [m for m in MEMBERS if fmt != tarfile.USTAR_FORMAT or len(m[0].linkname) < 100]
    raw = _tar(fmt, members, encoding="utf-8", errors="surrogateescape")
    want = _by_tarfile(raw)
    assert len(want) == len(members)
    assert _by_stream(raw) == want
    assert _by_stream(raw, chunk=700) == want  # headers and files across read boundaries


def test_pax_global_headers_and_big_sizes_are_honoured() -> None:
    raw = _tar(tarfile.PAX_FORMAT, [_info("a", data=b"1"), _info("b", data=b"22")],
               pax_headers={"comment": "built by a test"})
    assert _by_stream(raw) == _by_tarfile(raw)
    # a GNU tar's base-256 number: the same size written the other way
    info, data = _info("big", data=b"z" * 10)
    block = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    block[124:136] = b"\x80" + (10).to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:155] = f"{sum(block):06o}\0".encode()
    raw = bytes(block) + data.ljust(512, b"\0") + bytes(1024)
    assert _by_stream(raw) == [("big", tarfile.REGTYPE, 0o644, 10, "", data)]


def test_what_tarfile_would_cut_short_is_refused_with_the_reason() -> None:
    good = _tar(tarfile.USTAR_FORMAT, [_info("a", data=b"hello"), _info("b", data=b"x")])
    bad_sum = bytearray(good)
    bad_sum[512 + 512 + 3] ^= 1  # b's name, after a's header and data: tarfile ends early
    assert [r[0] for r in _by_tarfile(bytes(bad_sum))] == ["a"]
    with pytest.raises(ImageRefused, match="checksum does not match"):
        _by_stream(bytes(bad_sum))
    with pytest.raises(ImageRefused, match="ends inside a file"):
        _by_stream(good[:512 + 3])
    with pytest.raises(ImageRefused, match="header cut short"):
        _by_stream(good[:512 + 512 + 100])

    pax = _tar(tarfile.PAX_FORMAT, [_info("p" * 120, data=b"1")])
    broken = pax.replace(b" path=", b" path~", 1)
    with pytest.raises(ImageRefused, match="without '='"):
        _by_stream(_fix_checksums(broken))
    sparse = bytearray(good)
    sparse[156:157] = tarfile.GNUTYPE_SPARSE
    with pytest.raises(ImageRefused, match="sparse file"):
        _by_stream(_fix_checksums(bytes(sparse)))


def _fix_checksums(raw: bytes) -> bytes:
    """The first header's checksum recomputed after an edit (so only the edit is refused)."""
    block = bytearray(raw[:512])
    block[148:156] = b" " * 8
    block[148:155] = f"{sum(block):06o}\0".encode()
    return bytes(block) + raw[512:]
