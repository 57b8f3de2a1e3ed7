"""Reading an agent's workspace at the freeze: bounded, and without what a tool regenerates.

An agent leaves whatever it likes behind, and it is untrusted. So the walk is iterative (a
chain of ten thousand folders cannot exhaust the interpreter's stack), never follows a link,
and stops as soon as the tree is over one of its bounds (entries, apparent bytes, depth, path
length): the freeze then refuses to write an artifact and the attempt ends as
``resource_limit`` with the figure, so a 100 GiB sparse file or a million empty files never
reach the disk that holds the run. Sizes are apparent sizes (``st_size``): a sparse file counts
at its length, which is what a tar of it would hold.

Regenerable caches (bytecode, test-runner caches) are not deliverables. An honest agent runs
the tests and leaves them; reading them as changes would reject every agent that ever ran a
test. They are left out of the artifact and listed with their count and size. A ``.pyc`` with
no source beside it is not a cache (Python would load it in place of a source): it is kept, and
integrity rejects it as compiled code.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

#: How a pattern is matched against a path: the bundle's glob (``suites.patterns.glob_match``,
#: passed in by the caller, as records sits below suites), by default a plain ``fnmatch``.
Matcher = Callable[[str, str], bool]

#: A folder holding a ``pyvenv.cfg`` is a virtual environment, whatever its name (``.venv``,
#: ``env``, ``venv-3.11``): its interpreter links point out of the workspace and its
#: site-packages hold pip's own metadata, and no check runs it (the verifier runs the image's
#: interpreter). Listed among the patterns under this name, so a task can drop the rule.
VENV_RULE = "a folder holding pyvenv.cfg"
#: What is left out of the artifact unless the task says otherwise
#: (``acceptance.ignored_paths``). A name without ``/`` matches a file or folder of that name
#: anywhere; a folder that matches is left out with everything below it; ``dir/**`` matches
#: the top folder only. The rule is what can influence a verified run, not the name: these are
#: caches a tool regenerates, and tooling nothing in a check loads (packaging metadata once
#: pytest plugins load only by name, build and dist output, node's installed packages,
#: coverage data, editor swap and OS files).
DEFAULT_IGNORED_PATHS: tuple[str, ...] = (
    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
    VENV_RULE, "*.egg-info", "*.dist-info", "build/**", "dist/**", "node_modules", ".tox",
    ".nox", ".coverage", ".coverage.*", "htmlcov", "*.swp", "*.swo", "*~", ".DS_Store",
    "Thumbs.db")
#: Python 2's layout (``python -m compileall -b``): ``foo.pyc`` next to ``foo.py``. Python 3
#: loads the source when both exist, so the bytecode is inert and regenerable.
BESIDE_SOURCE_RULE = "*.pyc beside its .py"
_BYTECODE_SUFFIXES = (".pyc", ".pyo")
#: Bounds no configuration changes: no project needs folders this deep or paths this long,
#: and past them a path no longer fits the system's PATH_MAX below the run's temporary folder.
MAX_DEPTH = 128
MAX_PATH_BYTES = 3000


def ignored_match(rel: str, patterns: list[str] | tuple[str, ...],
                  match: Matcher = fnmatchcase) -> str | None:
    """The first pattern that leaves ``rel`` out, or None. A pattern without ``/`` names one
    path component (``__pycache__`` anywhere); one with ``/`` is a bundle glob over the
    workspace-relative path."""
    name = rel.rsplit("/", 1)[-1]
    for pattern in patterns:
        if "/" in pattern.strip("/"):
            if match(rel, pattern):
                return pattern
        elif match(name, pattern.strip("/")):
            return pattern
    return None


def ignored_test(patterns: list[str] | tuple[str, ...],
                 match: Matcher = fnmatchcase) -> Callable[[str], bool]:
    """A test of whether a path or one of its parent folders is left out by ``patterns``.
    Plain names (the defaults) become a set lookup per component: it runs once per path of a
    large tree."""
    names = frozenset(p.strip("/") for p in patterns
                      if not any(c in p.strip("/") for c in "/*?["))
    rest = [p for p in patterns if p.strip("/") not in names]

    def test(rel: str) -> bool:
        parts = rel.split("/")
        if not names.isdisjoint(parts):
            return True
        return bool(rest) and any(ignored_match("/".join(parts[:i]), rest, match)
                                  for i in range(1, len(parts) + 1))

    return test


@dataclass(frozen=True)
class WorkspaceLimits:
    """The bounds of one freeze: ``resources.workspace_mib`` and ``resources.workspace_files``,
    plus the fixed depth and path-length bounds."""

    max_bytes: int
    max_entries: int
    max_depth: int = MAX_DEPTH
    max_path_bytes: int = MAX_PATH_BYTES

    def to_record(self) -> dict[str, Any]:
        return {"bytes": self.max_bytes, "entries": self.max_entries, "depth": self.max_depth,
                "path_bytes": self.max_path_bytes}


class WorkspaceOverLimit(Exception):  # noqa: N818 - an outcome of the candidate, not a bug
    """The workspace is over a bound; ``figure`` says which, the bound, and what was counted
    when the walk stopped (a lower bound: the walk stops at the first crossing)."""

    def __init__(self, figure: dict[str, Any]) -> None:
        self.figure = figure
        super().__init__(figure["detail"])


@dataclass
class Excluded:
    """What the walk left out: one row per top excluded path (a cache folder with its count
    and bytes, or one bytecode file)."""

    patterns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        return {"patterns": self.patterns,
                "files": sum(r["files"] for r in self.rows),
                "bytes": sum(r["bytes"] for r in self.rows),
                "paths": self.rows}


@dataclass
class Walked:
    """The kept paths (relative, with their ``lstat``), and what was left out."""

    kept: list[tuple[str, os.stat_result]]
    excluded: Excluded
    entries: int
    bytes: int


class _Counter:
    def __init__(self, limits: WorkspaceLimits) -> None:
        self.limits = limits
        self.entries = 0
        self.bytes = 0

    def add(self, rel: str, st: os.stat_result, depth: int) -> None:
        self.entries += 1
        if stat.S_ISREG(st.st_mode):
            self.bytes += st.st_size
        lim = self.limits
        if self.entries > lim.max_entries:
            self._over("workspace_files", lim.max_entries, self.entries, rel,
                       f"the workspace holds more than {lim.max_entries} files and folders")
        if self.bytes > lim.max_bytes:
            self._over("workspace_mib", lim.max_bytes, self.bytes, rel,
                       f"the workspace holds more than {lim.max_bytes >> 20} MiB "
                       f"(apparent sizes; at least {self.bytes} bytes when the count stopped)")
        if depth > lim.max_depth:
            self._over("depth", lim.max_depth, depth, rel,
                       f"a path is more than {lim.max_depth} folders deep")
        if len(rel.encode("utf-8", "surrogateescape")) > lim.max_path_bytes:
            self._over("path_bytes", lim.max_path_bytes, len(rel.encode(
                "utf-8", "surrogateescape")), rel[:200],
                f"a path is longer than {lim.max_path_bytes} bytes")

    def _over(self, limit: str, bound: int, counted: int, rel: str, detail: str) -> None:
        raise WorkspaceOverLimit({"limit": limit, "bound": bound, "counted": counted,
                                  "entries_counted": self.entries,
                                  "bytes_counted": self.bytes, "at": rel[:300],
                                  "detail": detail})


def walk_workspace(root: Path, *, ignored: list[str] | tuple[str, ...],
                   limits: WorkspaceLimits, match: Matcher = fnmatchcase) -> Walked:
    """Every path below ``root``, sorted, links never followed; raises
    :class:`WorkspaceOverLimit` at the first bound crossed. Left-out paths count towards the
    bounds too: a sparse terabyte in ``.pytest_cache`` is still a terabyte to walk and keep."""
    counter = _Counter(limits)
    kept: list[tuple[str, os.stat_result]] = []
    excluded = Excluded(patterns=[*ignored, BESIDE_SOURCE_RULE])
    # (folder's host path, its relative path, depth, the excluded row it counts towards)
    stack: list[tuple[str, str, int, dict[str, Any] | None]] = [(str(root), "", 0, None)]
    while stack:
        host, rel_dir, depth, row = stack.pop()
        with os.scandir(host) as it:
            children = sorted(it, key=lambda d: d.name)
        names = {c.name for c in children}
        for child in children:
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            st = child.stat(follow_symlinks=False)
            counter.add(rel, st, depth + 1)
            is_dir = stat.S_ISDIR(st.st_mode)
            child_row = row
            if row is not None:
                _tally(row, st)
            else:
                rule = ignored_match(rel, ignored, match)
                if (rule is None and stat.S_ISREG(st.st_mode)
                        and child.name.endswith(_BYTECODE_SUFFIXES)
                        and child.name[:-4] + ".py" in names):
                    rule = BESIDE_SOURCE_RULE
                if rule is None and is_dir and VENV_RULE in ignored and is_venv(child.path):
                    rule = VENV_RULE
                if rule is not None:
                    child_row = {"path": rel, "rule": rule, "files": 0, "bytes": 0}
                    excluded.rows.append(child_row)
                    _tally(child_row, st)
                else:
                    kept.append((rel, st))
            if is_dir:
                stack.append((child.path, rel, depth + 1, child_row))
    kept.sort(key=lambda k: k[0])
    excluded.rows.sort(key=lambda r: r["path"])
    return Walked(kept, excluded, counter.entries, counter.bytes)


def is_venv(folder: str | Path) -> bool:
    """Whether ``folder`` holds a ``pyvenv.cfg`` as a regular file (never through a link)."""
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, "pyvenv.cfg")).st_mode)
    except OSError:
        return False


def venv_folders(paths: set[str]) -> set[str]:
    """The folders of a tree listing (its ``path`` set) that hold a ``pyvenv.cfg``."""
    return {p.rsplit("/", 1)[0] if "/" in p else "" for p in paths
            if p.rsplit("/", 1)[-1] == "pyvenv.cfg"} - {""}


def _tally(row: dict[str, Any], st: os.stat_result) -> None:
    if stat.S_ISREG(st.st_mode):
        row["files"] += 1
        row["bytes"] += st.st_size


def remove_tree(path: Path) -> None:
    """Remove a tree an agent left, however deep or unreadable: ``chmod`` and ``rm`` walk
    with ``openat`` (no path grows past PATH_MAX, no recursion in this process). Python's own
    ``rmtree`` is the fallback where they cannot run."""
    if not os.path.lexists(path):
        return
    try:
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True,
                       check=False, timeout=600)
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                       capture_output=True, check=False, timeout=600)
    except (OSError, subprocess.SubprocessError):
        pass
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def copy_tree(src: Path, dest: Path) -> None:
    """A private copy of ``src`` at ``dest`` (which must not exist): links as links, hard links
    kept together, modes and times. ``cp -a`` does it in one process without a Python call per
    file, which is most of the cost of a tree of many small files."""
    proc = subprocess.run(["cp", "-a", "-T", "--", str(src), str(dest)], capture_output=True,
                          check=False, timeout=3600)
    if proc.returncode != 0:
        raise OSError(f"copying {src}: {proc.stderr.decode(errors='replace').strip()[-300:]}")


#: Where the verifier's temporary trees go when they are small: a tree of many small files
#: costs a create and an unlink per file per copy, which on a disk mounted with online discard
#: under load runs to a millisecond each (100,000 files, five trees: minutes); in memory it is
#: microseconds. Only trees whose footprint (bytes plus a page per file) fits under
#: ``RAM_SCRATCH_MAX_BYTES``, and only while the memory file system has room for several.
RAM_SCRATCH = Path("/dev/shm")
RAM_SCRATCH_MAX_BYTES = 512 << 20


def owner_tag() -> str:
    """``<pid namespace>.<pid>`` of this process: a process id means something only within
    its namespace, so a folder named with it can be told to be a dead process's, and only
    folders made in our namespace are ever swept."""
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = "0"
    return f"{ns}.{os.getpid()}"


def dead_owners_folders(parent: Path, prefix: str) -> list[Path]:
    """The folders ``<prefix><owner_tag>-...`` under ``parent`` whose process (in our pid
    namespace) is gone: killed with SIGKILL, it never ran its clean-up. A live process's
    (another user's included), another namespace's and a symbolic link are left out."""
    ns, me = owner_tag().split(".")
    dead: list[Path] = []
    for entry in parent.glob(f"{prefix}{ns}.*-*"):
        pid = entry.name[len(prefix) + len(ns) + 1:].split("-", 1)[0]
        if not pid.isdigit() or pid == me or entry.is_symlink():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            dead.append(entry)
        except OSError:
            continue
    return dead


def verify_prefix(kind: str) -> str:
    """The name prefix of a verifier's temporary folder (``kind``: ``verifier``, ``verify``),
    carrying its owner so that a killed runner's folders can be swept (:func:`scratch_dir`)."""
    return f"assay-{kind}-{owner_tag()}-"


_OWNED = re.compile(r"^assay-verif(?:ier|y)-(\d+)\.(\d+)-")
_swept_ram = False


def sweep_dead_owners(root: Path) -> list[str]:
    """Remove the verifier folders under ``root`` whose owning process (in our pid namespace)
    is gone: a runner killed with SIGKILL never ran its clean-up, and in the memory file
    system its trees would hold memory until the machine restarts. Returns what was removed."""
    ns, me = owner_tag().split(".")
    removed: list[str] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _OWNED.match(entry.name)
        if m is None or m.group(1) != ns or m.group(2) == me or entry.is_symlink():
            continue
        try:
            os.kill(int(m.group(2)), 0)
        except ProcessLookupError:
            remove_tree(entry)
            removed.append(str(entry))
        except OSError:
            continue  # alive, but another user's
    return removed


def scratch_dir(files: int | None, nbytes: int | None) -> str | None:
    """The folder for the verifier's copies of a frozen tree of ``files`` files and
    ``nbytes`` bytes: the memory file system when the tree is small and there is room, else
    None (the system's temporary folder). The first time a process picks the memory file
    system it sweeps what dead runners left there (:func:`sweep_dead_owners`)."""
    global _swept_ram
    if files is None or nbytes is None:
        return None
    footprint = nbytes + 4096 * (files + 64)
    if footprint > RAM_SCRATCH_MAX_BYTES:
        return None
    try:
        if not (RAM_SCRATCH.is_dir() and os.access(RAM_SCRATCH, os.W_OK | os.X_OK)):
            return None
        free = shutil.disk_usage(RAM_SCRATCH).free
    except OSError:
        return None
    if free <= 8 * footprint + (1 << 30):
        return None
    if not _swept_ram:
        _swept_ram = True
        sweep_dead_owners(RAM_SCRATCH)
    return str(RAM_SCRATCH)


def scratch_beside(tree: Path) -> str | None:
    """The same choice for a copy of ``tree``: in memory when ``tree`` already is."""
    return str(RAM_SCRATCH) if RAM_SCRATCH in Path(tree).parents else None
