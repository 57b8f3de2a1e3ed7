"""The ``/bin/sh`` prefix that joins the execution's cgroups and sets rlimits, then ``exec``-s.

It exists so every process of the execution is accounted from its first instruction without a
``preexec_fn`` (unsafe with threads, and callers run executions from several threads at once).
Its failure is signalled by :data:`WRAPPER_FAILED_EXIT` plus a stderr line starting with
:data:`WRAPPER_MESSAGE_PREFIX`, which :mod:`assay.sandbox.outcome` reads as ``sandbox_error``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: exit status of the shell wrapper when it could not apply a limit (checked by the classifier).
WRAPPER_FAILED_EXIT = 125
WRAPPER_MESSAGE_PREFIX = "assay-sandbox:"


def wrapper_argv(procs_files: Sequence[str], ulimits: Sequence[str]) -> list[str]:
    """``/bin/sh -c SCRIPT``: write ``$$`` into each ``cgroup.procs`` file, run each ulimit
    statement, then ``exec "$@"``.

    The cgroup files are passed as positional arguments and the rlimit statements only contain
    integers, so nothing from the caller is interpolated into the script."""
    fail = f'echo "{WRAPPER_MESSAGE_PREFIX} $1" >&2; exit {WRAPPER_FAILED_EXIT}'
    lines = [
        "n=$1; shift",
        'while [ "$n" -gt 0 ]; do',
        f'  echo $$ > "$1" || {{ set -- "cannot join cgroup $1"; {fail}; }}',
        "  shift; n=$((n-1))",
        "done",
    ]
    for stmt in ulimits:
        lines.append(f'{stmt} || {{ set -- "cannot apply {stmt}"; {fail}; }}')
    lines.append('exec "$@"')
    return ["/bin/sh", "-c", "\n".join(lines), "assay-sandbox", str(len(procs_files)),
            *procs_files]
