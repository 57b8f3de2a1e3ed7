"""Integrity: what the candidate changed, and whether it touched what it must not.

Checked on the frozen artifact against the pristine tree, before any test runs, because a
"passing" test run means nothing if the tests, or the tools that run them, were changed. The
checks are all-of: a correct fix plus one edited test is still a rejection.
"""

from __future__ import annotations

import posixpath
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from assay.grading.verify.shadowing import shadowing_problems
from assay.records.artifact import MAX_CONFIG_BYTES, TOO_LARGE, TreeEntry
from assay.records.statuses import INTEGRITY_ORDER, IntegrityCode
from assay.records.workspace import BESIDE_SOURCE_RULE, VENV_RULE, ignored_test, venv_folders
from assay.suites.patterns import glob_match, matches_any

__all__ = ["ChangeSet", "IntegrityResult", "check_integrity", "diff_trees", "glob_match",
           "matches_any"]

# Files whose mere presence changes how Python or pytest behave: a candidate who adds one can
# make any test run "pass" without fixing anything.
TOOLING_NAMES = {"pytest.py", "conftest.py", "sitecustomize.py", "usercustomize.py",
                 "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                 "entry_points.txt"}
TOOLING_DIRS = {"pytest", "_pytest"}
TOOLING_SUFFIXES = (".pth", ".dist-info", ".egg-info", ".egg-link")
# Code the interpreter can import in place of a source a reviewer can read: bytecode and
# extension modules (``importlib.machinery.EXTENSION_SUFFIXES`` all end in ``.so`` on POSIX,
# ``.pyd`` on Windows). Other machine code (a compiled program the task asks for, a built
# artefact) cannot be imported: it is part of the deliverable, graded by the tests.
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd")
# Shared config files are legitimate to edit, unless the edit carries test-runner settings.
CONFIG_WITH_SECTIONS = {"setup.cfg", "pyproject.toml"}


@dataclass
class ChangeSet:
    added: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)  # content, type or mode

    @property
    def all(self) -> list[str]:
        return sorted(self.added + self.deleted + self.modified)

    def to_record(self) -> dict[str, list[str]]:
        return {"added": self.added, "deleted": self.deleted, "modified": self.modified}


def _key(e: TreeEntry) -> tuple[Any, ...]:
    exe = int(e["mode"], 8) & 0o111 if e["type"] == "file" else None
    return (e["type"], e.get("sha256"), e.get("target"), exe)


def diff_trees(pristine: list[TreeEntry], artifact: list[TreeEntry],
               strict_mode: set[str] | None = None) -> ChangeSet:
    """Changes from the pristine listing to the artifact listing. Mode counts as the executable
    bit, except on ``strict_mode`` paths (protected ones), where every permission bit counts."""
    strict_mode = strict_mode or set()
    p = {e["path"]: e for e in pristine}
    a = {e["path"]: e for e in artifact}
    cs = ChangeSet()
    for path in sorted(set(p) | set(a)):
        if path not in a:
            cs.deleted.append(path)
        elif path not in p:
            cs.added.append(path)
        elif _key(p[path]) != _key(a[path]) or (
                path in strict_mode and p[path]["mode"] != a[path]["mode"]):
            if p[path]["type"] == "dir" and a[path]["type"] == "dir" and path not in strict_mode:
                continue
            cs.modified.append(path)
    return cs


def _resolve(link_path: str, links: dict[str, str]) -> str | None:
    """Where the link at ``link_path`` leads, as a workspace-relative path, or None when it
    leaves the workspace. Resolved one component at a time, following links on the way, as
    the kernel does (so ``a/lnk/../x`` goes through ``lnk`` before climbing)."""
    pending = deque(p for p in link_path.split("/"))
    resolved: list[str] = []
    hops = 0
    while pending:
        comp = pending.popleft()
        if comp in ("", "."):
            continue
        if comp == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        candidate = "/".join([*resolved, comp])
        if candidate in links:
            hops += 1
            target = links[candidate]
            if hops > 40 or target.startswith("/"):
                return None  # a loop, or an absolute path: not inside the workspace
            pending.extendleft(reversed(target.split("/")))
            continue
        resolved.append(comp)
    return "/".join(resolved)


@dataclass
class IntegrityResult:
    passed: bool
    #: the first problem's code, in ``INTEGRITY_ORDER`` (``records/statuses.py``)
    failure_code: IntegrityCode | None
    problems: list[dict[str, Any]]
    changes: ChangeSet

    def to_record(self) -> dict[str, Any]:
        return {"passed": self.passed, "failure_code": self.failure_code,
                "problems": self.problems, "changes": self.changes.to_record()}


def without_ignored(entries: list[TreeEntry],
                    ignored: list[str] | None) -> list[TreeEntry]:
    """``entries`` less the regenerable caches the freeze leaves out (``ignored``: the
    patterns ``artifact.json`` recorded; the bytecode-beside-its-source rule included)."""
    if not ignored:
        return entries
    left_out = ignored_test([p for p in ignored if p not in (BESIDE_SOURCE_RULE, VENV_RULE)],
                            glob_match)
    paths = {e["path"] for e in entries}
    beside = BESIDE_SOURCE_RULE in ignored
    venvs = venv_folders(paths) if VENV_RULE in ignored else set()
    return [e for e in entries
            if not left_out(e["path"])
            and not (venvs and _under_any(e["path"], venvs))
            and not (beside and e["type"] == "file" and e["path"].endswith((".pyc", ".pyo"))
                     and e["path"][:-1] in paths)]


def _under_any(path: str, folders: set[str]) -> bool:
    parts = path.split("/")
    return any("/".join(parts[:i]) in folders for i in range(1, len(parts) + 1))


