"""Writes bounded while they happen: a command writing far past ``Limits.disk_mib`` in its
real bubblewrap sandbox is stopped while it writes, and the host's disk never gives it more
than the limit.

As root with loop devices (this machine, CI) the writable folders are on a size-limited ext4
filesystem for the run (:mod:`assay.sandbox.diskimage`): the kernel refuses a write past
``limit + MARGIN`` however loaded the machine is, so what the folders hold afterwards is at
most that, exactly, and the image file on the host's disk (what the execution cost the disk,
measured as the image is removed, not the disk's free space: other runs on this shared disk
move that by hundreds of MiB within one test) never goes past its limit's worth of data and
ext4's metadata. One test starves the poller on purpose (it looks once a minute): the bound
holds without it. Without root or loop devices the disk watcher holds the limit (a quarter
past it at most, measured when the machine is quiet; the small-file writer then runs in the
full form only: starved by ``make test``'s load it held 174 MiB under 64).

Real parts: bubblewrap, ext4 images on loop devices, ``cp``; a killed assay process is a real
process killed with SIGKILL. Nothing is mocked; the watcher-only test tells the planner that
there are no loop devices (the one thing that cannot be taken away from this machine).

Reduced form (the default): 300 MB under a 64 MiB limit, three times the limit in 16 KiB files
under 16 MiB. Full form: ``ASSAY_DISK_FULL=1`` (``make test-full``): 3 GB under 1 GiB, as in issue
35's report (``dd if=/dev/zero of=big.bin bs=1M count=3000``); it needs 9 GB free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.sandbox import Limits, bwrap_available, diskclean, diskimage, run_sandboxed
from assay.sandbox.bwrap import Mount
from assay.sandbox.diskimage import MARGIN, DiskImage
from assay.sandbox.diskwatch import disk_usage

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FULL = os.environ.get("ASSAY_DISK_FULL") == "1"
LIMIT_MIB, WRITE_MB = (1024, 3000) if FULL else (64, 300)
MIB = 1024 * 1024
LIMIT = LIMIT_MIB * MIB
#: the small-file writers' limit: 16 MiB is a thousand 16 KiB files (the full form: 1 GiB)
SMALL_MIB = 1024 if FULL else 16

# the writer, dd, from a shell that goes on after it (as an agent's would)
DD = 'dd if=/dev/zero of=big.bin bs=1M count="$1" 2>&1; echo "dd ended"; sleep 20; echo after'
# one file written in 1 MiB pieces by a program that ignores SIGXFSZ (Python does): its
# writes fail with EFBIG at the per-file limit
BIG = r"""
import os, sys
with open("big.bin", "wb") as fh:
    for i in range(int(sys.argv[1])):
        fh.write(b"x" * 1048576)
print("wrote it all")
"""
# many small files in several folders, the whole budget's worth of them and more
SMALL = r"""
import os, sys
n = 0
for d in range(int(sys.argv[1])):
    os.makedirs(f"d{d}", exist_ok=True)
    for f in range(64):
        with open(f"d{d}/{f}.txt", "wb") as fh:
            fh.write(b"y" * 16384)
        n += 1
