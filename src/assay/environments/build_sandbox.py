"""The sandbox an image is built in: bubblewrap with the image's own root filesystem as ``/``.

A recipe's steps (shell lines, pip, apt, copies) are the recipe author's code, so they run
inside the image being built and nowhere else: the staging root filesystem is bound writable
as ``/``, with a fresh ``/proc`` and a minimal ``/dev``; nothing of the host's file system is
visible except what a step is explicitly given read-only (the recipe's folder for a copy).
The process is uid 0 of its own user namespace (``apt-get`` and ``dpkg`` need to be root, and
in a user namespace that root owns nothing outside it), in its own PID, IPC and UTS namespaces,
with ``--die-with-parent`` so a killed build leaves no process behind.

Which user namespace: bubblewrap's own (``--unshare-user``) maps one uid, so a package whose
files or maintainer scripts name another owner (``_apt``'s download folder, a log owned by
group ``adm``) fails to install. When assay runs as root (CI, these machines), the build
uses the sandbox's two namespaces (:mod:`assay.sandbox.userns`): ids 0-65535 of the build are
the host's ``BASE + n``, so a step is never the host's root, however it gets out. Its files
must still be stored as the image says (root's files owned by 0 on disk, as every image of the
store is), so the step's ``/`` is the staging folder seen through a writable idmapped mount
(:func:`assay.sandbox.idmap.idmapped_mount`, the final namespace's map): what the disk says
0 owns, the step sees as its own root's, and what the step's root writes lands owned by 0.
bubblewrap makes the mounts in the setup namespace (host root there, so it reaches the staging
folder under the store) and runs the step in the final one, whose root the host's ``setpriv``
(lent from the host's ``/usr`` and started through the host's loader) makes the process before
anything of the step runs, with every capability of that namespace and of no other. The
recipe's own folder (a copy step's source) is shown through a read-only idmapped mount too,
so a file of the checkout mode 0600 reads as it does to a container's root.
Where the range cannot be mapped or the kernel cannot make the mount, a root-run build falls
back to a namespace of its own mapping ids 0-65535 onto themselves (:func:`build_users`: a
holder process entered with ``nsenter``), says why once, and the image's record says how its
steps ran. Those ids own nothing but the image being built (nothing else of the host is
mounted), but the step is then the host's root, with capabilities over that namespace only.

Network (:class:`StepEgress`): a step that needs the network (pip, apt, a shell line: every
step of a recipe) runs in a network namespace of its own (``--unshare-net``: loopback only, no
route, no DNS) and reaches the outside only through the registry proxy on the host
(:mod:`assay.environments.egress`: Debian's archive, PyPI, npm and the recipe's own mirror,
ports 80 and 443). The path is the model proxy's (:mod:`assay.sandbox.forwarder`): the
launcher, run by the host's own python3 through the host's dynamic loader (the image being
built may have no python, or a broken one), listens on ``127.0.0.1:``:data:`EGRESS_PORT`,
forks the byte forwarder, then becomes the step's command; the forwarder pumps each
connection to the proxy's Unix socket, the one file bound in. The step finds the proxy through
``http_proxy``/``https_proxy`` (both cases; ``no_proxy`` for loopback) and apt through its
``Acquire::http(s)::Proxy`` settings (:mod:`assay.environments.debian` writes them in its
build-only apt configuration, removed before the image is digested). The host's ``/usr``
(read-only) and the socket are mounted inside the ``/dev`` bubblewrap makes for the step (a
tmpfs of its own), so nothing is created in, or left in, the image. What is not narrowed:
``mmdebstrap``'s base install, which runs on the host before the image exists, and what is
fetched from an allowed registry (any package there).

This is not :mod:`assay.sandbox.bwrap`: that one runs candidate code as an unprivileged user
on a read-only copy of the host's system; this one makes an image and must write to it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from assay.errors import SandboxUnavailable
from assay.sandbox.forwarder import EXEC_FAILED, FAILED, READY
from assay.sandbox.host_runtime import host_loader, host_python_argv, inside, loader_argv
from assay.sandbox.idmap import idmapped_mount
from assay.sandbox.netproxy import forwarder_source, read_available
from assay.sandbox.userns import RANGE, MappedUsers, mapped_userns

#: PATH of build steps and of images whose recipe sets none (Debian's root default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUILD_HOSTNAME = "assay-build"
#: What the image holds of a step's output when it fails: the last lines, each cut short.
TAIL_LINES = 40
TAIL_LINE_CHARS = 400
#: Where a step's lent host parts appear (its network's, and the ``setpriv`` of a mapped
#: build): inside bubblewrap's own ``/dev`` (see above).
EGRESS_USR = "/dev/.assay-host-usr"
EGRESS_SOCKET = "/dev/.assay-registry.sock"
#: The port the forwarder listens on in a step's own network namespace.
EGRESS_PORT = 3128
NO_PROXY = "localhost,127.0.0.1,::1"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepEgress:
    """A step's way out: the registry proxy's Unix socket on the host, reached through a
    forwarder on ``127.0.0.1:port`` inside the step's network namespace."""

    socket: Path
    port: int = EGRESS_PORT

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The proxy variables of a step (curl reads the lower-case ones, most tools both)."""
        return {"http_proxy": self.url, "https_proxy": self.url, "HTTP_PROXY": self.url,
                "HTTPS_PROXY": self.url, "no_proxy": NO_PROXY, "NO_PROXY": NO_PROXY}


@dataclass(frozen=True)
class StepRun:
    """How one sandboxed command ended: its exit status (None when it timed out) and the last
    lines of its output (stdout and stderr together)."""

    returncode: int | None
    tail: list[str]
    #: Why the step's command never ran (the forwarder did not start, or the command could
    #: not be executed), when it had a :class:`StepEgress`.
    egress_failure: str | None = None
    #: Whether :attr:`egress_failure` is assay's (the forwarder), not the recipe's.
    infra: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable("bwrap is not installed (scripts/bootstrap.sh installs "
                                 "bubblewrap)")
    return found


#: Ids a root-run build maps onto the host's (:data:`assay.sandbox.userns.RANGE`).
MAPPED_IDS = RANGE


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the building process dies (PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@dataclass(frozen=True)
class BuildUsers:
    """The user namespace a root-run build's steps run in (see the module's docstring).
    Mapped: ``users`` holds the sandbox's two namespaces and ``view`` shows ``root``, the
    staging folder, through the final one's idmap. The fallback: ``identity``, the
    ``/proc/<pid>/ns/user`` of a namespace mapping ids onto themselves. ``note`` is what the
    image's record says of it."""

    root: Path
    note: str
    users: MappedUsers | None = None
    view: Path | None = None
    identity: str | None = None

    def source(self, rootfs: Path) -> Path:
        """What bubblewrap binds as ``/`` for ``rootfs`` (the view of it, when mapped)."""
        if self.view is None:
            return rootfs
        if rootfs != self.root:
            raise ValueError(f"{rootfs} is not the staging folder {self.root} of this build")
        return self.view

    def pass_fds(self) -> tuple[int, ...]:
        return () if self.users is None else (self.users.setup_fd, self.users.final_fd)


