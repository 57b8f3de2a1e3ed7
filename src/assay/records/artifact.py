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
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from assay.records.io import atomic_write_text

ARTIFACT_TAR = "artifact.tar"
ARTIFACT_JSON = "artifact.json"


_MAGICS = ((b"\x7fELF", "elf"), (b"\xfe\xed\xfa\xce", "macho"),
           (b"\xfe\xed\xfa\xcf", "macho"), (b"\xce\xfa\xed\xfe", "macho"),
           (b"\xcf\xfa\xed\xfe", "macho"), (b"\xca\xfe\xba\xbe", "macho"))


def _binary_kind(p: Path) -> str | None:
    """Machine code or Python bytecode by its first bytes, whatever the file is called: the
    interpreter would load either in place of a source a reviewer can read."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return None
    for magic, kind in _MAGICS:
        if head.startswith(magic):
            return kind
    word = int.from_bytes(head[:2], "little")
    if len(head) == 4 and head[2:4] == b"\r\n" and 3000 <= word < 4000:
        return "pyc"  # importlib's magic number: a little-endian version word, then \r\n
    return None


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


def _entry(root: Path, p: Path) -> dict[str, Any]:
    st = os.lstat(p)
    mode = st.st_mode
    rel = p.relative_to(root).as_posix()
    e: dict[str, Any] = {"path": rel, "mode": f"{stat.S_IMODE(mode):04o}"}
    if stat.S_ISLNK(mode):
        e.update(type="symlink", target=os.readlink(p), size=None, sha256=None)
    elif stat.S_ISDIR(mode):
        e.update(type="dir", size=None, sha256=None)
    elif stat.S_ISREG(mode):
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        e.update(type="file", size=st.st_size, sha256=h.hexdigest())
        if p.name in ("setup.cfg", "pyproject.toml") and st.st_size < (1 << 20):
            # integrity needs to know whether a shared config file carries pytest settings,
            # and whether exactly those settings changed
            data = p.read_bytes()
            e["mentions_pytest"] = b"pytest" in data.lower()
            e["pytest_config"] = pytest_config_digest(p.name, data)
        kind = _binary_kind(p) if st.st_size >= 4 else None
        if kind:
            e["binary"] = kind
        if st.st_nlink > 1:
            e.update(nlink=st.st_nlink, inode=st.st_ino)
    else:
        e.update(type="other", size=None, sha256=None)
    return e


def list_tree(root: Path) -> list[dict[str, Any]]:
    """Every path below ``root`` (not ``root`` itself), sorted, links never followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            out.append(_entry(root, Path(dirpath) / name))
    out.sort(key=lambda e: e["path"])
    return out


def freeze(workspace: Path, trial_dir: Path) -> dict[str, Any]:
    """Write ``artifact.tar`` and ``artifact.json`` for ``workspace`` into ``trial_dir``."""
    entries = list_tree(workspace)
    fd, tmp = tempfile.mkstemp(prefix=".artifact.", suffix=".tar", dir=trial_dir)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for e in entries:
                if e["type"] == "other":
                    continue  # sockets, fifos, devices: listed, not archived
                tar.add(workspace / e["path"], arcname=e["path"], recursive=False)
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
        "entries": entries,
    }
    # ASCII escapes: a file name that is not UTF-8 (the agent chooses names) survives as a
    # surrogate escape that JSON can carry and tar can match.
    atomic_write_text(trial_dir / ARTIFACT_JSON, json.dumps(manifest, indent=1) + "\n")
    return manifest


def extract_paths(trial_dir: Path, dest: Path, paths: set[str]) -> None:
    """Extract ``paths`` from the frozen tar into ``dest``. The ``tar`` filter refuses absolute
    names, ``..`` and anything that would land outside ``dest`` through a link, so a hostile
    archive cannot write on the host."""
    with tarfile.open(trial_dir / ARTIFACT_TAR) as tar:
        members = [m for m in tar.getmembers() if m.name in paths]
        for m in sorted(members, key=lambda m: m.name):
            target = dest / m.name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir() and not m.isdir():
                shutil.rmtree(target)
            tar.extract(m, dest, filter="tar")
