"""A task's pinned environment at trial time: the image looked up by its pin, the sandbox root
made from it, and the host tools lent to it.

``ensure_image(bundle, store)`` is the one place a trial, the verifier, ``task check`` and
``assay env shell`` learn which image a task runs in. The pin (``initial_state.
environment_image``) must name an image in the store; when it does not, and a builder is
installed (``assay.environments.build.build_source``), the source (``environment.image``) is
built and its digest must equal the pin, otherwise the trial is refused with the command that
builds it. A task without ``environment.image`` runs on the host's system (``None``). On a Ray
worker, a task whose image the driver sent (:func:`run_in_given_image`) runs in exactly that
image or is refused with the reason it could not be placed: a worker never builds one.

Host tools lent read-only to an image (so that an image needs none of them, and they are the
same trusted copies whatever the image holds):

* the verifier's pytest (with pluggy, iniconfig, packaging...) from the host's system
  ``python3``, each top-level package bound at :data:`HOST_PYTHON_MOUNT` ``/<name>``; the
  check's start-up guard puts that folder before the image's own site-packages and resolves
  pytest from it only, so the trusted pytest wins over an image's own;
* the host's ``/usr`` at :data:`HOST_USR_MOUNT`, from which the host's ``node`` (or another
  host-built program) starts through the host's dynamic loader with the host's library path
  (:func:`host_node_argv`, :func:`host_loader_argv`), so an image needs no node. The agent
  adapters do not use it yet: started that way, a program's ``/proc/self/exe`` (node's
  ``process.execPath``) is the loader, and the CLIs relaunch themselves through it (Qwen Code
  restarts node with a larger heap; Claude Code's single-file binary reads its payload from
  its own executable). The adapters mount their own pinned runtime (Qwen Code's Node 22, Claude
  Code's binary) and it runs on the image's C library, which any glibc-based image has.

What was lent (paths, versions) is recorded with the image in every trial record.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.errors import PullFailed, TrialRefused
from assay.records.environment import EnvironmentImage
from assay.sandbox import ImageRoot, Mount
from assay.sandbox.host_runtime import (
    HOST_USR_MOUNT,
    host_loader,
    host_usr_mount,
    inside,
    loader_argv,
)
from assay.suites.bundle import Bundle
from assay.suites.image_ref import DIGEST_RE, is_reference, parse_reference

__all__ = ["HOST_PYTHON_MOUNT", "HOST_USR_MOUNT", "build_command", "ensure_image", "host_loader",
           "host_loader_argv", "host_node", "host_node_argv", "host_python",
           "host_python_mounts", "host_usr_mount", "image_has_pytest", "image_record",
           "image_root", "registry_reference", "run_in_given_image", "task_root"]

#: Where the host's trusted Python packages (pytest and its dependencies) appear in an image.
HOST_PYTHON_MOUNT = "/assay/host-python"
#: The host interpreter whose pytest the verifier lends (the one the sandbox ran before images).
HOST_PYTHON = "/usr/bin/python3"
#: Top-level names lent from the host's site-packages (kept equal to the start-up guard's
#: runner modules that are packages on disk; missing ones are skipped).
HOST_PYTHON_NAMES = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "packaging", "attr",
                     "attrs", "exceptiongroup", "tomli")


def _store(store: Any) -> Any:
    if store is not None:
        return store
    from assay.environments.store import ImageStore
    return ImageStore()


def build_command(bundle: Bundle) -> str:
    """The command that builds (or pulls) the task's image, as the user would type it."""
    ref = registry_reference(bundle)
    if ref is not None:
        return f"assay env pull {ref}"
    source = bundle.spec.initial_state.environment.image or ""
    return f"assay env build {bundle.root / source}"


