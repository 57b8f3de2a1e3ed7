"""Pulling a pinned image from a registry, daemonless, into the image store.

Why skopeo and not a registry client of our own: the registry protocol is the small part; what
users expect of a pull is the rest (their auth files and credential helpers, ``registries.conf``
mirrors and insecure registries, short-name rules, retries), and skopeo reads the same files as
Podman and Buildah. It is a Debian package and needs no daemon. assay asks it for two things
only: the raw manifest a reference names (``skopeo inspect --raw``) and the blobs of one
platform's manifest copied as they are (``skopeo copy docker://… dir:…``: the ``dir`` transport
keeps the manifest's bytes, so its digest is still the registry's; an ``oci:`` destination
would convert a Docker manifest and change it).

Nothing the registry serves is trusted. The manifest's bytes are hashed here and must equal the
pin (``NAME@sha256:…``; in ``NAME:TAG@sha256:…`` the digest decides, as with Docker, and a tag
moved after pinning is never followed). A tag alone is resolved once (its manifest hashed) and
the pull is filed under the digest it named. A multi-platform index is
walked to this machine's platform here. The blobs skopeo wrote are then imported by the OCI
importer (:mod:`.oci`), which checks every blob against its digest again, refuses layers that
escape the root or pass a bound, and publishes the root filesystem under its own digest. The
download sits in a staging folder of the store, so a pull that fails or is killed leaves
nothing under a final name (:meth:`ImageStore.staging`, swept by the next one).

The store remembers a pull by the digest it was pinned to (``sources/registry-<hex>.json``): a
second pull of the same pin, or a trial of a task pinned to it, is a lookup without network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.environments.blobs import DIGEST_RE, short
from assay.environments.limits import ImportLimits
from assay.environments.oci import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    SourceName,
    import_image,
    machine_platform,
)
from assay.environments.pull_progress import CopyWatch, blob_sizes, unpack_eta
from assay.environments.pull_stream import OutOfOrder, import_while_copying
from assay.environments.store import EnvironmentImage, ImageStore
from assay.errors import ImageRefused, InputError, PullFailed
from assay.suites.image_ref import ImageRef, is_reference, parse_reference
from assay.suites.limits import describe_bytes

__all__ = ["ImageRef", "PullResult", "is_reference", "lookup_pulled", "parse_reference",
           "pull_image",
           "resolve_tag", "skopeo_argv", "skopeo_executable"]

#: Seconds for ``skopeo inspect`` (one manifest) and ``skopeo copy`` (every blob).
INSPECT_SECONDS = 120
COPY_SECONDS = 3600
#: Seconds between two looks at a running copy (how much later than skopeo a pull may end).
WATCH_EVERY = 0.25
#: Bytes of a copy's stdout read (``--quiet``: it prints nothing on success).
MAX_COPY_STDOUT = 1 << 20
#: Bytes of skopeo's own messages kept for an error.
MESSAGE_BYTES = 2000
#: Times skopeo retries a failed request (its ``--retry-times``).
RETRIES = 2

#: skopeo's words for content that does not match its digest (containers/image).
_MISMATCH_WORDS = ("digest did not match", "does not match digest", "digest mismatch",
                   "manifest digest", "invalid checksum")




def skopeo_executable() -> str | None:
    return shutil.which("skopeo")


@dataclass(frozen=True)
class PullResult:
    """A pull: the image in the store, the digest it was pinned to (an index's or a
    manifest's), the manifest unpacked (this platform's), and whether the store had it."""

    image: EnvironmentImage
    reference: str
    pinned_digest: str
    manifest_digest: str
    cached: bool
    resolved_tag: str | None


def skopeo_argv(ref: str) -> list[str]:
    """skopeo and its global options. ``$CONTAINERS_REGISTRIES_CONF`` (the file newer
    containers tools read instead of ``/etc/containers/registries.conf``) is passed as
    ``--registries-conf``: Debian bookworm's skopeo 1.9 reads only the flag."""
    found = skopeo_executable()
    if found is None:
        raise PullFailed(f"cannot pull {ref} (skopeo is not installed: apt-get install skopeo, "
                         "or `make setup`)")
    conf = os.environ.get("CONTAINERS_REGISTRIES_CONF")
    return [found, *([f"--registries-conf={conf}"] if conf else [])]