def check_integrity(pristine: list[TreeEntry], artifact: list[TreeEntry], *,
                    protected: list[str], allowed: list[str] | None,
                    allowed_binaries: list[str] | None = None,
                    ignored: list[str] | None = None,
                    every_mode: bool = False,
                    shadow_names: frozenset[str] = frozenset()) -> IntegrityResult:
    """The integrity verdict. Paths matching ``ignored`` (regenerable caches, which the
    freeze leaves out) are dropped from both sides first: they are neither changed protected
    paths nor changes outside the allowed paths. ``every_mode``: every permission bit of
    every path is a change (a task with several users, where a mode decides who reads a
    file), not only the executable bit outside the protected paths. ``shadow_names``: module
    names no added or changed top-level module may take (``shadowing.shadow_names``)."""
    pristine = without_ignored(pristine, ignored)
    artifact = without_ignored(artifact, ignored)
    protected_paths = {e["path"] for e in pristine + artifact
                       if matches_any(e["path"], protected)}
    strict = ({e["path"] for e in pristine + artifact} if every_mode else protected_paths)
    changes = diff_trees(pristine, artifact, strict_mode=strict)
    problems: list[dict[str, Any]] = []

    for path in changes.all:
        if path in protected_paths:
            problems.append({"code": "protected_file_changed", "path": path})

    links = {e["path"]: e["target"] for e in artifact if e["type"] == "symlink"}
    for path, target in sorted(links.items()):
        where = _resolve(path, links)
        if where is None:
            problems.append({"code": "link_outside_workspace", "path": path, "target": target})
        elif where in protected_paths or matches_any(where, protected):
            problems.append({"code": "link_into_protected_path", "path": path,
                             "target": target})

    by_inode: dict[int, list[TreeEntry]] = {}
    for e in artifact:
        if e.get("nlink", 1) > 1:
            by_inode.setdefault(e["inode"], []).append(e)
    for group in by_inode.values():
        names = sorted(e["path"] for e in group)
        if any(n in protected_paths for n in names):
            problems.append({"code": "link_into_protected_path", "path": names[0],
                             "hard_links": names})
        elif group[0]["nlink"] > len(group):
            problems.append({"code": "link_outside_workspace", "path": names[0],
                             "detail": "hard link to a file outside the workspace"})

    by_path = {e["path"]: e for e in artifact}
    before = {e["path"]: e for e in pristine}
    for path in changes.added + changes.modified:
        base = posixpath.basename(path)
        parts = path.split("/")
        after = by_path.get(path, TreeEntry())
        if base in CONFIG_WITH_SECTIONS and after.get("pytest_config") in (TOO_LARGE,
                                                                          "unparseable"):
            # fail closed: a config file integrity cannot read may carry pytest settings
            size = after.get("size")
            problems.append({"code": "test_tooling_changed", "path": path, "size": size,
                             "why": (f"{size} bytes, over the {MAX_CONFIG_BYTES} integrity "
                                     "reads: refused, never skipped"
                                     if after.get("pytest_config") == TOO_LARGE else
                                     "unreadable as config: refused, never skipped")})
        elif (base in TOOLING_NAMES or any(p in TOOLING_DIRS for p in parts)
                or any(p.endswith(TOOLING_SUFFIXES) for p in parts)
                or (base in CONFIG_WITH_SECTIONS
                    and _pytest_config_changed(before.get(path), after))):
            problems.append({"code": "test_tooling_changed", "path": path})
        entry = by_path.get(path, TreeEntry())
        if entry.get("type") != "dir" and _is_compiled(path, entry) and not matches_any(
                path, allowed_binaries or []):
            problems.append({"code": "compiled_code_added", "path": path,
                             "kind": entry.get("binary") or posixpath.splitext(base)[1]
                             or "__pycache__"})

    # a top-level module named like the standard library or the test runner: the interpreter
    # could load it in their place (``shadowing.py``)
    problems += shadowing_problems(artifact, changes.added + changes.modified, shadow_names)

    if allowed is not None:
        for path in changes.all:
            if not matches_any(path, allowed) and not _is_parent_dir_of_allowed(path, allowed):
                problems.append({"code": "change_outside_allowed_paths", "path": path})

    codes = {p["code"] for p in problems}
    first = next((c for c in INTEGRITY_ORDER if c in codes), None)
    return IntegrityResult(not problems, first, problems, changes)


def _pytest_config_changed(before: TreeEntry | None, after: TreeEntry) -> bool:
    """Only a change to the test runner's own sections counts, so a fix that edits a
    project's dependencies is not rejected. Artifacts frozen before the section digest existed
    fall back to the old rule: any change to a file that mentions pytest."""
    if "pytest_config" not in after:
        return bool(after.get("mentions_pytest"))
    old = before.get("pytest_config") if before else None
    new = after["pytest_config"]
    return new != old or new == "unparseable"


def _is_compiled(path: str, entry: TreeEntry) -> bool:
    """Code Python could import instead of a source: by the name the import system looks
    for (``.pyc``, an extension module, anything in a ``__pycache__``), whatever the content;
    an ELF or Mach-O file under any other name (``bin/prog``, ``notes.txt``) is not importable
    and is left to the tests."""
    return path.endswith(COMPILED_SUFFIXES) or "__pycache__" in path.split("/")


def _is_parent_dir_of_allowed(path: str, allowed: list[str]) -> bool:
    """A directory that only exists to hold allowed files (``src`` for ``src/**``) is fine."""
    return any(p.strip("/").startswith(path + "/") for p in allowed)
