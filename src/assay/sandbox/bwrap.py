"""The bubblewrap command line: what the sandboxed command can see.

The sandbox root is an empty tmpfs that is remounted read-only once populated. Visible inside:

* ``/usr`` read-only, and ``/bin``, ``/sbin``, ``/lib*`` as the host has them (symlinks into
  ``/usr`` on merged-/usr systems, read-only binds otherwise);
* ``/etc`` is a read-only *copy* of a short allow-list of host files needed to run python3 and
  node (dynamic loader cache, alternatives, time zone, name-service files, CA certificates,
  Debian's python config) plus a synthetic ``passwd``/``group`` that only know root, the sandbox
  user and nobody. Never the host's ``/etc`` as a whole: no shadow, no ``ssl/private``, no
  pip/npm/git configs that may hold credentials. The copy is made once per process (in a private
  temporary directory, rebuilt if it disappears or the loader cache changes) and bound with a
  single mount: binding ~20 files one by one cost ~10 ms per execution. ``/etc/alternatives``
  and ``/etc/ssl/certs`` (hundreds of symlinks, slow to copy, nothing secret) are bound live.
* ``/proc`` for the new PID namespace, a minimal ``/dev`` (null, zero, full, random, urandom, tty,
  pts; read-only except for the devices and a size-capped ``/dev/shm``);
* a private, size-capped tmpfs at ``/tmp``;
* the caller's work directory, read-write, at :data:`SANDBOX_WORKDIR` (also cwd and ``$HOME``);
* the caller's extra :class:`Mount` s, in order, after the work directory.

With an :class:`ImageRoot` (a task's pinned environment) the host's system is replaced by the
image's: every top-level entry of the image's root filesystem is bound read-only (symlinks
recreated) over the same empty tmpfs root, ``/etc`` is the image's own read-only with the
synthetic ``passwd``/``group`` bound over its two files, ``/proc``, ``/dev`` and ``/tmp`` are
the sandbox's own as above, the work directory is mounted at the image's working directory
(:attr:`ImageRoot.workdir`, cwd and ``$HOME``), and the image's environment (``PATH``...) is
the base the caller's values override. Nothing of the host's ``/usr`` or ``/etc`` is visible
unless a caller mounts it (the verifier's trusted pytest, the agent CLIs' node).

Nothing else of the host (``/root``, ``/home``, the host's ``/tmp``, the repository...) exists in
the sandbox. Namespaces: user (the command runs as uid/gid 1000 with no capabilities; run as
root, ids 0-65535 map onto unprivileged host ids: :mod:`assay.sandbox.userns`), PID, IPC, UTS,
cgroup (if possible) and, unless ``network="host"``, network (only a loopback interface;
``"model-proxy"`` adds one socket file bound read-only, see :mod:`assay.sandbox.netproxy`).
``--die-with-parent`` and ``--new-session`` are always set. The environment is cleared and rebuilt
from the values passed in; the bwrap options (including those values) travel through a memfd
(``--args``), so an API key given to the sandbox never shows up in a host ``ps`` listing.
"""

from __future__ import annotations

import atexit
import functools
import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from assay.errors import SandboxUnavailable
from assay.records.workspace import dead_owners_folders, owner_tag

#: Where the caller's work directory appears inside the sandbox; cwd and $HOME of the command.
SANDBOX_WORKDIR = "/work"
SANDBOX_HOME = SANDBOX_WORKDIR
SANDBOX_TMP = "/tmp"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_HOSTNAME = "sandbox"
#: PATH given to the command unless the caller's env sets one.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_SYSTEM_TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Copied (symlinks as symlinks) into the sandbox's /etc; missing or unreadable ones are skipped.
_ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "hosts",
    "protocols",
    "services",
    "networks",
    "mime.types",
    "ssl/openssl.cnf",
    "ca-certificates.conf",
    "os-release",
    "debian_version",
)
_ETC_GLOBS = ("python3*",)
#: Directories of hundreds of symlinks (slow to copy), public by nature: bound live, read-only.
_ETC_BOUND_DIRS = ("/etc/alternatives", "/etc/ssl/certs")
#: Bound live over the copy when the host network is shared (it may change at any time).
_ETC_HOST_NETWORK = ("/etc/resolv.conf",)
_RESERVED_TARGETS = ("/proc", "/dev")

_PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:{SANDBOX_HOME}:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"