class RunningCopy:
    """A long skopeo call (the copy) started, watched and ended: :meth:`tick` says what has
    arrived (``watch``, the fetch's progress lines) and enforces the time limit; its output
    goes to temporary files, so a chatty failure cannot fill a pipe and stall it. Leaving the
    ``with`` block kills it if it still runs (a refusal, an interrupt)."""

    def __init__(self, argv: list[str], ref: str, seconds: float, what: str,
                 watch: Callable[[], None]) -> None:
        self.argv, self.ref, self.seconds, self.what, self.watch = argv, ref, seconds, what, watch
        self.stdout = tempfile.TemporaryFile()
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdout=self.stdout, stderr=self.stderr,
                                         stdin=subprocess.DEVNULL)
        except OSError as exc:
            self.close()
            raise PullFailed(f"cannot pull {ref} ({what}: {exc.strerror})") from None
        self.deadline = time.monotonic() + seconds

    def __enter__(self) -> RunningCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def running(self) -> bool:
        return self.proc.poll() is None

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise PullFailed(f"cannot pull {self.ref} ({self.what} took more than "
                             f"{self.seconds:.0f} s)")
        self.watch()

    def wait(self) -> bytes:
        """Its stdout once it has ended; its failure as :func:`_failure` says."""
        while True:
            try:
                self.proc.wait(timeout=WATCH_EVERY)
                break
            except subprocess.TimeoutExpired:
                self.tick()
        self.stdout.seek(0)
        out = self.stdout.read(MAX_COPY_STDOUT)
        if self.proc.returncode != 0:
            size = self.stderr.seek(0, os.SEEK_END)  # only its tail is kept: read no more
            self.stderr.seek(max(0, size - 4 * MESSAGE_BYTES))
            raise _failure(self.proc.returncode, self.stderr.read(), self.ref)
        return out

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:  # timed out, refused, or interrupted
            proc.kill()
            proc.wait()
        self.stdout.close()
        self.stderr.close()


def _failure(returncode: int, stderr: bytes, ref: str) -> ImageRefused | PullFailed:
    """skopeo's failure as :class:`ImageRefused` (content not matching its digest) or
    :class:`PullFailed` (the registry unreachable, no credentials, no such image)."""
    message = stderr.decode("utf-8", "replace").strip()[-MESSAGE_BYTES:]
    said = re.findall(r'level=fatal msg="((?:[^"\\]|\\.)*)"', message)
    message = (said[-1].replace('\\"', '"') if said else " ".join(message.split())
               ) or f"skopeo exited with {returncode}"
    if any(w in message.lower() for w in _MISMATCH_WORDS):
        return ImageRefused(f"{ref}: the registry served content that does not match its "
                            f"digest ({message})")
    return PullFailed(f"cannot pull {ref} ({message})")


