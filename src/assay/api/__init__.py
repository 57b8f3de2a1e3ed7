"""The library API: the few functions a Python caller needs; the CLI calls the same ones.

    import assay

    result = assay.run("examples/triage", "builtin/baseline", out="runs/a")
    other = assay.run("examples/triage", "builtin/oracle", out="runs/b", temperature=0)
    print(result.figures.accuracy, assay.comparison("runs/a", "runs/b").diff_ci95)

Runs: :func:`run` (= :func:`prepare` then :func:`execute`), :func:`rebuild_report`,
:func:`compare` (:func:`comparison`: the same as its record model; a result's ``figures`` are
its report as one). From the top level it is also ``assay.report(run_dir)``: ``assay.report``
is the package that builds reports, made callable in ``assay/__init__.py`` so both meanings
hold. Suites and tasks: :func:`load_suite`, :func:`check_suite`, :func:`load_bundles`,
:func:`run_trial`, :func:`check_tasks`, :func:`import_harbor`. Experiments:
:func:`run_experiment` (one :class:`ExperimentOptions`, a typed :class:`ExperimentRun`, told
to a :class:`Progress`), :func:`compare_experiment`, :func:`plan_experiment`, :func:`verdict`.
The record models the readers return are in :mod:`assay.api.records`. Every error raised on
purpose is from :mod:`assay.errors`: an ``InputError`` means change the input, an
``InfraError`` means the machine, endpoint or sandbox failed and the same call may succeed
later.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Where each name of the API lives. They are imported on first use (PEP 562): the CLI imports
#: ``assay.api.options`` and friends at start-up, and Python runs this file first, so an eager
#: import here made every command, ``--help`` too, load the runner, the gateway and every record
#: model (0.3 of the 0.45 CPU-seconds a ``python -m assay`` took to start).
_WHERE = {
    **dict.fromkeys(("ExperimentOptions", "ExperimentRun", "Progress", "TrialDone",
                     "run_experiment"), "assay.api.experiment_run"),
    **dict.fromkeys(("compare_experiment", "plan_experiment", "verdict"),
                    "assay.api.experiments"),
    **dict.fromkeys(("CODING_DEFAULTS", "RUN_OPTIONS", "SHARED_DEFAULTS"), "assay.api.options"),
    **dict.fromkeys(("RunPlan", "RunResult", "compare", "comparison", "execute", "load_suite",
                     "prepare", "rebuild_report", "run"), "assay.api.runs"),
    **dict.fromkeys(("check_narrow_suite", "check_suite", "check_tasks", "import_harbor",
                     "load_bundles",
                     "run_trial"), "assay.api.tasks"),
    # every reader warns with it; the CLI shows it
    "TornRowWarning": "assay.records.io",
}

if TYPE_CHECKING:
    from assay.api.experiment_run import (
        ExperimentOptions,
        ExperimentRun,
        Progress,
        TrialDone,
        run_experiment,
    )
    from assay.api.experiments import compare_experiment, plan_experiment, verdict
    from assay.api.options import CODING_DEFAULTS, RUN_OPTIONS, SHARED_DEFAULTS
    from assay.api.runs import (
        RunPlan,
        RunResult,
        compare,
        comparison,
        execute,
        load_suite,
        prepare,
        rebuild_report,
        run,
    )
    from assay.api.tasks import (
        check_narrow_suite,
        check_suite,
        check_tasks,
        import_harbor,
        load_bundles,
        run_trial,
    )
    from assay.records.io import TornRowWarning


def __getattr__(name: str) -> Any:
    """A name of the API, imported from its module the first time it is used."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'assay.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "CODING_DEFAULTS",
    "RUN_OPTIONS",
    "SHARED_DEFAULTS",
    "TornRowWarning",
    "ExperimentOptions",
    "ExperimentRun",
    "Progress",
    "TrialDone",
    "RunPlan",
    "RunResult",
    "check_narrow_suite",
    "check_suite",
    "check_tasks",
    "import_harbor",
    "run_experiment",
    "compare",
    "comparison",
    "compare_experiment",
    "execute",
    "load_bundles",
    "load_suite",
    "prepare",
    "rebuild_report",
    "run",
    "run_trial",
    "plan_experiment",
    "verdict",
]