def ensure_image(bundle: Bundle, store: Any = None,
                 progress: Callable[[str], None] | None = None, *,
                 build: bool = True) -> EnvironmentImage | None:
    """The image the task runs in (None: the task names no image): the pinned one, or, for an
    unpinned ``environment.image``, what its source builds into (cached by the source's
    digest). Raises :class:`TrialRefused` when it cannot be had: an engine not available here,
    not in the store and no builder (or ``build`` False: look, never build), or a build whose
    digest is not the pin."""
    state = bundle.spec.initial_state
    env = state.environment
    if env.image is None:
        return None
    if env.engine != "bwrap":
        raise TrialRefused(
            f"{bundle.id}: environment.engine {env.engine!r} is not supported on this "
            "machine (assay runs images with its own sandbox, engine: bwrap; Podman 4.3 from "
            "Debian cannot start containers here: the runtime cannot set rlimits)")
    pin = state.environment_image
    store = _store(store)
    ref = registry_reference(bundle)
    if ref is not None:
        return _pulled(bundle, ref, store, progress, build=build)
    given = _GIVEN.get(_given_key(bundle))
    if given is not None:  # a Ray worker: the driver's image, placed here or refused
        digest, problem = given
        if problem is not None:
            raise TrialRefused(f"{bundle.id}: {problem}")
        found = store.get(digest)
        if found is None:
            raise TrialRefused(f"{bundle.id}: the image {digest} the driver runs this task in "
                               f"is not in this node's image store ({store.root}); a worker "
                               "never rebuilds it")
        return found
    found = store.get(pin) if pin is not None else None
    if found is not None:
        return found
    builder = _builder() if build else None
    if builder is None:
        what = f"the pinned image {pin} is not" if pin is not None else (
            f"no image built from {env.image!r} is")
        raise TrialRefused(f"{bundle.id}: {what} in the image store ({store.root}): build it "
                           f"with `{build_command(bundle)}`")
    # Unpinned: the source's build, cached by the source's digest (the same recipe is the
    # same image while it stays in the store); the digest it ran in is recorded either way.
    kw = {"approximate_base": True} if env.approximate_base else {}
    try:
        built = builder(bundle.root / env.image, store, progress or (lambda _line: None), **kw)
    except PullFailed as exc:  # a Dockerfile's FROM that cannot be pulled, not approximated
        raise TrialRefused(f"{bundle.id}: unsupported here: {exc}") from exc
    if pin is not None and built.digest != pin:
        raise TrialRefused(
            f"{bundle.id}: building {env.image} gave the image {built.digest}, not the pinned "
            f"{pin}: the source or what it installs changed; pin the new digest after checking "
            "it, or restore the source")
    return built


#: Bundles whose image the driver named for this process (a Ray worker): (bundle root, spec
#: digest) -> (the image's digest, or why it could not be placed on this node).
_GIVEN: dict[tuple[str, str], tuple[str, str | None]] = {}


def _given_key(bundle: Bundle) -> tuple[str, str]:
    return str(bundle.root.resolve()), bundle.spec_sha256


def run_in_given_image(bundle: Bundle, digest: str, problem: str | None = None) -> None:
    """From now on, in this process, the task runs in the image ``digest`` (which the caller
    has placed in the store), or is refused with ``problem``: never in an image built here.

    Why: on a Ray worker a task's image comes from the driver's store, verified by its
    digest; a recipe rebuilt on the worker would not be the same image, and an unpinned
    source may have been built on the driver into an image the bundle does not name."""
    _GIVEN[_given_key(bundle)] = (digest, problem)


def registry_reference(bundle: Bundle) -> str | None:
    """The registry image a task runs in (its ``environment_image`` when that names one,
    else a registry ``environment.image``), or None for a task whose image is built here."""
    state = bundle.spec.initial_state
    for text in (state.environment_image, state.environment.image):
        if text is not None and is_reference(text):
            return text
    return None


#: Tags resolved in this process (reference -> manifest digest): a tag resolves once, so every
#: trial of a run runs in what it named when the run first asked.
_RESOLVED: dict[str, str] = {}


def _pulled(bundle: Bundle, ref: str, store: Any, progress: Callable[[str], None] | None, *,
            build: bool) -> EnvironmentImage:
    """The registry image ``ref`` names, from the store or pulled (``build`` False: the store
    only). A ``sha256:`` pin of the root filesystem beside a registry source must match."""
    from assay.environments.registry import lookup_pulled, pull_image

    parsed = parse_reference(ref)
    asked = ref
    if parsed.digest is None and ref in _RESOLVED:
        asked = f"{parsed.name}@{_RESOLVED[ref]}"
    pinned = parse_reference(asked).digest
    hit = lookup_pulled(pinned, store, ref) if pinned is not None else None
    if hit is None and not build:
        raise TrialRefused(f"{bundle.id}: the registry image {ref} is not in the image store "
                           f"({store.root}): pull it with `assay env pull {ref}`")
    try:
        got = hit or pull_image(asked, store, progress=progress)
    except PullFailed as exc:
        raise TrialRefused(f"{bundle.id}: unsupported here: {exc}") from exc
    if parsed.digest is None:
        _RESOLVED.setdefault(ref, got.pinned_digest)
    image = got.image
    root_pin = bundle.spec.initial_state.environment_image
    if root_pin is not None and DIGEST_RE.match(root_pin) and image.digest != root_pin:
        raise TrialRefused(f"{bundle.id}: {ref} unpacked to the image {image.digest}, not the "
                           f"pinned {root_pin}")
    return image


def _builder() -> Callable[..., EnvironmentImage] | None:
    """The builder a trial uses for an image its bundle names (a seam the tests replace to
    see what happens on a machine that cannot build)."""
    from assay.environments.build import build_source

    return build_source


