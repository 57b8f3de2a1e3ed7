"""Real Debian images for the tests: built with assay's own recipe builder, once, and shared.

``base_image(extra_packages)`` returns ``(ImageStore, EnvironmentImage)`` for a Debian bookworm
root with ``python3`` and ``python3-pytest`` (plus ``extra_packages``), built from a recipe by
:func:`assay.environments.debian.build_recipe` (``mmdebstrap``, then the finishing pass), so a
session that uses an image has also tested that path. A build takes 40 s on an idle 2-core
machine and 2-4 min under the load of the rest of the test run (most of it mmdebstrap
downloading and unpacking ~60 packages).

Where the store lives: ``<root>/environments``, the image store of a cache directory
``<root>`` (a test points ``ASSAY_CACHE_DIR`` at :func:`cache_dir` for trials to find the
image). By default ``<root>`` is kept across sessions, like the agent CLIs the tests install:
``~/.cache/assay/test-images/<fingerprint>`` (``$XDG_CACHE_HOME`` if set), where the fingerprint
hashes what an image is made by besides its recipe: assay's builder (``src/assay/environments``,
the recipe model) and the ``mmdebstrap`` script. A change to any of them starts an
empty folder, so the next session builds again; a later session finds each image by its
recipe's digest and builds nothing. The same store is the ``environments`` of the session's
own cache folder (tests/conftest.py), so the images the Harbor tests' conversions ask for are
kept too: five builds, about 100 CPU-seconds, that a session with an unchanged builder does
not repeat. Folders of other fingerprints untouched for a week are removed when a session
starts. The builder itself runs in every session all the same: tests/test_env_build.py builds
its full recipe (after killing a first attempt) into a store of its own.
``$ASSAY_TEST_IMAGE_CACHE`` names another root; ``ASSAY_TEST_IMAGE_CACHE=session`` keeps none:
a folder of this session under the system temporary directory named by the pytest process
(under pytest-xdist, by the controller: the workers' parent), shared by the workers and removed
when the session ends (``tests/conftest.py``'s ``pytest_unconfigure``, or at exit without
xdist); ``make test-full`` uses that, so the shared images are built there too.
An ``fcntl.flock`` per recipe makes concurrent workers (and sessions) build each image once:
one builds, the others wait and then find it in the store.

Callers that cannot build (no ``mmdebstrap``, no bubblewrap) get ``pytest.skip`` with the
reason.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.environments.debian import BuildResult, build_recipe
from assay.environments.store import EnvironmentImage, ImageStore
from assay.suites.recipe import load_recipe, recipe_digest

BASE_PACKAGES = ("python3", "python3-pytest")
#: Seconds the last build in this process took, by package tuple (the bench reads it).
BUILD_SECONDS: dict[tuple[str, ...], float] = {}


def recipe_text(packages: tuple[str, ...]) -> str:
    """The recipe of a test image with ``packages`` (sorted, so the same set is one image)."""
    return ("# A shared test image (tests/support/images.py).\n"
            "suite: bookworm\n"
            f"packages: [{', '.join(sorted(set(packages)))}]\n")


#: The shared base image's recipe.
BASE_RECIPE = recipe_text(BASE_PACKAGES)


def cache_dir(store: ImageStore) -> Path:
    """The cache directory whose image store ``store`` is (for ``ASSAY_CACHE_DIR``)."""
    return store.root.parent


def _session_root(owner: int) -> Path:
    return Path(tempfile.gettempdir()) / f"assay-test-images-{os.getuid()}-{owner}"


#: Folders of other builder fingerprints untouched this long are removed (seconds).
STALE_AFTER_S = 7 * 24 * 3600


@functools.cache
def builder_fingerprint() -> str:
    """A hash of what a test image is made by besides its recipe (see the module's docstring).
    The ``mmdebstrap`` is looked for on the system's own path: a test that empties ``PATH`` to
    show that a cached image needs no build must still find the same folder."""
    src = Path(__file__).resolve().parents[2] / "src" / "assay"
    parts = [*sorted((src / "environments").rglob("*.py")), src / "suites" / "recipe.py"]
    mmdebstrap = shutil.which("mmdebstrap", path="/usr/local/bin:/usr/bin:/bin")
    if mmdebstrap:
        parts.append(Path(mmdebstrap))
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.name.encode() + b"\0" + part.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def _kept_root() -> Path | None:
    """The default root, kept across sessions; older fingerprints' folders are swept (once a
    process: every image lookup asks). None where it cannot be made (a home folder that
    cannot be written): then nothing is kept."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    parent = base / "assay" / "test-images"
    root = parent / builder_fingerprint()
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.utime(root)  # in use: not swept by another session
    except OSError:
        return None
    for other in parent.iterdir():
        if other != root and other.is_dir() and \
                time.time() - other.stat().st_mtime > STALE_AFTER_S:
            _remove(other)
    return root


def _kept() -> Path | None:
    """The root kept across sessions (``$ASSAY_TEST_IMAGE_CACHE`` or the default), or None for
    a folder of the session (``ASSAY_TEST_IMAGE_CACHE=session``, or no default to be had)."""
    cached = os.environ.get("ASSAY_TEST_IMAGE_CACHE")
    if cached == "session":
        return None
    return Path(cached) if cached else _kept_root()


