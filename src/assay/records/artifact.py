"""Freezing an agent's workspace into evidence: ``artifact.tar`` plus ``artifact.json``.

A ``git diff`` misses untracked files, binaries, permission changes, links and hard links, which
are exactly what a grader-gaming agent would use. So the freeze walks the tree without following
links and records every path's type, mode, size, content digest, link target and link count. The
verifier only ever reads this frozen copy, never the live workspace.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, Literal, TypedDict

from pydantic import Field

from assay.records.base import Record
from assay.records.io import atomic_write_text
from assay.records.workspace import (
    DEFAULT_IGNORED_PATHS,
    Matcher,
    WorkspaceLimits,
    WorkspaceOverLimit,
    walk_workspace,
)

ARTIFACT_TAR = "artifact.tar"
ARTIFACT_JSON = "artifact.json"


class TreeEntry(TypedDict, total=False):
    """One path of a tree listing (:func:`list_tree`, ``artifact.json``'s ``entries``), keys in
    the order written. Every entry has ``path``, ``mode``, ``type``, ``size`` and ``sha256``;
    the rest only where they apply. (A plain TypedDict, so ``artifact.json`` stays the dict it
    was; the record model reads ``entries`` as open mappings.)"""

    path: str
    mode: str  # the permission bits, octal
    type: Literal["file", "dir", "symlink", "other"]
    target: str  # symlink only
    size: int | None  # file only
    sha256: str | None  # file only
    mentions_pytest: bool  # setup.cfg and pyproject.toml only
    pytest_config: str | None  # the same: the digest of the test runner's sections
    binary: str  # compiled code: elf, macho, pyc
    nlink: int  # a file with more than one name
    inode: int


class ExcludedPath(Record):
    """One path the freeze left out, with everything below it."""

    path: str
    """Workspace-relative path (a cache or tooling folder, a virtual environment, or one
    file)."""
    rule: str
    """The pattern of ``acceptance.ignored_paths`` (or the default) that left it out
    (``a folder holding pyvenv.cfg`` for a virtual environment), or ``*.pyc beside its
    .py``."""
    files: int
    """Regular files in it."""
    bytes: int
    """Their apparent size."""


class ExcludedCaches(Record):
    """What the freeze left out as inert: regenerable caches (bytecode, test-runner caches)
    and tooling no check loads (virtual environments, packaging metadata, build output,
    node_modules, coverage data, editor and OS files). Links in them are never followed."""

    patterns: list[str]
    """The patterns in force: the task's ``acceptance.ignored_paths`` or the defaults, and the
    bytecode-beside-its-source rule."""
    files: int
    """Regular files left out."""
    bytes: int
    """Their apparent size."""
    paths: list[ExcludedPath]
    """One row per top path left out."""


class ArtifactManifest(Record):
    """``artifact.json``: the frozen workspace's listing beside ``artifact.tar``. Every kept
    path with its type, mode, size, digest, link target and link count; what was left out as a
    cache; the workspace bounds and what was measured. A workspace over its bounds gets no tar:
    ``refused`` says why and the attempt's execution is ``resource_limit``."""

    schema_name: ClassVar[str] = "assay.artifact"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "<trial>/artifact.json"

    schema_: str = Field(alias="schema")
    """``assay.artifact/1``."""
    tar_sha256: str | None
    """sha256 of ``artifact.tar``; None when the freeze refused the workspace."""
    files: int | None
    """Regular files kept."""
    bytes: int | None
    """Their total size."""
    excluded: ExcludedCaches | None = None
    """The caches left out (absent in artifacts frozen before caches were left out)."""
    limits: dict[str, Any] | None = None
    """The bounds in force (``bytes`` from ``resources.workspace_mib``, ``entries`` from
    ``resources.workspace_files``, ``depth``, ``path_bytes``) and what was ``measured``
    (entries and apparent bytes, caches included)."""
    refused: dict[str, Any] | None = None
    """Set when the workspace was over a bound: ``limit`` (which), ``bound``, ``counted`` (a
    lower bound: the walk stops at the first crossing), ``at`` (the path where it stopped),
    ``detail``."""
    entries: list[dict[str, Any]]
    """Every kept path: ``path``, ``type`` (file, dir, symlink, other), ``mode``, ``size``,
    ``sha256``, ``target``, ``nlink``/``inode`` for hard links, ``binary`` for compiled code."""


def _manifest_text(manifest: dict[str, Any], where: Path) -> str:
    ArtifactManifest.read(manifest, where)  # the writer's dict, validated as the record
    # ASCII escapes: a file name that is not UTF-8 (the agent chooses names) survives as a
    # surrogate escape that JSON can carry and tar can match.
    return json.dumps(manifest, indent=1) + "\n"


_MAGICS = ((b"\x7fELF", "elf"), (b"\xfe\xed\xfa\xce", "macho"),
           (b"\xfe\xed\xfa\xcf", "macho"), (b"\xce\xfa\xed\xfe", "macho"),
           (b"\xcf\xfa\xed\xfe", "macho"), (b"\xca\xfe\xba\xbe", "macho"))


def _kind_of_head(head: bytes) -> str | None:
    """The kind of compiled code a file's first four bytes announce, or None."""
    for magic, kind in _MAGICS:
        if head.startswith(magic):
            return kind
    word = int.from_bytes(head[:2], "little")
    if len(head) == 4 and head[2:4] == b"\r\n" and 3000 <= word < 4000:
        return "pyc"  # importlib's magic number: a version word, then \r\n
    return None


def _binary_kind(p: Path) -> str | None:
    """Machine code or Python bytecode by its first bytes, whatever the file is called: the
    interpreter would load either in place of a source a reviewer can read."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return None
    return _kind_of_head(head)


def pytest_config_digest(name: str, data: bytes) -> str | None:
    """sha256 of the test runner's own sections of a shared config file (``[tool.pytest*]`` in
    pyproject.toml, ``[tool:pytest]`` / ``[pytest]`` in setup.cfg), None when it has none, and
    ``"unparseable"`` when it cannot be read (then any change counts)."""
    import configparser
    import json
    import tomllib

    try:
        text = data.decode("utf-8")
        if name == "pyproject.toml":
            section = tomllib.loads(text).get("tool", {}).get("pytest")
        else:
            parser = configparser.RawConfigParser()
            parser.read_string(text)
            section = {s: dict(parser.items(s)) for s in ("tool:pytest", "pytest")
                       if parser.has_section(s)} or None
    except (UnicodeDecodeError, ValueError, configparser.Error):
        return "unparseable"
    if section is None:
        return None
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()


#: Shared config files that may carry pytest settings: integrity reads them (and only the test
#: runner's sections of them count as a change of test tooling).
CONFIG_FILES = ("setup.cfg", "pyproject.toml")
#: Larger than this, a config file is not read, and its digest says so: integrity then refuses
#: a change to it (fail closed), never skips it as having no pytest settings.
MAX_CONFIG_BYTES = 1 << 20
#: ``pytest_config`` of a config file too large to read (integrity refuses a change to it).
TOO_LARGE = "too_large"


def _config_fields(name: str, size: int, read: Any) -> TreeEntry:
    """``mentions_pytest`` and ``pytest_config`` of a shared config file; ``read`` None when it
    is over :data:`MAX_CONFIG_BYTES` (then ``too_large``, which integrity refuses)."""
    if read is None:
        return TreeEntry(mentions_pytest=True, pytest_config=TOO_LARGE)
    try:
        data = read()
    except OSError:
        return TreeEntry(mentions_pytest=True, pytest_config="unparseable")
    return TreeEntry(mentions_pytest=b"pytest" in data.lower(),
                     pytest_config=pytest_config_digest(name, data))


def _entry(root: Path, p: Path) -> TreeEntry:
    st = os.lstat(p)
    mode = st.st_mode
    rel = p.relative_to(root).as_posix()
    e = TreeEntry(path=rel, mode=f"{stat.S_IMODE(mode):04o}")
    if stat.S_ISLNK(mode):
        e.update(TreeEntry(type="symlink", target=os.readlink(p), size=None, sha256=None))
    elif stat.S_ISDIR(mode):
        e.update(TreeEntry(type="dir", size=None, sha256=None))
    elif stat.S_ISREG(mode):
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        e.update(TreeEntry(type="file", size=st.st_size, sha256=h.hexdigest()))
        if p.name in CONFIG_FILES:
            # integrity needs to know whether a shared config file carries pytest settings,
            # and whether exactly those settings changed
            e.update(_config_fields(p.name, st.st_size, p.read_bytes
                                    if st.st_size <= MAX_CONFIG_BYTES else None))
        kind = _binary_kind(p) if st.st_size >= 4 else None
        if kind:
            e["binary"] = kind
        if st.st_nlink > 1:
            e.update(TreeEntry(nlink=st.st_nlink, inode=st.st_ino))
    else:
        e.update(TreeEntry(type="other", size=None, sha256=None))
    return e


def list_tree(root: Path) -> list[TreeEntry]:
    """Every path below ``root`` (not ``root`` itself), sorted, links never followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            out.append(_entry(root, Path(dirpath) / name))
    out.sort(key=lambda e: e["path"])
    return out


