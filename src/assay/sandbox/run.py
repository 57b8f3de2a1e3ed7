"""``run_sandboxed``: check the arguments, build the command line, hand it to the watchdog.

The orchestrator: everything a call decides before the first process exists (isolation, mounts,
environment, record files, the limit plan) is here; running and killing is
:mod:`assay.sandbox.execute`, pipes :mod:`assay.sandbox.pipes`, what the end means
:mod:`assay.sandbox.outcome`. Whatever happens, every descriptor, sink and cgroup this call
created is released before it returns.

Process layout (``isolation="bwrap"``)::

    /bin/sh wrapper  --exec-->  bwrap (monitor, host side)
                                  └─ bwrap as PID 1 of the new PID namespace (reaper)
                                       └─ the command and everything it starts

The shell wrapper (:mod:`assay.sandbox.wrapper`) joins the execution's cgroups and sets rlimits,
then ``exec``-s bubblewrap, so every process of the execution is accounted from its first
instruction and no ``preexec_fn`` is needed (it is unsafe with threads, and callers run
executions from several threads at once).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from assay.errors import SandboxFailed
from assay.sandbox.bwrap import (
    DEFAULT_PATH,
    SANDBOX_GID,
    SANDBOX_HOME,
    SANDBOX_TMP,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    ImageRoot,
    Mount,
    bwrap_argv,
    bwrap_executable,
    bwrap_options,
    check_bwrap,
    options_fd,
    sandbox_env,
)
from assay.sandbox.diskimage import DiskImage, open_for
from assay.sandbox.execute import KILL_GRACE_SECONDS, execute
from assay.sandbox.host_runtime import HOST_USR_MOUNT, host_python_argv, host_usr_mount, loader_argv
from assay.sandbox.host_runtime import inside as host_inside
from assay.sandbox.idmap import idmapped_view
from assay.sandbox.limits import Limits
from assay.sandbox.netproxy import ProxySession, ProxyTarget, read_available, start_proxy
from assay.sandbox.outcome import REASONS
from assay.sandbox.pipes import TAIL_BYTES, OutputSink
from assay.sandbox.plan import LimitPlan, plan_limits
from assay.sandbox.result import ExecResult, not_started
from assay.sandbox.userns import (
    EXEC_FAILED,
    bwrap_user_args,
    hand_over,
    launch_argv,
    mapped_userns,
    switch_argv,
)

__all__ = ["KILL_GRACE_SECONDS", "REASONS", "TAIL_BYTES", "ExecResult", "run_sandboxed"]

DEFAULT_LIMITS = Limits()
_MIB = 1024 * 1024


def _resolve_plain(argv0: str, path: str, workdir: Path) -> str | None:
    if "/" in argv0:
        p = Path(argv0) if os.path.isabs(argv0) else workdir / argv0
        return str(p) if os.access(p, os.X_OK) and p.is_file() else None
    return shutil.which(argv0, path=path)


def _proxy_failure(session: ProxySession, status_fd: int) -> str | None:
    return session.failure(read_available(status_fd))


def _exec_failure(status_fd: int) -> str | None:
    for line in read_available(status_fd).decode("utf-8", "replace").splitlines():
        if line.startswith(EXEC_FAILED):
            return "the command could not be executed: " + line[len(EXEC_FAILED):].strip()
    return None


def _switch_tools(in_image: bool) -> tuple[list[str], list[str]] | None:
    """The host's ``setpriv`` and ``perl`` as the sandbox starts them (:mod:`assay.sandbox.userns`):
    in an image through the host's loader from the host's /usr. None: no host loader to run
    them with (the sandbox then keeps one id)."""
    tools = [os.path.realpath(shutil.which(name) or f"/usr/bin/{name}")
             for name in ("setpriv", "perl")]
    if not in_image:
        return [tools[0]], [tools[1]]
    lent = [loader_argv([host_inside(tool)], 0) for tool in tools]
    if lent[0] is None or lent[1] is None:
        return None
    return lent[0], lent[1]


def _user_switch(tools: tuple[list[str], list[str]], several: bool, in_image: bool,
                 mounts: list[Mount], inside: str, launch_fd: int | None) -> list[str]:
    """The prefix that makes the command the sandbox's user: the host's ``setpriv``, then (with
    ``launch_fd``) the launcher that reports a command it could not execute (in an image, the
    host's /usr is mounted for them). The writable folders were handed over before."""
    setpriv, perl = tools
    if in_image and not any(m.target == HOST_USR_MOUNT for m in mounts):
        mounts.append(host_usr_mount().validated(inside))
    uid, gid = (0, 0) if several else (SANDBOX_UID, SANDBOX_GID)
    prefix = switch_argv(setpriv, several=several, uid=uid, gid=gid)
    return prefix if launch_fd is None else [*prefix, *launch_argv(perl, launch_fd)]


def run_sandboxed(
    argv: Sequence[str],
    workdir: Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[Mount] = (),
    network: Literal["none", "host", "model-proxy"] = "none",
    stdin: bytes | None = None,
    record_dir: Path | None = None,
    isolation: Literal["bwrap", "none"] = "bwrap",
    use_cgroups: bool = True,
    proxy: ProxyTarget | None = None,
    grace_seconds: float = KILL_GRACE_SECONDS,
    image: ImageRoot | None = None,
) -> ExecResult:
    """Run ``argv`` with ``workdir`` as its (only writable) directory; see the module docstring.

    Synchronous and thread-safe. ``isolation="none"`` runs the command as a plain subprocess in
    ``workdir`` with the same environment rules and limits but *no isolation*; only use it when a
    caller asked for it explicitly. ``use_cgroups=False`` forces the rlimit fallback.

    ``network="model-proxy"`` (needs ``proxy`` and ``isolation="bwrap"``): the command's own
    network namespace, where ``proxy.base_url`` (``http://127.0.0.1:<proxy.port>``) reaches the
    gateway ``proxy`` names and nothing else is reachable (:mod:`assay.sandbox.netproxy`);
    ``ExecResult.network_applied`` says what was applied. A proxy that cannot be set up, or a
    forwarder that does not start, makes the execution a ``sandbox_error``.

    ``grace_seconds``: at the wall limit the watchdog (in this process, outside the sandbox)
    sends SIGTERM, waits this long, then kills everything; the applied ``wall_seconds`` limit
    records it.

    ``image``: run in a pinned environment's root filesystem instead of the host's system, the
    work directory at the image's working directory (``ImageRoot.workspace``; mounts may not
    target it), the image's environment under the caller's ``env`` (needs
    ``isolation="bwrap"``).

    Raises :class:`SandboxUnavailable` when bubblewrap cannot run, ``ValueError`` /
    ``FileNotFoundError`` for invalid arguments. Everything that happens to the command itself
    (including a broken command line inside the sandbox) is reported in the result."""
    argv = tuple(argv)
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ValueError("argv must be a non-empty sequence of strings without NUL bytes")
    if isolation not in ("bwrap", "none"):
        raise ValueError(f"isolation must be 'bwrap' or 'none', not {isolation!r}")
    if network not in ("none", "host", "model-proxy"):
        raise ValueError(f"network must be 'none', 'host' or 'model-proxy', not {network!r}")
    if (network == "model-proxy") != (proxy is not None):
        raise ValueError("network='model-proxy' and proxy=ProxyTarget(...) go together")
    if proxy is not None and not isinstance(proxy, ProxyTarget):
        raise TypeError("proxy must be a ProxyTarget")
    if network == "model-proxy" and isolation != "bwrap":
        raise ValueError("network='model-proxy' needs isolation='bwrap' (nothing else confines "
                         "the network)")
    if stdin is not None and not isinstance(stdin, bytes | bytearray | memoryview):
        raise TypeError("stdin must be bytes or None")
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise NotADirectoryError(f"workdir is not a directory: {workdir}")
    if image is not None:
        if isolation != "bwrap":
            raise ValueError("image=... needs isolation='bwrap'")
        image = image.validated()
    inside = image.workspace if image is not None else SANDBOX_WORKDIR
    checked_mounts = [m.validated(inside) for m in mounts]
    sandboxed = isolation == "bwrap"
    warnings: list[str] = []
    if sandboxed:
        check_bwrap()
    else:
        if checked_mounts:
            raise ValueError("mounts need isolation='bwrap'")
        if network == "none":
            warnings.append("network='none' is not enforced with isolation='none'")
        network = "host"

    cmd_env = sandbox_env(
        env,
        home=(inside if image is not None else SANDBOX_HOME) if sandboxed else str(workdir),
        tmpdir=SANDBOX_TMP if sandboxed else "/tmp",
        base=dict(image.env) if image is not None else None,
    )

    out_path = err_path = None
    if record_dir is not None:
        record_dir = Path(record_dir)
        record_dir.mkdir(parents=True, exist_ok=True)
        out_path, err_path = record_dir / "stdout.log", record_dir / "stderr.log"

    common: dict[str, Any] = dict(
        argv=argv,
        isolation=isolation,
        network=network,
        workdir=str(workdir),
        sandbox_workdir=inside if sandboxed else None,
        stdout_path=str(out_path) if out_path else None,
        stderr_path=str(err_path) if err_path else None,
    )

    parent_fds: list[int] = []
    sinks: list[OutputSink] = []
    disk: DiskImage | None = None
    plan: LimitPlan | None = None
    session: ProxySession | None = None
    setup_check: Callable[[], str | None] | None = None
    try:
        out = OutputSink(out_path, limits.output_bytes)
        sinks.append(out)
        err = OutputSink(err_path, limits.output_bytes)
        sinks.append(err)
        writable = [workdir, *(m.source for m in checked_mounts if m.writable)]
        several = image is not None and image.several_users
        users, users_note = mapped_userns() if sandboxed else (None, "")
        tools = _switch_tools(image is not None) if users is not None else None
        if users is not None and tools is None:
            users, users_note = None, "no host loader to start setpriv with in the image"
        if users is not None:
            # before the disk image: its overlays show the host folders' owners as they are then
            # (changing a mounted overlay's lower layer is undefined)
            hand_over(writable, users, *((0, 0) if several else (SANDBOX_UID, SANDBOX_GID)))
        no_image: str | None = "isolation='none': nothing to mount it in"
        workdir_bound = workdir
        if sandboxed and limits.disk_mib is not None:
            # the writable folders on a filesystem of the limit's size for the run: the
            # sandbox sees the copies, carried back when it ends (diskimage)
            disk, no_image = open_for(limits.disk_mib, writable)
            if disk is not None:
                workdir_bound, checked_mounts = disk.bound(workdir, checked_mounts)
        plan = plan_limits(limits, use_cgroups=use_cgroups, grace_seconds=grace_seconds,
                           forwarder=proxy is not None, no_disk_image=no_image)
        status_fd: int | None = None
        report_r: int | None = None
        if sandboxed:
            bwrap = bwrap_executable()
            assert bwrap is not None  # check_bwrap passed
            status_fd, status_w = os.pipe()
            parent_fds += [status_fd, status_w]
            inner: list[str] = list(argv)
            extra_fds: tuple[int, ...] = ()
            if proxy is not None:
                try:
                    session = start_proxy(proxy)
                except SandboxFailed as exc:
                    return dataclasses.replace(
                        not_started(common, plan.applied, str(exc), wall_seconds=0.0,
                                    warnings=warnings),
                        network_applied={"network": "model-proxy", "reachable": [],
                                         "gateway": proxy.describe(),
                                         "forwarder": "not started"})
                setup_r, setup_w = os.pipe()
                report_r, report_w = os.pipe()  # the forwarder's refusals (a claim)
                parent_fds += [setup_r, setup_w, report_r, report_w]
                checked_mounts.append(session.mount().validated(inside))
                inner = session.launcher_argv(argv, setup_w, report_w)
                if image is not None:
                    # the forwarder is assay's: the host's python3, started through the host's
                    # loader, whatever python the image has (or not); the command it hands
                    # over to runs on the image's own libraries
                    lent = host_python_argv()
                    if lent is None:
                        return dataclasses.replace(
                            not_started(common, plan.applied, "model-proxy in an image needs "
                                        "the host's /usr/bin/python3 under /usr",
                                        wall_seconds=0.0, warnings=warnings),
                            network_applied=session.record())
                    inner = [*lent, *inner[1:]]
                    checked_mounts.append(host_usr_mount().validated(inside))
                extra_fds = (setup_w, report_w)
                setup_check = functools.partial(_proxy_failure, session, setup_r)

            user_args: list[str] = []
            if users is not None and tools is not None:
                parent_fds += [users.setup_fd, users.final_fd]
                launch_r: int | None = None
                launch_w: int | None = None
                if proxy is None:  # else the forwarder reports a command it cannot execute
                    launch_r, launch_w = os.pipe()
                    parent_fds += [launch_r, launch_w]
                inner = [*_user_switch(tools, several, image is not None, checked_mounts,
                                       inside, launch_w), *inner]
                user_args = bwrap_user_args(users, several=several)
                if image is not None:  # its root's files root's inside, as in a container
                    image = dataclasses.replace(
                        image, rootfs=idmapped_view(image.rootfs, users.final_fd))
                if launch_r is not None and launch_w is not None:
                    extra_fds = (*extra_fds, launch_w)
                    setup_check = functools.partial(_exec_failure, launch_r)
            if users is None and several:
                warnings.append(f"several users asked for, one mapped: {users_note}")
            tmp_bytes = (limits.memory_mib or 1024) * _MIB
            opts = bwrap_options(
                workdir=workdir_bound,
                env=cmd_env,
                mounts=checked_mounts,
                network=network,
                tmp_bytes=tmp_bytes,
                status_fd=status_w,
                image=image,
                user_args=user_args,
                several_users=several and users is not None,
            )
            args_fd = options_fd(opts)
            parent_fds.append(args_fd)
            command = bwrap_argv(bwrap, args_fd, inner)
            pass_fds: tuple[int, ...] = (status_w, args_fd, *extra_fds, *(
                (users.setup_fd, users.final_fd) if users is not None else ()))
            cwd = "/"
            popen_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
        else:
            if _resolve_plain(argv[0], cmd_env["PATH"], workdir) is None:
                return not_started(
                    common, plan.applied, f"command not found or not executable: {argv[0]}",
                    wall_seconds=0.0, warnings=warnings,
                )
            command = list(argv)
            pass_fds = ()
            cwd = str(workdir)
            popen_env = cmd_env
        result = execute(
            plan=plan,
            command=plan.wrapper_argv() + command,
            cwd=cwd,
            popen_env=popen_env,
            pass_fds=pass_fds,
            owned_fds=parent_fds,
            status_fd=status_fd,
            stdin=bytes(stdin) if stdin is not None else None,
            limits=limits,
            sandboxed=sandboxed,
            out=out,
            err=err,
            warnings=warnings,
            common=common,
            setup_check=setup_check,
            grace_seconds=grace_seconds,
            writable=writable,
            disk=disk,
        )
        if disk is not None:  # every process is gone: the folders go back to the host's
            result = dataclasses.replace(result, warnings=result.warnings + tuple(disk.close()))
        if session is not None:
            if report_r is not None:
                session.read_report(read_available(report_r))
            warnings = session.close()
            result = dataclasses.replace(
                result,
                network_applied=session.record(),
                warnings=result.warnings + tuple(warnings),
            )
        return result
    finally:
        if disk is not None:
            disk.close()
        if session is not None:
            session.close()
        for sink in sinks:
            sink.close()
        for fd in parent_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if plan is not None:
            plan.cleanup()
