"""Users in the sandbox: ids 0..65535 mapped onto host ids no account holds, as containers do.

Why: bubblewrap's own ``--unshare-user`` run as root maps one id, the sandbox's, onto the
caller's: when assay runs as root (CI, these machines) every sandboxed process is the host's
uid 0, and what it creates is the host root's; it can read every root-owned file that is
mounted into it, whatever the file's mode; and ``setuid(65534)`` fails with ``EINVAL``, so a
task whose tests drop to ``nobody`` (``su``, ``runuser``, ``setpriv``, ``subprocess.run(user=...)``)
breaks. A container has every id of ``0..65535``, and none of them is the host's root.

How (as root, the only case built here). Two user namespaces, made once a process by short-lived
holder processes and kept open as descriptors:

* the *setup* namespace maps ``0 0 1`` and ``1 BASE 65536``: bubblewrap joins it
  (``--userns``) and makes the sandbox's mounts as its uid 0, the host's root, so it reaches
  every source path as it does today (a workspace under a ``0700`` folder of root's, the image
  store under ``/root/.cache``);
* the *final* namespace, a child of the setup one, maps ``0 1 65536``: sandbox id ``n`` is the
  host's ``BASE + n``. bubblewrap switches to it once the mounts are made (``--userns2``), and
  the first thing it runs is the host's ``setpriv``, which makes the process the sandbox's user
  (uid 0 with a container root's capabilities, :data:`CAPS`, when several users are asked for;
  uid 1000 with no capability at all otherwise) before it ``exec``-s the command. The host's
  uid 0 is not mapped in the final namespace, so nothing there can become it again.

So sandbox root is the host's ``BASE``, an unprivileged uid; capabilities count only inside the
final namespace and only over what it maps (a file of the host's root, ``0600``, mounted
read-only, is unreadable even to sandbox root: its owner is not mapped). ``BASE``: the
``root:`` (or ``0:``) line of ``/etc/subuid`` and ``/etc/subgid`` when there is one with room
for 65536 ids, otherwise :data:`DEFAULT_BASE`; refused if an account of the host's
``/etc/passwd`` falls inside the range.

Writable folders (the work directory, writable mounts) are handed over before each execution
(:func:`hand_over`): whatever in them belongs to a host id outside the range (files assay
made as root) becomes the sandbox user's, so the sandbox can write there; what belongs to a
mapped id (files the sandbox left owned by ``nobody``, say) keeps its owner. Afterwards assay
reads them as host root, which reads anything. Only the one mode needs saying: with one user
(the default) the command runs as sandbox uid 1000 (host ``BASE + 1000``) and cannot switch,
as before; with several (``environment.users: several``) it runs as sandbox root (host
``BASE``) and can switch to any mapped id.

Where the range cannot be mapped (not root: ``newuidmap`` from ``/etc/subuid`` is not wired up;
``unshare``, ``nsenter`` or ``setpriv`` missing; the kernel refuses), :func:`mapped_userns`
says why once and the sandbox keeps bubblewrap's single mapping (as an unprivileged user that
maps the sandbox onto that user, never onto root).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CAPS", "DEFAULT_BASE", "RANGE", "MappedUsers", "bwrap_user_args", "hand_over",
           "mapped_userns", "readable_by_all", "switch_argv"]

#: How many ids are mapped: sandbox ids ``0..RANGE-1`` (``nobody`` is 65534).
RANGE = 65536
#: The first host id of the range when ``/etc/subuid`` has no ``root:`` line.
DEFAULT_BASE = 0x70000000
#: What a container's root may do by default (Docker's list, less raw sockets, device nodes,
#: chroot and audit): inside the final namespace only.
CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
        "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE")
#: What bubblewrap's last process keeps so that ``setpriv`` can make it the sandbox's user
#: (and bubblewrap can enter a work directory of mode 0700, the sandbox user's, before it).
#: They count over mapped ids only, and none survives the command's ``exec`` for uid 1000.
SWITCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")
#: Seconds a holder gets to enter its namespace.
HOLDER_SECONDS = 5.0

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, object] = {}


@dataclass(frozen=True)
class MappedUsers:
    """Descriptors of this process's two namespaces (duplicates: the caller closes them) and
    the host ids the sandbox's ids start from."""

    setup_fd: int
    final_fd: int
    uid_base: int
    gid_base: int

    def host_ids(self, uid: int, gid: int) -> tuple[int, int]:
        """The host's uid and gid of the sandbox's ``uid`` and ``gid``."""
        return self.uid_base + uid, self.gid_base + gid

    def close(self) -> None:
        for fd in (self.setup_fd, self.final_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def _base(kind: str) -> int:
    """The host's first id of the range: the ``root:`` (or ``0:``) line of ``/etc/subuid`` or
    ``/etc/subgid`` with room for :data:`RANGE` ids, else :data:`DEFAULT_BASE`."""
    try:
        with open(f"/etc/sub{kind}", encoding="utf-8") as fh:
            for line in fh:
                parts = line.strip().split(":")
                if len(parts) == 3 and parts[0] in ("root", "0") and int(parts[2]) >= RANGE:
                    return int(parts[1])
    except (OSError, ValueError):
        pass
    return DEFAULT_BASE


def _clashes(base: int) -> str | None:
    """A host account whose uid falls inside the range, if one does."""
    try:
        with open("/etc/passwd", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split(":")
                if len(parts) > 2 and parts[2].isdigit() and base <= int(parts[2]) < base + RANGE:
                    return f"{parts[0]} (uid {parts[2]})"
    except OSError:
        pass
    return None


def _holder(argv: list[str], parent_ns: str) -> subprocess.Popen[bytes]:
    """A sleeping process in a new user namespace (a child of ``parent_ns``), started by
    ``argv``; raises OSError with why when it does not get there in time."""
    holder = subprocess.Popen([*argv, "sleep", "60"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + HOLDER_SECONDS
    while True:
        try:
            if os.readlink(f"/proc/{holder.pid}/ns/user") not in (parent_ns, _own_ns()):
                return holder
        except OSError:
            pass
        if holder.poll() is not None or time.monotonic() > deadline:
            why = (holder.stderr.read().decode(errors="replace").strip()
                   if holder.poll() is not None and holder.stderr else "")
            _stop(holder)
            raise OSError(f"a user namespace could not be made ({why or 'timed out'})")
        time.sleep(0.002)


def _own_ns() -> str:
    return os.readlink("/proc/self/ns/user")


def _stop(holder: subprocess.Popen[bytes]) -> None:
    holder.kill()
    holder.wait()
    if holder.stderr is not None:
        holder.stderr.close()


def _make() -> tuple[tuple[int, int, int, int] | None, str]:
    """The two namespaces as descriptors with their bases, or None and why not."""
    if os.geteuid() != 0:
        return None, ("assay does not run as root (mapping a range through newuidmap and "
                      "/etc/subuid is not supported yet)")
    tools = {name: shutil.which(name) for name in ("unshare", "nsenter", "setpriv", "perl")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        return None, f"{', '.join(missing)} not installed (util-linux, perl-base)"
    for name in ("setpriv", "perl"):
        if not os.path.realpath(str(tools[name])).startswith("/usr/"):
            return None, f"the host's {name} is not under /usr"
    uid_base, gid_base = _base("uid"), _base("gid")
    for base in {uid_base, gid_base}:
        clash = _clashes(base)
        if clash is not None:
            return None, f"the host account {clash} lies in the id range from {base}"
    holders: list[subprocess.Popen[bytes]] = []
    try:
        setup = _holder([str(tools["unshare"]), "--user"], _own_ns())
        holders.append(setup)
        proc = f"/proc/{setup.pid}"
        try:
            with open(f"{proc}/uid_map", "w") as fh:
                fh.write(f"0 0 1\n1 {uid_base} {RANGE}\n")
            with open(f"{proc}/setgroups", "w") as fh:
                fh.write("allow")
            with open(f"{proc}/gid_map", "w") as fh:
                fh.write(f"0 0 1\n1 {gid_base} {RANGE}\n")
        except OSError as exc:
            return None, f"the kernel refused the id maps ({exc.strerror})"
        setup_ns = f"{proc}/ns/user"
        enter = [str(tools["nsenter"]), f"--user={setup_ns}", "--"]
        final = _holder([*enter, str(tools["unshare"]), "--user", "--"], os.readlink(setup_ns))
        holders.append(final)
        # a child namespace's maps are written from its parent, in the parent's ids
        fin = f"/proc/{final.pid}"
        script = (f"echo '0 1 {RANGE}' > {fin}/uid_map && echo allow > {fin}/setgroups && "
                  f"echo '0 1 {RANGE}' > {fin}/gid_map")
        done = subprocess.run([*enter, "/bin/sh", "-c", script], capture_output=True,
                              timeout=HOLDER_SECONDS, check=False)
        if done.returncode != 0:
            return None, ("the kernel refused the final id maps ("
                          + done.stderr.decode(errors="replace").strip() + ")")
        setup_fd = os.open(setup_ns, os.O_RDONLY | os.O_CLOEXEC)
        final_fd = os.open(f"{fin}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        return (setup_fd, final_fd, uid_base, gid_base), (
            f"ids 0-{RANGE - 1} mapped to host ids from {uid_base} (gids from {gid_base})")
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    finally:
        for holder in holders:
            _stop(holder)


def mapped_userns() -> tuple[MappedUsers | None, str]:
    """New descriptors of this process's namespaces (the caller closes them), or None and why
    the range cannot be mapped here (logged once). The text describes what was mapped, for
    the record."""
    with _lock:
        if "made" not in _state:
            fresh, why = _make()
            _state["made"], _state["why"] = fresh, why
            if fresh is None:
                _log.warning("this machine cannot map a range of ids into the sandbox: %s; "
                             "the sandbox maps one user", why)
        held, why = _state["made"], str(_state["why"])
        if not isinstance(held, tuple):
            return None, why
        setup_fd, final_fd, uid_base, gid_base = held
        return MappedUsers(os.dup(setup_fd), os.dup(final_fd), uid_base, gid_base), why


def switch_argv(setpriv: list[str], *, several: bool, uid: int, gid: int) -> list[str]:
    """The ``setpriv`` prefix that makes bubblewrap's last process the sandbox's user before
    it runs the command: root with :data:`CAPS` (``several``), or ``uid``/``gid`` with no
    capability left anywhere (effective, inheritable, ambient, bounding)."""
    ids = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
           "--inh-caps=-all", "--ambient-caps=-all"]
    if several:
        keep = ",".join("+" + cap[len("CAP_"):].lower() for cap in CAPS)
        return [*setpriv, *ids, f"--bounding-set=-all,{keep}", "--"]
    return [*setpriv, *ids, "--bounding-set=-all", "--"]


#: The last step before the command (the switch cannot tell a command it could not execute
#: from one that failed): the host's perl takes the status pipe's descriptor off the command
#: (close-on-exec) and ``exec``-s it, or writes why not on that pipe, which the command never
#: holds, so a command cannot fake the failure by printing it.
_LAUNCH = ('open(my $s, ">&=", shift @ARGV) or exit 127; fcntl($s, 2, 1); my $c = $ARGV[0]; '
           '{ exec {$c} @ARGV }; print $s "' + "{tag}" + ' $c: $!\\n"; exit 127')
#: The status line's start when the command could not be executed.
EXEC_FAILED = "assay-exec-failed"


def launch_argv(perl: list[str], status_fd: int) -> list[str]:
    """The launcher that becomes the command or reports on ``status_fd`` why it could not."""
    return [*perl, "-e", _LAUNCH.replace("{tag}", EXEC_FAILED), str(status_fd)]


def bwrap_user_args(users: MappedUsers, *, several: bool) -> list[str]:
    """bubblewrap's options for the two namespaces: set up in one, run in the other, with
    only the capabilities ``setpriv`` needs (and a container root's when ``several``)."""
    args = ["--userns", str(users.setup_fd), "--userns2", str(users.final_fd),
            "--cap-drop", "ALL"]
    for cap in sorted(set(SWITCH_CAPS) | (set(CAPS) if several else set())):
        args += ["--cap-add", cap]
    return args


def hand_over(paths: Iterable[Path], users: MappedUsers, uid: int, gid: int) -> None:
    """Give the sandbox's ``uid``/``gid`` whatever under ``paths`` belongs to a host id outside
    the mapped range, symbolic links as links (never followed: the tree may hold what a
    sandbox made); what already belongs to a mapped id keeps its owner."""
    host_uid, host_gid = users.host_ids(uid, gid)

    def fix(name: str | Path, st: os.stat_result, dir_fd: int | None) -> None:
        new_uid = -1 if 0 <= st.st_uid - users.uid_base < RANGE else host_uid
        new_gid = -1 if 0 <= st.st_gid - users.gid_base < RANGE else host_gid
        if new_uid != -1 or new_gid != -1:
            os.chown(name, new_uid, new_gid, dir_fd=dir_fd, follow_symlinks=False)

    for path in paths:
        st = os.lstat(path)
        fix(path, st, None)
        if not stat.S_ISDIR(st.st_mode):
            continue
        for _top, dirs, files, top_fd in os.fwalk(path, follow_symlinks=False):
            for name in (*dirs, *files):
                try:
                    fix(name, os.stat(name, dir_fd=top_fd, follow_symlinks=False), top_fd)
                except FileNotFoundError:
                    continue


def readable_by_all(root: Path) -> None:
    """Let every user read a private copy that a sandbox gets read-only (folders gain r and x
    for all, files r; links are left as they are): its users are not the host's root, which
    owns the copy, so a 0600 file copied from a task (a checkout made under umask 077) would
    be unreadable to them where a container's root reads it."""
    def widen(name: str | Path, dir_fd: int | None) -> None:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            want = st.st_mode | 0o555
        elif stat.S_ISREG(st.st_mode):
            want = st.st_mode | 0o444
        else:
            return
        if want != st.st_mode:
            os.chmod(name, stat.S_IMODE(want), dir_fd=dir_fd)

    widen(root, None)
    if not root.is_dir() or root.is_symlink():
        return
    for _top, dirs, files, top_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            widen(name, top_fd)