class _HashingReader:
    """Reads exactly ``size`` bytes of an open file for the tar, hashing what it hands out, so
    the digest in ``artifact.json`` is the digest of the bytes in ``artifact.tar`` even if the
    file changed since it was measured (it is cut at the measured length)."""

    def __init__(self, fh: Any, size: int) -> None:
        self.fh, self.left = fh, size
        self.hash = hashlib.sha256()
        self.head = b""

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        data = self.fh.read(want)
        if len(data) < want:
            raise OSError(f"{self.fh.name}: shorter than when it was measured")
        if len(self.head) < 4:
            self.head += data[:4 - len(self.head)]
        self.left -= len(data)
        self.hash.update(data)
        return data


def _frozen_entry(tar: tarfile.TarFile, host: Path, rel: str,
                  st: os.stat_result) -> TreeEntry:
    """Archive one path and return its ``artifact.json`` entry (the same fields as
    :func:`_entry`, from one read of the file)."""
    mode = st.st_mode
    e = TreeEntry(path=rel, mode=f"{stat.S_IMODE(mode):04o}")
    if stat.S_ISREG(mode):
        fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            ti = tar.gettarinfo(arcname=rel, fileobj=fh)
            ti.mtime = int(st.st_mtime)  # an integer keeps a pax header off every member
            if ti.type == tarfile.LNKTYPE:  # a second name of a file already archived
                tar.addfile(ti)
                fh.seek(0)
                reader = _HashingReader(fh, st.st_size)
                while reader.left:
                    reader.read(1 << 20)
            else:
                ti.size = st.st_size
                reader = _HashingReader(fh, st.st_size)
                tar.addfile(ti, reader)
        e.update(TreeEntry(type="file", size=st.st_size, sha256=reader.hash.hexdigest()))
        if Path(rel).name in CONFIG_FILES:
            def read() -> bytes:
                with open(host, "rb") as fh2:
                    return fh2.read(st.st_size)
            e.update(_config_fields(Path(rel).name, st.st_size,
                                    read if st.st_size <= MAX_CONFIG_BYTES else None))
        kind = _kind_of_head(reader.head) if st.st_size >= 4 else None
        if kind:
            e["binary"] = kind
        if st.st_nlink > 1:
            e.update(TreeEntry(nlink=st.st_nlink, inode=st.st_ino))
        return e
    if stat.S_ISLNK(mode):
        e.update(TreeEntry(type="symlink", target=os.readlink(host), size=None, sha256=None))
    elif stat.S_ISDIR(mode):
        e.update(TreeEntry(type="dir", size=None, sha256=None))
    else:
        e.update(TreeEntry(type="other", size=None, sha256=None))
        return e  # sockets, fifos, devices: listed, not archived
    ti = tar.gettarinfo(str(host), arcname=rel)
    ti.mtime = int(st.st_mtime)
    tar.addfile(ti)
    return e


