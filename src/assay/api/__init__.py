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
    check_suite,
    check_tasks,
    import_harbor,
    load_bundles,
    run_trial,
)
from assay.records.io import TornRowWarning  # every reader warns with it; the CLI shows it

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
