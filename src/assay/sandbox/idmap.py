"""An image's root filesystem seen through an idmapped mount, so what the image holds as root
looks root-owned inside a sandbox whose ids are mapped (:mod:`assay.sandbox.userns`).

Why: the image store keeps a root filesystem owned as the image says, by host ids 0..65535
(``/usr`` root's, ``/var/cache/apt/archives/partial`` ``_apt``'s). Once sandbox id ``n`` is the
host's ``BASE + n`` and the host's uid 0 is mapped nowhere in the sandbox, every file of the
image would look owned by ``nobody``, and a folder of root's with mode 0700 (``/root``) would be
closed even to sandbox root. A container shows them as root's. Two ways were weighed:

* chown the store's images to ``BASE + id`` when they are imported (the store is assay's own):
  every image's owners on disk change, images already stored (and the build sandbox that makes
  them, and any process that does not map ids) would disagree with new ones, and a Ray worker's
  copy would have to be shifted again;
* an idmapped mount (Linux 5.12 and later on ext4, xfs and btrfs; overlayfs 5.19, tmpfs 6.3): a
  read-only view of the same folder in which a file the disk says id ``k`` owns is the host's
  ``BASE + k``, so the sandbox sees ``k``. Nothing on disk changes; made in about half a
  millisecond (measured here: ``open_tree`` + ``mount_setattr`` + ``move_mount``, 0.45 ms).

The view is made once per image and process (``open_tree`` a clone of the image root,
``mount_setattr`` with ``MOUNT_ATTR_IDMAP`` and the sandbox's final user namespace, read-only,
``move_mount`` onto a folder of a private (0700) directory of this process under
``/run``, else ``/tmp``, never the caller's ``TMPDIR``) and bubblewrap
binds from it instead of the store's folder. The views are detached at exit; those of a process
killed with SIGKILL are detached by the next process that makes one (as the ``/etc`` copies
are, :func:`assay.sandbox.bwrap.etc_dir`). Where the kernel or the file system refuses (an
older kernel, a root without ``CAP_SYS_ADMIN`` on the host), :func:`idmapped_view` says why once
and the image is bound as it is (its root's files then look owned by ``nobody``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from assay.records.workspace import dead_owners_folders, owner_tag

__all__ = ["idmapped_mount", "idmapped_view"]

_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # one number on every arch
_OPEN_TREE_CLONE, _AT_RECURSIVE, _AT_EMPTY_PATH = 1, 0x8000, 0x1000
_MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD, _MNT_DETACH = 4, -100, 2
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x100000
_PREFIX = "assay-idmap-"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_views: dict[str, Path] = {}
_state: dict[str, object] = {}
_numbers = itertools.count()  # next() on it is atomic under the GIL: no lock needed


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _detach(target: Path) -> None:
    _libc().umount2(str(target).encode(), _MNT_DETACH)
    try:
        target.rmdir()
    except OSError:
        pass


def _mounted_under(folder: Path) -> list[Path]:
    """Mount points below ``folder`` (this process's mount table)."""
    found = []
    prefix = str(folder) + "/"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 4 and parts[4].startswith(prefix):
                    found.append(Path(parts[4].replace("\\040", " ")))
    except OSError:
        pass
    return found


def _sweep_dead(tmp: Path) -> None:
    """Detach the views of processes that are gone (killed before their ``atexit``), then
    remove their empty folders (never a tree: a view still attached is an image)."""
    for entry in dead_owners_folders(tmp, _PREFIX):
        for target in _mounted_under(entry):
            _detach(target)
        try:
            entry.rmdir()
        except OSError:
            pass


def _home() -> Path:
    held = _state.get("home")
    if isinstance(held, Path) and held.is_dir():
        return held
    # never the caller's temporary folder: a run points TMPDIR into its scratch folder and
    # clears it while this process, and its views, live on
    base = "/run" if os.access("/run", os.W_OK | os.X_OK) else "/tmp"
    home = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{owner_tag()}-", dir=base))
    _sweep_dead(home.parent)
    _state["home"] = home
    atexit.register(_detach_all, home)
    return home


def _detach_all(home: Path) -> None:
    for target in _mounted_under(home):
        _detach(target)
    try:
        home.rmdir()
    except OSError:
        pass


def _make(rootfs: Path, userns_fd: int, *, read_only: bool = True) -> Path:
    libc = _libc()
    home = _home()
    target = home / f"v{next(_numbers)}"
    target.mkdir()
    tree = _check(libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, str(rootfs).encode(),
                               _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC), "open_tree")
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP | (_MOUNT_ATTR_RDONLY if read_only else 0), 0, 0,
                          userns_fd)
        _check(libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH | _AT_RECURSIVE,
                            ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr")
        _check(libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, str(target).encode(),
                            _MOVE_MOUNT_F_EMPTY_PATH), "move_mount")
    except OSError:
        target.rmdir()
        raise
    finally:
        os.close(tree)
    return target


def idmapped_view(rootfs: Path, userns_fd: int) -> Path:
    """A read-only view of ``rootfs`` whose owners are shifted by ``userns_fd``'s map (the
    sandbox's final namespace: id ``k`` on disk is sandbox id ``k``), or ``rootfs`` itself
    where the kernel cannot make one (said once)."""
    key = str(rootfs)
    with _lock:
        view = _views.get(key)
        if view is not None:
            return view
        if "failed" in _state:
            return rootfs
        try:
            view = _make(rootfs, userns_fd)
        except OSError as exc:
            _state["failed"] = str(exc)
            _log.warning("an image's files cannot be shown with their own owners in the "
                         "sandbox (%s); those of host ids outside the mapped range look owned "
                         "by nobody", exc)
            return rootfs
        _views[key] = view
        return view


@contextlib.contextmanager
def idmapped_mount(folder: Path, userns_fd: int, *, read_only: bool) -> Iterator[Path]:
    """A view of ``folder`` for as long as the block lasts, owners shifted by ``userns_fd``'s
    map as in :func:`idmapped_view`; writable unless ``read_only``: what a process of that
    namespace writes through it lands on disk under the namespace's own ids (sandbox root's
    file is owned by 0 on disk). Raises OSError where the kernel or file system refuses: the
    caller decides what to fall back to (an image build cannot just bind the folder as it is).
    Detached when the block ends (or, after a SIGKILL, by the next process that makes one)."""
    with _lock:
        view = _make(folder, userns_fd, read_only=read_only)
    try:
        yield view
    finally:
        _detach(view)