def freeze(workspace: Path, trial_dir: Path, *, limits: WorkspaceLimits | None = None,
           ignored: list[str] | tuple[str, ...] = DEFAULT_IGNORED_PATHS,
           match: Matcher = fnmatchcase) -> dict[str, Any]:
    """Write ``artifact.tar`` and ``artifact.json`` for ``workspace`` into ``trial_dir``.

    The tree is measured first (a bounded walk); over ``limits`` nothing is written and
    :class:`WorkspaceOverLimit` says why. Regenerable caches (``ignored``) are left out and
    listed under ``excluded``."""
    walked = walk_workspace(workspace, ignored=ignored, match=match,
                            limits=limits or WorkspaceLimits(max_bytes=1 << 62,
                                                             max_entries=1 << 62))
    fd, tmp = tempfile.mkstemp(prefix=".artifact.", suffix=".tar", dir=trial_dir)
    os.close(fd)
    entries: list[TreeEntry] = []
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for rel, st in walked.kept:
                entries.append(_frozen_entry(tar, workspace / rel, rel, st))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        os.replace(tmp, trial_dir / ARTIFACT_TAR)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    manifest = {
        "schema": "assay.artifact/1",
        "tar_sha256": digest,
        "files": sum(1 for e in entries if e["type"] == "file"),
        "bytes": sum(e["size"] or 0 for e in entries),
        "excluded": walked.excluded.to_record(),
        "limits": {**(limits.to_record() if limits else {}),
                   "measured": {"entries": walked.entries, "bytes": walked.bytes}},
        "entries": entries,
    }
    atomic_write_text(trial_dir / ARTIFACT_JSON, _manifest_text(manifest, trial_dir))
    return manifest


