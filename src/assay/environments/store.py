"""The image store: root filesystems kept content-addressed under the cache directory.

An environment is a root filesystem the sandbox runs a task in. However it was made (a Debian
recipe built with ``mmdebstrap``, an OCI layout or ``docker save`` archive, a Dockerfile turned
into a recipe), it ends up here the same way: unpacked into a staging folder, digested
(:func:`tree_digest`: paths, kinds, modes, contents and link targets, nothing of times or
owners), then renamed in one step to ``images/sha256-<hex>/``. A half-made image therefore never
sits under a final name, and two builders racing for the same result both end with the one copy.

The store also remembers which *source* gave which image (``sources/<kind>-<hex>.json``): a
recipe's digest names its build, the image's digest pins it; building the same recipe again is
a lookup. Records name an image by its digest (``sha256:<64 hex>``) only.

Two processes asked for the same source at once (two ``assay env build`` of one recipe, two
runs whose tasks share a Dockerfile, a team's jobs on one shared store) build it once:
:meth:`ImageStore.source_lock` holds a lock per source (``locks/``) while it is built, and
whoever waited finds the image when it gets the lock. Different sources build side by side.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from assay.errors import ImageRefused
from assay.records.clock import utc_now
from assay.records.environment import EnvironmentImage, ImageConfig, SourceKind
from assay.records.io import atomic_write_text, read_json_file

__all__ = ["EnvironmentImage", "ImageConfig", "ImageStore", "KnownFiles", "SourceKind",
           "cache_root", "tree_digest"]

IMAGE_FILE = "image.json"
ROOTFS = "rootfs"
LOCK_SUFFIX = ".lock"
#: An ``rm-`` staging folder this old is the remains of an interrupted removal.
STALE_REMOVAL_SECONDS = 600


def cache_root() -> Path:
    """``$ASSAY_CACHE_DIR`` or ``$XDG_CACHE_HOME/assay`` (``~/.cache/assay``)."""
    base = os.environ.get("ASSAY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "assay")
    return Path(base)


#: What an unpacker noted of a file it wrote: ``(st_dev, st_ino) -> (size, mtime_ns, hex
#: sha256 of the content)``. :func:`tree_digest` takes a file's content digest from here
#: instead of reading it back when the file on disk still has that size and mtime.
KnownFiles = dict[tuple[int, int], tuple[int, int, str]]


def tree_digest(root: Path, known: KnownFiles | None = None) -> tuple[str, int, int]:
    """``(sha256:<hex>, entries, bytes)`` of a root filesystem.

    Walked iteratively in sorted order; each entry contributes its relative path, kind,
    permission bits and content (regular files) or target (symlinks). Owners and times are left
    out: an unprivileged unpack cannot keep owners, and times say nothing of behaviour. Device
    files and sockets are refused by the unpackers before this point and digested by kind.

    ``known``: content digests an unpacker computed while it wrote the files (it had every
    byte in hand), so an imported image is not read back a second time (a third of a pull's
    unpack). The tree itself is still walked and every path, kind, mode and link target read
    from disk; a file is read only when it is not in ``known`` or its size or mtime changed
    since, so the digest is the same one a plain walk gives."""
    known = known or {}
    h = hashlib.sha256()
    entries = 0
    total = 0
    stack = [""]
    base = os.fspath(root)  # plain strings: a Path per entry was a tenth of the walk
    while stack:
        rel = stack.pop()
        here = f"{base}/{rel}" if rel else base
        names = sorted(os.listdir(here), reverse=True)
        for name in names:
            sub = f"{rel}/{name}" if rel else name
            path = f"{base}/{sub}"
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            entries += 1
            if stat.S_ISDIR(st.st_mode):
                h.update(f"d {sub} {mode:o}\0".encode("utf-8", "surrogateescape"))
                stack.append(sub)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                h.update(f"l {sub} {target}\0".encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(st.st_mode):
                noted = known.get((st.st_dev, st.st_ino))
                if noted is not None and noted[:2] == (st.st_size, st.st_mtime_ns):
                    content = noted[2]
                else:
                    fh = hashlib.sha256()
                    with open(path, "rb") as f:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            fh.update(chunk)
                    content = fh.hexdigest()
                total += st.st_size
                h.update(f"f {sub} {mode:o} {content}\0".encode("utf-8", "surrogateescape"))
            else:
                kind = stat.S_IFMT(st.st_mode)
                h.update(f"o {sub} {kind:o} {mode:o}\0".encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest(), entries, total


def _dir_name(digest: str) -> str:
    return digest.replace(":", "-")


class ImageStore:
    """The images under ``<cache>/environments``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root() / "environments").absolute()

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def sources_dir(self) -> Path:
        return self.root / "sources"

    @property
    def staging_dir(self) -> Path:
        return self.root / "staging"

    def image_dir(self, digest: str) -> Path:
        return self.images_dir / _dir_name(digest)

    def rootfs(self, digest: str) -> Path:
        """The root filesystem of a stored image (which must exist: see :meth:`get`)."""
        return self.image_dir(digest) / ROOTFS

    def get(self, digest: str) -> EnvironmentImage | None:
        path = self.image_dir(digest) / IMAGE_FILE
        if not path.is_file():
            return None
        return EnvironmentImage.model_validate(read_json_file(path))

    def ls(self) -> list[EnvironmentImage]:
        if not self.images_dir.is_dir():
            return []
        found = [self.get(p.name.replace("-", ":", 1)) for p in sorted(self.images_dir.iterdir())]
        return [i for i in found if i is not None]

    def lookup_source(self, kind: SourceKind, source_digest: str) -> EnvironmentImage | None:
        """The image a source was built into before, if it is still in the store."""
        path = self.sources_dir / f"{kind}-{_dir_name(source_digest)}.json"
        if not path.is_file():
            return None
        return self.get(str(read_json_file(path).get("digest", "")))

    def source_entry(self, kind: SourceKind, source_digest: str) -> dict[str, Any]:
        """What the store noted of a source when it was published (``digest``, and for a
        registry pull ``manifest_digest`` and ``reference``); ``{}`` for an unknown one."""
        path = self.sources_dir / f"{kind}-{_dir_name(source_digest)}.json"
        if not path.is_file():
            return {}
        found = read_json_file(path)
        return dict(found) if isinstance(found, dict) else {}

    @contextmanager
    def source_lock(self, kind: SourceKind, source_digest: str,
                    progress: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the build of one source for this process (``locks/<kind>-<hex>.lock``,
        ``flock``, so a killed holder frees it; the empty file stays). Says so through
        ``progress`` when another process holds it; the caller looks the source up again once
        this is entered."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        path = locks / f"{kind}-{_dir_name(source_digest)}{LOCK_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if progress is not None:
                    progress("waiting: another process is building this source into "
                             f"{self.root}")
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A fresh, empty folder on the store's file system to build a root filesystem in
        (``<staging>/rootfs``). Removed on exit unless :meth:`publish` moved it into place.

        A build killed outright (``kill -9``, a lost machine) cannot clean up after itself, so
        each staging folder ``build-<x>`` has a lock file ``build-<x>.lock`` held (``flock``)
        for as long as its build runs; :meth:`sweep`, called here first, removes every staging
        folder whose lock nobody holds. A build in another process keeps its lock and its
        folder."""
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        self.sweep()
        fd, lock_name = tempfile.mkstemp(prefix="build-", suffix=LOCK_SUFFIX,
                                         dir=self.staging_dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            work = Path(lock_name.removesuffix(LOCK_SUFFIX))
            work.mkdir()
            try:
                (work / ROOTFS).mkdir()
                yield work / ROOTFS
            finally:
                _remove_tree(work)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock_name)
        finally:
            os.close(fd)

    def sweep(self) -> list[Path]:
        """Remove what dead builds and removals left in the staging folder: build folders
        whose lock is free, and ``rm-`` folders (an interrupted :meth:`rm`) older than
        :data:`STALE_REMOVAL_SECONDS`. Returns the folders removed."""
        removed: list[Path] = []
        if not self.staging_dir.is_dir():
            return removed
        for lock in sorted(self.staging_dir.glob("build-*" + LOCK_SUFFIX)):
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live build
                work = Path(str(lock).removesuffix(LOCK_SUFFIX))
                _remove_tree(work)
                removed.append(work)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
            finally:
                os.close(fd)
        now = time.time()
        for doomed in sorted(self.staging_dir.glob("rm-*")):
            with contextlib.suppress(FileNotFoundError):
                if now - doomed.lstat().st_mtime > STALE_REMOVAL_SECONDS:
                    _remove_tree(doomed)
                    removed.append(doomed)
        return removed

    def publish(self, rootfs: Path, *, source_kind: SourceKind, source_digest: str,
                source_label: str = "", config: ImageConfig | None = None,
                substitutions: list[str] | None = None,
                packages: dict[str, str] | None = None,
                adjustments: dict[str, int] | None = None,
                notes: list[str] | None = None,
                build_hosts: list[str] | None = None,
                manifest_digest: str | None = None,
                reference: str | None = None,
                source_extra: dict[str, str] | None = None,
                known: KnownFiles | None = None) -> EnvironmentImage:
        """Digest a finished root filesystem (made inside :meth:`staging`) and move it under its
        final name in one rename. An image already stored under that digest wins; the staged
        copy is then dropped with the staging folder. ``known``: see :func:`tree_digest`."""
        digest, files, size = tree_digest(rootfs, known)
        image = EnvironmentImage(
            digest=digest, source_kind=source_kind, source_digest=source_digest,
            source_label=source_label, config=config or ImageConfig(),
            substitutions=list(substitutions or []), packages=dict(packages or {}),
            adjustments=dict(adjustments or {}), notes=list(notes or []),
            build_hosts=list(build_hosts) if build_hosts is not None else None, files=files,
            bytes=size, created_at=utc_now(), manifest_digest=manifest_digest,
            reference=reference)
        return self._place(rootfs, image, source_extra)

    def adopt(self, rootfs: Path, image: EnvironmentImage,
              source_extra: dict[str, str] | None = None) -> EnvironmentImage:
        """Place a root filesystem another store made (staged by :meth:`staging`) under the
        digest its record names, keeping that record as it is, once its tree is shown to have
        that digest (:func:`tree_digest`, the same walk that named it). A tree that arrived
        otherwise is refused (:class:`ImageRefused`) and never stored: the caller's staging
        folder goes with it."""
        digest, files, size = tree_digest(rootfs)
        if digest != image.digest:
            label = image.source_label or image.source_kind
            raise ImageRefused(f"the image {image.digest} ({label}) arrived as {digest} "
                               f"({files} entries, {size} bytes of files): it does not match "
                               "its digest, so nothing was stored")
        return self._place(rootfs, image, source_extra)

    def _place(self, rootfs: Path, image: EnvironmentImage,
               source_extra: dict[str, str] | None) -> EnvironmentImage:
        """Write the record beside the staged tree and rename the pair under the image's
        final name in one step (an image already there wins); note which source it came
        from."""
        digest = image.digest
        final = self.image_dir(digest)
        if self.get(digest) is None:
            holder = rootfs.parent
            text = image.model_dump_json(indent=2, by_alias=True) + "\n"
            atomic_write_text(holder / IMAGE_FILE, text)
            self.images_dir.mkdir(parents=True, exist_ok=True)
            if final.exists():  # a half-removed image: never reuse its name in place
                _remove_tree(final)
            try:
                os.rename(holder, final)
                holder.mkdir()  # the staging context removes an empty folder
            except OSError:
                if self.get(digest) is None:
                    raise
        self.sources_dir.mkdir(parents=True, exist_ok=True)
        name = f"{image.source_kind}-{_dir_name(image.source_digest)}.json"
        atomic_write_text(self.sources_dir / name,
                          json.dumps({"digest": digest, **(source_extra or {})}) + "\n")
        stored = self.get(digest)
        assert stored is not None
        return stored

    def rm(self, digest: str) -> bool:
        """Remove an image: renamed out of ``images/`` first, so a reader never sees half."""
        final = self.image_dir(digest)
        if not final.exists():
            return False
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        doomed = Path(tempfile.mkdtemp(prefix="rm-", dir=self.staging_dir))
        os.rename(final, doomed / "image")
        _remove_tree(doomed)
        return True


def _remove_tree(path: Path) -> None:
    """Remove a tree an unpack or a build made, read-only folders included."""
    def onerror(func: object, p: str, exc: object) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700) if os.path.isdir(p) and not os.path.islink(p) else None
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass
    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=onerror)