_said: set[str] = set()


def _fallback_said(why: str) -> None:
    if why not in _said:
        _said.add(why)
        _log.warning("image build steps run as the host's root in a user namespace of their "
                     "own (%s)", why)


@contextlib.contextmanager
def build_users(rootfs: Path) -> Iterator[BuildUsers | None]:
    """The namespace of a build into ``rootfs`` (the staging folder, empty or not), for the
    duration of the build. Not root: None (the build uses bubblewrap's one-uid namespace,
    which maps onto the building user, never onto root)."""
    if os.geteuid() != 0:
        yield None
        return
    users, why = mapped_userns()  # which also needs the host's setpriv under /usr
    if users is not None and not host_loader(EGRESS_USR):
        users.close()
        users, why = None, "the host's dynamic loader is not under /usr (to start setpriv)"
    with contextlib.ExitStack() as stack:
        if users is not None:
            stack.callback(users.close)
            try:
                view = stack.enter_context(idmapped_mount(rootfs, users.final_fd,
                                                          read_only=False))
            except OSError as exc:
                why = f"the staging folder cannot be shown through an idmapped mount ({exc})"
            else:
                yield BuildUsers(rootfs, f"build steps ran as the build's root, the host's uid "
                                 f"{users.uid_base} (ids 0-{RANGE - 1} mapped from it), "
                                 "never the host's root", users=users, view=view)
                return
    _fallback_said(why)
    with identity_userns() as ns:
        if ns is None:
            yield None
            return
        yield BuildUsers(rootfs, f"build steps ran as the host's root in a user namespace of "
                         f"their own ({why})", identity=ns)