print("wrote", n)
"""
# two files of 60% of the limit each (under the per-file limit), the second into HOME: the
# filesystem refuses (ENOSPC); the program says so and exits 0, as a careless agent would
SWALLOW = r"""
import errno, sys
part = int(sys.argv[1]) * 6 // 10
for where in ("a.bin", "/assay/home/b.bin"):
    try:
        with open(where, "wb") as fh:
            for _ in range(part // 65536):
                fh.write(b"z" * 65536)
    except OSError as exc:
        print("refused:", errno.errorcode[exc.errno], flush=True)
sys.exit(0)
"""

kernel = diskimage.unavailable() is None


@pytest.fixture(autouse=True)
def _images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The images in a folder of the test's own; what each image took on the host's disk,
    read once it is unmounted (everything written back) and before it is deleted."""
    monkeypatch.setenv(diskclean.DISK_DIR_ENV, str(tmp_path / "disks"))
    took: list[int] = []
    remove = diskclean.remove_image

    def measured(image: Path, mount: Path) -> list[str]:
        warnings = diskclean.unmount_all(mount)
        if image.exists():
            took.append(image.stat().st_blocks * 512)
        return warnings + remove(image, mount)

    monkeypatch.setattr(diskclean, "remove_image", measured)
    yield took
    diskclean.drain()
    left = [p.name for p in (tmp_path / "disks").glob("[0-9]*")]
    assert left == []  # every image unmounted and deleted (the templates are kept)


def _folders(tmp: Path) -> tuple[Path, Path]:
    """The command's workspace and HOME, both writable."""
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    home.mkdir()
    return work, home


def _run(code: str, arg: int, work: Path, home: Path, *, shell: bool = False,
         limit_mib: int = LIMIT_MIB) -> tuple[Any, int]:
    """Run ``code`` in the sandbox, HOME writable beside the work directory; what the two
    hold on disk once it ended (carried back from the image)."""
    argv = (["/bin/sh", "-c", code, "sh", str(arg)] if shell
            else ["python3", "-c", code, str(arg)])
    res = run_sandboxed(argv, work, mounts=[Mount(home, "/assay/home", writable=True)],
                        limits=Limits(wall_seconds=120, memory_mib=512, pids=64,
                                      disk_mib=limit_mib))
    held, _ = disk_usage([work, home])
    return res, held


def _held_by_kernel(res: Any, held: int, took: list[int], limit: int = LIMIT) -> None:
    """The kernel's bound: the folders hold at most the filesystem's room, and the image cost
    the host's disk at most that and ext4's metadata."""
    diskclean.drain()  # the image is removed in the background: measured as it is
    assert res.limits_applied["disk_mib"].mechanism == "rlimit_fsize+ext4_image"
    assert held <= limit + MARGIN, held / MIB
    assert len(took) == 1 and took[0] <= limit + MARGIN + 2 * MIB + limit // 64, took[0] / MIB


def _free(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


@pytest.mark.timeout(600 if FULL else 300)
def test_a_big_writer_is_stopped_while_it_writes(tmp_path: Path, _images: list[int]) -> None:
    work, home = _folders(tmp_path)
    if _free(work) < 3 * WRITE_MB * 1000 * 1000:
        pytest.skip(f"needs {3 * WRITE_MB} MB free under {tmp_path}")
    res, held = _run(DD, WRITE_MB, work, home, shell=True)
    assert res.reason == "disk_limit", res.to_record()
    assert "after" not in res.stdout_tail  # the shell was stopped too (20 s to see it)
    assert res.evidence["disk_over_bytes"] >= LIMIT
    # the kernel's per-file limit held dd (a kill in its last write may leave it short)
    assert LIMIT - MIB < (work / "big.bin").stat().st_size <= LIMIT
    if kernel:
        _held_by_kernel(res, held, _images)
    else:
        assert res.limits_applied["disk_mib"].mechanism == "rlimit_fsize+disk_watch"
        assert held <= LIMIT * 5 // 4, held / MIB


@pytest.mark.timeout(600 if FULL else 300)
def test_many_small_files_are_stopped_while_they_are_written(tmp_path: Path,
                                                             _images: list[int]) -> None:
    if not kernel and not FULL:
        pytest.skip("the disk watcher alone is starved under make test's load (the module "
                    f"docstring); no size-limited filesystem: {diskimage.unavailable()}")
    work, home = _folders(tmp_path)
    limit = SMALL_MIB * MIB
    folders = 3 * limit // (64 * 16384)  # three times the limit, in 16 KiB files
    if _free(work) < 3 * folders * 64 * 16384:
        pytest.skip(f"needs {3 * folders} MiB free under {tmp_path}")
    res, held = _run(SMALL, folders, work, home, limit_mib=SMALL_MIB)
    assert res.reason == "disk_limit", res.to_record()
    assert res.evidence["disk_over_bytes"] >= limit
    assert f"the limit of {SMALL_MIB} MiB" in (res.detail or "")
    assert "wrote" not in res.stdout_tail  # it meant to write three times the limit
    if kernel:
        _held_by_kernel(res, held, _images, limit)
    else:
        assert held <= limit * 5 // 4, held / MIB


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_the_kernel_holds_the_bound_with_the_poller_starved(
        tmp_path: Path, _images: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """The poller looks once a minute (as if starved): the writer of small files meets ENOSPC
    at the filesystem's room and fails; nothing past it reached the host's disk."""
    monkeypatch.setattr(diskimage, "POLL_SECONDS", 60.0)
    work, home = _folders(tmp_path)
    limit = SMALL_MIB * MIB
    res, held = _run(SMALL, 3 * limit // (64 * 16384), work, home, limit_mib=SMALL_MIB)
    assert res.reason == "disk_limit", res.to_record()
    assert "No space left on device" in res.stderr_tail
    assert res.evidence["disk_over_bytes"] >= limit  # the last look, at the end
    _held_by_kernel(res, held, _images, limit)
    assert held > limit  # filled to the room: it was the kernel that stopped it


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_enospc_swallowed_is_still_the_limit(tmp_path: Path, _images: list[int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Workspace and HOME share the room: the second file is refused with ENOSPC (not EFBIG:
    each file is under the per-file limit); the program exits 0 (the poller, starved, never
    stopped it), the execution is ``disk_limit`` all the same, not an agent's success."""
    monkeypatch.setattr(diskimage, "POLL_SECONDS", 60.0)
    work, home = _folders(tmp_path)
    res, held = _run(SWALLOW, LIMIT, work, home)
    assert res.reason == "disk_limit", res.to_record()
    assert res.exit_code == 0 and res.stdout_tail == "refused: ENOSPC\n"
    _held_by_kernel(res, held, _images)
    assert (work / "a.bin").stat().st_size == LIMIT * 6 // 10 // 65536 * 65536
    assert (home / "b.bin").stat().st_size < LIMIT * 6 // 10  # carried back, cut short


def test_a_program_ignoring_sigxfsz_is_held_to_the_limit(tmp_path: Path) -> None:
    work, home = _folders(tmp_path)
    res, _ = _run(BIG, LIMIT_MIB + 8, work, home)
    assert res.reason == "disk_limit", res.to_record()
    assert "wrote it all" not in res.stdout_tail  # its write failed (EFBIG), or it was killed
    assert (work / "big.bin").stat().st_size == LIMIT


def test_without_loop_devices_the_watcher_holds_it(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no size-limited filesystem can be made the record says why, once per execution,
    and the disk watcher and the per-file limit hold the limit."""
    monkeypatch.setattr(diskimage, "_why_not", ["no loop devices (/dev/loop-control)"])
    work, home = _folders(tmp_path)
    res, _ = _run(BIG, LIMIT_MIB + 8, work, home)
    assert res.reason == "disk_limit", res.to_record()
    applied = res.limits_applied["disk_mib"]
    assert applied.mechanism == "rlimit_fsize+disk_watch"
    assert "no size-limited filesystem: no loop devices" in (applied.note or "")
    assert (work / "big.bin").stat().st_size == LIMIT


def test_under_the_limit_nothing_happens(tmp_path: Path, _images: list[int]) -> None:
    work, home = _folders(tmp_path)
    res, _ = _run(BIG, 8, work, home)
    assert res.reason == "ok" and "wrote it all" in res.stdout_tail
    assert 8 * MIB <= res.evidence["disk_peak_bytes"] < LIMIT
    assert (work / "big.bin").stat().st_size == 8 * MIB  # carried back
    diskclean.drain()
    assert len(_images) == (1 if kernel else 0)


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_the_folders_come_back_as_the_command_left_them(tmp_path: Path) -> None:
    """Carried onto the image and back: contents, deletions, modes, links, hard links and
    times as the command left them, in the workspace and in HOME."""
    work, home = _folders(tmp_path)
    (work / "keep.txt").write_text("kept")
    (work / "gone.txt").write_text("to be removed")
    (work / "sub").mkdir()
    (work / "sub" / "tool.sh").write_text("#!/bin/sh\n")
    os.utime(work / "keep.txt", (1_000_000_000, 1_000_000_000))
    (home / ".config").mkdir()
    (work / "moves" / "inner").mkdir(parents=True)
    (work / "moves" / "a.txt").write_text("a")
    (work / "moves" / "inner" / "keep.txt").write_text("k")
    for name in ("replaced", "to_link"):
        (work / name).mkdir()
        (work / name / "old.txt").write_text("old")
    outside = tmp_path / "outside"
    outside.mkdir()
    (work / "was_link").symlink_to(outside)
    script = ("set -e; rm gone.txt; chmod 755 sub/tool.sh; ln -s keep.txt link; "
              "ln keep.txt hard; mkdir -p new/deep; echo made > new/deep/f; "
              "echo cached > /assay/home/.config/c; "
              # a folder replaced whole (opaque), a folder by a link, a link by a folder
              "rm -r replaced; mkdir replaced; echo fresh > replaced/only.txt; "
              "rm -r to_link; ln -s /etc to_link; "
              "rm was_link; mkdir was_link; echo inside > was_link/f; "
              # folders it started with, renamed (rename(2) works) and moved, changed after
              "mkdir -p pkg; python3 -c \"import os; os.rename('moves', 'pkg/moved')\"; "
              "rm pkg/moved/a.txt; echo new > pkg/moved/inner/b.txt")
    res, _ = _run(script, 0, work, home, shell=True)
    assert res.reason == "ok", res.to_record()
    assert sorted(p.name for p in work.iterdir()) == [
        "hard", "keep.txt", "link", "new", "pkg", "replaced", "sub", "to_link", "was_link"]
    moved = work / "pkg" / "moved"
    assert sorted(str(p.relative_to(moved)) for p in moved.rglob("*")) == [
        "inner", "inner/b.txt", "inner/keep.txt"]
    assert (moved / "inner" / "keep.txt").read_text() == "k"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging
    assert [p.name for p in (work / "replaced").iterdir()] == ["only.txt"]
    assert os.readlink(work / "to_link") == "/etc"
    assert not (work / "was_link").is_symlink()
    assert (work / "was_link" / "f").read_text() == "inside\n"
    assert list(outside.iterdir()) == []  # the link was replaced, never followed
    assert (work / "keep.txt").read_text() == "kept"
    assert (work / "keep.txt").stat().st_mtime == 1_000_000_000
    assert os.readlink(work / "link") == "keep.txt"
    assert (work / "hard").stat().st_ino == (work / "keep.txt").stat().st_ino
    assert (work / "sub" / "tool.sh").stat().st_mode & 0o777 == 0o755
    assert (work / "new" / "deep" / "f").read_text() == "made\n"
    assert (home / ".config" / "c").read_text() == "cached\n"


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_the_room_is_the_limit(tmp_path: Path) -> None:
    """ext4 keeps part of the image for itself (the preallocated excess is taken back): the
    room is the limit and the margin, exactly; the sparse image takes almost nothing yet."""
    for mib in (1, 64, 2048):
        image = DiskImage.create(mib * MIB, [])
        try:
            vfs = os.statvfs(image.mount)
            assert vfs.f_bavail * vfs.f_frsize == mib * MIB + MARGIN
            assert image.host_bytes() < 2 * MIB
        finally:
            image.close()


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_a_killed_process_leaves_nothing_the_next_one_does_not_sweep(tmp_path: Path) -> None:
    """An assay process killed with SIGKILL while its image is mounted: the next one's sweep
    unmounts it, the loop device goes with it, the image is deleted; a live one's is left."""
    disks = tmp_path / "disks"
    work = tmp_path / "work"
    work.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from assay.sandbox.diskimage import DiskImage; "
         "DiskImage.create(8 << 20, [Path(sys.argv[1])]); print('mounted', flush=True); "
         "sys.stdin.read()", str(work)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, diskclean.DISK_DIR_ENV: str(disks)})
    try:
        assert child.stdout is not None and child.stdout.readline() == "mounted\n"
        assert diskclean.sweep_stale() == []  # its process lives: left alone
        (mount,) = disks.glob("*.mnt")
        assert diskclean.mounted(mount)
        assert _loops(disks) == 1
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    swept = diskclean.sweep_stale()
    assert swept == [mount.name[: -len(".mnt")]]
    assert not diskclean.mounted(mount)
    assert [p.name for p in disks.iterdir() if not p.name.startswith("template-")] == []
    assert _loops(disks, until=0) == 0  # no loop device leaked


def _loops(folder: Path, until: int | None = None) -> int:
    """Loop devices whose backing file is in ``folder`` (waiting up to 5 s for ``until``:
    the kernel releases an autoclear device once its last user is gone)."""
    deadline = time.monotonic() + 5
    while True:
        n = 0
        for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
            try:
                if backing.read_text().strip().startswith(f"{folder}/"):
                    n += 1
            except OSError:
                continue
        if until is None or n == until or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


@pytest.mark.skipif(not kernel, reason=f"no size-limited filesystem: {diskimage.unavailable()}")
def test_long_and_deep_paths_are_carried_to_their_bound(tmp_path: Path) -> None:
    """Paths longer than the system's limit come back (descriptors, not paths); folders past
    ``MAX_DEPTH`` are not carried, and the result says so."""
    from assay.sandbox.upperdir import MAX_DEPTH
    work, home = _folders(tmp_path)
    code = ("import os, sys\n"
            "for i in range(30):\n"
            "    os.mkdir('L' * 200); os.chdir('L' * 200)\n"
            "open('end.txt', 'w').write('long')\n"
            "os.chdir('/assay/home')\n"
            "for i in range(int(sys.argv[1])):\n"
            "    os.mkdir('d'); os.chdir('d')\n")
    res, _ = _run(code, MAX_DEPTH + 5, work, home)
    assert res.reason == "ok", res.to_record()
    fd = os.open(work, os.O_RDONLY)
    try:
        for _ in range(30):
            fd, old = os.open("L" * 200, os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        assert os.stat("end.txt", dir_fd=fd).st_size == 4  # 6,000 bytes of path
    finally:
        os.close(fd)
    depth, here = 0, home
    while (here / "d").is_dir():
        depth, here = depth + 1, here / "d"
    assert depth == MAX_DEPTH - 1
    assert any(f"deeper than {MAX_DEPTH} folders" in w for w in res.warnings)
