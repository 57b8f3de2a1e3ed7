"""Building or importing a pinned environment from what a user or a bundle names: a recipe, a
Dockerfile, an OCI layout or tar, a ``docker save`` archive.

What a source is, is read from the path: a folder with ``oci-layout`` or a tar archive is an
OCI image or a ``docker save`` archive (imported), a file named ``Dockerfile`` (or whose first
instruction is ``FROM``/``ARG``) is a Dockerfile (turned into a recipe, then built), anything
else is a recipe file (``env.yaml``). A folder holding ``env.yaml`` or ``Dockerfile`` stands for
that file. :func:`build_source` is the seam a trial uses to build an image its bundle names
(``environments.run.ensure_image``); ``assay env build`` goes through the API to the same code.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from assay.environments.store import EnvironmentImage, ImageStore
from assay.errors import InputError, PullFailed, SuiteError

if TYPE_CHECKING:
    from assay.environments.debian import BuildResult as DebianBuild

PathLike = str | os.PathLike[str]
SourceType = Literal["recipe", "dockerfile", "archive"]

#: Bytes read to tell a Dockerfile from a recipe by its contents.
_SNIFF_BYTES = 64 * 1024
_DOCKERFILE_NAMES = ("dockerfile", "containerfile")


@dataclass(frozen=True)
class BuildResult:
    """The image in the store, whether it was there already (None when the importer does not
    say), and what kind of source it came from."""

    image: EnvironmentImage
    cached: bool | None
    source: SourceType


def source_type(path: Path) -> tuple[SourceType, Path]:
    """What ``path`` is (recipe, Dockerfile or image archive/layout) and the file or folder
    that stands for it; an ``InputError`` when it is none of them."""
    if path.is_dir():
        if (path / "oci-layout").is_file():
            return "archive", path
        for name, kind in (("env.yaml", "recipe"), ("Dockerfile", "dockerfile")):
            if (path / name).is_file():
                return kind, path / name  # type: ignore[return-value]
        raise InputError(f"{path}: a folder with neither an OCI layout (oci-layout), an "
                         "env.yaml recipe nor a Dockerfile")
    if not path.exists():
        raise InputError(f"{path} does not exist")
    if not path.is_file():
        raise InputError(f"{path} is not a regular file")
    name = path.name.lower()
    if name.endswith((".yaml", ".yml")):
        return "recipe", path
    if (name in _DOCKERFILE_NAMES or name.endswith(".dockerfile")
            or name.startswith(tuple(f"{n}." for n in _DOCKERFILE_NAMES))):
        return "dockerfile", path
    try:
        if tarfile.is_tarfile(path):
            return "archive", path
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror})") from None
    with open(path, "rb") as fh:
        head = fh.read(_SNIFF_BYTES).decode("utf-8", "replace")
    for line in head.splitlines():
        word = line.strip().split(maxsplit=1)[:1]
        if not word or word[0].startswith("#"):
            continue
        if word[0].upper() in ("FROM", "ARG"):
            return "dockerfile", path
        break
    return "recipe", path


def build_environment(source: PathLike, *, store: ImageStore | None = None,
                      build_args: dict[str, str] | None = None,
                      expected_digest: str | None = None,
                      progress: Callable[[str], None] | None = None,
                      approximate_base: bool = False) -> BuildResult:
    """Build (recipe, Dockerfile) or import (OCI layout, OCI tar, ``docker save`` archive)
    ``source`` into the store; a source the store has seen is a lookup. Progress lines go to
    ``progress``. ``build_args`` are a Dockerfile's ``ARG`` values; ``expected_digest`` pins an
    imported archive.

    A Dockerfile builds on its real base, pulled (:mod:`assay.environments.on_base`). A base
    that cannot be pulled raises :class:`PullFailed` (``cannot pull REF (reason)``) unless
    ``approximate_base``: then the Dockerfile is translated into a Debian recipe, and the
    image's substitutions say the base could not be pulled and what stood in for it."""
    store = store or ImageStore()
    path = Path(source)
    kind, path = source_type(path)
    if kind == "archive":
        from assay.environments.oci import import_image

        image = import_image(path, store, expected_digest=expected_digest, progress=progress)
        return BuildResult(image, None, "archive")
    from assay.environments.debian import build_recipe

    if kind == "dockerfile":
        from assay.suites.dockerfile import dockerfile_recipe

        pulled, why = _real_base(path, build_args, store, progress, approximate_base)
        if pulled is not None:
            built = pulled
        else:
            try:
                recipe, context = dockerfile_recipe(path, build_args=build_args)
            except SuiteError as exc:
                if not why:
                    raise
                # the base could not be pulled and nothing can stand in for it: that is why
                raise PullFailed(f"{why}; the Debian translation cannot stand in for it "
                                 f"(--approximate-base): {exc}") from exc
            if why:  # the reason goes to progress; the record's words stay the same
                # from one failure to the next, so the cached build is found again
                if progress is not None:
                    progress(f"{why}: approximating the base (--approximate-base)")
                recipe = recipe.model_copy(update={"substitutions": [
                    f"FROM {why.split(' (', 1)[0].removeprefix('cannot pull ')} could not "
                    "be pulled here: the base approximated (--approximate-base)",
                    *recipe.substitutions]})
            built = build_recipe(recipe, context, store, source_kind="dockerfile",
                                 source_label=_label(path), origin=path, progress=progress)
    else:
        from assay.suites.recipe import load_recipe, step_lines

        if build_args:
            raise InputError(f"{path}: --build-arg is for Dockerfiles; a recipe file has none")
        recipe, context = load_recipe(path)
        built = build_recipe(recipe, context, store, source_kind="debian-recipe",
                             source_label=_label(path), origin=path,
                             step_lines=step_lines(path), progress=progress)
    _check_expected(built.image, expected_digest, path)
    return BuildResult(built.image, built.cached, kind)


