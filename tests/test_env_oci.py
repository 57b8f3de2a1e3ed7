"""OCI image layouts and ``docker save`` archives imported into the image store (issue 23).

Every archive here is made by the test with tarfile, json and hashlib, the way Docker, BuildKit
or skopeo lay them out: an OCI layout folder, the same as a tar, a ``docker save`` archive in the
old layout (``manifest.json`` + ``<id>/layer.tar``) and in the newer one that embeds an OCI
layout, gzip'd as ``docker save | gzip`` makes it. The attacks are what a hostile image would
carry: ``..`` paths, a link then a write through it, a hard link through a link to a host file,
a decompression bomb, a blob that does not match its digest.

The last test packs a real Debian root filesystem with python3 as a layer of an OCI layout,
imports it (about 30 s), and runs python3 from the imported root under bubblewrap. The root is
the tests' shared bookworm image (``tests/support/images.py``, built once per session and used
by other files too), written out as a root filesystem tar carries it: with the set-id bits and
device nodes Debian installs, which the store stripped when it built the image. The full form
(``ASSAY_ENV_BUILD_FULL=1``, which ``make test-full`` sets) makes that tar with ``mmdebstrap``
itself instead: about 60 s more alone, up to 3 minutes on this shared 2-core machine. Run it
with ``ASSAY_ENV_BUILD_FULL=1 .venv/bin/python -m pytest -q tests/test_env_oci.py``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from assay.environments import limits as L
from assay.environments.limits import ImportLimits
from assay.environments.oci import import_image, machine_platform
from assay.environments.store import ImageStore, tree_digest
from assay.errors import ImageRefused, InputError
from assay.sandbox import bwrap_available

ARCH = machine_platform().split("/")[1]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


# -- making layers -------------------------------------------------------------------------


@dataclass
class E:
    """One tar entry of a layer."""

    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    mode: int = 0o644
    link: str = ""


def f(name: str, data: bytes | str = b"", mode: int = 0o644) -> E:
    return E(name, tarfile.REGTYPE, data.encode() if isinstance(data, str) else data, mode)


def d(name: str, mode: int = 0o755) -> E:
    return E(name, tarfile.DIRTYPE, mode=mode)


def sym(name: str, target: str) -> E:
    return E(name, tarfile.SYMTYPE, mode=0o777, link=target)


def hard(name: str, target: str) -> E:
    return E(name, tarfile.LNKTYPE, link=target)


def layer_tar(entries: list[E]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = e.kind
            info.mode = e.mode
            info.mtime = 1_700_000_000
            if e.kind == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                info.linkname = e.link
                if e.kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                    info.devmajor, info.devminor = 1, 3
                tar.addfile(info)
    return buf.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- making OCI layouts and docker save archives ----------------------------------------------


@dataclass
class Built:
    """What the test made: where, and the digests a user would know."""

    path: Path
    manifest: str
    config: str
    index: str | None = None
    layers: list[str] = field(default_factory=list)


def config_doc(diff_ids: list[str], *, arch: str = ARCH, **cfg: Any) -> dict[str, Any]:
    return {"architecture": arch, "os": "linux",
            "config": cfg or {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids}}


class Layout:
    """An OCI image layout folder being written."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')

    def blob(self, data: bytes) -> dict[str, Any]:
        digest = sha(data)
        (self.root / "blobs" / "sha256" / digest[7:]).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    def path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / digest[7:]

    def image(self, layers: list[list[E]], *, compress: str = "gzip", arch: str = ARCH,
              **cfg: Any) -> tuple[dict[str, Any], str]:
        """Blobs of one image; returns its manifest descriptor and config digest."""
        descs, diff_ids = [], []
        for entries in layers:
            raw = layer_tar(entries)
            diff_ids.append(sha(raw))
            if compress == "gzip":
                blob, media = gzip.compress(raw, mtime=0), LAYER_GZIP
            else:
                blob, media = raw, LAYER_TAR
            descs.append({"mediaType": media, **self.blob(blob)})
        config = self.blob(json.dumps(config_doc(diff_ids, arch=arch, **cfg)).encode())
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": OCI_CONFIG, **config}, "layers": descs}
        mdesc = {"mediaType": OCI_MANIFEST, **self.blob(json.dumps(manifest).encode())}
        return mdesc, config["digest"]

    def index(self, manifests: list[dict[str, Any]]) -> None:
        (self.root / "index.json").write_text(json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}))


def make_oci(root: Path, layers: list[list[E]], *, compress: str = "gzip", **cfg: Any) -> Built:
    lay = Layout(root)
    mdesc, config = lay.image(layers, compress=compress, **cfg)
    lay.index([{**mdesc, "annotations": {"org.opencontainers.image.ref.name": "test:1"}}])
    manifest = json.loads(lay.path(mdesc["digest"]).read_text())
    return Built(root, mdesc["digest"], config, layers=[x["digest"] for x in manifest["layers"]])