def refuse(trial_dir: Path, over: WorkspaceOverLimit,
           limits: WorkspaceLimits) -> dict[str, Any]:
    """Write the ``artifact.json`` of a workspace that was over its bounds: no tar, no
    entries, the figure. The verifier grades it from the execution (``resource_limit``)."""
    manifest: dict[str, Any] = {"schema": "assay.artifact/1", "tar_sha256": None, "files": None,
                "bytes": None, "refused": {**over.figure, "limits": limits.to_record()},
                "entries": []}
    atomic_write_text(trial_dir / ARTIFACT_JSON, _manifest_text(manifest, trial_dir))
    return manifest


def _links_below(root: Path) -> set[str]:
    """Relative paths of the symbolic links below ``root`` (the pristine tree: small)."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                found.add(os.path.relpath(p, root).replace(os.sep, "/"))
    return found


def _safe_name(name: str, links: set[str]) -> bool:
    """Relative, no ``..`` or empty component, and no parent folder that is a link: written
    below ``dest`` and nowhere else."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return False
    return not any("/".join(parts[:i]) in links for i in range(1, len(parts)))


#: From this many paths on, the frozen tar is unpacked by GNU tar (C) into a staging folder
#: and the wanted paths moved into place: Python's tarfile spends over 100 microseconds a member
#: just reading the headers.
BULK_EXTRACT_MIN = 2000


def extract_paths(trial_dir: Path, dest: Path, paths: set[str]) -> None:
    """Extract ``paths`` from the frozen tar into ``dest`` (the pristine tree), the same names
    checks either way (:func:`_extract_members`, or for many paths of an artifact this assay
    froze, :func:`_extract_bulk`)."""
    if len(paths) >= BULK_EXTRACT_MIN and shutil.which("tar"):
        manifest = json.loads((trial_dir / ARTIFACT_JSON).read_text())
        if manifest.get("excluded") is not None:  # frozen by the walk: listing == tar members
            _extract_bulk(trial_dir, dest, paths, manifest["entries"])
            return
    _extract_members(trial_dir, dest, paths)