def _real_base(path: Path, build_args: dict[str, str] | None, store: ImageStore,
               progress: Callable[[str], None] | None,
               approximate: bool) -> tuple[DebianBuild | None, str]:
    """The Dockerfile built on its pulled ``FROM`` image, or (None, why the base could not be
    pulled) when ``approximate`` allows the translation instead; a base that cannot be pulled
    otherwise is :class:`PullFailed`. ``FROM scratch`` has no base to pull (None, '')."""
    from assay.environments.debian import _confine_copies
    from assay.environments.on_base import build_on_base
    from assay.environments.registry import pull_image
    from assay.suites.dockerfile import translate_dockerfile
    from assay.suites.image_ref import qualified

    done = translate_dockerfile(path, build_args=build_args, real_base=True)
    written = done.base_ref or ""
    if written.lower() == "scratch":
        return None, ""
    try:
        ref = qualified(written)
    except InputError as exc:
        raise InputError(f"{path}: FROM {written}: not an image reference ({exc})") from None
    _confine_copies(done.recipe, done.context, path, {})  # before anything is fetched
    try:
        base = pull_image(ref, store, progress=progress)
    except PullFailed as exc:
        if approximate:
            return None, str(exc)
        raise PullFailed(f"{exc}; --approximate-base (or the task key "
                         "environment.approximate_base) builds on the Debian release that "
                         "stands for it instead") from exc
    built = build_on_base(done.recipe, done.context, base, store,
                          source_label=_label(path), origin=path, progress=progress)
    return built, ""


def _label(path: Path) -> str:
    """``folder/env.yaml``: enough to tell two recipes apart in ``env ls``."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _check_expected(image: EnvironmentImage, expected: str | None, path: Path) -> None:
    if expected is not None and image.digest != expected:
        raise InputError(f"{path} built {image.digest}, not the expected {expected}")


def build_source(path: Path, store: ImageStore,
                 progress: Callable[[str], None] | None = None, *,
                 approximate_base: bool = False) -> EnvironmentImage:
    """The image ``path`` builds or imports into ``store`` (a lookup when seen before)."""
    return build_environment(path, store=store, progress=progress,
                             approximate_base=approximate_base).image
