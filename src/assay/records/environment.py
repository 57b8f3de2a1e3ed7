"""The records of pinned environments: an image in the store and how processes start in it.

An environment is a root filesystem named by the digest of its contents. The image store
(``assay.environments.store``) keeps one ``image.json`` beside each root filesystem; bundles,
manifests and trial records name the image by its digest alone.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from assay.records.base import Record

SourceKind = Literal["debian-recipe", "dockerfile", "oci-layout", "docker-archive", "registry"]

#: ``sha256:`` and 64 lowercase hex digits.
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class ImageConfig(BaseModel):
    """How a process starts in the image: what an OCI config or a Dockerfile's ``ENV``,
    ``WORKDIR``, ``USER``, ``ENTRYPOINT`` and ``CMD`` said."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables every process in the image starts with (``PATH`` among them)."""
    workdir: str = "/"
    """Where the image's work happens; the task's workspace is mounted here."""
    user: str = "root"
    """The user the image names (the sandbox still runs as its own unprivileged uid)."""
    entrypoint: list[str] = Field(default_factory=list)
    """The image's entry point, recorded; tasks run their own commands."""
    cmd: list[str] = Field(default_factory=list)
    """The image's default command, recorded."""


class EnvironmentImage(Record):
    """``image.json``: one image in the store, named by the digest of its root filesystem."""

    schema_name: ClassVar[str] = "assay.environment_image"
    schema_version: ClassVar[int] = 1
    file: ClassVar[str] = "<cache>/environments/images/sha256-<hex>/image.json"

    schema_: str = Field(default="assay.environment_image/1", alias="schema")
    """``assay.environment_image/1``."""
    digest: str = Field(pattern=DIGEST_PATTERN)
    """``sha256:`` of the root filesystem's tree digest (paths, kinds, modes, contents, link
    targets; no owners or times): the pin."""
    source_kind: SourceKind
    """What it was made from."""
    source_digest: str
    """Digest of what it was made from (the recipe, the Dockerfile with its context, the
    archive's manifest): the same source is a cache hit."""
    source_label: str = ""
    """A human name for the source (a file name, a Harbor task id)."""
    config: ImageConfig = Field(default_factory=ImageConfig)
    """How processes start in it."""
    substitutions: list[str] = Field(default_factory=list)
    """What was approximated to build it (``FROM ubuntu:22.04`` built on Debian bookworm...):
    shown by ``task check`` and kept in every trial record."""
    packages: dict[str, str] = Field(default_factory=dict)
    """Debian packages and versions installed, where known."""
    adjustments: dict[str, int] = Field(default_factory=dict)
    """What unpacking changed from the source, by count (OCI layouts and ``docker save``
    archives): ``mode_bits_stripped`` (setuid, setgid and sticky bits removed) and
    ``special_files_skipped`` (device nodes and fifos left out; the sandbox brings its own
    ``/dev``). Empty for images built here."""
    notes: list[str] = Field(default_factory=list)
    """How it was built, where that matters to a reader: what the builder added on its own
    (``python-is-python3``), the network the build steps had, steps that ran as root although
    the source named another user."""
    build_hosts: list[str] | None = None
    """``host:port`` the build's steps could reach (their only network: assay's registry proxy,
    allowing Debian's archive, PyPI, npm and the recipe's mirror). Null
    when unknown or not applicable: no step ran (a recipe of packages only), an OCI image, an
    image built before this was recorded."""
    files: int = Field(ge=0)
    """Entries in the root filesystem."""
    bytes: int = Field(ge=0)
    """Apparent size of its regular files."""
    created_at: str
    """When it entered the store (UTC)."""
    manifest_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    """The digest of the image manifest a registry pull unpacked (this platform's, when the
    pin names a multi-platform index): the registry's name for the image. Null for images
    built or imported from an archive here. The same files reached from two sources are one
    image, and its record is the first one's; a trial record takes both digests from its
    task's pin (``environment_image``), never from here alone."""
    reference: str | None = None
    """The registry reference the image was pulled by, as asked (``REGISTRY/NAME@sha256:…``,
    or with the tag it resolved from); null for images not pulled from a registry."""
