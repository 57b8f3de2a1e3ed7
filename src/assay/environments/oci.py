"""Importing an image a team already builds with Docker: an OCI image layout (a folder, or a tar
of one) or a ``docker save`` archive (the old layout with ``manifest.json`` and
``<id>/layer.tar``, or the newer one that embeds an OCI layout), into the image store.

The archive is read, not trusted. The manifest is chosen for this machine (``linux/amd64`` on
x86-64) from the index, through nested indexes; every blob on the way (index, manifest, config,
layer) is checked against its descriptor's size and ``sha256`` digest while it is read, and each
layer's decompressed stream against the config's diff id. ``expected_digest`` pins the import:
it must be the manifest's digest (or the digest of an index that leads to it, as a registry
shows for a multi-platform tag, or the config's digest, which Docker calls the image id) or
nothing is imported. An old ``docker save`` archive has no manifest blob; its image id is its
pin and its source digest.

The store is asked first: the same manifest was imported before -> that image, nothing read
past the JSON files. Otherwise the layers are unpacked in order (:mod:`.layers`) into a staging
folder and published under the digest of the tree they made.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zlib_ng import gzip_ng

from assay.environments.blobs import (
    DIGEST_RE,
    INFLATE_ERRORS,
    BlobSource,
    VerifiedReader,
    blob_name,
    open_source,
    read_json,
    short,
)
from assay.environments.layers import CountingReader, Unpacker
from assay.environments.limits import MAX_INDEX_DEPTH, ImportLimits
from assay.environments.pull_progress import Ticker
from assay.environments.readahead import ReadAhead
from assay.environments.store import EnvironmentImage, ImageConfig, ImageStore
from assay.errors import ImageRefused, InfraError
from assay.records.environment import SourceKind
from assay.suites.limits import describe_bytes

__all__ = ["SourceName", "config_checked", "import_image", "machine_platform", "manifest_parts",
           "publish_unpacked", "say_unpacked", "unpack_layer"]

INDEX_TYPES = {"application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json"}
MANIFEST_TYPES = {"application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json"}
LAYER_TYPE_PREFIXES = ("application/vnd.oci.image.layer.v1.tar",
                       "application/vnd.oci.image.layer.nondistributable.v1.tar",
                       "application/vnd.docker.image.rootfs.diff.tar")
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_REF_NAME = "org.opencontainers.image.ref.name"
_CHUNK = 1 << 20

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
         "armv7l": "arm", "i686": "386", "i386": "386", "ppc64le": "ppc64le",
         "s390x": "s390x", "riscv64": "riscv64"}


def machine_platform() -> str:
    """``linux/amd64`` on x86-64: the platform an image must be built for to run here."""
    machine = platform.machine().lower()
    return f"linux/{_ARCH.get(machine, machine)}"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: str | None
    annotations: dict[str, str]


@dataclass(frozen=True)
class LayerRef:
    """One layer to unpack: where it is, and what its bytes must hash to."""

    name: str
    media_type: str
    digest: str | None
    size: int | None
    diff_id: str | None


@dataclass
class ImagePlan:
    """What an archive holds for this machine, read and checked, before any layer is touched."""

    kind: SourceKind
    source_digest: str
    accepted: set[str]
    config: ImageConfig
    layers: list[LayerRef]
    ref_name: str = ""


@dataclass(frozen=True)
class SourceName:
    """What the store files an import under when the archive is only the carrier: a registry
    pull is remembered by the digest it was pinned to (an index's, for a multi-platform
    image), not by the layout the client wrote, so the next pull of that pin is a lookup."""

    kind: SourceKind
    digest: str
    label: str
    reference: str | None = None


def import_image(path: Path, store: ImageStore, *, expected_digest: str | None = None,
                 progress: Callable[[str], None] | None = None,
                 limits: ImportLimits | None = None,
                 name: SourceName | None = None) -> EnvironmentImage:
    """Import the OCI layout or ``docker save`` archive at ``path`` into ``store``
    (``name``: filed under that source instead of the archive's own).

    Raises :class:`ImageRefused` for anything unsafe, damaged, over a limit, not for this
    machine, or not matching ``expected_digest``, and :class:`InfraError` when the store cannot
    be written; nothing is left under a final name then."""
    say = progress or (lambda _line: None)
    limits = limits or ImportLimits()
    if expected_digest is not None and not DIGEST_RE.match(expected_digest):
        raise ImageRefused(f"{path}: expected digest {expected_digest!r} is not "
                           "'sha256:' and 64 lowercase hex digits")
    with open_source(path, limits, store.staging_dir) as source:
        plan = read_plan(source, limits, expected_digest)
        if expected_digest is not None and expected_digest not in plan.accepted:
            raise ImageRefused(f"{path}: the image's manifest digest is {plan.source_digest}, "
                               f"not the expected {expected_digest}")
        kind, source_digest = ((name.kind, name.digest) if name is not None
                               else (plan.kind, plan.source_digest))
        hit = store.lookup_source(kind, source_digest)
        if hit is not None:
            say(f"cached: {kind} {short(source_digest)} is image {short(hit.digest)}")
            return hit
        total = sum(layer.size or 0 for layer in plan.layers)
        say(f"{kind} {short(plan.source_digest)}: {len(plan.layers)} layers, "
            f"{describe_bytes(total)}")
        try:
            with store.source_lock(kind, source_digest, say), \
                    store.staging() as rootfs:
                hit = store.lookup_source(kind, source_digest)  # while we waited
                if hit is not None:
                    say(f"cached: {kind} {short(source_digest)} is image {short(hit.digest)}")
                    return hit
                unpacker = Unpacker(rootfs, limits)
                for i, layer in enumerate(plan.layers, 1):
                    unpack_layer(source, layer, f"layer {i}/{len(plan.layers)}", unpacker,
                                 limits, say)
                label = (name.label if name is not None else
                         path.name + (f" ({plan.ref_name})" if plan.ref_name else ""))
                image = publish_unpacked(store, unpacker, plan.config, kind=kind,
                                         source_digest=source_digest, label=label,
                                         manifest_digest=plan.source_digest, name=name)
        except OSError as exc:  # a full disk, a store that cannot be written: not the input
            raise InfraError(f"{path}: could not unpack the image into {store.root}: "
                             f"{exc}") from exc
    say_unpacked(image, unpacker, say)
    return image


def publish_unpacked(store: ImageStore, unpacker: Unpacker, config: ImageConfig, *,
                     kind: SourceKind, source_digest: str, label: str, manifest_digest: str,
                     name: SourceName | None) -> EnvironmentImage:
    """The unpacked root (its working folder made, as a runtime does) digested and published;
    a registry pull (``name``) files both digests and the reference with it."""
    unpacker.ensure_dir(config.workdir)
    return store.publish(unpacker.rootfs, source_kind=kind, source_digest=source_digest,
                         source_label=label, config=config,
                         adjustments=unpacker.counts.adjustments(), known=unpacker.known,
                         manifest_digest=manifest_digest if name is not None else None,
                         reference=name.reference if name is not None else None,
                         source_extra=({"manifest_digest": manifest_digest,
                                        "reference": name.reference or ""}
                                       if name is not None else None))


def say_unpacked(image: EnvironmentImage, unpacker: Unpacker,
                 say: Callable[[str], None]) -> None:
    counts = unpacker.counts
    say(f"image {short(image.digest)}: {image.files:,} entries, {describe_bytes(image.bytes)}; "
        f"{counts.mode_bits_stripped} setuid/setgid/sticky bits stripped, "
        f"{counts.special_files_skipped} device nodes and fifos skipped")


# -- reading what the archive holds ----------------------------------------------------------


def read_plan(source: BlobSource, limits: ImportLimits,
              expected_digest: str | None = None) -> ImagePlan:
    """The image for this machine in ``source``, its JSON files read and verified."""
    if source.has("index.json"):
        kind: SourceKind = "docker-archive" if source.has("manifest.json") else "oci-layout"
        return _oci_plan(source, limits, kind, expected_digest)
    return _docker_plan(source, limits, expected_digest)


def _descriptor(obj: object, what: str, limits: ImportLimits) -> Descriptor:
    if not isinstance(obj, dict):
        raise ImageRefused(f"{what}: a descriptor that is not a JSON object")
    media, digest, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
    if not isinstance(media, str):
        raise ImageRefused(f"{what}: field 'mediaType' missing or not a string")
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        algo = digest.split(":", 1)[0] if isinstance(digest, str) else None
        hint = (f" (only sha256 is read, not {algo})" if algo and algo != "sha256" else "")
        raise ImageRefused(f"{what}: field 'digest' {digest!r} is not a sha256 digest{hint}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImageRefused(f"{what}: field 'size' {size!r} is not a byte count")
    if size > limits.archive_bytes:
        raise ImageRefused(f"{what}: field 'size' {size:,} is past the "
                           f"{describe_bytes(limits.archive_bytes)} limit of an image archive")
    plat = obj.get("platform")
    plat_text = None
    if isinstance(plat, dict):
        plat_text = f"{plat.get('os', '?')}/{plat.get('architecture', '?')}"
    notes = obj.get("annotations")
    annotations = ({str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict)
                   else {})
    return Descriptor(media, digest, size, plat_text, annotations)


@dataclass
class _Candidate:
    manifest: Descriptor
    via: tuple[str, ...]
    ref_name: str


def _oci_plan(source: BlobSource, limits: ImportLimits, kind: SourceKind,
              expected: str | None) -> ImagePlan:
    label = source.label
    if source.has("oci-layout"):
        layout = read_json(source, "oci-layout", limits)
        version = layout.get("imageLayoutVersion") if isinstance(layout, dict) else None
        if not isinstance(version, str) or not version.startswith("1."):
            raise ImageRefused(f"{label}: oci-layout: field 'imageLayoutVersion' is "
                               f"{version!r}; only 1.x layouts are read")
    index = read_json(source, "index.json", limits)
    want = machine_platform()
    found: list[_Candidate] = []
    others: list[str] = []
    missing: list[str] = []

    def walk(doc: object, what: str, via: tuple[str, ...], ref: str) -> None:
        manifests = doc.get("manifests") if isinstance(doc, dict) else None
        if not isinstance(manifests, list):
            raise ImageRefused(f"{what}: field 'manifests' missing or not a list")
        if len(manifests) > limits.archive_members:
            raise ImageRefused(f"{what}: more than {limits.archive_members:,} manifests")
        for i, raw in enumerate(manifests):
            d = _descriptor(raw, f"{what}: manifests[{i}]", limits)
            if d.annotations.get("vnd.docker.reference.type") == "attestation-manifest":
                continue
            name = d.annotations.get(_REF_NAME) or d.annotations.get(
                "io.containerd.image.name") or ref
            if d.platform is not None and d.platform != want:
                others.append(d.platform)
                continue
            if d.media_type not in INDEX_TYPES | MANIFEST_TYPES:
                others.append(f"a {d.media_type}")
                continue
            if not source.has(blob_name(d.digest)):
                missing.append(d.digest)
                continue
            if d.media_type in INDEX_TYPES:
                if len(via) + 1 > MAX_INDEX_DEPTH:
                    raise ImageRefused(f"{what}: image indexes nested more than "
                                       f"{MAX_INDEX_DEPTH} deep")
                sub = read_json(source, blob_name(d.digest), limits, digest=d.digest,
                                size=d.size, what=f"{label}: index {short(d.digest)}")
                walk(sub, f"{label}: index {short(d.digest)}", via + (d.digest,), name)
            else:
                found.append(_Candidate(d, via, name))

    walk(index, f"{label}: index.json", (), "")
    plans: dict[str, ImagePlan] = {}
    for cand in found:
        if cand.manifest.digest in plans:
            plans[cand.manifest.digest].accepted.update(cand.via)
            continue
        plan = _manifest_plan(source, limits, kind, cand)
        if isinstance(plan, str):  # the config names another platform
            others.append(plan)
            continue
        plans[cand.manifest.digest] = plan
    if not plans:
        if missing:
            raise ImageRefused(f"{label}: the {want} image's blobs ({short(missing[0])}) are "
                               "not in the archive")
        held = ", ".join(sorted(set(others))) or "nothing"
        raise ImageRefused(f"{label}: no {want} image (this machine's platform) in it; it "
                           f"holds: {held}")
    if len(plans) > 1:
        chosen = [p for p in plans.values() if expected is not None and expected in p.accepted]
        if chosen:
            return chosen[0]
        names = "; ".join(f"{p.source_digest} {p.ref_name}".strip() for p in plans.values())
        ask = (f"none has the expected digest {expected}" if expected is not None
               else "pass the digest of the one to import")
        raise ImageRefused(f"{label}: {len(plans)} {want} images in it ({names}): {ask}")
    return next(iter(plans.values()))


def _manifest_plan(source: BlobSource, limits: ImportLimits, kind: SourceKind,
                   cand: _Candidate) -> ImagePlan | str:
    """The plan of one manifest, or the platform its config names when that is not this
    machine's."""
    d = cand.manifest
    what = f"{source.label}: manifest {short(d.digest)}"
    manifest = read_json(source, blob_name(d.digest), limits, digest=d.digest, size=d.size,
                         what=what)
    cdesc, descs = manifest_parts(manifest, what, limits)
    config_doc = read_json(source, blob_name(cdesc.digest), limits, digest=cdesc.digest,
                           size=cdesc.size, what=f"{source.label}: config {short(cdesc.digest)}")
    if not _for_this_machine(config_doc):
        return _config_platform(config_doc)
    for i, ld in enumerate(descs):
        if not source.has(blob_name(ld.digest)):
            raise ImageRefused(f"{what}: layers[{i}] ({ld.digest}) is not in the archive (a "
                               "foreign or missing layer)")
    diff_ids = _diff_ids(config_doc, len(descs), f"{source.label}: config "
                         f"{short(cdesc.digest)}", required=False)
    layers = [LayerRef(blob_name(ld.digest), ld.media_type, ld.digest, ld.size,
                       diff_ids[i] if diff_ids else None) for i, ld in enumerate(descs)]
    return ImagePlan(kind=kind, source_digest=d.digest,
                     accepted={d.digest, cdesc.digest, *cand.via},
                     config=_image_config(config_doc, f"{source.label}: config"),
                     layers=layers, ref_name=cand.ref_name)


def manifest_parts(manifest: object, what: str,
                   limits: ImportLimits) -> tuple[Descriptor, list[Descriptor]]:
    """An image manifest's config and layer descriptors, checked (schema version, sizes,
    digests, the number of layers, layer media types) before any blob it names is read."""
    if not isinstance(manifest, dict):
        raise ImageRefused(f"{what}: not a JSON object")
    if manifest.get("schemaVersion") != 2:
        raise ImageRefused(f"{what}: field 'schemaVersion' is {manifest.get('schemaVersion')!r}"
                           ", not 2")
    cdesc = _descriptor(manifest.get("config"), f"{what}: config", limits)
    raw_layers = manifest.get("layers")
    if not isinstance(raw_layers, list):
        raise ImageRefused(f"{what}: field 'layers' missing or not a list")
    if len(raw_layers) > limits.layers:
        raise ImageRefused(f"{what}: {len(raw_layers)} layers, more than the limit of "
                           f"{limits.layers}")
    descs = [_descriptor(x, f"{what}: layers[{i}]", limits) for i, x in enumerate(raw_layers)]
    for i, ld in enumerate(descs):
        if not ld.media_type.startswith(LAYER_TYPE_PREFIXES):
            raise ImageRefused(f"{what}: layers[{i}]: media type {ld.media_type!r} is not an "
                               "image layer assay can unpack")
    return cdesc, descs


def config_checked(config_doc: object, plain: list[str], what: str) -> ImageConfig:
    """What a pull that unpacked its layers first (:mod:`.pull_stream`) checks of the config
    once it has arrived: this machine's platform, and each layer's uncompressed digest
    (``plain``, in order) against the diff ids. Refused with the reason otherwise."""
    if not _for_this_machine(config_doc):
        raise ImageRefused(f"{what}: the image is for {_config_platform(config_doc)}, not "
                           f"{machine_platform()} (this machine's platform)")
    diff_ids = _diff_ids(config_doc, len(plain), what, required=False)
    for i, (got, want) in enumerate(zip(plain, diff_ids or [], strict=False)):
        if got != want:
            raise ImageRefused(f"{what}: layer {i + 1}'s uncompressed content has digest {got}, "
                               f"not the diff id {want} the config gives (a damaged or altered "
                               "layer)")
    return _image_config(config_doc, what)


def _docker_plan(source: BlobSource, limits: ImportLimits, expected: str | None) -> ImagePlan:
    """An old ``docker save`` archive: ``manifest.json`` names a config file (its name is its
    digest, the image id) and uncompressed layer tars, which the config's diff ids pin."""
    label = source.label
    doc = read_json(source, "manifest.json", limits)
    if not isinstance(doc, list) or not doc:
        raise ImageRefused(f"{label}: manifest.json: not a non-empty JSON list of images")
    entries = []
    for i, entry in enumerate(doc):
        what = f"{label}: manifest.json: [{i}]"
        if not isinstance(entry, dict):
            raise ImageRefused(f"{what}: not a JSON object")
        config_name, layer_names = entry.get("Config"), entry.get("Layers")
        if not isinstance(config_name, str):
            raise ImageRefused(f"{what}: field 'Config' missing or not a string")
        if not isinstance(layer_names, list) or not all(isinstance(n, str)
                                                        for n in layer_names):
            raise ImageRefused(f"{what}: field 'Layers' missing or not a list of names")
        m = re.search(r"(?:^|/)([0-9a-f]{64})(?:\.json)?$", config_name)
        if m is None:
            raise ImageRefused(f"{what}: field 'Config' {config_name!r} does not name its "
                               "digest (a docker save archive names it <sha256 hex>.json)")
        tags = entry.get("RepoTags")
        ref = ", ".join(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else ""
        entries.append((f"sha256:{m.group(1)}", config_name, layer_names, ref, what))
    if len(entries) > 1:
        chosen = [e for e in entries if e[0] == expected]
        if not chosen:
            names = "; ".join(f"{e[0]} {e[3]}".strip() for e in entries)
            raise ImageRefused(f"{label}: {len(entries)} images in it ({names}): pass the "
                               "image id of the one to import")
        entries = chosen
    image_id, config_name, layer_names, ref, what = entries[0]
    if len(layer_names) > limits.layers:
        raise ImageRefused(f"{what}: {len(layer_names)} layers, more than the limit of "
                           f"{limits.layers}")
    config_doc = read_json(source, config_name, limits, digest=image_id,
                           what=f"{label}: {config_name}")
    if not _for_this_machine(config_doc):
        raise ImageRefused(f"{label}: the image is for {_config_platform(config_doc)}, not "
                           f"{machine_platform()} (this machine's platform)")
    diff_ids = _diff_ids(config_doc, len(layer_names), f"{label}: {config_name}", required=True)
    layers = []
    for i, name in enumerate(layer_names):
        if not source.has(name):
            raise ImageRefused(f"{what}: Layers[{i}] {name!r} is not in the archive")
        m = re.fullmatch(r"blobs/sha256/([0-9a-f]{64})", name)
        layers.append(LayerRef(name, "application/vnd.docker.image.rootfs.diff.tar",
                               f"sha256:{m.group(1)}" if m else None, source.size(name),
                               diff_ids[i] if diff_ids else None))
    return ImagePlan(kind="docker-archive", source_digest=image_id, accepted={image_id},
                     config=_image_config(config_doc, f"{label}: {config_name}"),
                     layers=layers, ref_name=ref)


def _config_platform(doc: object) -> str:
    if not isinstance(doc, dict):
        return "?/?"
    return f"{doc.get('os', '?')}/{doc.get('architecture', '?')}"


def _for_this_machine(doc: object) -> bool:
    """A config that names no platform is taken as this machine's (some tools leave it out)."""
    if not isinstance(doc, dict) or ("os" not in doc and "architecture" not in doc):
        return True
    return _config_platform(doc) == machine_platform()


def _diff_ids(doc: object, n: int, what: str, *, required: bool) -> list[str] | None:
    rootfs = doc.get("rootfs") if isinstance(doc, dict) else None
    ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if ids is None and not required:
        return None
    if not isinstance(ids, list) or not all(isinstance(x, str) and DIGEST_RE.match(x)
                                            for x in ids):
        raise ImageRefused(f"{what}: field 'rootfs.diff_ids' missing or not a list of sha256 "
                           "digests")
    if len(ids) != n:
        raise ImageRefused(f"{what}: field 'rootfs.diff_ids' has {len(ids)} entries for {n} "
                           "layers")
    return list(ids)


def _image_config(doc: object, what: str) -> ImageConfig:
    """``config.Env``, ``WorkingDir``, ``User``, ``Entrypoint``, ``Cmd`` of an image config."""
    cfg = doc.get("config") if isinstance(doc, dict) else None
    if cfg is None:
        return ImageConfig()
    if not isinstance(cfg, dict):
        raise ImageRefused(f"{what}: field 'config' is not a JSON object")

    def strings(key: str) -> list[str]:
        value = cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ImageRefused(f"{what}: field 'config.{key}' is not a list of strings")
        return list(value)

    def text(key: str) -> str:
        value = cfg.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ImageRefused(f"{what}: field 'config.{key}' is not a string")
        return value

    env: dict[str, str] = {}
    for item in strings("Env"):
        key, sep, value = item.partition("=")
        if sep and key:
            env[key] = value
    workdir = text("WorkingDir") or "/"
    if not workdir.startswith("/"):
        workdir = "/" + workdir
    return ImageConfig(env=env, workdir=workdir, user=text("User") or "root",
                       entrypoint=strings("Entrypoint"), cmd=strings("Cmd"))


# -- unpacking one layer -------------------------------------------------------------------


def _no_zstd(what: str, media_type: str) -> ImageRefused:
    return ImageRefused(f"{what}: media type {media_type} is zstd-compressed, and reading zstd "
                        "needs the Python package 'zstandard', which is not installed; save the "
                        "image with gzip layers (docker's default) or install zstandard")


def _zstd_reader(raw: Any, what: str, media_type: str) -> Any:
    try:
        import zstandard
    except ImportError:
        raise _no_zstd(what, media_type) from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


def _decode_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [gzip.BadGzipFile, *INFLATE_ERRORS]
    try:
        import zstandard
        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


def unpack_layer(source: BlobSource, layer: LayerRef, which: str, unpacker: Unpacker,
                 limits: ImportLimits, say: Callable[[str], None]) -> str:
    """Unpack one layer (its blob's digest and size checked as it is read, its uncompressed
    content against the diff id when known); returns that content's digest."""
    what = f"{source.label}: {which} ({short(layer.digest) if layer.digest else layer.name})"
    if layer.media_type.endswith("+zstd") and not _has_zstd():
        raise _no_zstd(what, layer.media_type)  # refused before a byte of it is read
    counts = unpacker.counts
    before = counts.stream_bytes
    with source.open(layer.name) as raw:
        verifier = VerifiedReader(raw, what=what, digest=layer.digest, size=layer.size)
        buffered = io.BufferedReader(verifier, _CHUNK)
        head = buffered.peek(4)[:4]
        if head.startswith(_GZIP):
            # zlib-ng: gzip's format and checks (CRC, length), inflated in half zlib's time
            decoded: Any = gzip_ng.GzipFile(fileobj=buffered, mode="rb")
        elif head.startswith(_ZSTD):
            decoded = _zstd_reader(buffered, what, layer.media_type)
        else:
            decoded = buffered
        # An uncompressed layer's bytes are its blob's: the blob's digest is its diff id, and
        # hashing the same bytes twice would cost a sixth of the unpack
        diff = hashlib.sha256() if decoded is not buffered else None
        ticker = Ticker(f"unpacking {which}", layer.size, say)

        def progress(_data: bytes) -> None:
            ticker.tick(verifier.count)  # compressed bytes read, of the layer's size
        try:
            # read, checked, inflated and hashed on a thread of its own while this one writes;
            # the thread has stopped when the checks below read the blob's counts
            with ReadAhead(decoded, on_chunk=None if diff is None else diff.update) as ahead:
                unpacker.apply(CountingReader(ahead, counts, limits, what, progress), what)
        except _decode_errors() as exc:
            verifier.finish()  # a damaged blob is named by its digest first
            raise ImageRefused(f"{what}: the compressed stream is damaged ({exc})") from None
        blob = verifier.finish()
    plain = blob if diff is None else "sha256:" + diff.hexdigest()
    if layer.diff_id is not None and plain != layer.diff_id:
        raise ImageRefused(f"{what}: its uncompressed content has digest "
                           f"{plain}, not the diff id {layer.diff_id} the "
                           "config gives (a damaged or altered layer)")
    say(f"{which} {short(layer.digest) if layer.digest else layer.name}: "
        f"{describe_bytes(verifier.count)} read, "
        f"{describe_bytes(counts.stream_bytes - before)} unpacked")
    return plain


def _has_zstd() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True
