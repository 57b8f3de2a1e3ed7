"""assay: evidence-first evals of models and coding agents on your own tasks.

The library API lives in :mod:`assay.api` and is reached from here (``assay.run``,
``assay.rebuild_report``, ``assay.compare``, ...). It is loaded on first use: every ``import
assay.<anything>`` runs this file first, so an eager import here would pull the runner into
``import assay.records.base`` and could close an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from assay.version import __version__

__all__ = [
    "RunPlan",
    "RunResult",
    "__version__",
    "check_suite",
    "check_tasks",
    "compare",
    "execute",
    "load_bundles",
    "load_suite",
    "prepare",
    "rebuild_report",
    "run",
    "run_experiment",
    "run_trial",
]
_API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from assay.api import (
        RunPlan,
        RunResult,
        check_suite,
        check_tasks,
        compare,
        execute,
        load_bundles,
        load_suite,
        prepare,
        rebuild_report,
        run,
        run_experiment,
        run_trial,
    )


def __getattr__(name: str) -> Any:
    """``assay.run`` and friends, imported from :mod:`assay.api` the first time one is used."""
    if name in _API:
        import assay.api

        value = getattr(assay.api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'assay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
