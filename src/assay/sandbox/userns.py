"""Several users in the sandbox: a user namespace that maps a range of ids, as containers do.

Why: bubblewrap's own ``--unshare-user`` maps one id, so inside the sandbox ``setuid(65534)``
fails with ``EINVAL`` and a task whose tests drop to ``nobody`` (``su``, ``runuser``, ``setpriv``,
``subprocess.run(user=...)``) to check that a solution cannot read a root-only file breaks. A
container has every id of ``0..65535``; so does a sandbox started through this module.

How (as root, the only case built here): a short-lived holder process (``unshare --user``)
creates a user namespace; this process writes its maps, ``0 0 1`` and ``1 BASE 65535`` (uid and
gid, ``setgroups`` allowed), opens ``/proc/PID/ns/user`` and lets the holder go; the namespace
lives on in the descriptor. bubblewrap joins it (``--userns FD``, ``--uid 0 --gid 0``) instead of
making its own, and the command runs as root *of that namespace* with the capabilities a
container's root has by default (:data:`CAPS`), which count only inside it: it can switch to
any mapped user and chown to them; it cannot touch what the namespace does not own (mounts stay
read-only, the host's other ids are unmapped). Root inside is the host's uid 0 as today's one
mapping is (the workspace is the host's root's); ids 1..65535 are the host's ``BASE + id - 1``,
ids no host account holds: the ``root:`` line of ``/etc/subuid`` and ``/etc/subgid`` when there
is one, otherwise :data:`DEFAULT_BASE`, refused if an account of the host's ``/etc/passwd``
falls inside it.

One namespace serves every sandbox of the process (each bubblewrap makes its own mount, PID,
IPC, UTS and network namespaces inside it); each execution gets a duplicate of the descriptor.
Where the range cannot be mapped (not root: ``newuidmap`` from ``/etc/subuid`` is not wired up
yet; ``unshare`` missing; the kernel refuses), :func:`several_users_fd` says why once and the
sandbox keeps today's single mapping.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time

__all__ = ["CAPS", "DEFAULT_BASE", "RANGE", "several_users_fd"]

#: Ids mapped besides root: ``1..RANGE`` (``nobody`` is 65534).
RANGE = 65535
#: The first host id of the range when ``/etc/subuid`` has no ``root:`` line.
DEFAULT_BASE = 0x70000000
#: What a container's root may do by default (Docker's list, less raw sockets, device nodes,
#: chroot and audit): inside the namespace only.
CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
        "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE")
#: Seconds the holder gets to enter its namespace.
HOLDER_SECONDS = 5.0

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, object] = {}


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


def _make() -> tuple[int | None, str]:
    """A user namespace with the range mapped, as a descriptor, or None and why not."""
    if os.geteuid() != 0:
        return None, ("assay does not run as root (mapping a range through newuidmap and "
                      "/etc/subuid is not supported yet)")
    unshare = shutil.which("unshare")
    if unshare is None:
        return None, "util-linux's unshare is not installed"
    uid_base, gid_base = _base("uid"), _base("gid")
    for base in {uid_base, gid_base}:
        clash = _clashes(base)
        if clash is not None:
            return None, f"the host account {clash} lies in the id range from {base}"
    mine = os.readlink("/proc/self/ns/user")
    holder = subprocess.Popen([unshare, "--user", "sleep", "60"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HOLDER_SECONDS
        while True:
            try:
                if os.readlink(f"/proc/{holder.pid}/ns/user") != mine:
                    break
            except OSError:
                pass
            if holder.poll() is not None or time.monotonic() > deadline:
                why = (holder.stderr.read().decode(errors="replace").strip()
                       if holder.poll() is not None and holder.stderr else "")
                return None, f"a user namespace could not be made ({why or 'timed out'})"
            time.sleep(0.002)
        proc = f"/proc/{holder.pid}"
        try:
            with open(f"{proc}/uid_map", "w") as fh:
                fh.write(f"0 0 1\n1 {uid_base} {RANGE}\n")
            with open(f"{proc}/setgroups", "w") as fh:
                fh.write("allow")
            with open(f"{proc}/gid_map", "w") as fh:
                fh.write(f"0 0 1\n1 {gid_base} {RANGE}\n")
            fd = os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            return None, f"the kernel refused the id maps ({exc.strerror})"
        return fd, f"ids 0-{RANGE} mapped (1-{RANGE} to host ids from {uid_base})"
    finally:
        holder.kill()
        holder.wait()
        if holder.stderr is not None:
            holder.stderr.close()


def several_users_fd() -> tuple[int | None, str]:
    """A new descriptor of this process's several-users namespace (the caller passes it to
    bubblewrap and closes it), or None and why the range cannot be mapped here (logged once).
    The second value describes what was mapped, for the record."""
    with _lock:
        if "fd" not in _state:
            fd, why = _make()
            _state["fd"], _state["why"] = fd, why
            if fd is None:
                _log.warning("several users were asked for, but this machine cannot map a "
                             "range of ids: %s; the sandbox maps one user", why)
        held, why = _state["fd"], str(_state["why"])
        if not isinstance(held, int):
            return None, why
        return os.dup(held), why
