"""What a task's image holds in its working directory, added to the starting tree.

The workspace is mounted over the image's working directory, so whatever the image's build left
there would be hidden. A Dockerfile's ``COPY`` lines into ``WORKDIR`` are the bundle's starting
tree already (``repo/``, pinned by ``fixture_digest``), but its ``RUN`` lines may write there
too: a log a task's tests read, generated data, a compiled helper. In Harbor the agent and the
tests see those files, because they run in the built container itself. Here, every place that
makes a starting tree for a trial (the agent's workspace, the verifier's pristine tree, the
judge's diff base, a fork, ``assay env shell``) exports the bundle's tree and then calls
:func:`seed_from_image`, which copies in what the image's working directory has and the tree
lacks. The tree's own files win; they are what the digest pins. The image is pinned by its
own digest, so the seeded files are pinned too.

What is copied: directories, regular files (set-id bits dropped) and symbolic links (as links,
never followed). Devices, FIFOs and sockets are left out. The total is bounded by the task's
workspace limits, and a working directory over them refuses the trial, naming the figure.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import TrialRefused
from assay.suites.bundle import Bundle

#: set-user-id, set-group-id and sticky: a copy in the workspace never keeps them
_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


@dataclass
class Seeded:
    """What :func:`seed_from_image` added: relative paths (files and links; a folder that was
    missing counts with everything below it), and their bytes."""

    paths: list[str] = field(default_factory=list)
    bytes: int = 0


def seed_from_image(bundle: Bundle, dest: Path, store: Any = None) -> Seeded:
    """Copy into ``dest`` (a starting tree just exported from ``bundle``) what the task's image
    has in the directory the workspace is mounted over and ``dest`` lacks. Nothing for a task
    on the host's system or an image whose directory is empty or missing."""
    from assay.environments.run import ensure_image, image_root

    # build allowed: every caller has had the image already (a trial's prepare, the verifier's
    # sandbox, a shell that refuses an unbuilt one), so an unpinned source is a cache hit here
    image = ensure_image(bundle, store)
    if image is None:
        return Seeded()
    root = image_root(image, store)
    hidden = Path(root.rootfs) / root.workspace.lstrip("/")
    seeded = Seeded()
    if not hidden.is_dir() or hidden.is_symlink():
        return seeded
    limits = bundle.workspace_limits()
    _copy_missing(hidden, dest, "", seeded, limits.max_bytes, limits.max_entries, bundle.id)
    seeded.paths.sort()
    return seeded


def _copy_missing(src: Path, dest: Path, rel: str, seeded: Seeded, max_bytes: int,
                  max_entries: int, task: str) -> None:
    with os.scandir(src) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        s, d = src / name, dest / name
        here = f"{rel}{name}"
        st = os.lstat(s)
        if stat.S_ISDIR(st.st_mode):
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                continue  # the tree has something else there: it wins
            if not d.exists():
                d.mkdir()
                os.chmod(d, stat.S_IMODE(st.st_mode) & ~_SPECIAL_BITS | stat.S_IRWXU)
            _copy_missing(s, d, here + "/", seeded, max_bytes, max_entries, task)
            continue
        if os.path.lexists(d):
            continue
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
        elif stat.S_ISREG(st.st_mode):
            seeded.bytes += st.st_size
            if seeded.bytes > max_bytes:
                raise TrialRefused(
                    f"{task}: the image's working directory holds more than the workspace "
                    f"allows ({max_bytes:,} bytes, resources.workspace_mib)")
            shutil.copyfile(s, d, follow_symlinks=False)
            os.chmod(d, stat.S_IMODE(st.st_mode) & ~_SPECIAL_BITS | stat.S_IRUSR | stat.S_IWUSR)
        else:
            continue  # a device, FIFO or socket is no file of a starting tree
        seeded.paths.append(here)
        if len(seeded.paths) > max_entries:
            raise TrialRefused(
                f"{task}: the image's working directory holds more than the workspace allows "
                f"({max_entries:,} entries, resources.workspace_files)")