def tar_folder(folder: Path, out: Path, *, top: str | None = None) -> Path:
    with tarfile.open(out, "w") as tar:
        for p in sorted(folder.rglob("*")):
            tar.add(p, arcname=(f"{top}/" if top else "") + str(p.relative_to(folder)),
                    recursive=False)
    return out


def make_docker_legacy(out: Path, layers: list[list[E]], *, duplicate_last: bool = False,
                       **cfg: Any) -> Built:
    """``docker save`` before Docker 25: ``manifest.json``, ``<image id>.json``,
    ``<layer id>/layer.tar`` (uncompressed); an identical layer is a link to the first copy."""
    raws = [layer_tar(x) for x in layers]
    diff_ids = [sha(r) for r in raws]
    if duplicate_last:
        diff_ids.append(diff_ids[-1])
    config = json.dumps(config_doc(diff_ids, **cfg)).encode()
    image_id = sha(config)
    names = []
    with tarfile.open(out, "w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for i, raw in enumerate(raws):
            lid = hashlib.sha256(f"layer{i}".encode()).hexdigest()
            add(f"{lid}/layer.tar", raw)
            add(f"{lid}/VERSION", b"1.0")
            names.append(f"{lid}/layer.tar")
        if duplicate_last:
            info = tarfile.TarInfo("dup0000/layer.tar")
            info.type = tarfile.SYMTYPE
            info.linkname = "../" + names[-1]
            tar.addfile(info)
            names.append("dup0000/layer.tar")
        add(f"{image_id[7:]}.json", config)
        add("manifest.json", json.dumps([{"Config": f"{image_id[7:]}.json",
                                          "RepoTags": ["team/app:ci"],
                                          "Layers": names}]).encode())
    return Built(out, image_id, image_id)


def make_docker_oci(folder: Path, out: Path, layers: list[list[E]], **cfg: Any) -> Built:
    """``docker save`` of Docker 25 and later: an OCI layout plus ``manifest.json``."""
    built = make_oci(folder, layers, compress="tar", **cfg)
    (folder / "manifest.json").write_text(json.dumps([{
        "Config": f"blobs/sha256/{built.config[7:]}", "RepoTags": ["team/app:ci"],
        "Layers": [f"blobs/sha256/{x[7:]}" for x in built.layers]}]))
    tar_folder(folder, out)
    return Built(out, built.manifest, built.config, layers=built.layers)


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "store")


def lines() -> tuple[list[str], Callable[[str], None]]:
    got: list[str] = []
    return got, got.append


def leftovers(store: ImageStore) -> list[str]:
    """Anything under a final name, or left in staging, after a refused import."""
    out = []
    for d_ in (store.images_dir, store.staging_dir, store.sources_dir):
        if d_.is_dir():
            out += [str(p) for p in d_.iterdir()]
    return out


BASE = [d("etc"), f("etc/os-release", "ID=test\n"), d("tmp", 0o1777),
        f("usr/bin/tool", b"\x7fELF tool", 0o4755), f("usr/bin/group-tool", "x", 0o2711),
        d("opt/old"), f("opt/old/a", "lower a"), d("opt/old/b"), f("opt/old/b/c", "lower c"),
        d("var"), f("var/keep", "keep"), f("var/gone", "gone"), d("var/gone-dir"),
        f("var/gone-dir/x", "x"), f("data/hello", "hello\n", 0o640),
        E("dev/null", tarfile.CHRTYPE, mode=0o666), E("run/fifo", tarfile.FIFOTYPE)]
TOP = [f("opt/old/new", "upper new"), f("opt/old/.wh..wh..opq"),
       f("opt/other/.wh..wh..opq"), f("opt/other/kept", "same layer, after the marker"),
       f("var/.wh.gone"), f("var/.wh.gone-dir"), f("var/.wh.never-there"),
       hard("data/hello2", "data/hello"), sym("bin", "usr/bin"),
       sym("etc/abs", "/etc/os-release"), f("/srv/abs-path", "absolute name, image root"),
       f("./etc/motd", "dot-slash name")]


# -- what an image becomes -----------------------------------------------------------------


def test_layers_unpack_with_whiteouts_links_and_stripped_bits(tmp_path: Path,
                                                              store: ImageStore) -> None:
    built = make_oci(tmp_path / "layout", [BASE, TOP])
    got, say = lines()
    image = import_image(built.path, store, progress=say)
    root = store.rootfs(image.digest)
    assert image.source_kind == "oci-layout" and image.source_digest == built.manifest
    # file and folder whiteouts: only the named lower entries go
    assert (root / "var/keep").read_text() == "keep"
    assert not (root / "var/gone").exists() and not (root / "var/gone-dir").exists()
    # an opaque folder: lower contents gone, this layer's kept (before and after the marker)
    assert sorted(os.listdir(root / "opt/old")) == ["new"]
    assert sorted(os.listdir(root / "opt/other")) == ["kept"]
    assert not list(root.rglob(".wh.*"))
    # links: a hard link shares the inode, symlinks keep their targets verbatim
    assert os.stat(root / "data/hello").st_ino == os.stat(root / "data/hello2").st_ino
    assert os.readlink(root / "bin") == "usr/bin"
    assert os.readlink(root / "etc/abs") == "/etc/os-release"
    assert (root / "srv/abs-path").read_text().startswith("absolute")
    assert (root / "etc/motd").is_file()
    # setuid, setgid and sticky stripped and counted; device nodes and fifos skipped
    assert stat.S_IMODE(os.stat(root / "usr/bin/tool").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "usr/bin/group-tool").st_mode) == 0o711
    assert stat.S_IMODE(os.stat(root / "tmp").st_mode) == 0o777
    assert stat.S_IMODE(os.stat(root / "data/hello").st_mode) == 0o640
    assert not (root / "dev/null").exists() and not (root / "run/fifo").exists()
    assert image.adjustments == {"mode_bits_stripped": 3, "special_files_skipped": 2}
    assert store.get(image.digest) == image  # the record on disk says the same
    # one progress line per layer, with bytes
    layer_lines = [x for x in got if x.startswith("layer ")]
    assert len(layer_lines) == 2 and all("read" in x and "unpacked" in x for x in layer_lines)
    assert "3 setuid/setgid/sticky bits stripped" in got[-1]


