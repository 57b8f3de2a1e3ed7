"""Statistics for eval results: intervals, percentiles, paired tests, pass@k."""

from assay.stats.describe import nearest_rank
from assay.stats.intervals import wilson
from assay.stats.paired import mcnemar_exact, paired_bootstrap_diff
from assay.stats.passk import cluster_bootstrap_mean, pass_at_k, pass_hat_k

__all__ = [
    "cluster_bootstrap_mean",
    "mcnemar_exact",
    "nearest_rank",
    "paired_bootstrap_diff",
    "pass_at_k",
    "pass_hat_k",
    "wilson",
]
