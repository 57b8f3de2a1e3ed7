"""Image references as bundles and ``assay env pull`` write them: ``REGISTRY/NAME@sha256:…``,
``REGISTRY/NAME:TAG`` or both, told apart from a bare root-filesystem digest (``sha256:…``).

Pure parsing, no network: a bundle is validated at load (the suites layer) before anything is
pulled (:mod:`assay.environments.registry`). The grammar is the distribution spec's, narrowed
where it matters here: a bundle's reference must name its registry's host (``ghcr.io/…``,
``127.0.0.1:5000/…``, ``localhost/…``), so what a task runs in never depends on the
short-name rules of the machine that runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from assay.errors import InputError

__all__ = ["DIGEST_RE", "ImageRef", "is_reference", "parse_reference", "qualified"]

#: ``sha256:`` and 64 lowercase hex digits: a bare digest, never a reference.
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
#: Bytes of a reference (Docker's own limit on a repository name is 255).
MAX_REFERENCE_BYTES = 512
#: One path component of a repository name, and a registry host (``host[:port]``).
_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HOST_RE = re.compile(r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|"
                      r"\[?[0-9a-fA-F:.]+\]?)(?::[0-9]+)?$|^[A-Za-z0-9.-]+:[0-9]+$")


@dataclass(frozen=True)
class ImageRef:
    """A registry reference: ``REGISTRY/NAME``, then ``:TAG``, ``@sha256:…`` or both."""

    name: str
    tag: str | None
    digest: str | None

    @property
    def text(self) -> str:
        return (self.name + (f":{self.tag}" if self.tag else "")
                + (f"@{self.digest}" if self.digest else ""))

    def at(self, digest: str) -> str:
        """The reference of one digest in the same repository, as skopeo takes it."""
        return f"docker://{self.name}@{digest}"

    @property
    def pinned(self) -> bool:
        return self.digest is not None


def parse_reference(text: str) -> ImageRef:
    """``text`` as an image reference; an :class:`InputError` naming what is wrong."""
    if len(text.encode()) > MAX_REFERENCE_BYTES:
        raise InputError(f"image reference longer than {MAX_REFERENCE_BYTES} bytes")
    rest, _, digest = text.partition("@")
    if digest and not DIGEST_RE.match(digest):
        raise InputError(f"{text!r}: the digest after '@' must be 'sha256:' and 64 lowercase "
                         "hex digits")
    name, tag = rest, None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        name, tag = rest[:colon], rest[colon + 1:]
        if not _TAG_RE.match(tag):
            raise InputError(f"{text!r}: tag {tag!r} is not a valid tag")
    if not _valid_name(name):
        raise InputError(f"{text!r}: {name!r} is not a registry/repository name (lowercase "
                         "letters, digits, '.', '_', '-', '/' and a registry's host[:port])")
    if tag is None and not digest:
        tag = "latest"
    return ImageRef(name=name, tag=tag, digest=digest or None)


def _valid_name(name: str) -> bool:
    parts = name.split("/")
    if len(parts) > 1 and _HOST_RE.match(parts[0]):
        parts = parts[1:]
    return all(_COMPONENT_RE.match(p) for p in parts)


def is_reference(text: str) -> bool:
    """Whether a bundle's ``environment_image`` is a registry reference (not a bare digest):
    it names a repository with a registry host (``host.name/…``, ``host:port/…``,
    ``localhost/…``) and a digest or a tag."""
    if DIGEST_RE.match(text):
        return False
    first = text.split("/", 1)[0]
    if "/" not in text or not _HOST_RE.match(first):
        return False
    try:
        parse_reference(text)
    except InputError:
        return False
    return True


def qualified(text: str) -> str:
    """``text`` with its registry spelled out, as Docker reads a short name: ``python:3.13``
    is ``docker.io/library/python:3.13``, ``team/app`` is ``docker.io/team/app``; a name whose
    first part is a host (``ghcr.io/…``, ``host:5000/…``, ``localhost/…``) is kept. An
    :class:`InputError` when it is no reference."""
    ref = parse_reference(text)
    first, _, rest = ref.name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost") and _HOST_RE.match(first):
        name = ref.name
    elif rest:
        name = f"docker.io/{ref.name}"
    else:
        name = f"docker.io/library/{ref.name}"
    return ImageRef(name, ref.tag, ref.digest).text