def _extract_bulk(trial_dir: Path, dest: Path, paths: set[str],
                  entries: list[TreeEntry]) -> None:
    """GNU tar unpacks the whole archive into a staging folder beside ``dest``; then each
    wanted file and link is renamed into place and each wanted folder made, after the same
    checks as :func:`_extract_members`, on the names ``artifact.json`` lists (the tar's own,
    bound to it by the digest the verifier checked)."""
    by_path = {e["path"]: e for e in entries}
    wanted = sorted(p for p in paths if p in by_path and by_path[p]["type"] != "other")
    links = _links_below(dest) | {p for p in wanted if by_path[p]["type"] == "symlink"}
    for p in wanted:
        if not _safe_name(p, links):
            raise ValueError(f"artifact.tar: refusing to extract {p!r}")
    with tempfile.TemporaryDirectory(prefix=".assay-extract-", dir=dest.parent) as tmp:
        staging = Path(tmp)
        proc = subprocess.run(
            ["tar", "-x", "-p", "--no-same-owner", "-f", str(trial_dir / ARTIFACT_TAR),
             "-C", str(staging)], capture_output=True, check=False, timeout=3600)
        if proc.returncode != 0:
            raise OSError("unpacking artifact.tar: "
                          + proc.stderr.decode(errors="replace").strip()[-300:])
        # folders the candidate left unwritable would stop the moves out of them
        subprocess.run(["find", str(staging), "-type", "d", "-exec", "chmod", "u+rwx", "{}",
                        "+"], capture_output=True, check=False, timeout=3600)
        for p in wanted:
            target = dest / p
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                st = None
            is_dir = by_path[p]["type"] == "dir"
            if st is not None and stat.S_ISDIR(st.st_mode) and not is_dir:
                shutil.rmtree(target)
            elif st is not None and not stat.S_ISDIR(st.st_mode):
                target.unlink()
            if is_dir:
                target.mkdir(exist_ok=True)
            else:
                os.rename(staging / p, target)
    for p in reversed(wanted):  # folder modes last, deepest first
        if by_path[p]["type"] == "dir":
            os.chmod(dest / p, int(by_path[p]["mode"], 8) & 0o777)


def _extract_members(trial_dir: Path, dest: Path, paths: set[str]) -> None:
    """Extract ``paths`` from the frozen tar into ``dest`` (the pristine tree). Every name is
    checked before anything is written: relative, no ``..``, no parent that is a link (in the
    pristine tree or in the archive), a hard link only to a name checked the same way; so a
    hostile archive cannot write outside ``dest``. The checks are set lookups, not the ``tar``
    filter's ``realpath`` of every member, which cost more than the extraction itself on a
    tree of many small files. Permission bits above 0o777 are dropped."""
    links = _links_below(dest)
    with tarfile.open(trial_dir / ARTIFACT_TAR) as tar:
        members = sorted((m for m in tar.getmembers() if m.name in paths),
                         key=lambda m: m.name)
        links |= {m.name for m in members if m.issym()}
        for m in members:
            if not _safe_name(m.name, links) or (
                    m.islnk() and not _safe_name(m.linkname, links)) or not (
                    m.isfile() or m.isdir() or m.issym() or m.islnk()):
                raise ValueError(f"artifact.tar: refusing to extract {m.name!r}")
            target = dest / m.name
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISDIR(st.st_mode) and not m.isdir():
                    shutil.rmtree(target)
                elif not stat.S_ISDIR(st.st_mode):
                    target.unlink()
            tar.extract(m.replace(mode=m.mode & 0o777, deep=False), dest,
                        filter="fully_trusted")
