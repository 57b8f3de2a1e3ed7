"""Building a Dockerfile on its real base: the ``FROM`` image pulled, its Dockerfile's own steps
run inside it.

A task written against ``node:20-slim@sha256:…`` or ``ubuntu:24.04`` was written for that
image, not for the Debian release the translation (:mod:`assay.suites.dockerfile`) would put in
its place. So when the base can be pulled (:func:`assay.environments.registry.pull_image`), the
image is a copy of the base's root filesystem with the Dockerfile's ``RUN``, ``COPY``, ``ENV``,
``WORKDIR`` and ``USER`` lines applied in order, by the same builder and sandbox a Debian
recipe's steps run in (:class:`assay.environments.debian._Builder`): the base's own ``apt-get``,
``pip`` or shell runs each ``RUN`` line as written.

Network: the steps reach the outside only through the registry proxy, which allows what it
allows every build (:data:`assay.environments.egress.REGISTRY_HOSTS`) and, in addition, the
package archives the base itself is configured with, read from its apt sources or apk
repositories (:func:`package_archives`); nothing else. apt is told about the proxy by the
same build-only file a recipe build writes (removed before the image is digested).

The build is cached like any Dockerfile's: its source digest covers the base's root
filesystem digest and the steps (and the files they copy), so the same Dockerfile on the same
pinned base is a lookup. Where the base cannot be pulled, :func:`build_on_base` is not reached:
the caller either refuses (``unsupported here: cannot pull REF (reason)``) or, when asked
(``--approximate-base``, ``environment.approximate_base``), falls back to the translation.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from assay.environments.build_sandbox import build_users
from assay.environments.debian import (
    APT_BUILD_CONF,
    APT_BUILD_SETTINGS,
    BuildResult,
    _Builder,
    _confine_copies,
)
from assay.environments.egress import policy_for
from assay.environments.registry import PullResult
from assay.environments.store import ImageConfig, ImageStore
from assay.errors import InfraError
from assay.suites.recipe import Recipe, recipe_digest

Progress = Callable[[str], None]

#: apt source files read from a base, and how much of each (a base is untrusted data).
APT_SOURCE_FILES_MAX = 64
APT_SOURCE_BYTES_MAX = 256 * 1024
#: Wall-clock bound of copying the base's root filesystem into the staging folder.
COPY_TIMEOUT_S = 1800.0
_URL = re.compile(r"^(https?)://[^\s\]]+$")


def _inside(rootfs: Path, relative: str) -> Path | None:
    """``rootfs/relative`` when no component of it is a symbolic link (a link in a base could
    lead a read to the building machine's own files), else None."""
    path = rootfs
    for part in relative.strip("/").split("/"):
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return None
        except OSError:
            return None
    return path


def _read_small(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(APT_SOURCE_BYTES_MAX).decode("utf-8", "replace")


def package_archives(rootfs: Path) -> list[str]:
    """The archive URLs the base's package manager is configured with: apt's
    (``sources.list``, one-line ``sources.list.d/*.list`` and deb822 ``*.sources`` files) and
    apk's (``/etc/apk/repositories``, a URL a line, optionally after an ``@tag``), in the order
    found; each file read as data, never through a link, at most
    :data:`APT_SOURCE_FILES_MAX` files of :data:`APT_SOURCE_BYTES_MAX` bytes."""
    urls: list[str] = []
    apk = _inside(rootfs, "etc/apk/repositories")
    text = _read_small(apk) if apk is not None else None
    for line in (text or "").splitlines():
        repo = line.split("#", 1)[0].split()
        if repo and repo[0].startswith("@"):
            repo = repo[1:]
        urls += [w for w in repo[:1] if _URL.match(w) and w not in urls]
    files: list[Path] = []
    main = _inside(rootfs, "etc/apt/sources.list")
    if main is not None:
        files.append(main)
    folder = _inside(rootfs, "etc/apt/sources.list.d")
    if folder is not None and folder.is_dir():
        names = sorted(n for n in os.listdir(folder) if n.endswith((".list", ".sources")))
        files += [folder / n for n in names[:APT_SOURCE_FILES_MAX]]
    for path in files:
        text = _read_small(path)
        if text is None:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            words: list[str] = []
            if path.name.endswith(".sources"):
                key, _, value = line.partition(":")
                if key.strip().lower() == "uris":
                    words = value.split()
            elif line.startswith(("deb ", "deb-src ")):
                words = re.sub(r"\[[^\]]*\]", " ", line).split()[1:2]
            urls += [w for w in words if _URL.match(w) and w not in urls]
    return urls


def on_base_digest(base: PullResult, recipe: Recipe, context: Path | None) -> str:
    """The build's source digest: the base's root filesystem and the steps on it."""
    data = json.dumps({"base": base.image.digest, "steps": recipe_digest(recipe, context)},
                      sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_on_base(recipe: Recipe, context: Path | None, base: PullResult, store: ImageStore, *,
                  source_label: str, origin: Path | None,
                  progress: Progress | None = None) -> BuildResult:
    """``recipe``'s steps (a Dockerfile read with ``real_base``) run on a copy of ``base``,
    published as a ``dockerfile`` image, or found in the store."""
    say = progress or (lambda _line: None)
    source_digest = on_base_digest(base, recipe, context)
    hit = store.lookup_source("dockerfile", source_digest)
    if hit is None:
        _confine_copies(recipe, context, origin, {})
        with store.source_lock("dockerfile", source_digest, say):
            hit = store.lookup_source("dockerfile", source_digest)
            if hit is None:
                return _build(recipe, context, base, store, source_digest, source_label,
                              origin, say)
    say(f"cached: {source_label} on {base.reference} is {hit.digest} (nothing to build)")
    return BuildResult(hit, True)


def _build(recipe: Recipe, context: Path | None, base: PullResult, store: ImageStore,
           source_digest: str, source_label: str, origin: Path | None,
           say: Progress) -> BuildResult:
    """:func:`build_on_base`'s build, with the source's lock held."""
    builder = _Builder(recipe, context, say, origin, {})
    builder.env = {**base.image.config.env, **recipe.env}
    with store.staging() as rootfs, build_users(rootfs) as userns:
        say(f"base: {base.reference} ({base.manifest_digest}), root filesystem "
            f"{base.image.digest}")
        # cp -a keeps owners, modes, links and hard links as the base has them (assay runs
        # as root where it builds images; elsewhere owners become the building user's)
        done = subprocess.run(["cp", "-a", "--reflink=auto", "--",
                               f"{store.rootfs(base.image.digest)}/.", str(rootfs)],
                              capture_output=True, text=True, timeout=COPY_TIMEOUT_S,
                              check=False)
        if done.returncode != 0:
            raise InfraError(f"could not copy the base {base.image.digest} to build on it: "
                             f"{done.stderr.strip()[-2000:]}")
        archives = package_archives(rootfs)
        builder.policy = policy_for([*archives])
        builder.rootfs = rootfs
        builder.userns = userns
        if userns is not None:
            builder.notes.append(userns.note)
        apt_dir = _inside(rootfs, "etc/apt/apt.conf.d")
        if apt_dir is not None and apt_dir.is_dir():
            (rootfs / APT_BUILD_CONF).write_text(APT_BUILD_SETTINGS)
        try:
            builder.steps()
        finally:
            builder.stop_proxy()
        config, packages = builder.finish()
        notes = [f"built on {base.reference} (manifest {base.manifest_digest}, root "
                 f"filesystem {base.image.digest}): the Dockerfile's own steps ran in it",
                 *(["the base's package archives allowed through the build's proxy: "
                    + ", ".join(archives)] if archives else []),
                 *(n.split("; the base install")[0] for n in builder.notes)]
        say("digesting the root filesystem")
        image = store.publish(rootfs, source_kind="dockerfile", source_digest=source_digest,
                              source_label=source_label,
                              config=ImageConfig(env=config.env, workdir=config.workdir,
                                                 user=config.user),
                              substitutions=[*recipe.substitutions, *builder.substitutions],
                              packages=packages, notes=notes,
                              build_hosts=builder.build_hosts())
    say(f"built {image.digest} on {base.reference} ({image.files:,} files, "
        f"{image.bytes / 2**20:.0f} MiB)")
    return BuildResult(image, False)