def test_a_later_layer_replaces_what_a_lower_one_made(tmp_path: Path,
                                                       store: ImageStore) -> None:
    lower = [d("bin"), f("bin/sh", "lower sh"), sym("lib", "usr/lib"), f("conf", "file"),
             f("usr/lib/libc.so", "libc", 0o755), d("keep"), f("keep/lower", "lower"),
             sym("redirect", "usr/lib/libc.so"), f("same", "lower"), d("wasdir"),
             f("wasdir/x", "x")]
    upper = [sym("bin", "usr/bin"), d("lib"), f("lib/new", "in a real folder now"),
             d("conf"), f("conf/inner", "a folder now"), hard("libc-link", "usr/lib/libc.so"),
             f("keep/upper", "upper"), f("keep/.wh..wh..opq"), sym("keep/upper", "lower"),
             f("redirect", "a file now"), f("same", "upper"), f("wasdir", "a file now"),
             f("twice", "first"), f("twice", "second")]
    image = import_image(make_oci(tmp_path / "layout", [lower, upper]).path, store)
    root = store.rootfs(image.digest)
    # a file over a link replaces the link, never writes through it
    assert not (root / "redirect").is_symlink()
    assert (root / "redirect").read_text() == "a file now"
    assert (root / "usr/lib/libc.so").read_text() == "libc"
    assert (root / "same").read_text() == "upper" and (root / "wasdir").is_file()
    assert (root / "twice").read_text() == "second"  # the later member of one layer wins
    assert os.readlink(root / "bin") == "usr/bin"
    assert not (root / "lib").is_symlink() and (root / "lib/new").is_file()
    assert (root / "conf/inner").is_file()
    assert os.stat(root / "libc-link").st_ino == os.stat(root / "usr/lib/libc.so").st_ino
    # an opaque folder keeps this layer's entry even when it is a link now
    assert os.listdir(root / "keep") == ["upper"] and os.readlink(root / "keep/upper") == "lower"
    # the digest, made from the content digests the unpack noted (nothing read back), is the
    # one a plain walk of the finished tree gives: replaced files, links, whiteouts and all
    assert image.digest == tree_digest(root)[0]
    # a noted content digest is taken only while the file has the size and mtime noted
    st = os.stat(root / "conf/inner")
    wrong = {(st.st_dev, st.st_ino): (st.st_size, st.st_mtime_ns, "0" * 64)}
    assert tree_digest(root, wrong)[0] != image.digest  # taken as noted
    os.utime(root / "conf/inner", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert tree_digest(root, wrong)[0] == image.digest  # changed since: read again


def test_several_images_in_one_layout_need_a_digest(tmp_path: Path, store: ImageStore) -> None:
    lay = Layout(tmp_path / "layout")
    one, _ = lay.image([[f("which", "one")]])
    two, two_config = lay.image([[f("which", "two")]])
    lay.index([one, two])
    with pytest.raises(ImageRefused, match="2 linux/.* images in it .*pass the digest"):
        import_image(lay.root, store)
    with pytest.raises(ImageRefused, match="none has the expected digest"):
        import_image(lay.root, store, expected_digest=sha(b"neither"))
    image = import_image(lay.root, store, expected_digest=two_config)
    assert (store.rootfs(image.digest) / "which").read_text() == "two"
    assert image.source_digest == two["digest"]


def test_the_config_is_honoured_and_the_workdir_made(tmp_path: Path, store: ImageStore) -> None:
    built = make_oci(tmp_path / "layout", [[f("usr/bin/app", "x", 0o755)]],
                     Env=["PATH=/opt/venv/bin:/usr/bin", "LANG=C.UTF-8", "EMPTY=", "NOEQUALS"],
                     WorkingDir="/srv/app", User="1000:1000",
                     Entrypoint=["/usr/bin/tini", "--"], Cmd=["python", "-m", "app"])
    image = import_image(built.path, store)
    assert image.config.env == {"PATH": "/opt/venv/bin:/usr/bin", "LANG": "C.UTF-8", "EMPTY": ""}
    assert image.config.workdir == "/srv/app"
    assert image.config.user == "1000:1000"
    assert image.config.entrypoint == ["/usr/bin/tini", "--"]
    assert image.config.cmd == ["python", "-m", "app"]
    assert (store.rootfs(image.digest) / "srv/app").is_dir()


def test_second_import_is_a_store_hit(tmp_path: Path, store: ImageStore) -> None:
    built = make_oci(tmp_path / "layout", [BASE, TOP])
    first = import_image(built.path, store)
    got, say = lines()
    second = import_image(built.path, store, progress=say)
    assert second == first
    assert got[0].startswith("cached:") and not any(x.startswith("layer ") for x in got)
    assert len(store.ls()) == 1 and not list(store.staging_dir.iterdir())
    # the same image given as a tar of the layout (with a top folder) is the same tree
    other = ImageStore(tmp_path / "other")
    as_tar = import_image(tar_folder(built.path, tmp_path / "img.tar", top="img"), other)
    assert as_tar.digest == first.digest and as_tar.source_digest == built.manifest


def test_an_import_another_process_holds_is_waited_for_not_repeated(
        tmp_path: Path, store: ImageStore) -> None:
    """Two imports of one archive into one store unpack it once: the test holds the source's
    lock as a first importer would, a real second process says it waits, and after the test
    has published the image it takes that one without unpacking a layer."""
    built = make_oci(tmp_path / "layout", [BASE, TOP])
    script = ("from pathlib import Path\n"
              "from assay.environments.oci import import_image\n"
              "from assay.environments.store import ImageStore\n"
              f"i = import_image(Path({str(built.path)!r}), ImageStore(Path({str(store.root)!r})),"
              " progress=lambda s: print(s, flush=True))\n"
              "print('result', i.digest, flush=True)\n")
    with store.source_lock("oci-layout", built.manifest):
        proc = subprocess.Popen([sys.executable, "-c", script], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        before = [proc.stdout.readline() for _ in range(2)]
        assert before[1].startswith("waiting: another process is building this source"), (
            "".join(before) + proc.stderr.read())
        with store.staging() as rootfs:
            (rootfs / "etc").mkdir()
            mine = store.publish(rootfs, source_kind="oci-layout", source_digest=built.manifest)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == f"result {mine.digest}"
    assert out.splitlines()[0].startswith("cached:")
    assert not any(x.startswith("layer ") for x in out.splitlines())
    assert [i.digest for i in store.ls()] == [mine.digest]


# -- docker save archives ------------------------------------------------------------------


def test_docker_save_old_layout_with_a_linked_duplicate_layer(tmp_path: Path,
                                                               store: ImageStore) -> None:
    built = make_docker_legacy(tmp_path / "app.tar", [BASE, TOP, [f("extra", "e")]],
                               duplicate_last=True, WorkingDir="/work")
    image = import_image(built.path, store, expected_digest=built.config)
    assert image.source_kind == "docker-archive" and image.source_digest == built.config
    assert image.source_label == "app.tar (team/app:ci)"
    root = store.rootfs(image.digest)
    assert (root / "extra").read_text() == "e" and not (root / "var/gone").exists()
    assert image.config.workdir == "/work" and (root / "work").is_dir()
    # the same layers as an OCI layout make the same tree
    oci = import_image(make_oci(tmp_path / "layout", [BASE, TOP, [f("extra", "e")]],
                                WorkingDir="/work").path, store)
    assert oci.digest == image.digest


def test_docker_save_with_an_embedded_oci_layout_gzipped(tmp_path: Path,
                                                         store: ImageStore) -> None:
    built = make_docker_oci(tmp_path / "saved", tmp_path / "app.tar", [BASE, TOP])
    gz = tmp_path / "app.tar.gz"
    gz.write_bytes(gzip.compress(built.path.read_bytes(), compresslevel=1))
    image = import_image(gz, store, expected_digest=built.manifest)
    assert image.source_kind == "docker-archive" and image.source_digest == built.manifest
    assert (store.rootfs(image.digest) / "opt/old/new").is_file()
    assert not list(store.staging_dir.iterdir())  # the expanded archive is gone too
    xz = tmp_path / "app.tar.xz"
    xz.write_bytes(lzma.compress(built.path.read_bytes(), preset=0))
    assert import_image(xz, ImageStore(tmp_path / "xz-store")).digest == image.digest
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(gz.read_bytes()[:-100])
    with pytest.raises(ImageRefused, match="damaged compressed archive"):
        import_image(cut, ImageStore(tmp_path / "cut-store"))
    # a gzip header, then a deflate block of the reserved type: data inflate cannot decode,
    # not a short read (zlib's error is no OSError; it escaped as a traceback once)
    mangled = tmp_path / "mangled.tar.gz"
    mangled.write_bytes(b"\x1f\x8b\x08\x00" + bytes(6) + b"\x07" + bytes(64))
    with pytest.raises(ImageRefused, match="damaged compressed archive.*invalid block type"):
        import_image(mangled, ImageStore(tmp_path / "mangled-store"))


def test_a_damaged_old_docker_layer_fails_its_diff_id(tmp_path: Path, store: ImageStore) -> None:
    built = make_docker_legacy(tmp_path / "app.tar", [BASE])
    data = bytearray(built.path.read_bytes())
    at = data.index(b"ID=test")
    data[at:at + 7] = b"ID=evil"
    built.path.write_bytes(bytes(data))
    with pytest.raises(ImageRefused, match="not the diff id"):
        import_image(built.path, store)
    assert leftovers(store) == []


# -- platforms and pins --------------------------------------------------------------------


def test_the_manifest_for_this_machine_is_picked_from_nested_indexes(
        tmp_path: Path, store: ImageStore) -> None:
    lay = Layout(tmp_path / "layout")
    other_arch = "arm64" if ARCH != "arm64" else "amd64"
    mine, _ = lay.image([[f("which", "mine")]])
    theirs, _ = lay.image([[f("which", "theirs")]], arch=other_arch)
    inner = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {**theirs, "platform": {"os": "linux", "architecture": other_arch}},
        {**mine, "platform": {"os": "linux", "architecture": ARCH}},
        {"mediaType": OCI_MANIFEST, "digest": sha(b"absent"), "size": 6,
         "platform": {"os": "unknown", "architecture": "unknown"},
         "annotations": {"vnd.docker.reference.type": "attestation-manifest"}}]}
    idesc = {"mediaType": OCI_INDEX, **lay.blob(json.dumps(inner).encode())}
    lay.index([idesc])
    image = import_image(lay.root, store, expected_digest=idesc["digest"])
    assert (store.rootfs(image.digest) / "which").read_text() == "mine"
    assert image.source_digest == mine["digest"]

    only_other = Layout(tmp_path / "arm")
    theirs, _ = only_other.image([[f("which", "theirs")]], arch=other_arch)
    only_other.index([{**theirs, "platform": {"os": "linux", "architecture": other_arch}}])
    with pytest.raises(ImageRefused, match=f"no {machine_platform()} image .*linux/{other_arch}"):
        import_image(only_other.root, store)
    # a manifest with no platform in the index is judged by its config
    unlabelled = Layout(tmp_path / "unlabelled")
    theirs, _ = unlabelled.image([[f("which", "theirs")]], arch=other_arch)
    unlabelled.index([theirs])
    held = f"no {machine_platform()} image .*: linux/{other_arch}$"
    with pytest.raises(ImageRefused, match=held):
        import_image(unlabelled.root, store)