def session_image_store() -> Path | None:
    """The image store a session's own cache folder (``$ASSAY_CACHE_DIR``, tests/conftest.py)
    links to as its ``environments``: the kept images' store, unless nothing is kept."""
    kept = _kept()
    return None if kept is None else kept / "environments"


def _store_root() -> Path:
    kept = _kept()
    if kept is not None:
        return kept
    if "PYTEST_XDIST_TESTRUNUID" in os.environ:  # a worker: the controller's folder, shared
        return _session_root(os.getppid())
    root = _session_root(os.getpid())
    if not root.exists():
        atexit.register(_remove, root)
    return root


def image_cache_dir(_factory: object = None) -> Path:
    """The root the shared images live under (see the module's docstring)."""
    root = _store_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


def remove_session_store() -> None:
    """The controller's end of a session (``pytest_unconfigure``): the shared folder its
    pytest-xdist workers built images in, when they are not kept (see :func:`_kept`)."""
    if _kept() is None:
        _remove(_session_root(os.getpid()))


def _remove(root: Path) -> None:
    if root.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def require_mmdebstrap() -> None:
    """Skip (saying why) where images cannot be built: no mmdebstrap, no bubblewrap."""
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (scripts/bootstrap.sh installs it as root)")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (scripts/bootstrap.sh installs it)")


def build_shared(root: Path, name: str, text: str,
                 progress: Callable[[str], None] | None = None) -> tuple[ImageStore,
                                                                          BuildResult]:
    """Build the recipe ``text`` (written to ``<root>/recipes/<name>/env.yaml``) into the store
    ``<root>/environments``, one builder at a time across processes. Skips (saying why)
    when the store lacks it and this machine cannot build it."""
    folder = root / "recipes" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "env.yaml"
    store = ImageStore(root / "environments")
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        recipe, context = load_recipe(path)
        if store.lookup_source("debian-recipe", recipe_digest(recipe, context)) is None:
            require_mmdebstrap()
        result = build_recipe(recipe, context, store, source_label=f"{name}/env.yaml",
                              origin=path, progress=progress)
    return store, result


def shared_base(_factory: object = None) -> tuple[ImageStore, BuildResult]:
    """The shared base image and whether this call found it built."""
    return build_shared(image_cache_dir(), "base", BASE_RECIPE)


def base_image(extra_packages: tuple[str, ...] = ()) -> tuple[ImageStore, EnvironmentImage]:
    """The shared image with ``python3``, ``python3-pytest`` and ``extra_packages``."""
    packages = tuple(sorted(set(BASE_PACKAGES) | set(extra_packages)))
    name = "base" if packages == tuple(sorted(BASE_PACKAGES)) else (
        "base-" + hashlib.sha256(",".join(packages).encode()).hexdigest()[:12])
    started = time.monotonic()
    store, result = build_shared(image_cache_dir(), name, recipe_text(packages))
    if not result.cached:
        BUILD_SECONDS[packages] = time.monotonic() - started
    return store, result.image


#: What :func:`python_only` keeps of the shared image's ``/usr/bin``: the interpreter and what
#: a task's shell lines and the requirement check call.
PYTHON_ROOT_PROGRAMS = ("python3", "python3.11", "sh", "dash", "sed", "cat", "head", "env",
                        "ls", "mkdir", "rm", "sleep", "true")
#: Folders of the standard library no test run imports (its compiled modules stay: without
#: them every Python start in the read-only image compiles what it imports, a second each).
_STDLIB_LEFT_OUT = frozenset(("test", "idlelib", "pydoc_data", "lib2to3", "ensurepip",
                              "tkinter", "turtledemo", "distutils",
                              "config-3.11-x86_64-linux-gnu", "pkg_resources"))
_PYTHON_FOLDERS = ("", "etc", "tmp", "root", "home", "proc", "dev", "work", "usr", "usr/bin",
                   "usr/lib", "usr/lib64")


def python_only(name: str, info: tarfile.TarInfo) -> bool:
    """Whether the entry ``name`` of the shared image (relative, ``info`` its tar header)
    belongs to a small root (about 45 MB, a fifth of the image) that holds the image's Python
    with its standard library and pytest, the shared libraries of ``/usr/lib/<arch>`` up to
    1 MiB and ``libc``, ``/etc``, and the few programs of :data:`PYTHON_ROOT_PROGRAMS`: enough
    for a fixture task's oracle (``sh``, ``sed``) and hidden tests, for tests that move an
    image around and pay for every byte of it (``support.registry.layout_of_root``'s
    ``keep``)."""
    parts = name.split("/")
    if name in _PYTHON_FOLDERS or parts[0] == "etc" or name.startswith("usr/lib64/"):
        return True
    if len(parts) == 1:  # bin, lib, lib64, sbin: links into /usr (merged /usr)
        return info.issym()
    if parts[:2] == ["usr", "bin"]:
        return len(parts) == 3 and parts[2] in PYTHON_ROOT_PROGRAMS
    if len(parts) >= 3 and parts[:2] == ["usr", "lib"] and parts[2].endswith("-linux-gnu"):
        return len(parts) == 3 or (len(parts) == 4 and (
            info.issym() or (info.isfile() and (info.size <= 2**20
                                                or parts[3].startswith("libc.so")))))
    if len(parts) >= 3 and parts[:2] == ["usr", "lib"] and parts[2] in ("python3.11", "python3"):
        return not _STDLIB_LEFT_OUT & set(parts[3:])
    return False