def _run(argv: list[str], ref: str, seconds: float, what: str) -> bytes:
    """skopeo's stdout (a short call: the manifest); its failure as :func:`_failure` says."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=seconds, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PullFailed(f"cannot pull {ref} ({what} took more than {seconds:.0f} s)") from None
    except OSError as exc:
        raise PullFailed(f"cannot pull {ref} ({what}: {exc.strerror})") from None
    if done.returncode != 0:
        raise _failure(done.returncode, done.stderr, ref)
    return done.stdout


def _raw_manifest(ref: ImageRef, target: str, limits: ImportLimits) -> bytes:
    """The bytes of the manifest or index ``target`` names, bounded."""
    raw = _run([*skopeo_argv(ref.text), "inspect", "--raw", f"--retry-times={RETRIES}", target],
               ref.text, INSPECT_SECONDS, "reading the manifest")
    if len(raw) > limits.json_bytes:
        raise ImageRefused(f"{ref.text}: the manifest is {len(raw):,} bytes, more than the "
                           f"limit of {limits.json_bytes:,}")
    return raw


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def resolve_tag(text: str, *, limits: ImportLimits | None = None) -> str:
    """The manifest digest a tag resolves to now (what ``task lint --write-digest`` pins)."""
    ref = parse_reference(text)
    if ref.tag is None:
        raise InputError(f"{text}: no tag to resolve")
    raw = _raw_manifest(ref, f"docker://{ref.name}:{ref.tag}", limits or ImportLimits())
    return _sha(raw)


def _doc(raw: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ImageRefused(f"{what}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ImageRefused(f"{what}: not a JSON object")
    return doc


def _media_type(doc: dict[str, Any]) -> str:
    kind = doc.get("mediaType")
    if isinstance(kind, str):
        return kind
    # An OCI index or manifest may leave mediaType out: tell them by their fields.
    return ("application/vnd.oci.image.index.v1+json" if "manifests" in doc
            else "application/vnd.oci.image.manifest.v1+json")


def _platform_manifest(ref: ImageRef, index: dict[str, Any], what: str) -> str:
    """The digest of this machine's manifest in a multi-platform index."""
    want = machine_platform()
    seen: list[str] = []
    entries = index.get("manifests")
    if not isinstance(entries, list):
        raise ImageRefused(f"{what}: field 'manifests' missing or not a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ImageRefused(f"{what}: manifests[{i}] is not an object")
        plat = entry.get("platform") or {}
        notes = entry.get("annotations") or {}
        if isinstance(notes, dict) and notes.get("vnd.docker.reference.type"):
            continue  # an attestation, not an image
        found = f"{plat.get('os')}/{plat.get('architecture')}" if isinstance(plat, dict) else "?"
        digest = entry.get("digest")
        if found == want and isinstance(digest, str) and DIGEST_RE.match(digest):
            return digest
        seen.append(found)
    raise ImageRefused(f"{ref.text}: no {want} image (this machine's platform) in the index; "
                       f"it holds: {', '.join(seen) or 'nothing'}")


def _pin(ref: ImageRef, limits: ImportLimits) -> tuple[str, bytes | None]:
    """The digest the pull is pinned to, and the manifest bytes when reading the tag already
    fetched them. A tag and a digest together (``python:3.13-slim@sha256:…``, as task corpora
    pin): the digest decides, as with Docker; the tag is a label, never followed, so a tag
    moved after pinning cannot change what runs."""
    if ref.digest is not None:
        return ref.digest, None
    raw = _raw_manifest(ref, f"docker://{ref.name}:{ref.tag}", limits)
    return _sha(raw), raw


def pull_image(text: str, store: ImageStore | None = None, *,
               progress: Callable[[str], None] | None = None,
               limits: ImportLimits | None = None) -> PullResult:
    """Pull the image ``text`` names (``REGISTRY/NAME@sha256:…``, ``…:TAG`` or both) into the
    store, or find it there. Raises :class:`ImageRefused` for content that does not match a
    digest or is unsafe, :class:`PullFailed` when it cannot be fetched (with skopeo's
    reason); nothing is left under a final name then."""
    store = store or ImageStore()
    say = progress or (lambda _line: None)
    limits = limits or ImportLimits()
    ref = parse_reference(text)
    if ref.digest is not None:
        hit = lookup_pulled(ref.digest, store, ref.text)
        if hit is not None:
            say(f"cached: {ref.text} is image {short(hit.image.digest)}")
            return hit
    pinned, raw = _pin(ref, limits)
    resolved = ref.tag if ref.digest is None else None
    if resolved is not None:
        say(f"{ref.name}:{ref.tag} resolves to {pinned}")
    hit = lookup_pulled(pinned, store, ref.text, resolved)
    if hit is not None:
        say(f"cached: {ref.name}@{pinned} is image {short(hit.image.digest)}")
        return hit
    if raw is None:
        raw = _raw_manifest(ref, ref.at(pinned), limits)
        if _sha(raw) != pinned:
            raise ImageRefused(f"{ref.text}: the registry served a manifest whose digest is "
                               f"{_sha(raw)}, not the pinned {pinned}")
    doc = _doc(raw, f"{ref.text}: manifest")
    manifest = pinned
    if _media_type(doc) in INDEX_TYPES:
        manifest = _platform_manifest(ref, doc, f"{ref.text}: index")
        say(f"{machine_platform()}: manifest {manifest}")
        raw = _raw_manifest(ref, ref.at(manifest), limits)  # what it lists: the progress' total
        if _sha(raw) != manifest:
            raise ImageRefused(f"{ref.text}: the registry served a manifest whose digest is "
                               f"{_sha(raw)}, not {manifest} the index names")
        doc = _doc(raw, f"{ref.text}: manifest {short(manifest)}")
    elif _media_type(doc) not in MANIFEST_TYPES:
        raise ImageRefused(f"{ref.text}: media type {_media_type(doc)!r} is not an image "
                           "manifest or index assay can pull")
    sizes = blob_sizes(doc)
    name = SourceName(kind="registry", digest=pinned,
                      label=f"{ref.name}@{pinned}", reference=ref.text)
    try:
        with store.staging() as scratch:
            image = _fetch(ref, manifest, doc, scratch.parent, store, limits, say, sizes, name)
    except OSError as exc:
        raise PullFailed(f"cannot pull {ref.text} (writing to {store.root}: {exc})") from exc
    return PullResult(_as_pulled(image, ref.text, pinned, manifest), ref.text, pinned,
                      manifest, False, resolved)


def _as_pulled(image: EnvironmentImage, reference: str, pinned: str,
               manifest: str) -> EnvironmentImage:
    """The stored image as this pull reached it. The same files reached from another source
    first (an archive, a build) are one image whose ``image.json`` names that source; what a
    record says of a pull (both digests, the reference) comes from the pull."""
    name = parse_reference(reference).name
    return image.model_copy(update={
        "source_kind": "registry", "source_digest": pinned, "source_label": f"{name}@{pinned}",
        "manifest_digest": manifest, "reference": reference})


def lookup_pulled(pinned: str, store: ImageStore, reference: str,
                  tag: str | None = None) -> PullResult | None:
    """An earlier pull of ``pinned`` still in the store (no network), or None."""
    hit = store.lookup_source("registry", pinned)
    if hit is None:
        return None
    manifest = str(store.source_entry("registry", pinned).get("manifest_digest") or pinned)
    return PullResult(_as_pulled(hit, reference, pinned, manifest), reference, pinned,
                      manifest, True, tag)


def _fetch(ref: ImageRef, manifest: str, doc: dict[str, Any], work: Path, store: ImageStore,
           limits: ImportLimits, say: Callable[[str], None], sizes: list[int] | None,
           name: SourceName) -> EnvironmentImage:
    """skopeo copies ``manifest``'s blobs as they are into ``work/dir`` (what has arrived is
    said while it waits: ``pull_progress.CopyWatch``) while each layer is unpacked as it
    arrives (:mod:`.pull_stream`); where skopeo writes them in another order, the finished
    copy is laid out (hard links, no copy) as a one-image OCI layout and imported."""
    target = work / "dir"
    what = (f"{len(sizes)} blobs, {describe_bytes(sum(sizes))}" if sizes is not None
            else "its blobs")
    say(f"fetching {what} of {ref.name}@{manifest} with skopeo")
    watch = CopyWatch(target, sizes, say)
    told = unpack_eta(say, sizes[1:] if sizes else None)
    argv = [*skopeo_argv(ref.text), "copy", "--quiet", f"--retry-times={RETRIES}",
            ref.at(manifest), f"dir:{target}"]
    with RunningCopy(argv, ref.text, COPY_SECONDS, "copying the image", watch.poll) as copy:
        try:
            return import_while_copying(
                target, manifest, doc, copy, store, label=ref.text, name=name, limits=limits,
                say=told, finished=lambda: _copied_manifest(target, ref, manifest, limits))
        except OutOfOrder as exc:
            say(f"skopeo wrote the blobs in another order ({exc}): unpacking once it is done")
            copy.wait()
    return import_image(_layout(target, ref, manifest, limits, work / "layout"), store,
                        expected_digest=manifest, progress=told, limits=limits, name=name)


def _copied_manifest(target: Path, ref: ImageRef, manifest: str, limits: ImportLimits) -> bytes:
    """The manifest skopeo wrote, which must be the one pinned (or the index named)."""
    path = target / "manifest.json"
    if not path.is_file() or path.stat().st_size > limits.json_bytes:
        raise ImageRefused(f"{ref.text}: the manifest copied is not {manifest}")
    got = path.read_bytes()
    if _sha(got) != manifest:
        raise ImageRefused(f"{ref.text}: the manifest copied is not {manifest}")
    return got


def _layout(target: Path, ref: ImageRef, manifest: str, limits: ImportLimits,
            layout: Path) -> Path:
    """skopeo's finished ``dir:`` copy as a one-image OCI layout the importer reads."""
    got = _copied_manifest(target, ref, manifest, limits)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for entry in os.scandir(target):
        if re.fullmatch(r"[0-9a-f]{64}", entry.name) and entry.is_file(follow_symlinks=False):
            os.link(entry.path, blobs / entry.name)
    (blobs / manifest.removeprefix("sha256:")).write_bytes(got)
    kind = _media_type(_doc(got, f"{ref.text}: manifest {short(manifest)}"))
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": kind, "digest": manifest, "size": len(got)}]}
    (layout / "index.json").write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return layout