def test_expected_digest_must_match(tmp_path: Path, store: ImageStore) -> None:
    built = make_oci(tmp_path / "layout", [BASE])
    wrong = sha(b"some other image")
    with pytest.raises(ImageRefused, match=f"not the expected {wrong}"):
        import_image(built.path, store, expected_digest=wrong)
    with pytest.raises(InputError, match="not 'sha256:' and 64"):
        import_image(built.path, store, expected_digest="latest")
    assert leftovers(store) == []
    # the manifest digest and the config digest (docker's image id) both pin it
    assert import_image(built.path, store, expected_digest=built.manifest).source_digest == \
        built.manifest
    assert import_image(built.path, store, expected_digest=built.config).source_digest == \
        built.manifest


@pytest.mark.parametrize("what", ["layer", "layer-longer", "layer-shorter", "manifest",
                                  "config"])
def test_a_blob_that_does_not_match_its_digest_is_refused(tmp_path: Path, store: ImageStore,
                                                          what: str) -> None:
    built = make_oci(tmp_path / "layout", [BASE, TOP])
    lay = Layout(built.path)
    target = {"manifest": built.manifest, "config": built.config}.get(what, built.layers[1])
    blob = lay.path(target)
    data = bytearray(blob.read_bytes())
    if what == "layer-longer":
        data += b"\0" * 1024
    elif what == "layer-shorter":
        data = data[:-4]
    else:
        data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    with pytest.raises(ImageRefused, match="digest|descriptor gives") as err:
        import_image(built.path, store)
    assert target[:19] in str(err.value) or target in str(err.value)
    assert leftovers(store) == []


