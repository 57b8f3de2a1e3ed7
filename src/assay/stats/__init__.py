"""Statistics for eval results: intervals, percentiles, paired tests, pass@k, A/B, power.

Names are imported on first use (PEP 562, as ``assay.api`` does): ``abtest``, ``power`` and
the bootstraps need numpy, and a submodule import such as ``assay.stats.intervals`` runs this
file first, so an eager import here made every reader of a Wilson interval (``trial show``,
``exp status``, an archived install run as another user) load numpy for nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Where each name lives.
_WHERE = {
    **dict.fromkeys(("ABResult", "compare_arms"), "assay.stats.abtest"),
    "nearest_rank": "assay.stats.describe",
    "wilson": "assay.stats.intervals",
    **dict.fromkeys(("clustered_wilson", "moderated_t_interval"), "assay.stats.moderated"),
    **dict.fromkeys(("mcnemar_exact", "paired_bootstrap_diff", "paired_diff_interval"),
                    "assay.stats.paired"),
    **dict.fromkeys(("cluster_bootstrap_mean", "pass_at_k", "pass_hat_k"), "assay.stats.passk"),
    **dict.fromkeys(("minimum_detectable_effect", "simulated_power", "tasks_needed"),
                    "assay.stats.power"),
    **dict.fromkeys(("t_cdf", "t_ppf"), "assay.stats.tdist"),
}

if TYPE_CHECKING:
    from assay.stats.abtest import ABResult, compare_arms
    from assay.stats.describe import nearest_rank
    from assay.stats.intervals import wilson
    from assay.stats.moderated import clustered_wilson, moderated_t_interval
    from assay.stats.paired import mcnemar_exact, paired_bootstrap_diff, paired_diff_interval
    from assay.stats.passk import cluster_bootstrap_mean, pass_at_k, pass_hat_k
    from assay.stats.power import minimum_detectable_effect, simulated_power, tasks_needed
    from assay.stats.tdist import t_cdf, t_ppf


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'assay.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


__all__ = [
    "ABResult",
    "cluster_bootstrap_mean",
    "clustered_wilson",
    "compare_arms",
    "mcnemar_exact",
    "minimum_detectable_effect",
    "moderated_t_interval",
    "nearest_rank",
    "paired_bootstrap_diff",
    "paired_diff_interval",
    "pass_at_k",
    "pass_hat_k",
    "simulated_power",
    "t_cdf",
    "t_ppf",
    "tasks_needed",
    "wilson",
]
