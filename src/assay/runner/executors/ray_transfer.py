"""Files between the driver and a Ray worker without a shared file system (``object_store``).

The driver ships a task bundle as a tar (put in Ray's object store once per bundle); the worker
runs the attempt in a private temporary directory and sends the attempt's files back as tars:
the frozen artifact before ``verifying`` is announced (so a node lost while verifying is graded
on the driver, as with a shared file system), the rest as the task's return value.

What comes back was written on another machine by code that ran next to an agent: it is
untrusted. :func:`unpack_into` accepts regular files, directories and symlinks that stay inside
the attempt; an absolute name, a ``..``, a link out, a hard link or a device is refused before
anything lands. Files are unpacked into a temporary directory beside the attempt and renamed
into it, ``trial.json`` last, so a reader never sees half a file; the attempt directory already
holds the driver's own files (``placement.json``, the gateway's ``model_calls.jsonl``), and a
name that is already there is never overwritten (``NeverOverwrite``) — except ``trial.json``,
the stage record that the stages themselves rewrite (atomically) as they go.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from assay.errors import NeverOverwrite, TransportError

#: The one file of an attempt that a later shipment may replace (its stages rewrite it).
REWRITABLE = "trial.json"


def pack(root: Path, only: Iterable[str] | None = None, *, arcname: str = ".",
         leave_out: str | None = None) -> bytes:
    """A tar of ``root`` (or of the relative paths ``only`` under it); links are stored as
    links, never followed. ``leave_out``: a relative path under ``root`` left out with all it
    holds (a bundle's image source, when the image travels on its own)."""
    buf = io.BytesIO()
    rel = posixpath.normpath(leave_out) if leave_out is not None else "."
    skip = None if rel in (".", "..") or rel.startswith("../") else posixpath.join(arcname, rel)

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if skip is not None and (
            info.name == skip or info.name.startswith(skip + "/")) else info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        if only is None:
            tar.add(root, arcname=arcname, recursive=True, filter=keep)
        else:
            for rel in sorted(only):
                tar.add(root / rel, arcname=rel, recursive=False)
    return buf.getvalue()


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and link under ``root`` by relative path, with its size and mtime: what a
    later :func:`pack` of the changes compares against."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def changed_since(root: Path, shipped: dict[str, tuple[int, int]]) -> list[str]:
    """The files under ``root`` that are new or changed since ``shipped``."""
    now = files_of(root)
    return sorted(rel for rel, sig in now.items() if shipped.get(rel) != sig)


def _check_member(m: tarfile.TarInfo) -> str:
    name = posixpath.normpath(m.name)
    if m.name.startswith("/") or name.startswith("/") or name == ".." or \
            name.startswith("../") or "\\" in m.name:
        raise TransportError(f"a worker's tar holds {m.name!r}: outside the attempt")
    if m.isdir() or m.isreg():
        return name
    if m.issym():
        target = m.linkname
        if target.startswith("/") or posixpath.normpath(
                posixpath.join(posixpath.dirname(name), target)).split("/")[0] == "..":
            raise TransportError(f"a worker's tar holds the link {m.name!r} -> {target!r}: "
                                 "it points outside the attempt")
        return name
    raise TransportError(f"a worker's tar holds {m.name!r} of a kind an attempt never "
                         "writes (hard link, device, fifo)")


def unpack_into(data: bytes | IO[bytes], dest: Path) -> list[str]:
    """Unpack a worker's tar into the attempt directory ``dest`` (see the module docstring);
    returns the relative paths that landed. Nothing lands when any member is refused."""
    fileobj = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        tar = tarfile.open(fileobj=fileobj, mode="r:")
    except tarfile.TarError as exc:
        raise TransportError(f"a worker's files are not a tar: {exc}") from None
    with tar:
        members = tar.getmembers()
        names = [_check_member(m) for m in members]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.incoming-", dir=dest.parent))
        try:
            tar.extractall(tmp, filter="data")
            landed = [n for n, m in zip(names, members, strict=True)
                      if not m.isdir() and n != "."]
            if not dest.exists():  # all of it at once
                tmp.chmod(0o755)
                os.rename(tmp, dest)
                return sorted(landed)
            clash = [n for n in landed if n != REWRITABLE and os.path.lexists(dest / n)]
            if clash:
                raise NeverOverwrite(f"{dest}: a worker's files would overwrite "
                                     f"{', '.join(clash[:5])}: an attempt is never rewritten")
            for rel in sorted(landed, key=lambda n: (n == REWRITABLE, n)):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, dest / rel)
            return sorted(landed)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["REWRITABLE", "changed_since", "files_of", "pack", "unpack_into"]
