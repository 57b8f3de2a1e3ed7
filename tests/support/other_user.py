"""Running ``python -m assay …`` as another user (``nobody``) from any checkout.

A test that proves a reader cannot write (an archived, read-only run) drops to ``nobody`` when it
runs as root, since root writes through any permission bit. ``nobody`` cannot import from a
checkout or a virtualenv under ``/root`` or any other 0700 directory, so the command gets an
install it can read: the packages the very same command imports when this user runs it, copied
(hard-linked where the file system allows) into a world-readable directory, and an interpreter of
this Python's version that ``nobody`` can start. When no such interpreter or directory exists the
caller skips, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# Runs ``assay`` with argv, then writes to the file given first the location of every top-level
# module it imported that is not part of the base interpreter's standard library (package folder
# or module file; a virtualenv's lib/pythonX.Y is its platstdlib, so the base one is asked for).
_PROBE = r"""
import atexit, json, os, runpy, sys, sysconfig
out = sys.argv.pop(1)
base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
        "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
std = tuple(os.path.realpath(sysconfig.get_paths(vars=base)[k]) + os.sep
            for k in ("stdlib", "platstdlib"))
def in_std(real):
    parts = real.split(os.sep)
    return real.startswith(std) and "site-packages" not in parts and "dist-packages" not in parts
def dump():
    found = set()
    for name, mod in list(sys.modules.items()):
        if "." in name:
            continue
        paths = list(getattr(mod, "__path__", []) or [])
        if not paths and getattr(mod, "__file__", None):
            paths = [mod.__file__]
        for p in paths:
            real = os.path.realpath(p)
            if not in_std(real) and os.path.exists(real):
                found.add(p)
    with open(out, "w") as fh:
        json.dump(sorted(found), fh)
atexit.register(dump)
sys.argv[0] = "assay"
runpy.run_module("assay", run_name="__main__", alter_sys=True)
"""

# What the other user runs: the copied packages first on the path, then ``assay``'s main.
_LAUNCH = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'assay'; "
           "runpy.run_module('assay', run_name='__main__', alter_sys=True)")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def readable_install(probe_argv: Sequence[str], into: Path) -> Path:
    """Copy into ``into/lib`` (world-readable) what ``assay *probe_argv`` imports here, and the
    distribution metadata beside it (``importlib.metadata`` reads it); return that folder."""
    lib = into / "lib"
    lib.mkdir(parents=True)
    listing = into / "imported.json"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    res = subprocess.run([sys.executable, "-c", _PROBE, str(listing), *probe_argv],
                         capture_output=True, text=True, timeout=120, check=False, env=env)
    assert listing.is_file(), res.stderr
    parents: set[Path] = set()
    for name in json.loads(listing.read_text()):
        path = Path(name)
        parents.add(path.parent)
        if path.is_dir():
            shutil.copytree(path, lib / path.name, copy_function=_link_or_copy,
                            ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            _link_or_copy(str(path), str(lib / path.name))
    for parent in parents:
        for meta in parent.glob("*.dist-info"):
            shutil.copytree(meta, lib / meta.name, copy_function=_link_or_copy,
                            dirs_exist_ok=True)
    for d, _, files in os.walk(into):
        os.chmod(d, 0o755)
        for f in files:
            p = os.path.join(d, f)
            if os.stat(p).st_nlink == 1:  # a copy of ours; hard links keep their source's mode
                os.chmod(p, 0o644)
    return lib


def nobody_python(cwd: Path) -> str:
    """An interpreter of this Python's major.minor (the copied extension modules are built for
    it) that ``nobody`` can start from ``cwd``; skip when there is none."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [sys.executable, os.path.realpath(sys.executable),
                  getattr(sys, "_base_executable", ""), shutil.which(f"python{want}") or "",
                  f"/usr/bin/python{want}", f"/usr/local/bin/python{want}"]
    tried = []
    for exe in dict.fromkeys(c for c in candidates if c):
        try:
            res = subprocess.run([*AS_NOBODY, exe, "-I", "-c",
                                  "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=60, cwd=cwd,
                                 check=False)
        except OSError as exc:
            tried.append(f"{exe}: {exc}")
            continue
        if res.returncode == 0 and res.stdout.strip() == want:
            return exe
        tried.append(f"{exe}: {res.stdout.strip() or res.stderr.strip()[-200:]}")
    pytest.skip(f"no Python {want} that nobody can start: " + "; ".join(tried))


def run_as_nobody(lib: Path, argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``assay *argv`` as nobody, importing only from ``lib`` and the interpreter's own library
    (``-I``: no PYTHONPATH, no user site, not the working directory)."""
    exe = nobody_python(cwd)
    return subprocess.run([*AS_NOBODY, exe, "-I", "-c", _LAUNCH, str(lib), *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
