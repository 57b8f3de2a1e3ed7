"""Unpacking a pull's layers while skopeo is still fetching them.

A pull used to be two steps one after the other: skopeo copied every blob into a ``dir:``
folder, then the importer read them back and unpacked the layers. On a fast registry the second
step took several times the first (issue 33's bench: 8-16x skopeo's own copy), and nothing
needed to wait: skopeo's ``dir`` destination writes one blob at a time, the layers in the
manifest's order and then the config, each into a temporary file (``dir-put-blob…``) that it
renames to the blob's hex digest once it has checked it. So each layer is read here while it is
being written (:class:`GrowingBlob` follows the file as it grows) and unpacked at once.

Every check of the importer still holds, in a different order only:

- the manifest was read and hashed against the pin before the copy started
  (:func:`.registry.pull_image`), so every blob digest it lists is the registry's name for it;
- each layer's bytes go through the same :class:`~.blobs.VerifiedReader` and
  :func:`.oci.unpack_layer` as an import: size bound, digest at its end, decompression bomb,
  path escapes, links, whiteouts, every limit;
- the bytes followed are the ones skopeo kept: a blob ends only when the file read is renamed
  to that layer's digest (the same inode), never at a momentary end of what has arrived;
- the config (this machine's platform, the diff ids every layer's content must match, the
  working folder) is read once skopeo has finished, with its digest from the manifest, and the
  manifest skopeo wrote is hashed against the pin again, before anything is published;
- the root filesystem is built in a staging folder and renamed into place only after all of
  that (a refusal, a failed copy or a kill leaves nothing under a final name).

When skopeo does not write in that order (another version, a blob it already had), the file
followed turns out to be another blob: :class:`OutOfOrder` is raised, the half-made root is
dropped with its staging folder, and the caller imports the finished copy the old way.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from assay.environments.blobs import DirSource, blob_name, read_json, short
from assay.environments.layers import Unpacker
from assay.environments.limits import ImportLimits
from assay.environments.oci import (
    LayerRef,
    SourceName,
    config_checked,
    manifest_parts,
    publish_unpacked,
    say_unpacked,
    unpack_layer,
)
from assay.environments.store import EnvironmentImage, ImageStore
from assay.errors import ImageRefused, InfraError
from assay.suites.limits import describe_bytes

__all__ = ["GrowingBlob", "OutOfOrder", "import_while_copying"]

#: skopeo's temporary name for a blob it is writing (containers/image ``dir`` destination)
TEMP_PREFIX = "dir-put-blob"
#: Seconds between two looks at a blob that has not grown (skopeo writes in 32 KiB pieces)
WAIT = 0.004


class OutOfOrder(Exception):
    """skopeo wrote the blobs in another order than the one followed: import afterwards."""


class Copy(Protocol):
    """The running ``skopeo copy`` as this module needs it (:class:`.registry.RunningCopy`)."""

    def running(self) -> bool: ...

    def wait(self) -> object: ...

    def tick(self) -> None: ...


def _hex_names(folder: Path) -> dict[int, str]:
    """The finished blobs in skopeo's folder, by inode."""
    found: dict[int, str] = {}
    for entry in os.scandir(folder):
        if len(entry.name) == 64 and not entry.name.startswith(TEMP_PREFIX):
            found[entry.inode()] = entry.name
    return found