def image_root(image: EnvironmentImage, store: Any = None, *,
               several_users: bool = False) -> ImageRoot:
    """The sandbox root of a stored image (``several_users``: ids 0-65535 mapped)."""
    store = _store(store)
    return ImageRoot(rootfs=store.rootfs(image.digest), workdir=image.config.workdir,
                     env=tuple(image.config.env.items()), digest=image.digest,
                     several_users=several_users)


def task_root(bundle: Bundle, store: Any = None, *, build: bool = True) -> ImageRoot | None:
    """The sandbox root of the task's image (None: the host's system), with as many users as
    the task asks for (``environment.users``)."""
    image = ensure_image(bundle, store, build=build)
    several = bundle.spec.initial_state.environment.users == "several"
    return None if image is None else image_root(image, store, several_users=several)


def image_record(image: EnvironmentImage) -> dict[str, Any]:
    """What a trial record, the manifest and ``task check`` say of the image; for a registry
    image also the reference and the manifest digest (the registry's name for it) beside
    ``digest`` (assay's, of the root filesystem)."""
    pulled = ({"reference": image.reference, "manifest_digest": image.manifest_digest}
              if image.source_kind == "registry" else {})
    return {"digest": image.digest, "source_kind": image.source_kind,
            "source_digest": image.source_digest, "source_label": image.source_label,
            "substitutions": list(image.substitutions), "workdir": image.config.workdir,
            **pulled}


@functools.lru_cache(maxsize=1)
def host_python() -> dict[str, Any]:
    """The host's trusted pytest: its site-packages folder, the top-level names lent and the
    versions (``{}`` when the host's python3 has no pytest)."""
    script = ("import json, os, sys, pytest, pluggy\n"
              "print(json.dumps({'site': os.path.dirname(os.path.dirname(pytest.__file__)),"
              " 'pytest': pytest.__version__, 'pluggy': pluggy.__version__,"
              " 'python': sys.version.split()[0]}))")
    try:
        out = subprocess.run([HOST_PYTHON, "-I", "-c", script], capture_output=True,
                             text=True, timeout=60, check=False)
        found = json.loads(out.stdout) if out.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    site = Path(found.get("site", ""))
    names = [n for n in HOST_PYTHON_NAMES if (site / n).exists()]
    return {"site": str(site), "names": names, "pytest": found.get("pytest"),
            "pluggy": found.get("pluggy"), "python": found.get("python"),
            "interpreter": HOST_PYTHON, "mount": HOST_PYTHON_MOUNT}


def image_has_pytest(rootfs: Path) -> bool:
    """Whether an image's own Python holds pytest (a ``pytest`` package in one of its system
    or local site-packages); a reward check then runs that pytest, as the task pinned it."""
    for lib in ("usr/lib", "usr/local/lib"):
        for kind in ("dist-packages", "site-packages"):
            if any(Path(rootfs).glob(f"{lib}/python3*/{kind}/pytest/__init__.py")):
                return True
    return False


def host_python_mounts() -> list[Mount]:
    """The trusted pytest's packages, read-only under :data:`HOST_PYTHON_MOUNT`."""
    found = host_python()
    if not found:
        raise TrialRefused(f"the host's {HOST_PYTHON} has no pytest to lend to the image "
                           "(apt-get install python3-pytest)")
    site = Path(found["site"])
    return [Mount(site / n, f"{HOST_PYTHON_MOUNT}/{n}") for n in found["names"]]


@functools.lru_cache(maxsize=1)
def host_node() -> dict[str, Any]:
    """The host's node as an image sees it under :data:`HOST_USR_MOUNT`, with the loader
    that starts it (``{}`` when the host has no node)."""
    node = Path("/usr/bin/node")
    loader = host_loader()
    if not node.exists() or not loader:
        return {}
    try:
        version = subprocess.run([str(node), "--version"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        version = ""
    return {"node": inside(os.path.realpath(node)), "version": version, **loader}


def host_loader_argv(argv: list[str], at: int) -> list[str]:
    """``argv`` with ``argv[at]`` (a host-built executable) started through the host's dynamic
    loader with the host's library path (:mod:`assay.sandbox.host_runtime`); needs
    :func:`host_usr_mount`."""
    found = loader_argv(argv, at)
    if found is None:
        raise TrialRefused("the host's dynamic loader was not found under /usr: cannot lend "
                           "a host program to the image")
    return found


def host_node_argv(args: list[str]) -> list[str]:
    """``node ARGS`` with the host's node (from :data:`HOST_USR_MOUNT`) inside an image."""
    found = host_node()
    if not found:
        raise TrialRefused("the host has no node to lend to the image's agent CLI")
    return host_loader_argv([found["node"], *args], 0)
