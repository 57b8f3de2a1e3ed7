"""Pinned environments from Python: build or import an image, list the store, remove one.

    from assay.api.environments import build_environment, list_environments

    result = build_environment("tasks/env.yaml", progress=print)
    print(result.image.digest, "cached" if result.cached else "built")

What a source is, is read from the path: a folder with ``oci-layout`` or a tar archive is an
OCI image or a ``docker save`` archive (imported), a file named ``Dockerfile`` (or whose first
instruction is ``FROM``/``ARG``) is a Dockerfile (turned into a recipe, then built), anything
else is a recipe file (``env.yaml``). A folder holding ``env.yaml`` or ``Dockerfile`` stands for
that file. Every image goes to the store under the cache directory (``ImageStore()``, i.e.
``$ASSAY_CACHE_DIR/environments``) unless a store is given.
"""

from __future__ import annotations

from collections.abc import Callable

from assay.environments.build import BuildResult, SourceType, build_environment, source_type
from assay.environments.registry import PullResult
from assay.environments.store import EnvironmentImage, ImageStore
from assay.errors import InputError


def store_root() -> str:
    """Where the image store is (for messages)."""
    return str(ImageStore().root)


def pull_environment(reference: str, *, store: ImageStore | None = None,
                     progress: Callable[[str], None] | None = None) -> PullResult:
    """Pull ``REGISTRY/NAME@sha256:…`` (or ``:TAG``) into the store with skopeo, or find it
    there; the result holds the image and both digests (the registry's and the root
    filesystem's)."""
    from assay.environments.registry import pull_image

    return pull_image(reference, store or ImageStore(), progress=progress)


def list_environments(*, store: ImageStore | None = None) -> list[EnvironmentImage]:
    """Every image in the store, newest first."""
    images = (store or ImageStore()).ls()
    return sorted(images, key=lambda i: i.created_at, reverse=True)


def resolve_digest(prefix: str, *, store: ImageStore | None = None) -> EnvironmentImage:
    """The one image whose digest starts with ``prefix`` (``sha256:`` optional); an
    ``InputError`` naming the candidates when none or several match."""
    wanted = prefix.strip().lower()
    bare = wanted.removeprefix("sha256:")
    if not bare or any(c not in "0123456789abcdef" for c in bare):
        raise InputError(f"{prefix!r} is not a digest or a digest prefix (hex digits, "
                         "optionally after sha256:)")
    images = (store or ImageStore()).ls()
    found = [i for i in images if i.digest.removeprefix("sha256:").startswith(bare)]
    if not found:
        raise InputError(f"no image in the store has a digest starting with {prefix!r}")
    if len(found) > 1:
        shown = ", ".join(short_digest(i.digest) for i in found[:10])
        raise InputError(f"{prefix!r} matches {len(found)} images ({shown}): give more of "
                         "the digest")
    return found[0]


def remove_environment(prefix: str, *, store: ImageStore | None = None) -> EnvironmentImage:
    """Remove the image a unique digest prefix names; returns its record."""
    store = store or ImageStore()
    image = resolve_digest(prefix, store=store)
    if not store.rm(image.digest):
        raise InputError(f"{image.digest} was removed meanwhile")
    return image


def short_digest(digest: str) -> str:
    """``sha256:0123456789ab``: the first 12 hex digits, as ``env ls`` shows them."""
    return digest[: len("sha256:") + 12]


__all__ = ["BuildResult", "PullResult", "SourceType", "build_environment", "list_environments",
           "pull_environment",
           "remove_environment", "resolve_digest", "short_digest", "source_type", "store_root"]
