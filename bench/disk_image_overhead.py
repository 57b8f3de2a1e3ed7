"""What the size-limited filesystem adds to an execution with a disk limit.

    .venv/bin/python bench/disk_image_overhead.py [--n 40] [--limit-mib 2048] [--files 200]

Three kinds of ``python3 -c pass`` through the sandbox, interleaved so that drift in machine
load hits each alike: no disk limit; ``disk_mib`` held by the disk watcher (the image switched
off, as on a machine without loop devices); ``disk_mib`` held by the ext4 image (its
workspace and HOME copied onto it and back). The workspace holds ``--files`` small files (an
example task's tree is about that size); HOME is empty, as an agent's is. Also times the
image's own steps (create: the template's copy, the loop device, the mount, the copy in;
close: the overlays unmounted, the changes carried back; the image's unmount and deletion
run on a thread of their own) and counts the loop devices before and after, once every image
is removed (a leak shows as a difference). Prints the medians and PASS/FAIL against the target of
under 50 ms added per execution by the image over no disk limit. Needs root and loop devices
(exit 2 without). Exit status 1 on FAIL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from assay.sandbox import Limits, Mount, diskclean, diskimage, run_sandboxed
from assay.sandbox.diskimage import DiskImage

TARGET_ADDED_MS = 50.0


def _loops() -> int:
    return sum(1 for p in Path("/sys/block").glob("loop*/loop/backing_file"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="executions of each kind (default 40)")
    ap.add_argument("--limit-mib", type=int, default=2048,
                    help="the disk limit (default 2048: 1024 workspace + 1024 HOME)")
    ap.add_argument("--files", type=int, default=200, help="files in the workspace")
    args = ap.parse_args(argv)
    why = diskimage.unavailable()
    if why is not None:
        print(f"no size-limited filesystem here: {why}", file=sys.stderr)
        return 2
    loops_before = _loops()
    ms: dict[str, list[float]] = {"no disk limit": [], "disk watcher": [], "ext4 image": []}
    steps: dict[str, list[float]] = {"create": [], "close": []}
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        (work / "src").mkdir(parents=True)
        home.mkdir()
        for i in range(args.files):
            (work / "src" / f"m{i}.py").write_text(f"VALUE = {i}\n" * 20)
        mounts = [Mount(home, "/assay/home", writable=True)]

        def once(kind: str) -> float:
            limits = Limits(wall_seconds=30, disk_mib=None if kind == "no disk limit"
                            else args.limit_mib)
            diskimage._why_not[:] = ["bench: the watcher's side"] if kind == "disk watcher" \
                else [None]
            t0 = time.perf_counter()
            res = run_sandboxed(["python3", "-c", "pass"], work, limits=limits, mounts=mounts)
            took = (time.perf_counter() - t0) * 1000
            if res.reason != "ok":
                raise SystemExit(f"{kind}: {res.reason} {res.detail}")
            return took

        for kind in ms:  # warm: the template, the bwrap probe, the page cache
            once(kind)
        for _ in range(args.n):
            for kind in ms:
                ms[kind].append(once(kind))
            t0 = time.perf_counter()
            image = DiskImage.create(args.limit_mib << 20, [work, home])
            t1 = time.perf_counter()
            image.close()
            steps["create"].append((t1 - t0) * 1000)
            steps["close"].append((time.perf_counter() - t1) * 1000)
    diskimage._why_not[:] = [None]
    diskclean.drain()  # the images are removed on a thread of their own: all of them gone
    loops_after = _loops()
    med = {k: statistics.median(v) for k, v in ms.items()}
    added = med["ext4 image"] - med["no disk limit"]
    verdict = "PASS" if added < TARGET_ADDED_MS and loops_after == loops_before else "FAIL"
    print(f"disk image overhead: {args.n} x `python3 -c pass` of each kind, interleaved; "
          f"limit {args.limit_mib} MiB, {args.files} files in the workspace")
    print()
    print(f"{'':<18}{'median ms':>12}{'max ms':>10}")
    for kind, values in ms.items():
        print(f"{kind:<18}{med[kind]:>12.1f}{max(values):>10.1f}")
    for step, values in steps.items():
        print(f"{'image ' + step:<18}{statistics.median(values):>12.1f}{max(values):>10.1f}")
    print()
    print(f"added by the image       {added:.1f} ms "
          f"(the watcher: {med['disk watcher'] - med['no disk limit']:.1f} ms)")
    print(f"loop devices             {loops_before} before, {loops_after} after")
    print(f"target                   < {TARGET_ADDED_MS:.0f} ms added, none leaked   {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
