"""``environments/ship.py``: an image of one store sent to another as chunks and placed only
when its digest is the one its record names (issue 33: the image a Ray worker gets from the
driver's store through the object store). No Ray here: the chunks are bytes, so a chunk changed
on the way, a hostile stream and a full disk are made directly. Real stores on disk, the real
digest walk; the only thing not real is the object store carrying the chunks (a list).

Cost: well under a CPU-second (a root of a few files, chunks of 4 KiB).
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ray_transfer import _member, _tar

from assay.environments import ship
from assay.environments.ship import pack_image, receive_image
from assay.environments.store import EnvironmentImage, ImageConfig, ImageStore
from assay.errors import ImageRefused, ImageUnavailable

SMALL = 4096  # bytes a chunk: the test's image crosses several


def _image(tmp: Path) -> tuple[ImageStore, EnvironmentImage]:
    """A store holding one image with every kind and mode the digest reads."""
    store = ImageStore(tmp / "driver")
    with store.staging() as root:
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / "tool").write_bytes(b"#!/bin/sh\necho hi\n" * 700)  # > 3 chunks
        os.chmod(root / "usr" / "bin" / "tool", 0o4755)  # a set-id bit the digest counts
        (root / "etc").mkdir()
        (root / "etc" / "empty").write_bytes(b"")
        (root / "etc" / "secret").write_text("key\n")
        os.chmod(root / "etc" / "secret", 0o600)
        os.symlink("/usr/bin/tool", root / "bin-tool")  # absolute: never followed
        os.symlink("../usr", root / "etc" / "up")
        (root / "ro").mkdir()
        (root / "ro" / "inside").write_text("x")
        os.chmod(root / "ro", 0o555)  # filled before its mode is set
        image = store.publish(root, source_kind="oci-layout", source_digest="sha256:" + "a" * 64,
                              source_label="test.tar", config=ImageConfig(workdir="/work"))
    return store, image


def _sent(store: ImageStore, image: EnvironmentImage) -> list[bytes]:
    chunks, total = pack_image(store, image, lambda b: b, chunk_bytes=SMALL)
    assert len(chunks) > 3 and sum(map(len, chunks)) == total
    assert all(len(c) <= SMALL for c in chunks)
    return chunks


def _nothing_left(store: ImageStore) -> None:
    assert not store.images_dir.exists() or not list(store.images_dir.iterdir())
    assert not list(store.staging_dir.glob("build-*")), "a staging folder outlived the refusal"


def test_an_image_arrives_whole_and_keeps_its_digest_and_record(tmp_path: Path) -> None:
    store, image = _image(tmp_path)
    worker = ImageStore(tmp_path / "worker")
    got = receive_image(worker, image, iter(_sent(store, image)), chunk_bytes=SMALL)
    assert got == image  # the driver's record as it is, created_at included: not rebuilt
    root = worker.rootfs(image.digest)
    assert stat.S_IMODE(os.lstat(root / "usr/bin/tool").st_mode) == 0o4755
    assert stat.S_IMODE(os.lstat(root / "ro").st_mode) == 0o555
    assert os.readlink(root / "bin-tool") == "/usr/bin/tool"
    assert worker.lookup_source("oci-layout", "sha256:" + "a" * 64) == image
    # a second arrival is a lookup: the chunks are not even read
    assert receive_image(worker, image, iter(()), chunk_bytes=SMALL) == image
    assert not list(worker.staging_dir.glob("build-*"))


def test_a_chunk_changed_on_the_way_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    store, image = _image(tmp_path)
    chunks = _sent(store, image)
    # one byte of a file's contents changed (the tar stays a valid tar)
    i = next(n for n, c in enumerate(chunks) if b"echo hi" in c)
    at = chunks[i].index(b"echo hi")
    chunks[i] = chunks[i][:at] + b"echo HI" + chunks[i][at + 7:]
    worker = ImageStore(tmp_path / "worker")
    with pytest.raises(ImageRefused) as err:
        receive_image(worker, image, iter(chunks), chunk_bytes=SMALL)
    text = str(err.value)
    assert image.digest in text and "does not match its digest" in text, text
    assert "test.tar" in text  # the image is named as the user knows it
    _nothing_left(worker)

    # a lost chunk: the stream ends early
    with pytest.raises(ImageRefused) as err:
        receive_image(worker, image, iter(_sent(store, image)[:-2]), chunk_bytes=SMALL)
    assert image.digest in str(err.value)
    _nothing_left(worker)

    # a chunk larger than a chunk may be
    with pytest.raises(ImageRefused, match="chunk 1 is"):
        receive_image(worker, image, iter([b"\0" * (SMALL + 1)]), chunk_bytes=SMALL)
    _nothing_left(worker)


def _stream(*members: tuple[tarfile.TarInfo, bytes | None]) -> list[bytes]:
    return [_tar(*members)]


def _m(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = _member(name, kind, link)
    info.mode = 0o755
    return info


@pytest.mark.parametrize("members, why", [
    ([(_m("../escape"), b"x")], "not a plain relative path"),
    ([(_m("/etc/passwd"), b"x")], "not a plain relative path"),
    ([(_m("etc", tarfile.SYMTYPE, "/etc"), None), (_m("etc/passwd"), b"x")],
     "does not come after its folder"),
    ([(_m("hard", tarfile.LNKTYPE, "/etc/passwd"), None)], "neither a folder, a file nor"),
    ([(_m("dev", tarfile.CHRTYPE), None)], "neither a folder, a file nor"),
])
def test_a_hostile_stream_is_refused_before_it_writes_outside(
        tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], why: str) -> None:
    _, image = _image(tmp_path)
    worker = ImageStore(tmp_path / "worker")
    with pytest.raises(ImageRefused, match=why):
        receive_image(worker, image, iter(_stream(*members)), chunk_bytes=1 << 20)
    _nothing_left(worker)
    assert not (tmp_path / "escape").exists()


def test_no_room_is_said_before_anything_is_fetched(tmp_path: Path) -> None:
    store, image = _image(tmp_path)
    free = shutil.disk_usage(tmp_path).free
    huge = image.model_copy(update={"bytes": free + 1})
    fetched: list[int] = []

    def chunks() -> Iterator[bytes]:
        fetched.append(1)
        yield from _sent(store, image)

    worker = ImageStore(tmp_path / "worker")
    with pytest.raises(ImageUnavailable) as err:
        receive_image(worker, huge, chunks(), chunk_bytes=SMALL)
    text = str(err.value)
    assert image.digest in text and "no room" in text and str(worker.root) in text, text
    assert not fetched
    _nothing_left(worker)


def test_an_image_the_store_does_not_hold_or_cannot_send_is_refused(tmp_path: Path) -> None:
    store, image = _image(tmp_path)
    other = ImageStore(tmp_path / "empty")
    with pytest.raises(ImageUnavailable, match="is not in the image store"):
        pack_image(other, image, lambda b: b)
    fifo = store.rootfs(image.digest) / "etc" / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ImageRefused, match="etc/pipe, neither a folder"):
        pack_image(store, image, lambda b: b)
    assert ship.CHUNK_BYTES == 64 * 2**20  # the bound docs/scaling.md states


def test_a_worker_runs_the_image_it_was_given_and_never_builds_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a Ray worker does with the driver's image (``environments.run``): a bundle given
    an image runs in exactly that one from the store, even unpinned, with a builder installed
    that would build another; one whose image could not be placed is refused with the reason,
    naming the image; a given image missing from the store is refused, never rebuilt."""
    from support.bundles import make_bundle

    from assay.environments import run
    from assay.errors import TrialRefused
    from assay.suites.bundle import load_bundle

    store, image = _image(tmp_path)
    root = make_bundle(tmp_path / "task")
    (root / "env.yaml").write_text("suite: bookworm\npackages: [python3]\n")
    y = root / "task.yaml"
    y.write_text(y.read_text().replace("environment: {requires:",
                                       "environment: {image: env.yaml, requires:"))
    built: list[Path] = []
    monkeypatch.setattr(run, "_builder", lambda: lambda path, *a, **k: built.append(path))
    monkeypatch.setattr(run, "_GIVEN", {})
    bundle = load_bundle(root)
    assert bundle.spec.initial_state.environment_image is None  # unpinned: built on the driver
    run.run_in_given_image(bundle, image.digest)
    assert run.ensure_image(bundle, store) == image
    run.run_in_given_image(bundle, "sha256:" + "9" * 64)
    with pytest.raises(TrialRefused, match="sha256:9{64} the driver runs this task in is not in "
                       "this node's image store .*never rebuilds it"):
        run.ensure_image(bundle, store)
    why = f"the image {image.digest} could not be placed on node abc (vm): no room"
    run.run_in_given_image(bundle, image.digest, why)
    with pytest.raises(TrialRefused) as err:
        run.ensure_image(bundle, store)
    assert str(err.value) == f"calc-001: {why}"
    assert not built
