"""Where all untrusted code runs: bubblewrap isolation, resource limits, honest outcomes.

``run_sandboxed(argv, workdir, ...)`` runs a command with ``workdir`` bound read-write at
:data:`SANDBOX_WORKDIR`, the system read-only, no network (or, with ``network="model-proxy"`` and
a :class:`ProxyTarget`, one model gateway at ``http://127.0.0.1:<port>`` and nothing else), a
private /tmp, a new PID namespace and an environment built only from what the caller passes.
The :class:`ExecResult` says what happened (``reason``), which limits were actually applied and
by which mechanism (``limits_applied``), and the kernel evidence behind the classification
(``evidence``). With ``image=ImageRoot(...)`` the command runs in a pinned environment's root
filesystem instead of the host's system, the work directory at the image's working directory.

One module per concern: ``run`` (the orchestrator, ``run_sandboxed``), ``bwrap`` (what the
command can see), ``limits`` (what it may use, and the record of what was applied), ``plan`` (one
decision per limit), ``cgroups`` and ``evidence`` (the kernel side), ``wrapper`` (the shell prefix
that applies them), ``execute`` and ``proctree`` (watchdog and killing), ``pipes`` (bounded
output), ``outcome`` (the pure classification into a reason), ``result`` (``ExecResult``), and
for the model proxy ``netproxy`` (the setup and its record), ``forwarder`` (the byte pump and
the in-sandbox launcher) and ``relay`` (the host-side thread for a TCP gateway);
``host_runtime`` lends host programs (the forwarder's python3) to a sandbox in an image
through the host's dynamic loader; for ``disk_mib``, ``diskimage`` (the writable folders on a
size-limited filesystem, mounted by ``loopmount``, carried back by ``upperdir``, removed
by ``diskclean``) or, where
that cannot be made, ``diskwatch``.
"""

from assay.sandbox.bwrap import (
    DEFAULT_PATH,
    SANDBOX_HOME,
    SANDBOX_TMP,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    ImageRoot,
    Mount,
    SandboxUnavailable,
    bwrap_available,
    check_bwrap,
)
from assay.sandbox.cgroups import sweep_orphans_once
from assay.sandbox.diskclean import sweep_stale_once as sweep_stale_images_once
from assay.sandbox.execute import KILL_GRACE_SECONDS
from assay.sandbox.limits import NOT_APPLIED, AppliedLimit, Limits
from assay.sandbox.netproxy import DEFAULT_PROXY_PORT, SANDBOX_PROXY_SOCKET, ProxyTarget
from assay.sandbox.outcome import REASONS
from assay.sandbox.pipes import TAIL_BYTES
from assay.sandbox.result import ExecResult
from assay.sandbox.run import run_sandboxed

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_PROXY_PORT",
    "KILL_GRACE_SECONDS",
    "NOT_APPLIED",
    "REASONS",
    "SANDBOX_HOME",
    "SANDBOX_PROXY_SOCKET",
    "SANDBOX_TMP",
    "SANDBOX_UID",
    "SANDBOX_WORKDIR",
    "TAIL_BYTES",
    "AppliedLimit",
    "ExecResult",
    "ImageRoot",
    "Limits",
    "Mount",
    "ProxyTarget",
    "SandboxUnavailable",
    "bwrap_available",
    "check_bwrap",
    "run_sandboxed",
    "sweep_orphans_once",
    "sweep_stale_images_once",
]