@pytest.mark.parametrize("damage", ["reserved-block", "crc", "cut"])
def test_a_layer_whose_gzip_is_damaged_under_a_matching_digest_is_refused(
        tmp_path: Path, store: ImageStore, damage: str) -> None:
    """A builder or registry that wrote a broken layer and pinned it: the digests match, the
    stream does not inflate. Each inflate failure is one message naming the layer, never a
    traceback, and nothing is left in the store."""
    raw = layer_tar(BASE)
    good = gzip.compress(raw, mtime=0)
    blob = {"reserved-block": b"\x1f\x8b\x08\x00" + bytes(6) + b"\x07" + bytes(64),
            "crc": good[:-8] + bytes(4) + good[-4:],
            "cut": good[:len(good) // 2]}[damage]
    lay = Layout(tmp_path / "layout")
    layer = {"mediaType": LAYER_GZIP, **lay.blob(blob)}
    config = lay.blob(json.dumps(config_doc([sha(raw)])).encode())
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, **config}, "layers": [layer]}
    lay.index([{"mediaType": OCI_MANIFEST, **lay.blob(json.dumps(manifest).encode())}])
    with pytest.raises(ImageRefused, match="compressed stream is damaged") as err:
        import_image(lay.root, store)
    assert layer["digest"][:19] in str(err.value)
    assert leftovers(store) == []


