"""Where all untrusted code runs: bubblewrap isolation, resource limits, honest outcomes.

``run_sandboxed(argv, workdir, ...)`` runs a command with ``workdir`` bound read-write at
:data:`SANDBOX_WORKDIR`, the system read-only, no network, a private /tmp, a new PID namespace
and an environment built only from what the caller passes. The :class:`ExecResult` says what
happened (``reason``), which limits were actually applied and by which mechanism
(``limits_applied``), and the kernel evidence behind the classification (``evidence``).
See :mod:`assay.sandbox.bwrap`, :mod:`assay.sandbox.limits` and :mod:`assay.sandbox.run`.
"""

from assay.sandbox.bwrap import (
    DEFAULT_PATH,
    SANDBOX_HOME,
    SANDBOX_TMP,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    Mount,
    SandboxUnavailable,
    bwrap_available,
    check_bwrap,
)
from assay.sandbox.limits import NOT_APPLIED, AppliedLimit, Limits
from assay.sandbox.run import KILL_GRACE_SECONDS, REASONS, TAIL_BYTES, ExecResult, run_sandboxed

__all__ = [
    "DEFAULT_PATH",
    "KILL_GRACE_SECONDS",
    "NOT_APPLIED",
    "REASONS",
    "SANDBOX_HOME",
    "SANDBOX_TMP",
    "SANDBOX_UID",
    "SANDBOX_WORKDIR",
    "TAIL_BYTES",
    "AppliedLimit",
    "ExecResult",
    "Limits",
    "Mount",
    "SandboxUnavailable",
    "bwrap_available",
    "check_bwrap",
    "run_sandboxed",
]
