"""Models whose evidence is known exactly: the yardsticks of every estimator here.

Each factory returns an :class:`AnalyticModel`: a ``pm.Model`` with a function giving the exact
``log p(y)`` for any data set of the right shape, so that bounds on simulated data (from
:func:`pymc_bdmc.sample_bdmc`) are checked against the truth as well as bounds on the data the
model was built with.

* :mod:`.closed_form`: conjugate models (closed-form evidence, exact tempered posteriors for
  :mod:`pymc_bdmc.verification`) and enumerable discrete ones;
* :mod:`.quadrature`: random walks, autoregressions, hierarchies, latent GPs and local-scale
  regressions, whose evidence is a low-dimensional integral computed by quadrature.
"""

from pymc_bdmc.known_evidence import closed_form, quadrature
from pymc_bdmc.known_evidence.closed_form import (
    AnalyticModel,
    beta_binomial,
    binary_attribute,
    categorical_mixture,
    gamma_poisson,
    linear_regression,
    normal_inverse_gamma_regression,
    switchpoint_poisson,
)
from pymc_bdmc.known_evidence.quadrature import (
    autoregression,
    eight_schools,
    gaussian_random_walk,
    group_intercepts,
    latent_gp,
    local_scales_regression,
    log_integral,
    random_intercepts,
)

__all__ = [
    "AnalyticModel",
    "autoregression",
    "beta_binomial",
    "binary_attribute",
    "categorical_mixture",
    "closed_form",
    "eight_schools",
    "gamma_poisson",
    "gaussian_random_walk",
    "group_intercepts",
    "latent_gp",
    "linear_regression",
    "local_scales_regression",
    "log_integral",
    "normal_inverse_gamma_regression",
    "quadrature",
    "random_intercepts",
    "switchpoint_poisson",
]