# -- attacks -------------------------------------------------------------------------------


def test_a_path_that_climbs_out_is_refused(tmp_path: Path, store: ImageStore) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i, name in enumerate(["../outside/pwned", "a/../../outside/pwned",
                              "/../outside/pwned"]):
        built = make_oci(tmp_path / f"layout{i}", [[f("ok", "1"), f(name, "pwned")]])
        with pytest.raises(ImageRefused, match=r"'\.\.'"):
            import_image(built.path, store)
    hard_out = make_oci(tmp_path / "hl", [[hard("stolen", "../../../etc/hostname")]])
    with pytest.raises(ImageRefused, match=r"'\.\.'"):
        import_image(hard_out.path, store)
    for i, name in enumerate([".wh...", "etc/.wh...", "etc/.wh..", "etc/.wh."]):
        built = make_oci(tmp_path / f"wh{i}", [[f("etc/keep", "k")], [f(name)]])
        with pytest.raises(ImageRefused, match="a whiteout of"):
            import_image(built.path, store)
    assert list(outside.iterdir()) == [] and leftovers(store) == []


def test_nothing_is_ever_written_through_an_unpacked_symlink(tmp_path: Path,
                                                             store: ImageStore) -> None:
    """``etc -> /`` (or a host folder) from one layer, then ``etc/passwd`` from the next: the
    entry is refused, the host untouched. A hard link through such a link would hand the image
    a host file; also refused. A link at an entry's own name is replaced, not written through."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "passwd").write_text("root:x:0:0\n")
    (host / "secret").write_text("host secret\n")
    attacks = {
        "two layers": [[sym("etc", str(host))], [f("etc/passwd", "pwned\n")]],
        "to slash": [[sym("etc", "/")], [f("etc/" + str(host / "passwd").lstrip("/"), "x")]],
        "one layer": [[sym("etc", str(host)), f("etc/passwd", "pwned\n")]],
        "relative": [[d("a"), sym("a/up", "../../../../../../../.." + str(host))],
                     [f("a/up/passwd", "pwned")]],
        "folder": [[sym("etc", str(host))], [d("etc/newdir")]],
        "hard link": [[sym("lnk", str(host))], [hard("stolen", "lnk/secret")]],
        "whiteout": [[sym("etc", str(host))], [f("etc/.wh.passwd")]],
        "opaque": [[sym("etc", str(host))], [f("etc/.wh..wh..opq")]],
        # a folder the unpacker has already reached (its fd kept for the next entries)
        # replaced by a link in the same layer: the next entry walks again, and is refused
        "reached folder": [[d("etc"), f("etc/a"), sym("etc", str(host)),
                            f("etc/passwd", "pwned\n")]],
        "reached deeper": [[d("x"), d("x/y"), f("x/y/a"), sym("x", str(host)),
                            f("x/y/passwd", "pwned\n")]],
    }
    for label, layers in attacks.items():
        built = make_oci(tmp_path / label.replace(" ", "-"), layers)
        with pytest.raises(ImageRefused, match="symbolic link") as err:
            import_image(built.path, store)
        assert "never written through a link" in str(err.value), label
        assert (host / "passwd").read_text() == "root:x:0:0\n", label
        assert sorted(os.listdir(host)) == ["passwd", "secret"], label
        assert os.stat(host / "secret").st_nlink == 1, label
    assert leftovers(store) == []

    target = host / "target.txt"
    target.write_text("host file\n")
    replaced = make_oci(tmp_path / "replace", [[sym("conf", str(target))],
                                               [f("conf", "image file\n")]])
    image = import_image(replaced.path, store)
    conf = store.rootfs(image.digest) / "conf"
    assert not conf.is_symlink() and conf.read_text() == "image file\n"
    assert target.read_text() == "host file\n"


def test_a_decompression_bomb_is_stopped_at_the_bound(tmp_path: Path,
                                                      store: ImageStore) -> None:
    """128 MiB of zeros in about 128 KiB of gzip, against an 8 MiB bound (the default bound is
    32 GiB; a test that inflates that much would take minutes)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 128 * L.MIB
        tar.addfile(info, _Zeros(info.size))
    lay = Layout(tmp_path / "bomb")
    blob = gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)
    assert len(blob) < 1 * L.MIB
    layer = {"mediaType": LAYER_GZIP, **lay.blob(blob)}
    config = lay.blob(json.dumps(config_doc([sha(raw.getvalue())])).encode())
    manifest = {"schemaVersion": 2, "config": {"mediaType": OCI_CONFIG, **config},
                "layers": [layer]}
    lay.index([{"mediaType": OCI_MANIFEST, **lay.blob(json.dumps(manifest).encode())}])
    small = ImportLimits(image_bytes=8 * L.MIB)
    with pytest.raises(ImageRefused, match="decompression bomb"):
        import_image(lay.root, store, limits=small)
    with pytest.raises(ImageRefused, match="limit of one file"):
        import_image(lay.root, store, limits=ImportLimits(file_bytes=1 * L.MIB))
    assert leftovers(store) == []


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def test_entries_and_path_lengths_are_bounded(tmp_path: Path, store: ImageStore) -> None:
    many = make_oci(tmp_path / "many", [[f(f"f{i}") for i in range(300)]])
    with pytest.raises(ImageRefused, match="more than 200 entries"):
        import_image(many.path, store, limits=ImportLimits(entries=200))
    deep = make_oci(tmp_path / "deep", [[f("/".join(["d" * 200] * 25))]])
    with pytest.raises(ImageRefused, match="longer than 4096 bytes"):
        import_image(deep.path, store)
    wide = make_oci(tmp_path / "wide", [[f("n" * 300)]])
    with pytest.raises(ImageRefused, match="longer than 255 bytes"):
        import_image(wide.path, store)
    bigjson = Layout(tmp_path / "bigjson")
    (bigjson.root / "index.json").write_text(json.dumps(
        {"manifests": [], "padding": "x" * (L.JSON_MAX_BYTES + 10)}))
    with pytest.raises(ImageRefused, match="limit of an image's JSON file"):
        import_image(bigjson.root, store)
    assert leftovers(store) == []
    assert ImportLimits() == ImportLimits(
        L.ARCHIVE_MAX_BYTES, L.ARCHIVE_MAX_MEMBERS, L.JSON_MAX_BYTES, L.MAX_LAYERS,
        L.IMAGE_MAX_BYTES, L.FILE_MAX_BYTES, L.IMAGE_MAX_ENTRIES, L.PATH_MAX_BYTES,
        L.NAME_MAX_BYTES, L.LINK_TARGET_MAX_BYTES)


