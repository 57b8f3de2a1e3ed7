"""The one check that the sandbox can run here, made before anything runs.

Every entry point that runs candidate code asks this first (``run`` of a coding suite, ``suite
check``, ``task check``, ``trial run``, ``exp run``, ``regrade``, ``agents check``), so a host
without a working bubblewrap is told once, up front, instead of once per failed trial.
"""

from __future__ import annotations

from assay.errors import InputError, SandboxUnavailable

ISOLATIONS = ("bwrap", "none")


def require_sandbox(isolation: str) -> None:
    """``bwrap`` must run here (:class:`SandboxUnavailable` otherwise); ``none`` is taken as
    asked, and recorded as NOT ISOLATED wherever it is used."""
    if isolation not in ISOLATIONS:
        raise InputError(f"sandbox={isolation!r}: must be 'bwrap' or 'none'")
    if isolation == "bwrap":
        from assay.sandbox import check_bwrap

        check_bwrap()


__all__ = ["ISOLATIONS", "SandboxUnavailable", "require_sandbox"]