@dataclass(frozen=True)
class ImageRoot:
    """A root filesystem to run in instead of the host's system (see the module docstring).

    ``rootfs`` is the image's root on the host (the image store's ``rootfs`` folder; never
    written: every bind is read-only). ``workdir``: where the work directory appears (an
    absolute path; ``/`` means :data:`SANDBOX_WORKDIR`). ``env``: the image's own environment,
    the base of the command's. ``digest`` names the image in records. ``several_users``: run
    as root of a user namespace that maps ids ``0..65535`` with the image's own ``passwd`` and
    ``group`` (:mod:`assay.sandbox.userns`), instead of uid 1000 alone."""

    rootfs: Path
    workdir: str = SANDBOX_WORKDIR
    env: tuple[tuple[str, str], ...] = ()
    digest: str = ""
    several_users: bool = False

    @property
    def workspace(self) -> str:
        target = str(PurePosixPath(self.workdir or "/"))
        return SANDBOX_WORKDIR if target == "/" else target

    def validated(self) -> ImageRoot:
        root = Path(self.rootfs).absolute()
        if not root.is_dir():
            raise FileNotFoundError(f"image root filesystem not found: {root}")
        target = self.workspace
        if not target.startswith("/") or ".." in PurePosixPath(target).parts or any(
                target == r or target.startswith(r + "/")
                for r in (*_RESERVED_TARGETS, "/etc", SANDBOX_TMP)):
            raise ValueError(f"the image's working directory cannot hold the workspace: "
                             f"{self.workdir!r}")
        return ImageRoot(root, target, tuple(self.env), self.digest, self.several_users)


@dataclass(frozen=True)
class Mount:
    """An extra host path visible in the sandbox at ``target`` (read-only unless ``writable``).

    Mounted after the work directory, so a target below :data:`SANDBOX_WORKDIR` shadows what is
    there (bubblewrap then creates the mount point, an empty directory or file, in the host's
    work directory). Read-only means read-only for the sandbox: nothing in it can be changed."""

    source: Path
    target: str
    writable: bool = False

    def validated(self, workspace: str = SANDBOX_WORKDIR) -> Mount:
        target = str(PurePosixPath(self.target))
        if not target.startswith("/") or ".." in PurePosixPath(target).parts:
            raise ValueError(f"mount target must be an absolute path without '..': {self.target}")
        if target in ("/", workspace) or any(
            target == r or target.startswith(r + "/") for r in _RESERVED_TARGETS
        ):
            raise ValueError(f"mount target {target!r} is reserved")
        source = Path(self.source).absolute()
        if not source.exists():
            raise FileNotFoundError(f"mount source does not exist: {source}")
        return Mount(source=source, target=target, writable=self.writable)


def bwrap_executable() -> str | None:
    return shutil.which("bwrap") or (
        "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None
    )


def sandbox_env(extra: Mapping[str, str] | None, *, home: str, tmpdir: str,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment of the command: defaults, then ``base`` (an image's own
    environment), then the caller's explicit values (which win). Nothing is taken from
    ``os.environ``. (Inside bubblewrap, bwrap itself adds ``PWD``; a shell may add its own
    variables.)"""
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmpdir}
    for key, value in [*(base or {}).items(), *(extra or {}).items()]:
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name: {key!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"invalid value for environment variable {key}")
        env[key] = value
    return env


@functools.lru_cache(maxsize=1)
def _system_args() -> tuple[str, ...]:
    """Read-only system binds (cached: the host layout does not change between executions)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in _SYSTEM_TOP_LEVEL:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return tuple(args)


#: Placeholder in the cached image binds for the current /etc copy (see :func:`etc_dir`).
_USERS = "\0users"

#: Top-level names of an image never bound from it: the sandbox makes its own (``/assay`` holds
#: the mount points of assay's own read-only mounts, which a read-only image folder would stop
#: bubblewrap from creating).
_IMAGE_OWN = frozenset({"proc", "dev", "tmp", "sys", "etc", "run", "assay"})


@functools.lru_cache(maxsize=32)
def _image_args(rootfs: str, workspace: str) -> tuple[str, ...]:
    """Read-only binds of an image's top-level entries (cached per image: stored images never
    change under their digest), then its ``/etc`` with the synthetic user files over it."""
    args: list[str] = []
    for entry in sorted(os.scandir(rootfs), key=lambda e: e.name):
        if entry.name in _IMAGE_OWN:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), "/" + entry.name]
        elif entry.is_dir() or entry.is_file():
            args += ["--ro-bind", entry.path, "/" + entry.name]
    etc = os.path.join(rootfs, "etc")
    if os.path.isdir(etc) and not os.path.islink(etc):
        args += ["--ro-bind", etc, "/etc"]
        for name in ("passwd", "group"):  # a link could aim the bind anywhere: not followed
            path = os.path.join(etc, name)
            if os.path.isfile(path) and not os.path.islink(path):
                args += ["--ro-bind", f"{_USERS}/{name}", f"/etc/{name}"]
    run = os.path.join(rootfs, "run")
    if os.path.isdir(run) and not os.path.islink(run):
        args += ["--tmpfs", "/run"]
    return tuple(args)


