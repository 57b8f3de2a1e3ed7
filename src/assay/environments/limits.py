"""The bounds an image archive is held to while it is read and unpacked, in one place.

Why bounds at all: an OCI layout or a ``docker save`` archive can come from anyone, and a layer
is a tar stream that may be compressed. A few kilobytes of gzip expand to gigabytes of zeros (a
decompression bomb), a tar header can claim any size, a path can be megabytes long and a layer
can hold millions of empty entries. Each of these would fill the disk or the memory of the
machine that runs the trials, so every one is counted while reading and the import is refused,
naming the limit, as soon as one is passed. The defaults sit far above real images (a CUDA
image with a full toolchain is 10-20 GiB and a few hundred thousand entries): reaching one is a
mistake or an attack.
"""

from __future__ import annotations

from dataclasses import dataclass

from assay.suites.limits import KIB, MIB

GIB = 1024 * MIB

#: Bytes of one archive file (a ``docker save`` tar, a tarred OCI layout), compressed or not.
ARCHIVE_MAX_BYTES = 64 * GIB
#: Members of an archive tar or files of a layout folder that are looked at (blobs and the
#: few JSON files): a real one holds a few dozen.
ARCHIVE_MAX_MEMBERS = 100_000
#: Bytes of one JSON document of an image (``index.json``, ``manifest.json``, a manifest, a
#: config): real ones are a few KiB; a config with a long build history is tens of KiB.
JSON_MAX_BYTES = 4 * MIB
#: Layers of one image (Docker itself stops at 127).
MAX_LAYERS = 256
#: Image indexes nested inside one another on the way to a manifest.
MAX_INDEX_DEPTH = 4
#: Bytes all layers expand to once decompressed (tar headers and padding counted): the bound
#: that stops a decompression bomb, counted on the decompressed stream itself.
IMAGE_MAX_BYTES = 32 * GIB
#: Bytes of one regular file in a layer (a tar header's size is checked before reading).
FILE_MAX_BYTES = 8 * GIB
#: Entries (files, folders, links, whiteouts) in all layers together.
IMAGE_MAX_ENTRIES = 2_000_000
#: Bytes of one path inside a layer, and of one of its components (Linux's own limits).
PATH_MAX_BYTES = 4096
NAME_MAX_BYTES = 255
#: Bytes of a symbolic link's target.
LINK_TARGET_MAX_BYTES = 4096

__all__ = ["ARCHIVE_MAX_BYTES", "ARCHIVE_MAX_MEMBERS", "FILE_MAX_BYTES", "GIB",
           "IMAGE_MAX_BYTES", "IMAGE_MAX_ENTRIES", "JSON_MAX_BYTES", "KIB",
           "LINK_TARGET_MAX_BYTES", "MAX_INDEX_DEPTH", "MAX_LAYERS", "MIB", "NAME_MAX_BYTES",
           "PATH_MAX_BYTES", "ImportLimits"]


@dataclass(frozen=True)
class ImportLimits:
    """The limits one import runs under: the module's constants unless a caller (a test that
    must reach a bound in a second, a team with a larger image) passes others."""

    archive_bytes: int = ARCHIVE_MAX_BYTES
    archive_members: int = ARCHIVE_MAX_MEMBERS
    json_bytes: int = JSON_MAX_BYTES
    layers: int = MAX_LAYERS
    image_bytes: int = IMAGE_MAX_BYTES
    file_bytes: int = FILE_MAX_BYTES
    entries: int = IMAGE_MAX_ENTRIES
    path_bytes: int = PATH_MAX_BYTES
    name_bytes: int = NAME_MAX_BYTES
    link_target_bytes: int = LINK_TARGET_MAX_BYTES
