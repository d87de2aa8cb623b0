"""Estimator testbed: the BDMC paper's experiments (Grosse, Ghahramani & Adams 2015, §6).

Benchmark problems on simulated data (:mod:`.models`, with Gibbs-sampler forms in
:mod:`.gibbs_models`), marginal-likelihood estimators behind one interface (:mod:`.estimators`,
:mod:`.chib`, :mod:`.nested`, :mod:`.quadrature`) and a runner that compares them against BDMC
ground truth (:mod:`.runner`).
"""

from pymc_bdmc.testbed.estimators import ESTIMATORS, EstimateResult, EstimatorSpec
from pymc_bdmc.testbed.gibbs_models import CollapsedLinearGaussian, LowRankGibbs
from pymc_bdmc.testbed.models import (
    Problem,
    binary_attributes,
    clustering,
    low_rank,
    problem_from_analytic,
    with_observed,
)
from pymc_bdmc.testbed.runner import (
    compare_estimators,
    ground_truth,
    plot_estimates,
    rmse,
    summary_table,
    time_to_accuracy,
)

__all__ = [
    "ESTIMATORS",
    "CollapsedLinearGaussian",
    "EstimateResult",
    "EstimatorSpec",
    "LowRankGibbs",
    "Problem",
    "binary_attributes",
    "clustering",
    "compare_estimators",
    "ground_truth",
    "low_rank",
    "plot_estimates",
    "problem_from_analytic",
    "rmse",
    "summary_table",
    "time_to_accuracy",
    "with_observed",
]
