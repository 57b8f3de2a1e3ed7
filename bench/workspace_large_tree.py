"""Where the time of a large workspace goes, and what the freeze and verifier now spend on it.

A tree of many tiny files (what an agent that writes 100,000 files leaves) goes through the
host-side steps of a trial: the freeze (hash and archive), the verifier's extraction of the
candidate's files onto the pristine tree, each check's private copy, and the removal of the
temporary trees. Each step runs the way it was done before (baseline: ``tar.add`` after a
separate hashing walk, float mtimes and so a pax header per member, the ``tar`` extraction
filter's ``realpath`` per member, ``shutil.copytree``, ``shutil.rmtree``, all in the system's
temporary folder) and the way it is done now (one read per file, GNU tar and moves, ``cp -a``,
the verifier's trees in ``/dev/shm`` when small), in the same run, on the same tree. Prints a
table of seconds and ratios; a copy is made twice per verification and removed three times.

    PYTHONPATH=src .venv/bin/python bench/workspace_large_tree.py --files 20000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from assay.records.artifact import extract_paths, freeze, list_tree
from assay.records.workspace import WorkspaceLimits, copy_tree, remove_tree, scratch_dir


def _make_tree(root: Path, n: int) -> None:
    for i in range(n):
        d = root / "src" / "gen" / f"d{i // 1000}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.txt").write_text("x")


def _old_freeze(ws: Path, trial: Path) -> None:
    list_tree(ws)  # the hashing walk
    with tarfile.open(trial / "artifact.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(ws):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                tar.add(p, arcname=p.relative_to(ws).as_posix(), recursive=False)
    with open(trial / "artifact.tar", "rb") as fh:
        hashlib.file_digest(fh, "sha256")


def _old_extract(trial: Path, dest: Path) -> None:
    with tarfile.open(trial / "artifact.tar") as tar:
        for m in tar.getmembers():
            tar.extract(m, dest, filter="tar")


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "ws"
        ws.mkdir()
        _make_tree(ws, args.files)
        old_trial, new_trial = tmp / "old", tmp / "new"
        old_trial.mkdir()
        new_trial.mkdir()
        rows: list[tuple[str, float, float]] = []
        rows.append(("freeze (hash + tar)", _timed(lambda: _old_freeze(ws, old_trial)),
                     _timed(lambda: freeze(ws, new_trial, limits=WorkspaceLimits(
                         max_bytes=1 << 40, max_entries=10 * args.files)))))
        names = {e["path"] for e in list_tree(ws)}
        # the verifier's trees go where it puts them now: /dev/shm when small and there is room
        where = scratch_dir(args.files, args.files)
        with tempfile.TemporaryDirectory(prefix="assay-bench-", dir=where) as scratch_name:
            new = Path(scratch_name)
            rows.append(("verifier: extract onto pristine",
                         _timed(lambda: _old_extract(old_trial, tmp / "x-old")),
                         _timed(lambda: (new / "x-new").mkdir() or extract_paths(
                             new_trial, new / "x-new", names))))
            rows.append(("check: private copy (x2)",
                         _timed(lambda: shutil.copytree(tmp / "x-old", tmp / "c-old",
                                                        symlinks=True)),
                         _timed(lambda: copy_tree(new / "x-new", new / "c-new"))))
            rows.append(("remove a copy (x3)", _timed(lambda: shutil.rmtree(tmp / "c-old")),
                         _timed(lambda: remove_tree(new / "c-new"))))
    print(f"{args.files} files of 1 byte; seconds, same run, same tree; the verifier's trees "
          f"now in {where or tempfile.gettempdir()}")
    print(f"{'step':34} {'baseline':>9} {'now':>9} {'now/base':>9}")
    for name, old, new in rows:
        print(f"{name:34} {old:9.2f} {new:9.2f} {new / old:9.2f}")
    total_old, total_new = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"{'total':34} {total_old:9.2f} {total_new:9.2f} {total_new / total_old:9.2f}")


if __name__ == "__main__":
    main()
