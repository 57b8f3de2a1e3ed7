"""Top-level modules of the deliverable named like the standard library or the test runner.

A check's interpreter puts ``PYTHONPATH`` entries, the working directory and the test files'
folders before the standard library on ``sys.path``. A deliverable that adds ``src/json.py`` or
``src/typing/`` is imported in place of the real module by everything in the test process, pytest
included, and can change the code under test before any test runs; the start-up guard resolves
those names from the interpreter's installation first (``pytest_boot.py``), and integrity refuses
them outright (``stdlib_shadowed``), so the verdict never rests on the guard alone.

Which names: the standard library of the interpreter that runs the checks. Python keeps the
list (``sys.stdlib_module_names``); a check in a pinned image runs the image's ``python3``, so
the top-level names of the image's own standard-library folders are added to this process's
list (builtin modules are in both). Plus the test runner's own distributions
(``check_run.RUNNER_MODULES``).
"""

from __future__ import annotations

import os
import posixpath
import sys
from pathlib import Path
from typing import Any

from assay.grading.verify.check_run import RUNNER_MODULES

#: suffixes under which a file on ``sys.path`` is importable as a module
_MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pyw")
#: where a Debian or upstream image keeps its standard library
_STDLIB_GLOBS = ("usr/lib/python3*", "usr/local/lib/python3*")


def _names_in(folder: Path) -> set[str]:
    out: set[str] = set()
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name in ("site-packages", "dist-packages", "test", "config"):
                    continue
                if e.is_dir(follow_symlinks=False):
                    if e.name.isidentifier() and e.name != "lib-dynload":
                        out.add(e.name)
                elif e.name.endswith(_MODULE_SUFFIXES):
                    out.add(e.name.split(".", 1)[0])
    except OSError:
        pass
    return out


def image_stdlib_names(rootfs: Path | None) -> set[str]:
    """Top-level module names of an image's standard-library folders (and ``lib-dynload``)."""
    if rootfs is None:
        return set()
    out: set[str] = set()
    for pattern in _STDLIB_GLOBS:
        for lib in sorted(rootfs.glob(pattern))[:8]:
            if lib.is_dir() and not lib.is_symlink():
                out |= _names_in(lib) | _names_in(lib / "lib-dynload")
    return {n for n in out if n.isidentifier()}


#: Standard-library names nothing imports unasked (the interpreter's own regression tests,
#: demos and jokes): a reproduction script called ``test.py`` at the root is a habit, not an
#: attack, and leaving these out refuses none of what the interpreter, pytest or a test loads.
NEVER_IMPORTED = frozenset({"test", "this", "antigravity", "idlelib", "turtledemo",
                            "__phello__"})


def shadow_names(rootfs: Path | None) -> frozenset[str]:
    """Names no top-level module of the deliverable may take."""
    std = set(getattr(sys, "stdlib_module_names", ())) | image_stdlib_names(rootfs)
    return frozenset((std - NEVER_IMPORTED) | RUNNER_MODULES)


def top_level_module(path: str, entry_type: str, paths: set[str]) -> str | None:
    """The module name ``path`` (a file or folder of a tree listing, ``paths`` every path of
    it) can be imported as from the folder holding it, when that folder is not itself a
    package (so it may be on ``sys.path``): ``src/json.py`` → ``json``, ``src/typing/`` (with
    an ``__init__.py``) → ``typing``. None for anything else: a module inside a package, a
    namespace folder (a regular module of the same name elsewhere on the path wins), data."""
    parent, base = posixpath.split(path)
    if posixpath.join(parent, "__init__.py").lstrip("/") in paths:
        return None  # inside a package: imported under the package's name
    if entry_type == "dir":
        return base if posixpath.join(path, "__init__.py") in paths else None
    if entry_type in ("file", "symlink") and base.endswith(_MODULE_SUFFIXES):
        name = base.split(".", 1)[0]
        return name if name.isidentifier() else None
    return None


def shadowing_problems(artifact: list[Any], changed: list[str],
                       names: frozenset[str]) -> list[dict[str, Any]]:
    """A ``stdlib_shadowed`` problem for each added or changed top-level module of the
    deliverable named in ``names``."""
    by_path = {e["path"]: e for e in artifact}
    paths = set(by_path)
    out = []
    for path in changed:
        e = by_path.get(path)
        if e is None:
            continue
        name = top_level_module(path, e["type"], paths)
        if name is not None and name in names:
            what = ("the test runner's" if name in RUNNER_MODULES else "the standard library's")
            out.append({"code": "stdlib_shadowed", "path": path, "module": name,
                        "why": f"named like {what} {name!r}, which the interpreter could load "
                               "from the deliverable in its place"})
    return out