def test_careless_inputs_get_one_clear_message(tmp_path: Path, store: ImageStore) -> None:
    with pytest.raises(ImageRefused, match="no such file or folder"):
        import_image(tmp_path / "missing.tar", store)
    (tmp_path / "notes.txt").write_text("not an image\n" * 100)
    with pytest.raises(ImageRefused, match="not an OCI layout folder"):
        import_image(tmp_path / "notes.txt", store)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageRefused, match="no index.json"):
        import_image(tmp_path / "empty", store)
    broken = make_oci(tmp_path / "broken", [BASE])
    (broken.path / "index.json").write_text('{"manifests": [')
    with pytest.raises(ImageRefused, match="index.json: not valid JSON"):
        import_image(broken.path, store)
    sha512 = make_oci(tmp_path / "sha512", [BASE])
    (sha512.path / "index.json").write_text(json.dumps({"manifests": [
        {"mediaType": OCI_MANIFEST, "digest": "sha512:" + "0" * 128, "size": 10}]}))
    with pytest.raises(ImageRefused, match="only sha256 is read, not sha512"):
        import_image(sha512.path, store)
    missing_layer = make_oci(tmp_path / "missing-layer", [BASE])
    Layout(missing_layer.path).path(missing_layer.layers[0]).unlink()
    with pytest.raises(ImageRefused, match="not in the archive"):
        import_image(missing_layer.path, store)


def test_a_zstd_layer_without_zstandard_is_refused_by_its_media_type(
        tmp_path: Path, store: ImageStore) -> None:
    try:
        import zstandard  # type: ignore[import-not-found]  # noqa: F401
        pytest.skip("zstandard is installed here, so zstd layers are read")
    except ImportError:
        pass
    lay = Layout(tmp_path / "zstd")
    raw = layer_tar([f("hello", "zstd")])
    blob = (subprocess.run(["zstd", "-q", "-c"], input=raw, capture_output=True,
                           check=True).stdout if shutil.which("zstd")
            else b"\x28\xb5\x2f\xfd" + raw)
    layer = {"mediaType": LAYER_ZSTD, **lay.blob(blob)}
    config = lay.blob(json.dumps(config_doc([sha(raw)])).encode())
    manifest = {"schemaVersion": 2, "config": {"mediaType": OCI_CONFIG, **config},
                "layers": [layer]}
    lay.index([{"mediaType": OCI_MANIFEST, **lay.blob(json.dumps(manifest).encode())}])
    with pytest.raises(ImageRefused, match=r"media type .*tar\+zstd.*'zstandard'"):
        import_image(lay.root, store)


# -- a real image under bubblewrap ---------------------------------------------------------


#: What Debian bookworm installs set-id, as a root filesystem tar (mmdebstrap's, ``docker
#: export``'s) carries it; the store strips these bits, so the shared image has them plain.
SETID_IN_DEBIAN = {"usr/bin/passwd": 0o4000, "usr/bin/chfn": 0o4000, "usr/bin/chsh": 0o4000,
                   "usr/bin/gpasswd": 0o4000, "usr/bin/newgrp": 0o4000, "usr/bin/su": 0o4000,
                   "usr/bin/mount": 0o4000, "usr/bin/umount": 0o4000, "usr/bin/chage": 0o2000,
                   "usr/bin/expiry": 0o2000, "usr/sbin/unix_chkpwd": 0o2000}