def _without_user_files(binds: list[str]) -> list[str]:
    """The image's binds less the synthetic ``passwd``/``group`` laid over its own."""
    out: list[str] = []
    i = 0
    while i < len(binds):
        if binds[i] == "--ro-bind" and i + 1 < len(binds) and binds[i + 1].startswith(_USERS):
            i += 3
            continue
        out.append(binds[i])
        i += 1
    return out


def _copy_tree(src: str, dst: str) -> None:
    """Copy files and symlinks (as symlinks), contents only, no metadata."""
    try:
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            os.mkdir(dst)
            for entry in os.scandir(src):
                _copy_tree(entry.path, os.path.join(dst, entry.name))
        elif os.path.isfile(src):
            shutil.copyfile(src, dst)
    except OSError:
        pass  # unreadable or vanished: the sandbox simply does not get it


def _copy_etc_entry(name: str, dest_root: Path) -> None:
    dst = dest_root / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    _copy_tree(os.path.join("/etc", name), str(dst))


_etc_lock = threading.Lock()
_etc_state: tuple[Path, float] | None = None


def _loader_cache_mtime() -> float:
    try:
        return os.stat("/etc/ld.so.cache").st_mtime
    except OSError:
        return 0.0


_ETC_PREFIX = "assay-sandbox-etc-"


def _etc_owner() -> str:
    """``<pid namespace>.<pid>`` (``records.workspace.owner_tag``): a process id means
    something only within its namespace (a container sharing ``/tmp`` has its own), so only
    copies made in ours are ever swept."""
    return owner_tag()


def _sweep_dead_etc(tmp: Path) -> None:
    """Remove the /etc copies of processes that are gone: one killed with SIGKILL never ran
    its ``atexit``, and its copy would stay in the temporary directory forever. The copy's
    name carries its pid namespace and process id; a process that still exists (or is
    another user's), or another namespace's copy, is left alone."""
    for entry in dead_owners_folders(tmp, _ETC_PREFIX):
        shutil.rmtree(entry, ignore_errors=True)


def etc_dir() -> Path:
    """The host directory bound read-only at /etc in every sandbox (built on first use)."""
    global _etc_state
    mtime = _loader_cache_mtime()
    state = _etc_state
    if state is not None and state[1] == mtime and (state[0] / "passwd").exists():
        return state[0]
    with _etc_lock:
        state = _etc_state
        if state is not None and state[1] == mtime and (state[0] / "passwd").exists():
            return state[0]
        new = Path(tempfile.mkdtemp(prefix=f"{_ETC_PREFIX}{_etc_owner()}-"))
        _sweep_dead_etc(new.parent)
        names = list(_ETC_ENTRIES)
        for pattern in _ETC_GLOBS:
            names += sorted(os.path.basename(p) for p in glob.glob(f"/etc/{pattern}"))
        for name in names:
            _copy_etc_entry(name, new)
        (new / "passwd").write_text(_PASSWD)
        (new / "group").write_text(_GROUP)
        for path in _ETC_BOUND_DIRS:  # mount points for the live binds
            (new / os.path.relpath(path, "/etc")).mkdir(parents=True, exist_ok=True)
        for path in _ETC_HOST_NETWORK:
            (new / os.path.relpath(path, "/etc")).touch()
        os.chmod(new, 0o755)
        atexit.register(shutil.rmtree, new, ignore_errors=True)
        # An older copy is left in place: a concurrent execution may be starting with it; it
        # is removed at exit.
        _etc_state = (new, mtime)
        return new


def _open_parents(targets: Sequence[str]) -> list[str]:
    """``--dir`` with mode 0755 for every folder above the targets, parents first: made by the
    setup namespace's root, they must let the sandbox's users through (an existing folder, an
    image's own, is left as it is)."""
    seen: list[str] = []
    for target in targets:
        for parent in reversed(PurePosixPath(target).parents):
            if str(parent) != "/" and str(parent) not in seen:
                seen.append(str(parent))
    args: list[str] = []
    for folder in seen:
        args += ["--perms", "0755", "--dir", folder]
    return args


