"""``runner/executors/ray_transfer.py``: the tars between the driver and a Ray worker, the way back
treated as untrusted (it was written beside an agent on another machine)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from assay.errors import NeverOverwrite, TransportError
from assay.runner.executors.ray_transfer import changed_since, files_of, pack, unpack_into


def _attempt(root: Path) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "stdout.log").write_text("hello\n")
    (root / "artifact.tar").write_bytes(b"\0" * 2048)
    (root / "trial.json").write_text('{"status": "running"}')
    os.symlink("agent/stdout.log", root / "log")  # a link that stays inside
    return root


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_a_new_attempt_lands_whole(tmp_path: Path) -> None:
    src = _attempt(tmp_path / "worker" / "attempt")
    dest = tmp_path / "run" / "a1"
    landed = unpack_into(pack(src), dest)
    assert set(landed) == {"agent/stdout.log", "artifact.tar", "trial.json", "log"}
    assert (dest / "agent" / "stdout.log").read_text() == "hello\n"
    assert os.readlink(dest / "log") == "agent/stdout.log"
    assert (dest / "artifact.tar").read_bytes() == b"\0" * 2048
    assert sorted(p.name for p in dest.parent.iterdir()) == ["a1"]  # no temp dir left


def test_files_merge_beside_the_drivers_own_and_never_overwrite(tmp_path: Path) -> None:
    src = _attempt(tmp_path / "worker" / "attempt")
    dest = tmp_path / "run" / "a1"
    dest.mkdir(parents=True)
    (dest / "placement.json").write_text("{}")  # the driver's, written when the worker came in
    shipped = files_of(src)
    unpack_into(pack(src, shipped), dest)
    assert (dest / "placement.json").read_text() == "{}"
    # later: a grade, and trial.json rewritten by its stages; only those are sent again
    (src / "grades").mkdir()
    (src / "grades" / "v1.json").write_text("{}")
    (src / "trial.json").write_text('{"status": "graded"}')
    assert changed_since(src, shipped) == ["grades/v1.json", "trial.json"]
    unpack_into(pack(src, changed_since(src, shipped)), dest)
    assert (dest / "trial.json").read_text() == '{"status": "graded"}'
    assert (dest / "grades" / "v1.json").is_file()
    # anything else that is already there is never overwritten, and nothing else lands
    (src / "artifact.tar").write_bytes(b"changed")
    (src / "new.txt").write_text("new")
    with pytest.raises(NeverOverwrite, match="artifact.tar"):
        unpack_into(pack(src, ["artifact.tar", "new.txt"]), dest)
    assert (dest / "artifact.tar").read_bytes() == b"\0" * 2048
    assert not (dest / "new.txt").exists()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["a1"]


@pytest.mark.parametrize("member", [
    _member("../escape.txt"),
    _member("/etc/escape.txt"),
    _member("agent/../../escape.txt"),
    _member("out", tarfile.SYMTYPE, "/etc/passwd"),
    _member("agent/out", tarfile.SYMTYPE, "../../escape"),
    _member("hard", tarfile.LNKTYPE, "trial.json"),
    _member("dev", tarfile.CHRTYPE),
])
def test_a_worker_tar_that_reaches_outside_is_refused_before_anything_lands(
        tmp_path: Path, member: tarfile.TarInfo) -> None:
    data = _tar((_member("trial.json"), b"{}"),
                (member, b"x" if member.isreg() else None))
    dest = tmp_path / "run" / "a1"
    with pytest.raises(TransportError, match="worker's tar"):
        unpack_into(data, dest)
    assert not (tmp_path / "run").exists()  # checked before anything was created
    assert not (tmp_path / "escape.txt").exists()


def test_what_is_not_a_tar_is_a_transport_error(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="not a tar"):
        unpack_into(b"this is not a tar archive" * 40, tmp_path / "a1")
    assert not (tmp_path / "a1").exists()


def test_pack_leaves_out_a_path_with_all_it_holds(tmp_path: Path) -> None:
    """A bundle whose image is sent on its own is packed without the image's source."""
    root = tmp_path / "bundle"
    (root / "environment" / "blobs").mkdir(parents=True)
    (root / "environment" / "blobs" / "layer").write_bytes(b"\0" * 4096)
    (root / "environment-notes.md").write_text("kept: only the named path goes\n")
    (root / "task.yaml").write_text("id: x\n")
    for leave_out, gone in (("environment", True), ("./environment/", True), (".", False),
                            ("../x", False), (None, False)):
        names = tarfile.open(fileobj=io.BytesIO(pack(root, arcname="bundle",
                                                     leave_out=leave_out))).getnames()
        assert "bundle/task.yaml" in names and "bundle/environment-notes.md" in names
        assert ("bundle/environment/blobs/layer" not in names) is gone, (leave_out, names)
        assert ("bundle/environment" not in names) is gone