class GrowingBlob(io.RawIOBase):
    """One blob read while skopeo writes it: a read that finds no new bytes waits for more,
    and the end is where skopeo renamed the file to ``hex`` (its digest, checked by skopeo and
    again by the reader this feeds). A file renamed to another name, or a copy that ended
    without naming it, is :class:`OutOfOrder` (or skopeo's own error, from ``copy.wait``)."""

    def __init__(self, folder: Path, hex_digest: str, claimed: set[int], copy: Copy) -> None:
        super().__init__()
        self.folder, self.hex, self.copy = folder, hex_digest, copy
        self.fd, self.done = self._find(claimed)
        self.inode = os.fstat(self.fd).st_ino
        claimed.add(self.inode)

    def _find(self, claimed: set[int]) -> tuple[int, bool]:
        """An fd of the blob's file: the finished one, or the one skopeo is writing now."""
        while True:
            final = self.folder / self.hex
            try:
                return os.open(final, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), True
            except FileNotFoundError:
                pass
            try:
                temps = [e for e in os.scandir(self.folder)
                         if e.name.startswith(TEMP_PREFIX) and e.inode() not in claimed]
            except FileNotFoundError:  # skopeo has not made its folder yet
                temps = []
            if len(temps) == 1:
                try:
                    fd = os.open(temps[0].path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                except FileNotFoundError:  # renamed meanwhile: look again
                    continue
                if final.exists():  # finished between the two looks: that temporary file
                    os.close(fd)   # may already be the next blob's
                    continue
                return fd, False
            if len(temps) > 1:  # several blobs at once: not the order followed here
                raise OutOfOrder(f"{len(temps)} blobs written at once")
            if not self.copy.running():
                self.copy.wait()  # skopeo's own failure, if it failed
                raise OutOfOrder(f"the copy ended without blob {self.hex[:12]}")
            self.copy.tick()
            time.sleep(WAIT)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            n = os.readv(self.fd, [view])
            if n or self.done:
                return n
            self._settle()

    def _settle(self) -> None:
        """No new bytes: the blob is whole if skopeo has named it, else wait for more."""
        names = _hex_names(self.folder)
        name = names.get(self.inode)
        if name == self.hex:
            self.done = True  # renamed after its last write: one more read finds the rest
            return
        if name is not None:
            raise OutOfOrder(f"followed blob {short('sha256:' + name)}, not {self.hex[:12]}")
        if not self.copy.running():
            self.copy.wait()
            if _hex_names(self.folder).get(self.inode) == self.hex:
                self.done = True
                return
            raise OutOfOrder(f"the copy ended without naming blob {self.hex[:12]}")
        self.copy.tick()
        time.sleep(WAIT)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


class _Following:
    """The :class:`~.blobs.BlobSource` :func:`.oci.unpack_layer` reads a layer from."""

    def __init__(self, folder: Path, label: str, copy: Copy) -> None:
        self.folder, self.label, self.copy = folder, label, copy
        self.claimed: set[int] = set()

    def has(self, name: str) -> bool:
        return True

    def size(self, name: str) -> int:
        raise NotImplementedError

    def open(self, name: str) -> Any:
        return io.BufferedReader(GrowingBlob(self.folder, name.rsplit("/", 1)[-1],
                                             self.claimed, self.copy), 1 << 20)


def import_while_copying(folder: Path, manifest_digest: str, manifest: dict[str, Any],
                         copy: Copy, store: ImageStore, *, label: str, name: SourceName,
                         limits: ImportLimits, say: Callable[[str], None],
                         finished: Callable[[], Any]) -> EnvironmentImage:
    """Unpack the layers of ``manifest`` (already checked against the pin) from ``folder`` as
    skopeo writes them; once the copy has ended, ``finished()`` (which checks the manifest
    skopeo wrote), the config's checks, then publish. Raises :class:`OutOfOrder` when skopeo
    wrote the blobs otherwise (nothing published), and what an import raises."""
    what = f"{label}: manifest {short(manifest_digest)}"
    cdesc, descs = manifest_parts(manifest, what, limits)
    layers = [LayerRef(blob_name(d.digest), d.media_type, d.digest, d.size, None)
              for d in descs]
    say(f"registry {short(manifest_digest)}: {len(layers)} layers, "
        f"{describe_bytes(sum(d.size for d in descs))}, unpacked as they arrive")
    source = _Following(folder, label, copy)
    try:
        with store.source_lock(name.kind, name.digest, say), store.staging() as rootfs:
            hit = store.lookup_source(name.kind, name.digest)  # while we waited
            if hit is not None:
                say(f"cached: {name.kind} {short(name.digest)} is image {short(hit.digest)}")
                copy.wait()
                return hit
            unpacker = Unpacker(rootfs, limits)
            try:
                plain = [unpack_layer(source, layer, f"layer {i}/{len(layers)}", unpacker,
                                      limits, say) for i, layer in enumerate(layers, 1)]
            except ImageRefused:
                # skopeo's own verdict first, as when the import came after the copy: a
                # blob altered in the registry is "does not match its digest", not the
                # damaged tar its altered bytes make
                copy.wait()
                raise
            copy.wait()
            finished()
            config_doc = read_json(DirSource(folder), cdesc.digest.removeprefix("sha256:"),
                                   limits, digest=cdesc.digest, size=cdesc.size,
                                   what=f"{label}: config {short(cdesc.digest)}")
            config = config_checked(config_doc, plain, f"{label}: config {short(cdesc.digest)}")
            image = publish_unpacked(store, unpacker, config, kind=name.kind,
                                     source_digest=name.digest, label=name.label,
                                     manifest_digest=manifest_digest, name=name)
    except OSError as exc:  # a full disk, a store that cannot be written: not the input
        raise InfraError(f"{label}: could not unpack the image into {store.root}: "
                         f"{exc}") from exc
    say_unpacked(image, unpacker, say)
    return image

