"""assay: evidence-first evals of models and coding agents on your own tasks.

The library API lives in :mod:`assay.api` and is reached from here (``assay.run``,
``assay.report`` / ``assay.rebuild_report``, ``assay.compare``, ...). It is loaded on first
use: every ``import assay.<anything>`` runs this file first, so an eager import here would pull
the runner into ``import assay.records.base`` and could close an import cycle.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

from assay.version import __version__

__all__ = [
    "ExperimentOptions",
    "ExperimentRun",
    "RunPlan",
    "RunResult",
    "__version__",
    "check_narrow_suite",
    "check_suite",
    "check_tasks",
    "import_harbor",
    "compare",
    "comparison",
    "compare_experiment",
    "execute",
    "load_bundles",
    "load_suite",
    "prepare",
    "rebuild_report",
    "run",
    "run_experiment",
    "run_trial",
    "plan_experiment",
    "verdict",
]
_API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from assay.api import (
        ExperimentOptions,
        ExperimentRun,
        RunPlan,
        RunResult,
        check_narrow_suite,
        check_suite,
        check_tasks,
        compare,
        compare_experiment,
        comparison,
        execute,
        import_harbor,
        load_bundles,
        load_suite,
        plan_experiment,
        prepare,
        rebuild_report,
        run,
        run_experiment,
        run_trial,
        verdict,
    )


def __getattr__(name: str) -> Any:
    """``assay.run`` and friends, imported from :mod:`assay.api` the first time one is used."""
    if name in _API:
        import assay.api

        value = getattr(assay.api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'assay' has no attribute {name!r}")


class _ReportPackage(types.ModuleType):
    """``assay.report`` is both the package that builds reports and the API's ``report(run_dir)``:
    once any ``assay.report.<module>`` is imported, Python binds the package to that name, so
    the package itself is made callable rather than a function shadowed at random."""

    def __call__(self, run_dir: Any, **kwargs: Any) -> dict[str, Any]:
        """Rebuild report.json, report.md and report.html from a run directory; see
        :func:`assay.api.rebuild_report`."""
        from assay.api import rebuild_report

        return rebuild_report(run_dir, **kwargs)


# The package's __init__ is empty, so importing it costs nothing and pulls in no runner.
_report_package = importlib.import_module("assay.report")
_report_package.__class__ = _ReportPackage


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
