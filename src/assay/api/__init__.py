"""The library API: the few functions a Python caller needs; the CLI calls the same ones.

    import assay

    result = assay.run("examples/triage", "builtin/baseline", out="runs/a")
    other = assay.run("examples/triage", "builtin/oracle", out="runs/b", temperature=0)
    print(result.report["accuracy"], assay.compare("runs/a", "runs/b")["diff_ci95"])

Runs: :func:`run` (= :func:`prepare` then :func:`execute`), :func:`rebuild_report`,
:func:`compare`. From the top level it is also ``assay.report(run_dir)``: ``assay.report`` is the
package that builds reports, made callable in ``assay/__init__.py`` so both meanings hold.
Suites and tasks: :func:`load_suite`, :func:`check_suite`, :func:`load_bundles`,
:func:`run_trial`, :func:`check_tasks`, :func:`import_harbor`. Experiments: :func:`run_experiment`,
:func:`compare_experiment`, :func:`plan_experiment`, :func:`verdict`. Every error raised on
purpose is from :mod:`assay.errors`: an ``InputError`` means change the input, an
``InfraError`` means the machine, endpoint or sandbox failed and the same call may succeed
later.
"""

from __future__ import annotations

from assay.api.experiments import compare_experiment, plan_experiment, verdict
from assay.api.options import CODING_DEFAULTS, RUN_OPTIONS, SHARED_DEFAULTS
from assay.api.runs import (
    RunPlan,
    RunResult,
    compare,
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
    run_experiment,
    run_trial,
)

__all__ = [
    "CODING_DEFAULTS",
    "RUN_OPTIONS",
    "SHARED_DEFAULTS",
    "RunPlan",
    "RunResult",
    "check_suite",
    "check_tasks",
    "import_harbor",
    "run_experiment",
    "compare",
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
