"""Statistics for eval results: intervals, percentiles, paired tests, pass@k, A/B, power."""

from assay.stats.abtest import ABResult, compare_arms
from assay.stats.describe import nearest_rank
from assay.stats.intervals import wilson
from assay.stats.moderated import clustered_wilson, moderated_t_interval
from assay.stats.paired import mcnemar_exact, paired_bootstrap_diff, paired_diff_interval
from assay.stats.passk import cluster_bootstrap_mean, pass_at_k, pass_hat_k
from assay.stats.power import minimum_detectable_effect, simulated_power, tasks_needed
from assay.stats.tdist import t_cdf, t_ppf

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
