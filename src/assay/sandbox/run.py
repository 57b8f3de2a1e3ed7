"""``run_sandboxed``: start a command in the sandbox, watch it, kill it, classify, collect.

Process layout (``isolation="bwrap"``)::

    /bin/sh wrapper  --exec-->  bwrap (monitor, host side)
                                  └─ bwrap as PID 1 of the new PID namespace (reaper)
                                       └─ the command and everything it starts

The shell wrapper joins the execution's cgroups and sets rlimits, then ``exec``-s bubblewrap, so
every process of the execution is accounted from its first instruction and no ``preexec_fn`` is
needed (it is unsafe with threads, and callers run executions from several threads at once).

Watchdog: when ``wall_seconds`` expire, SIGTERM goes to every process of the command (found as
descendants of the namespace's PID 1, plus the members of the execution's cgroups); after
:data:`KILL_GRACE_SECONDS` SIGKILL goes to bwrap's PID 1 and monitor, which makes the kernel kill
everything left in the PID namespace at once (a process that ignores SIGTERM, forks, or calls
setsid cannot escape it). With ``isolation="none"`` the same is done with the process group and the
cgroups instead of the namespace.

Classification (``ExecResult.reason``), first match wins:

``sandbox_error``
    bubblewrap did not start the command (bad mount, exec failure, cannot create namespaces), or
    the wrapper could not join a cgroup / set an rlimit. Known from bwrap's ``--json-status-fd``:
    it reports ``exit-code`` only for a command it actually ran, and the command cannot write to
    that descriptor, so a program cannot fake this outcome by printing something.
``ok``
    exit status 0 and the watchdog did not fire.
``memory_limit``
    cgroup: the execution's cgroup ``oom_kill`` counter is non-zero (exact). rlimit: inferred from
    stderr (MemoryError, bad_alloc, V8 allocation failures), said so in ``detail``.
``process_limit``
    cgroup: ``pids.events`` ``max`` is non-zero, i.e. the kernel refused a fork (exact). rlimit:
    inferred from stderr (EAGAIN / BlockingIOError), said so in ``detail``.
``timeout``
    the watchdog fired, or the process died of SIGXCPU (``cpu_seconds``, in ``detail``).
``nonzero_exit``
    anything else: non-zero exit status or death by a signal we did not send.

bubblewrap reports a command killed by signal N as exit status 128+N; statuses 129..192 are
therefore decoded as "killed by signal" (``exit_code=None``); a program that literally calls
``exit(137)`` is indistinguishable and is reported as killed by SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from assay.sandbox.bwrap import (
    DEFAULT_PATH,
    SANDBOX_HOME,
    SANDBOX_TMP,
    SANDBOX_WORKDIR,
    Mount,
    bwrap_argv,
    bwrap_executable,
    bwrap_options,
    check_bwrap,
    options_fd,
    sandbox_env,
)
from assay.sandbox.limits import (
    MECH_RLIMIT_DATA,
    MECH_RLIMIT_NPROC,
    NOT_APPLIED,
    WRAPPER_FAILED_EXIT,
    WRAPPER_MESSAGE_PREFIX,
    AppliedLimit,
    LimitPlan,
    Limits,
    plan_limits,
)

Reason = Literal["ok", "nonzero_exit", "timeout", "memory_limit", "process_limit", "sandbox_error"]
REASONS: tuple[str, ...] = (
    "ok",
    "nonzero_exit",
    "timeout",
    "memory_limit",
    "process_limit",
    "sandbox_error",
)

TAIL_BYTES = 4096
DEFAULT_LIMITS = Limits()
KILL_GRACE_SECONDS = 1.0
_DRAIN_SECONDS = 1.0
_MIB = 1024 * 1024
_MAX_SIGNAL = 64

_MEMORY_ERROR_RE = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|out of memory|"
    r"Array buffer allocation failed|Fatal process OOM|allocation failed",
    re.IGNORECASE,
)
_FORK_ERROR_RE = re.compile(
    r"Resource temporarily unavailable|BlockingIOError|EAGAIN|fork: retry", re.IGNORECASE
)


@dataclass(frozen=True)
class ExecResult:
    """What happened to one execution. ``to_record()`` gives a JSON-ready dict."""

    argv: tuple[str, ...]
    isolation: Literal["bwrap", "none"]
    network: Literal["none", "host"]
    reason: Reason
    exit_code: int | None
    signal: str | None
    wall_seconds: float
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    stdout_bytes: int
    stderr_bytes: int
    limits_applied: dict[str, AppliedLimit]
    evidence: dict[str, int] = field(default_factory=dict)
    detail: str | None = None
    workdir: str = ""
    sandbox_workdir: str | None = None
    stdout_path: str | None = None
    stderr_path: str | None = None
    stdout_truncated: bool = False  # the record file kept fewer bytes than were written
    stderr_truncated: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def to_record(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "isolation": self.isolation,
            "network": self.network,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "wall_seconds": round(self.wall_seconds, 6),
            "timed_out": self.timed_out,
            "detail": self.detail,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "stdout_path": self.stdout_path,
            "stderr_path": self.stderr_path,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "limits_applied": {k: v.to_record() for k, v in self.limits_applied.items()},
            "evidence": dict(self.evidence),
            "workdir": self.workdir,
            "sandbox_workdir": self.sandbox_workdir,
            "warnings": list(self.warnings),
        }


class _Sink:
    """One output stream: total count, bounded tail, and an optional capped file copy."""

    def __init__(self, path: Path | None, cap: int) -> None:
        self.total = 0
        self.tail = bytearray()
        self.path = path
        self.cap = cap
        self.kept = 0
        self.truncated = False
        self.fh: IO[bytes] | None = open(path, "wb") if path is not None else None

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        if self.fh is not None:
            room = self.cap - self.kept
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            if chunk:
                self.fh.write(chunk)
                self.kept += len(chunk)

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", errors="replace")

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def _descendants(root: int) -> set[int]:
    """All processes below ``root`` (by scanning /proc; only used when killing)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                data = fh.read()
            ppid = int(data[data.rfind(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _kill(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class _Supervisor:
    """Pumps stdin/stdout/stderr/status pipes and notices the exit of the top process."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin: bytes | None,
        out: _Sink,
        err: _Sink,
        status_fd: int | None,
    ) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.readers: set[int] = set()
        self.sinks: dict[int, _Sink] = {}
        self.status = bytearray()
        self.status_fd = status_fd
        self.exited = False
        self.exit_time: float | None = None
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            assert stream is not None
            fd = stream.fileno()
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
            self.readers.add(fd)
            self.sinks[fd] = sink
        if status_fd is not None:
            self.sel.register(status_fd, selectors.EVENT_READ)
            self.readers.add(status_fd)
        self.stdin_fd: int | None = None
        self.stdin_data = memoryview(stdin or b"")
        if proc.stdin is not None:
            if stdin:
                self.stdin_fd = proc.stdin.fileno()
                os.set_blocking(self.stdin_fd, False)
                self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        self.pidfd: int | None
        try:
            self.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            self.pidfd = None

    def _close_stdin(self) -> None:
        if self.stdin_fd is not None:
            self.sel.unregister(self.stdin_fd)
            self.stdin_fd = None
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _close_reader(self, fd: int) -> None:
        self.sel.unregister(fd)
        self.readers.discard(fd)

    def _mark_exited(self) -> None:
        if not self.exited:
            self.exited = True
            self.exit_time = time.monotonic()
            if self.pidfd is not None:
                self.sel.unregister(self.pidfd)

    def pump(self, until: float, stop: Callable[[], bool]) -> None:
        while not stop():
            now = time.monotonic()
            if now >= until:
                return
            timeout = until - now
            if self.pidfd is None and not self.exited:
                timeout = min(timeout, 0.01)
            for key, _ in self.sel.select(timeout):
                fd = key.fd
                if fd == self.pidfd:
                    self._mark_exited()
                elif fd == self.stdin_fd:
                    try:
                        n = os.write(fd, self.stdin_data[:65536])
                        self.stdin_data = self.stdin_data[n:]
                        if not self.stdin_data:
                            self._close_stdin()
                    except BlockingIOError:
                        pass
                    except OSError:  # the command closed its stdin / exited
                        self._close_stdin()
                else:
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        self._close_reader(fd)
                    elif fd == self.status_fd:
                        self.status += chunk
                    else:
                        self.sinks[fd].write(chunk)
            if self.pidfd is None and not self.exited and self.proc.poll() is not None:
                self._mark_exited()

    def status_docs(self) -> dict[str, Any]:
        """Merge bwrap's JSON status documents ({"child-pid": ...}, {"exit-code": ...})."""
        merged: dict[str, Any] = {}
        text = self.status.decode("utf-8", errors="replace")
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

    def close(self) -> None:
        if self.stdin_fd is not None:
            self._close_stdin()
        for fd in list(self.readers):
            self._close_reader(fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        self.sel.close()


def _resolve_plain(argv0: str, path: str, workdir: Path) -> str | None:
    if "/" in argv0:
        p = Path(argv0) if os.path.isabs(argv0) else workdir / argv0
        return str(p) if os.access(p, os.X_OK) and p.is_file() else None
    return shutil.which(argv0, path=path)


def run_sandboxed(
    argv: Sequence[str],
    workdir: Path,
    *,
    limits: Limits = DEFAULT_LIMITS,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[Mount] = (),
    network: Literal["none", "host"] = "none",
    stdin: bytes | None = None,
    record_dir: Path | None = None,
    isolation: Literal["bwrap", "none"] = "bwrap",
    use_cgroups: bool = True,
) -> ExecResult:
    """Run ``argv`` with ``workdir`` as its (only writable) directory; see the module docstring.

    Synchronous and thread-safe. ``isolation="none"`` runs the command as a plain subprocess in
    ``workdir`` with the same environment rules and limits but *no isolation*; only use it when a
    caller asked for it explicitly. ``use_cgroups=False`` forces the rlimit fallback.

    Raises :class:`SandboxUnavailable` when bubblewrap cannot run, ``ValueError`` /
    ``FileNotFoundError`` for invalid arguments. Everything that happens to the command itself
    (including a broken command line inside the sandbox) is reported in the result."""
    argv = tuple(argv)
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise ValueError("argv must be a non-empty sequence of strings without NUL bytes")
    if isolation not in ("bwrap", "none"):
        raise ValueError(f"isolation must be 'bwrap' or 'none', not {isolation!r}")
    if network not in ("none", "host"):
        raise ValueError(f"network must be 'none' or 'host', not {network!r}")
    if stdin is not None and not isinstance(stdin, bytes | bytearray | memoryview):
        raise TypeError("stdin must be bytes or None")
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise NotADirectoryError(f"workdir is not a directory: {workdir}")
    checked_mounts = [m.validated() for m in mounts]
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
        home=SANDBOX_HOME if sandboxed else str(workdir),
        tmpdir=SANDBOX_TMP if sandboxed else "/tmp",
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
        sandbox_workdir=SANDBOX_WORKDIR if sandboxed else None,
        stdout_path=str(out_path) if out_path else None,
        stderr_path=str(err_path) if err_path else None,
    )

    parent_fds: list[int] = []
    sinks: list[_Sink] = []
    plan: LimitPlan | None = None
    try:
        out = _Sink(out_path, limits.output_bytes)
        sinks.append(out)
        err = _Sink(err_path, limits.output_bytes)
        sinks.append(err)
        plan = plan_limits(limits, use_cgroups=use_cgroups, grace_seconds=KILL_GRACE_SECONDS)
        status_fd: int | None = None
        if sandboxed:
            bwrap = bwrap_executable()
            assert bwrap is not None  # check_bwrap passed
            status_fd, status_w = os.pipe()
            parent_fds += [status_fd, status_w]
            tmp_bytes = (limits.memory_mib or 1024) * _MIB
            opts = bwrap_options(
                workdir=workdir,
                env=cmd_env,
                mounts=checked_mounts,
                network=network,
                tmp_bytes=tmp_bytes,
                status_fd=status_w,
            )
            args_fd = options_fd(opts)
            parent_fds.append(args_fd)
            command = bwrap_argv(bwrap, args_fd, argv)
            pass_fds: tuple[int, ...] = (status_w, args_fd)
            cwd = "/"
            popen_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
        else:
            if _resolve_plain(argv[0], cmd_env["PATH"], workdir) is None:
                return ExecResult(
                    **common,
                    reason="sandbox_error",
                    exit_code=None,
                    signal=None,
                    wall_seconds=0.0,
                    timed_out=False,
                    stdout_tail="",
                    stderr_tail="",
                    stdout_bytes=0,
                    stderr_bytes=0,
                    limits_applied=dict(plan.applied),
                    detail=f"command not found or not executable: {argv[0]}",
                    warnings=tuple(warnings),
                )
            command = list(argv)
            pass_fds = ()
            cwd = str(workdir)
            popen_env = cmd_env
        return _execute(
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
        )
    finally:
        for sink in sinks:
            sink.close()
        for fd in parent_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if plan is not None:
            plan.cleanup()


def _execute(
    *,
    plan: LimitPlan,
    command: list[str],
    cwd: str,
    popen_env: dict[str, str],
    pass_fds: tuple[int, ...],
    owned_fds: list[int],
    status_fd: int | None,
    stdin: bytes | None,
    limits: Limits,
    sandboxed: bool,
    out: _Sink,
    err: _Sink,
    warnings: list[str],
    common: dict[str, Any],
) -> ExecResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=popen_env,
            pass_fds=pass_fds,
            start_new_session=True,
        )
    except OSError as exc:
        return ExecResult(
            **common,
            reason="sandbox_error",
            exit_code=None,
            signal=None,
            wall_seconds=time.monotonic() - start,
            timed_out=False,
            stdout_tail="",
            stderr_tail="",
            stdout_bytes=0,
            stderr_bytes=0,
            limits_applied=dict(plan.applied),
            detail=f"could not start {command[0]}: {exc}",
            warnings=tuple(warnings),
        )
    # The child has its copies. Close ours now (the write end of the status pipe must only be
    # open in bwrap, or its EOF never comes) and forget them, so nothing is closed twice.
    for fd in pass_fds:
        owned_fds.remove(fd)
        os.close(fd)
    sup = _Supervisor(proc, stdin, out, err, status_fd)

    def ns_init() -> int | None:
        pid = sup.status_docs().get("child-pid") if sandboxed else None
        return pid if isinstance(pid, int) and pid > 0 else None

    def signal_command(sig: int) -> None:
        """SIGTERM/SIGKILL to the command's processes, not (yet) to bwrap's own two."""
        init = ns_init()
        targets = _descendants(init or proc.pid) | plan.procs()
        if sandboxed:
            targets -= {proc.pid, init}
        else:
            targets.add(proc.pid)
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
        _kill(targets, sig)

    def kill_everything() -> None:
        init = ns_init()
        if init is not None:
            _kill({init}, signal.SIGKILL)  # PID 1 gone => the kernel kills the whole namespace
        _kill({proc.pid}, signal.SIGKILL)
        if not sandboxed:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        _kill(_descendants(proc.pid) | plan.procs(), signal.SIGKILL)

    timed_out = False
    try:
        sup.pump(start + limits.wall_seconds, lambda: sup.exited)
        if not sup.exited:
            timed_out = True
            signal_command(signal.SIGTERM)
            sup.pump(time.monotonic() + KILL_GRACE_SECONDS, lambda: sup.exited)
            if not sup.exited:
                kill_everything()
                sup.pump(time.monotonic() + 10.0, lambda: sup.exited)
        # The top process is gone. Under bwrap the namespace died with it; without isolation,
        # whatever it left running in its process group or cgroups is killed now.
        if not sandboxed:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        _kill(plan.procs() - {proc.pid}, signal.SIGKILL)
        sup.pump(time.monotonic() + _DRAIN_SECONDS, lambda: not sup.readers)
        if sup.readers:
            warnings.append("output pipes were still held open after the command ended")
    except BaseException:
        kill_everything()
        raise
    finally:
        sup.close()
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            warnings.append(f"process {proc.pid} could not be reaped")
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    end = sup.exit_time or time.monotonic()
    evidence = plan.evidence()
    warnings += plan.cleanup()
    status = sup.status_docs() if sandboxed else {}
    reason, exit_code, sig, detail = _classify(
        sandboxed=sandboxed,
        returncode=proc.returncode,
        status=status,
        timed_out=timed_out,
        evidence=evidence,
        applied=plan.applied,
        stderr_tail=err.text(),
        limits=limits,
    )
    return ExecResult(
        **common,
        reason=reason,
        exit_code=exit_code,
        signal=sig,
        wall_seconds=end - start,
        timed_out=timed_out,
        stdout_tail=out.text(),
        stderr_tail=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        limits_applied=dict(plan.applied),
        evidence=evidence,
        detail=detail,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        warnings=tuple(warnings),
    )


def _classify(
    *,
    sandboxed: bool,
    returncode: int | None,
    status: dict[str, Any],
    timed_out: bool,
    evidence: dict[str, int],
    applied: dict[str, AppliedLimit],
    stderr_tail: str,
    limits: Limits,
) -> tuple[Reason, int | None, str | None, str | None]:
    exit_code: int | None = None
    sig: str | None = None
    notes: list[str] = []
    started = True
    rc = returncode if returncode is not None else -signal.SIGKILL
    if sandboxed:
        code = status.get("exit-code")
        if isinstance(code, int):
            if 128 < code <= 128 + _MAX_SIGNAL:
                sig = _signal_name(code - 128)
                notes.append(f"bubblewrap reported status {code}: killed by {sig}")
            else:
                exit_code = code
        elif timed_out or evidence.get("oom_kills", 0) > 0:
            # we (or the OOM killer) killed bubblewrap itself before it could report
            sig = _signal_name(-rc) if rc < 0 else None
        else:
            started = False
    elif rc < 0:
        sig = _signal_name(-rc)
    else:
        exit_code = rc
        if rc == WRAPPER_FAILED_EXIT and stderr_tail.lstrip().startswith(WRAPPER_MESSAGE_PREFIX):
            started = False

    def done(reason: Reason, why: str | None) -> tuple[Reason, int | None, str | None, str | None]:
        parts = ([why] if why else []) + notes
        return reason, exit_code, sig, "; ".join(parts) or None

    if not started:
        last = stderr_tail.strip().splitlines()[-1:] or [f"wrapper exit status {rc}"]
        what = "bubblewrap did not start the command" if sandboxed else "the wrapper failed"
        return done("sandbox_error", f"{what}: {last[0]}")
    if not timed_out and exit_code == 0:
        if evidence.get("oom_kills", 0) or evidence.get("pid_limit_hits", 0):
            notes.append(f"exit 0 despite limit events {evidence}")
        return done("ok", None)
    oom = evidence.get("oom_kills", 0)
    if oom > 0:
        return done("memory_limit", f"cgroup OOM killer fired {oom} time(s) (oom_kill counter)")
    if applied["memory_mib"].mechanism == MECH_RLIMIT_DATA:
        m = _MEMORY_ERROR_RE.search(stderr_tail)
        if m:
            return done(
                "memory_limit",
                f"inferred from stderr ({m.group(0)!r}); RLIMIT_DATA leaves no kernel record",
            )
    refused = evidence.get("pid_limit_hits", 0)
    if refused > 0:
        return done("process_limit", f"{refused} fork(s) refused by pids.max (pids.events)")
    if applied["pids"].mechanism == MECH_RLIMIT_NPROC:
        m = _FORK_ERROR_RE.search(stderr_tail)
        if m:
            return done(
                "process_limit",
                f"inferred from stderr ({m.group(0)!r}); RLIMIT_NPROC leaves no kernel record",
            )
    if timed_out:
        throttled = evidence.get("cpu_throttled_periods", 0)
        if throttled:  # a starved run reads differently from a slow one
            notes.append(f"held back by the CPU quota in {throttled} period(s), "
                         f"{evidence.get('cpu_throttled_ms', 0)} ms in all")
        return done(
            "timeout",
            f"wall time limit of {limits.wall_seconds:g} s exceeded; killed by the watchdog",
        )
    if sig == "SIGXCPU" and applied["cpu_seconds"].mechanism != NOT_APPLIED:
        return done("timeout", f"CPU-time limit of {limits.cpu_seconds} s exceeded (RLIMIT_CPU)")
    return done("nonzero_exit", None)
