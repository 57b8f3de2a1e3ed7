"""assay's start-up guard for every Python process of a verifier check (never imported by assay).

The verifier copies this file, read-only, into the Python user site that only the sandbox sees,
beside a ``.pth`` line that executes it by its absolute path (never by module name, so nothing on
the deliverable's import path can stand in for it). Python runs it while ``site`` starts up,
before any of the deliverable's code can be imported, in the test process and in every Python
process it starts (they inherit ``PYTHONUSERBASE``). It does two things:

1. **The test runner's own modules come first.** pytest, its plugins' package and its
   dependencies (pluggy, iniconfig, packaging, attrs, ...), ``sitecustomize`` and
   ``usercustomize``, and assay's own verifier modules are resolved only from the interpreter's
   installation and this user site: a ``src/iniconfig/`` or ``pytest.py`` of the candidate is
   shadowed, not imported, whatever ``PYTHONPATH`` or the working directory say. Everything
   else resolves as usual, so the candidate's own packages are still the ones tested.
2. **No bytecode of the deliverable is ever read or written.** Every directory outside the
   interpreter's installation gets an import finder that loads ``.py`` sources (compiled afresh
   each time, never cached) and extension modules only: no ``__pycache__`` lookup, no sourceless
   ``.pyc`` (a zip archive on the path, which only code can put there, keeps Python's own
   importer, so ``python3 app.zip`` still runs). The interpreter's own bytecode caches stay in
   use, which keeps the start-up cost of pytest what it always is (an empty
   ``PYTHONPYCACHEPREFIX`` would discard those too and recompile the standard library and pytest
   in every check).

Standard library only, and cheap: nothing is imported here that ``site`` has not imported.
"""

from __future__ import annotations

import _imp
import importlib.machinery as _machinery
import os as _os
import sys as _sys

# Only the type checker reads these: importing ``typing`` here would cost every check's start-up
# (``site`` never imports it), and the annotations stay strings (the ``__future__`` import).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import CodeType, ModuleType

    from _typeshed import ReadableBuffer

RUNNER_MODULES = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "attr", "attrs",
    "exceptiongroup", "tomli", "sitecustomize", "usercustomize"})
_OWN_PREFIX = "assay_verifier_"
_HERE = _os.path.dirname(_os.path.abspath(__file__))
#: In a pinned image, the host's trusted pytest is lent here, read-only (kept equal to
#: assay.environments.run.HOST_PYTHON_MOUNT; a test checks they agree).
HOST_PYTHON_MOUNT = "/assay/host-python"


def _install_roots() -> tuple[str, ...]:
    roots = {_sys.prefix, _sys.base_prefix, _sys.exec_prefix, _sys.base_exec_prefix}
    return tuple(sorted(_os.path.join(_os.path.realpath(r), "") for r in roots if r))


_ROOTS = _install_roots()


def _trusted_dir(path: str) -> bool:
    full = _os.path.join(_os.path.realpath(path or _os.getcwd()), "")
    return (full.startswith(_ROOTS) or full == _os.path.join(_HERE, "")
            or full.startswith(_os.path.join(HOST_PYTHON_MOUNT, "")))


# Where the runner's own modules may come from: the interpreter's own sys.path entries (the
# standard library and site-packages, once ``site`` added them) and this user site; in a
# pinned image the host's trusted pytest (HOST_PYTHON_MOUNT, on the path right after this
# user site) comes before the image's own site-packages, so the image's pytest never answers.
def _trusted_path() -> list[str]:
    import site
    found = [_HERE]
    for p in [*_sys.path, *site.getsitepackages()]:
        if p and p not in found and _trusted_dir(p) and _os.path.isdir(p):
            found.append(p)
    return found


#: The standard library's top-level names (3.10 and later; an older image's interpreter has no
#: list, and integrity's ``stdlib_shadowed`` refusal stands alone there).
_STDLIB = frozenset(getattr(_sys, "stdlib_module_names", ())) - {"__main__"}
_TRUSTED_BY_PATH: dict[tuple[str, ...], list[str]] = {}


def _trusted_path_now() -> list[str]:
    key = tuple(_sys.path)
    found = _TRUSTED_BY_PATH.get(key)
    if found is None:
        found = _TRUSTED_BY_PATH[key] = _trusted_path()
    return found


class TrustedFirst:
    """A meta path finder, first in line, for the test runner's own top-level names and the
    standard library's: both resolve from the interpreter's installation only, so a
    ``src/json.py`` of the deliverable is never imported in place of ``json`` (integrity
    refuses it besides)."""

    @classmethod
    def find_spec(cls, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> _machinery.ModuleSpec | None:
        if path is not None:
            return None
        if name in _STDLIB:
            if name in _sys.builtin_module_names or _imp.is_frozen(name):
                return None  # the builtin and frozen importers answer, never a path
            spec = _machinery.PathFinder.find_spec(name, _trusted_path_now())
            if spec is None:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return spec
        if not (name in RUNNER_MODULES or name.startswith(_OWN_PREFIX)):
            return None
        spec = _machinery.PathFinder.find_spec(name, _trusted_path_now())
        if spec is None and name in ("sitecustomize", "usercustomize"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec

    @classmethod
    def invalidate_caches(cls) -> None:
        return None


class SourceOnlyLoader(_machinery.SourceFileLoader):
    """Compiles the source every time; never reads nor writes a bytecode cache."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)

    def set_data(self, path: str, data: ReadableBuffer, *, _mode: int = 0o666) -> None:
        return None


_LOADERS = ((_machinery.ExtensionFileLoader, _machinery.EXTENSION_SUFFIXES),
            (SourceOnlyLoader, _machinery.SOURCE_SUFFIXES))


def source_only_hook(path: str) -> _machinery.FileFinder:
    # Not a directory (a script being run, a zip archive): the next hooks decide, as always;
    # ``python3 app.py`` asks the hooks about the script's own path first.
    if _trusted_dir(path) or not _os.path.isdir(path or "."):
        raise ImportError("the default finders handle this path")
    return _machinery.FileFinder(path, *_LOADERS)


def install() -> None:
    if any(getattr(f, "__name__", "") == "TrustedFirst" for f in _sys.meta_path):
        return
    _sys.dont_write_bytecode = True
    _sys.meta_path.insert(0, TrustedFirst)
    _sys.path_hooks.insert(0, source_only_hook)
    for entry in list(_sys.path_importer_cache):
        if not _trusted_dir(entry):
            del _sys.path_importer_cache[entry]


install()