#: The device nodes mmdebstrap writes into the tar (name, major, minor).
DEBIAN_DEVICES = [("dev/null", 1, 3), ("dev/zero", 1, 5), ("dev/full", 1, 7),
                  ("dev/random", 1, 8), ("dev/urandom", 1, 9), ("dev/tty", 5, 0),
                  ("dev/console", 5, 1), ("dev/ptmx", 5, 2)]


@pytest.fixture(scope="session")
def debian_rootfs_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bookworm root filesystem with python3 as a tar (about 250 MB): the shared test image's
    root with Debian's set-id bits and device nodes put back, or, in the full form, the tar
    mmdebstrap writes."""
    if os.environ.get("ASSAY_ENV_BUILD_FULL") == "1":
        return _mmdebstrap_tar(tmp_path_factory)
    from support.images import base_image, require_mmdebstrap

    require_mmdebstrap()
    store, image = base_image()
    root = store.rootfs(image.digest)
    restored: list[str] = []

    def as_debian_ships_it(info: tarfile.TarInfo) -> tarfile.TarInfo:
        bits = SETID_IN_DEBIAN.get(info.name.removeprefix("./"))
        if bits and info.isfile():
            info.mode |= bits
            restored.append(info.name)
        return info

    out = tmp_path_factory.mktemp("debian") / "rootfs.tar"
    with tarfile.open(out, "w") as tar:
        tar.add(root, arcname=".", filter=as_debian_ships_it)
        for name, major, minor in DEBIAN_DEVICES:
            node = tarfile.TarInfo(name)
            node.type, node.mode = tarfile.CHRTYPE, 0o666
            node.devmajor, node.devminor = major, minor
            tar.addfile(node)
    assert len(restored) >= 5, restored  # the image still has Debian's set-id programs
    return out


def _mmdebstrap_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full form's tar, from mmdebstrap itself (about 60 s). Skips when mmdebstrap is
    missing and cannot be installed, or Debian's archive cannot be reached."""
    if shutil.which("mmdebstrap") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "mmdebstrap"], capture_output=True,
                       timeout=600, check=False)
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed and could not be installed "
                    "(scripts/bootstrap.sh installs it)")
    out = tmp_path_factory.mktemp("debian") / "rootfs.tar"
    proc = subprocess.run(["mmdebstrap", "--variant=apt", "--mode=unshare",
                           "--include=python3", "bookworm", str(out)],
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"mmdebstrap could not build a bookworm root filesystem here: {last}")
    return out


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
def test_python3_runs_from_an_imported_debian_image_under_bwrap(
        tmp_path: Path, store: ImageStore, debian_rootfs_tar: Path) -> None:
    lay = Layout(tmp_path / "debian")
    base = debian_rootfs_tar.read_bytes()
    app = layer_tar([d("app"), f("app/hello.py", "import sys, os\n"
                                 "print('hello from', sys.version_info[:2], os.getuid(),\n"
                                 "      os.environ.get('GREETING'), os.getcwd())\n"),
                     f("usr/share/doc/.wh..wh..opq")])
    layers = [{"mediaType": LAYER_TAR, **lay.blob(base)},
              {"mediaType": LAYER_GZIP, **lay.blob(gzip.compress(app, mtime=0))}]
    cfg = config_doc([sha(base), sha(app)], Env=["PATH=/usr/local/bin:/usr/bin:/bin",
                                                 "GREETING=hi"], WorkingDir="/app",
                     Cmd=["python3", "hello.py"])
    config = lay.blob(json.dumps(cfg).encode())
    manifest = {"schemaVersion": 2, "config": {"mediaType": OCI_CONFIG, **config},
                "layers": layers}
    lay.index([{"mediaType": OCI_MANIFEST, **lay.blob(json.dumps(manifest).encode())}])
    got, say = lines()
    image = import_image(lay.root, store, progress=say)
    root = store.rootfs(image.digest)
    # the real image carries setuid programs and device nodes: stripped and skipped
    assert stat.S_IMODE(os.stat(root / "usr/bin/passwd").st_mode) == 0o755
    assert image.adjustments["mode_bits_stripped"] >= 5
    assert image.adjustments["special_files_skipped"] >= 5
    assert list((root / "usr/share/doc").iterdir()) == []
    assert any("layer 1/2" in x and "MiB" in x for x in got)

    argv = ["bwrap", "--ro-bind", str(root), "/", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--uid", "1000",
            "--clearenv", "--chdir", image.config.workdir]
    for key, value in image.config.env.items():
        argv += ["--setenv", key, value]
    proc = subprocess.run(argv + image.config.cmd, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello from (3, 11) 1000 hi /app"
    # the host's python is not the one that ran: the image's own has no 'assay' and no venv
    proc = subprocess.run(argv + ["python3", "-c", "import sys; print(sys.prefix)"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.strip() == "/usr"