def bwrap_options(
    *,
    workdir: Path,
    env: Mapping[str, str],
    mounts: Sequence[Mount] = (),
    network: str = "none",
    tmp_bytes: int,
    status_fd: int | None,
    image: ImageRoot | None = None,
    user_args: Sequence[str] = (),
    several_users: bool = False,
) -> list[str]:
    """Every bwrap option (everything before the command). Mounts (and ``image``) must be
    validated; with ``image`` its root replaces the host's system. ``user_args``: the user
    namespaces to set up in and run in (:func:`assay.sandbox.userns.bwrap_user_args`: a range
    of ids mapped, none of them the host's root), else bubblewrap's own one-id namespace.
    ``several_users``: the image's own users in ``/etc``."""
    if user_args:
        args = list(user_args)
    else:
        args = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        SANDBOX_HOSTNAME,
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if network in ("none", "model-proxy"):  # model-proxy: the way out is a bound socket
        args.append("--unshare-net")
    elif network != "host":
        raise ValueError(f"network must be 'none', 'host' or 'model-proxy', not {network!r}")
    workspace = SANDBOX_WORKDIR
    if image is None:
        args += _system_args()
        args += ["--ro-bind", str(etc_dir()), "/etc"]
        for path in _ETC_BOUND_DIRS:
            args += ["--ro-bind-try", path, path]
        if network == "host":
            for path in _ETC_HOST_NETWORK:
                args += ["--ro-bind-try", path, path]
    else:
        workspace = image.workspace
        users = str(etc_dir())  # the synthetic passwd/group of this process's current copy
        binds = list(_image_args(str(image.rootfs), workspace))
        if several_users:  # the image's own passwd and group
            binds = _without_user_files(binds)
        args += [a.replace(_USERS, users, 1) if a.startswith(_USERS) else a for a in binds]
        if network == "host" and (image.rootfs / "etc" / "resolv.conf").is_file():
            args += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # made by the setup namespace's root, which the sandbox's users are not: open to all
    # of them, as a container's /tmp is (one id: the sandbox user makes them, as before)
    perms = ["--perms", "1777"] if user_args else []
    args += [*perms, "--size", str(tmp_bytes), "--tmpfs", "/dev/shm"]
    args += [*perms, "--size", str(tmp_bytes), "--tmpfs", SANDBOX_TMP]
    if user_args:  # bubblewrap makes a mount point's missing parents 0700, for its own user
        args += _open_parents([workspace, *(m.target for m in mounts)])
    args += ["--bind", str(workdir), workspace]
    for m in mounts:
        args += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
    # The root tmpfs and /dev are populated now: freeze them, so "writing outside the work
    # directory" fails instead of filling memory (device nodes stay usable).
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", workspace, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    return args


def bwrap_argv(bwrap: str, args_fd: int, command: Sequence[str]) -> list[str]:
    return [bwrap, "--args", str(args_fd), "--", *command]


def parse_json_status(raw: bytes) -> dict[str, Any]:
    """Merge the JSON documents bwrap wrote to ``--json-status-fd`` ({"child-pid": ...},
    {"exit-code": ...}); a truncated last document is ignored."""
    merged: dict[str, Any] = {}
    text = raw.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        if isinstance(doc, dict):
            merged.update(doc)
    return merged


def data_fd(text: str, name: str) -> int:
    """An in-memory file (memfd) holding ``text``, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, text.encode())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def options_fd(options: Sequence[str]) -> int:
    """The options as NUL-separated text in a memfd, for ``bwrap --args FD``."""
    for opt in options:
        if "\0" in opt:
            raise ValueError("NUL byte in a bubblewrap argument")
    return data_fd("".join(opt + "\0" for opt in options), "assay-bwrap-args")


_probe_lock = threading.Lock()
_probe_ok = False


def check_bwrap() -> None:
    """Raise :class:`SandboxUnavailable` unless our bubblewrap configuration runs here.

    The probe runs ``true`` in exactly the sandbox :func:`assay.sandbox.run_sandboxed` builds; a
    success is remembered for the life of the process, a failure is re-checked next time."""
    global _probe_ok
    if _probe_ok:
        return
    with _probe_lock:
        if _probe_ok:
            return
        bwrap = bwrap_executable()
        if bwrap is None:
            raise SandboxUnavailable("bwrap executable not found (install bubblewrap)")
        args_fd = None
        try:
            with tempfile.TemporaryDirectory(prefix="assay-bwrap-probe-") as tmp:
                opts = bwrap_options(
                    workdir=Path(tmp),
                    env=sandbox_env(None, home=SANDBOX_HOME, tmpdir=SANDBOX_TMP),
                    tmp_bytes=1024 * 1024,
                    status_fd=None,
                )
                args_fd = options_fd(opts)
                proc = subprocess.run(
                    bwrap_argv(bwrap, args_fd, ["true"]),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    env={"PATH": DEFAULT_PATH},
                    pass_fds=(args_fd,),
                    timeout=30,
                    check=False,
                )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"running {bwrap} failed: {exc}") from exc
        finally:
            if args_fd is not None:
                os.close(args_fd)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}"
            raise SandboxUnavailable(f"{bwrap} cannot create the sandbox: {err}")
        _probe_ok = True


def bwrap_available() -> bool:
    try:
        check_bwrap()
    except SandboxUnavailable:
        return False
    return True
