"""Reading one hand-written text file, bounded and checked, before anything parses it.

Every input file goes through :func:`read_text`: its size is checked against its limit
(``suites/limits.py``) from the open file's metadata, before a byte is read, so an oversized
file costs a stat call and not a parse; only a regular file is read (a FIFO or a device named
as ``task.yaml`` would block or never end); and bytes that are not UTF-8 are refused with their
byte offset and line, since a decode traceback tells a user nothing about where to look.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from assay.suites.errors import SuiteError
from assay.suites.limits import describe_bytes


def read_text(path: Path, *, limit: int, what: str, line: int | None = None,
              field: str | None = None, at: Path | None = None) -> tuple[bytes, str]:
    """``(raw bytes, text)`` of ``path``, or a ``SuiteError``: not found, not a regular file,
    larger than ``limit`` bytes, or not UTF-8. ``what`` names the file in messages ("the
    experiment file"); a missing file is reported at ``at``/``line``/``field`` when given (the
    file and field that name it)."""
    where = at if at is not None else path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SuiteError.one(where, f"{what} {path} does not exist", line=line,
                             field=field) from None
    except OSError as exc:
        raise SuiteError.one(where, f"{what} {path} cannot be read ({exc.strerror})",
                             line=line, field=field) from None
    except ValueError:  # a NUL byte in the path
        raise SuiteError.one(where, f"{what} {str(path)!r}: a path may not contain a NUL byte",
                             line=line, field=field) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SuiteError.one(where, f"{what} {path} is not a regular file", line=line,
                                 field=field)
        if st.st_size > limit:
            raise too_large(path, what, st.st_size, limit)
        raw = fh.read(limit + 1)  # a file growing while read is bounded too
    if len(raw) > limit:
        raise too_large(path, what, len(raw), limit)
    return raw, decode_utf8(path, raw)


def too_large(path: Path, what: str, size: int, limit: int) -> SuiteError:
    return SuiteError.one(path, f"{what} is {describe_bytes(size)}, over the "
                          f"{describe_bytes(limit)} limit for it (see docs/guide/security.md, "
                          "\"Input limits\"); refused without parsing")


def decode_utf8(path: Path, raw: bytes, *, first_line: int = 1) -> str:
    """``raw`` as text, or a ``SuiteError`` naming the byte offset and line of the first byte
    that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + raw.count(b"\n", 0, exc.start)
        raise SuiteError.one(path, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at byte "
                             f"offset {exc.start}; save the file as UTF-8",
                             line=line) from None