@contextlib.contextmanager
def lent_context(folder: Path, ids: BuildUsers | None) -> Iterator[Path]:
    """The recipe's folder as a copy step is shown it: through a read-only idmapped mount
    when the build's ids are mapped (its files then read as they would to a container's
    root), else as it is."""
    if ids is None or ids.users is None:
        yield folder
        return
    with contextlib.ExitStack() as stack:
        try:
            view = stack.enter_context(idmapped_mount(folder, ids.users.final_fd,
                                                      read_only=True))
        except OSError as exc:
            _log.warning("the recipe's folder %s is shown as it is (%s): files only its "
                         "owner may read are closed to the build's steps", folder, exc)
            view = folder
        yield view


@contextlib.contextmanager
def identity_userns() -> Iterator[str | None]:
    """A user namespace mapping ids 0-65535 to themselves, held open by a sleeping process for
    the duration of a build: yields its ``/proc/<pid>/ns/user`` path. Not root, or no
    ``unshare``/``nsenter``: None (the build then uses bubblewrap's one-uid namespace)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        yield None
        return
    holder = subprocess.Popen(["unshare", "--user", "--", "sleep", "infinity"],
                              stdin=subprocess.DEVNULL, start_new_session=True,
                              preexec_fn=_die_with_parent)
    try:
        ours = os.readlink("/proc/self/ns/user")
        ns = f"/proc/{holder.pid}/ns/user"
        deadline = time.monotonic() + 30
        while True:
            try:
                if os.readlink(ns) != ours:
                    break
            except FileNotFoundError:
                pass
            if holder.poll() is not None or time.monotonic() > deadline:
                raise SandboxUnavailable("could not create a user namespace for the build "
                                         "(unshare --user failed)")
            time.sleep(0.01)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as fh:
                fh.write(f"0 0 {MAPPED_IDS}\n")
        yield ns
    finally:
        holder.kill()
        holder.wait()


def _become_root() -> list[str]:
    """The host's ``setpriv`` as a mapped step starts it: it makes the process the final
    namespace's root (the host's ``BASE``) and keeps every capability bubblewrap left."""
    setpriv = os.path.realpath(str(shutil.which("setpriv")))
    lent = loader_argv([inside(setpriv, EGRESS_USR)], 0, EGRESS_USR)
    if lent is None:  # build_users checked the loader; kept for the type checker
        raise SandboxUnavailable("the host's dynamic loader is not under /usr")
    return [*lent, "--reuid=0", "--regid=0", "--clear-groups", "--"]


def build_argv(bwrap: str, rootfs: Path, command: Sequence[str], *, env: Mapping[str, str],
               cwd: str = "/", writable: bool = True, network: bool = True,
               ro_binds: Sequence[tuple[Path, str]] = (), userns: BuildUsers | None = None,
               egress: StepEgress | None = None, status_fd: int | None = None
               ) -> list[str]:
    """The bwrap command line running ``command`` with ``rootfs`` as ``/``. ``ro_binds``
    are host paths shown read-only at the given places inside (their mount points must exist
    in the root filesystem, or be under ``/dev``). ``userns``: the build's namespace from
    :func:`build_users` (its descriptors must reach bwrap: :meth:`BuildUsers.pass_fds`), else
    bubblewrap makes a one-uid one. ``egress`` (with ``status_fd``, the launcher's status
    pipe): the step's network is the registry proxy alone (``network`` is then ignored)."""
    users = None if userns is None else userns.users
    if users is not None:
        # bwrap's mount points, made here as the disk's root: bwrap itself is the setup
        # namespace's root, whose writes the idmapped view refuses (its owner is unmapped)
        for point in ("proc", "dev"):
            (rootfs / point).mkdir(exist_ok=True)
        prefix = [bwrap, "--userns", str(users.setup_fd), "--userns2", str(users.final_fd)]
        ids: list[str] = []
    elif userns is not None and userns.identity is not None:
        prefix = ["nsenter", f"--user={userns.identity}", "--", bwrap]
        ids = []
    else:
        prefix = [bwrap]
        ids = ["--unshare-user", "--uid", "0", "--gid", "0"]
    source = rootfs if userns is None else userns.source(rootfs)
    argv = [*prefix, "--bind" if writable else "--ro-bind", str(source), "/",
            "--proc", "/proc", "--dev", "/dev", *ids, "--cap-add", "ALL",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", BUILD_HOSTNAME, "--die-with-parent", "--new-session",
            "--clearenv", "--chdir", cwd]
    if not writable:  # a read-only look into an image still needs somewhere to write
        argv += ["--tmpfs", "/tmp"]
    if not network or egress is not None:
        argv.append("--unshare-net")
    if egress is not None or users is not None:
        argv += ["--ro-bind", "/usr", EGRESS_USR]
    if egress is not None:
        lent = host_python_argv(EGRESS_USR)
        if lent is None or status_fd is None:
            raise SandboxUnavailable("a build step's network needs the host's /usr/bin/python3 "
                                     "and its dynamic loader under /usr (for the forwarder)")
        argv += ["--ro-bind", str(egress.socket), EGRESS_SOCKET]
        command = [*lent, "-I", "-S", "-c", forwarder_source(), EGRESS_SOCKET,
                   str(egress.port), str(status_fd), "--", *command]
        env = {**env, **egress.env()}
    if users is not None:  # first of all: nothing of the step runs as the host's root
        command = [*_become_root(), *command]
    for host, inside_at in ro_binds:
        argv += ["--ro-bind", str(host), inside_at]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def run_in_root(rootfs: Path, command: Sequence[str], *, env: Mapping[str, str],
                cwd: str = "/", writable: bool = True, network: bool = True,
                ro_binds: Sequence[tuple[Path, str]] = (), timeout: float | None = None,
                line: Callable[[str], object] | None = None,
                userns: BuildUsers | None = None, egress: StepEgress | None = None) -> StepRun:
    """Run ``command`` in the build sandbox (:func:`run_streamed`: bwrap's PID namespace ends
    with its process group); with ``egress``, behind the forwarder (see the module's
    docstring), and a command that never started says why in :attr:`StepRun.egress_failure`."""
    held = () if userns is None else userns.pass_fds()
    if egress is None:
        argv = build_argv(bwrap_path(), rootfs, command, env=env, cwd=cwd, writable=writable,
                          network=network, ro_binds=ro_binds, userns=userns)
        return run_streamed(argv, timeout=timeout, line=line, pass_fds=held)
    status_r, status_w = os.pipe()
    open_w = [status_w]

    def close_w() -> None:  # once the child has its copy: EOF comes when the sandbox ends
        os.close(open_w.pop())

    try:
        argv = build_argv(bwrap_path(), rootfs, command, env=env, cwd=cwd, writable=writable,
                          network=False, ro_binds=ro_binds, userns=userns, egress=egress,
                          status_fd=status_w)
        run = run_streamed(argv, timeout=timeout, line=line, pass_fds=(status_w, *held),
                           after_start=close_w)
        status = read_available(status_r).decode("utf-8", "replace").splitlines()
    finally:
        os.close(status_r)
        if open_w:
            close_w()
    for text in status:
        if text.startswith(FAILED):
            return dataclasses.replace(run, egress_failure="the build's network forwarder did "
                                       "not start: " + text[len(FAILED):].strip(), infra=True)
        if text.startswith(EXEC_FAILED):
            return dataclasses.replace(run, egress_failure="the command could not be "
                                       "executed: " + text[len(EXEC_FAILED):].strip())
    if READY not in status and run.returncode is not None:
        return dataclasses.replace(run, egress_failure="the build's network forwarder never "
                                   "reported that it was ready", infra=True)
    return run


def run_streamed(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float | None = None,
                 line: Callable[[str], object] | None = None,
                 pass_fds: Sequence[int] = (),
                 after_start: Callable[[], object] | None = None) -> StepRun:
    """Run ``argv`` in a session of its own, killed if the caller dies; each output line (stdout
    and stderr together, cut at :data:`TAIL_LINE_CHARS`) to ``line``, the last
    :data:`TAIL_LINES` kept. Past ``timeout`` seconds the whole process group is killed."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(env) if env is not None else None,
                            preexec_fn=_die_with_parent, pass_fds=tuple(pass_fds))
    if after_start is not None:
        after_start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        _killpg(proc.pid)

    timer = threading.Timer(timeout, kill) if timeout else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace").rstrip("\n")[:TAIL_LINE_CHARS]
            tail.append(text)
            if line is not None:
                line(text)
        code = proc.wait()
    finally:
        if timer:
            timer.cancel()
        if proc.poll() is None:
            _killpg(proc.pid)
            proc.wait()
    return StepRun(None if timed_out.is_set() else code, list(tail))


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
