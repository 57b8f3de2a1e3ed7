"""An arm's own files (``agent_files:``): what its agent needs beside the experiment file.

A ``command:`` agent is usually a script the team keeps next to the experiment
(``agents/my_agent.py``). The sandbox shows the agent only the task's workspace and the system,
so an arm names those files, paths relative to the experiment file, and the runner copies them
read-only into every sandbox at :data:`AGENT_FILES_MOUNT` (``runner/agent_files.py``).

They are part of what an arm *is*: each entry's fingerprint joins the arm's identity, so a
changed agent file on resume is refused like a changed task. The entries are checked here, at
load: relative, inside the experiment's folder, present, and within :data:`MAX_BYTES` /
:data:`MAX_FILES` (the copy is made once per run; a mistaken ``agent_files: [.]`` over a
dataset should be refused, not copied).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

#: Where an arm's files appear in the agent's sandbox (read-only); ``agents/x.py`` is then
#: ``/assay/agent/agents/x.py``. Also given to the agent as ``ASSAY_AGENT_DIR``.
AGENT_FILES_MOUNT = "/assay/agent"
MAX_BYTES = 256 * 1024 * 1024
MAX_FILES = 20_000


def normalize_entry(entry: str) -> str:
    """``agents/`` → ``agents``; refuses what could name something outside the experiment's
    folder (absolute paths, ``..``) with the reason as a ``ValueError``."""
    text = entry.strip()
    if not text:
        raise ValueError("an agent_files entry is a path relative to the experiment file")
    path = PurePosixPath(text)
    if path.is_absolute():
        raise ValueError(f"{entry!r} is absolute: agent_files are relative to the experiment "
                         "file (they are copied into the sandbox under "
                         f"{AGENT_FILES_MOUNT})")
    parts = [p for p in path.parts if p != "."]
    if not parts or ".." in parts:
        raise ValueError(f"{entry!r} leaves the experiment's folder: agent_files are inside "
                         "it, relative to the experiment file")
    return "/".join(parts)


def entry_fingerprint(base: Path, entry: str) -> str:
    """``sha256:`` over the entry's files (path, type, executable bit, content; links as their
    target, never followed), within the size bounds; ``ValueError`` saying what is wrong."""
    root = base / entry
    if root.is_symlink() or not (root.is_file() or root.is_dir()):
        raise ValueError(f"{entry!r}: no such file or folder beside the experiment file "
                         f"({root})")
    resolved, top = root.resolve(), base.resolve()
    if resolved != top and top not in resolved.parents:
        raise ValueError(f"{entry!r} leaves the experiment's folder")
    h = hashlib.sha256()
    files, size = 0, 0
    for path in _walk(root):
        rel = path.relative_to(root).as_posix() if path != root else "."
        if path.is_symlink():
            h.update(f"link\0{rel}\0{os.readlink(path)}\n".encode())
            continue
        if not path.is_file():
            continue
        files += 1
        size += path.stat().st_size
        if files > MAX_FILES or size > MAX_BYTES:
            raise ValueError(f"{entry!r} holds more than {MAX_FILES} files or "
                             f"{MAX_BYTES // (1024 * 1024)} MiB: name only what the agent needs")
        exe = "x" if os.access(path, os.X_OK) else "-"
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        h.update(f"file\0{rel}\0{exe}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()


def _walk(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        out += [Path(dirpath) / n for n in sorted(filenames)]
        out += [Path(dirpath) / n for n in dirnames if (Path(dirpath) / n).is_symlink()]
    return sorted(out)


def fingerprint_all(base: Path, entries: list[str]) -> dict[str, str]:
    """Every entry's fingerprint, by its normalised path."""
    return {normalize_entry(e): entry_fingerprint(base, normalize_entry(e)) for e in entries}
