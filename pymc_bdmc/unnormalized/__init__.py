# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)
"""Models whose likelihood ``f(y|θ) = γ(y|θ) / Z(θ)`` has an intractable normaliser ``Z(θ)``.

Issue 18 (Everitt, Johansen, Rowing & Evdemon-Hogan 2017, "Bayesian model comparison with
un-normalised likelihoods", Stat. Comput. 27:403-422). This subpackage holds:

* :mod:`~pymc_bdmc.unnormalized.distributions`: :class:`Ising`, :class:`ERGM` and
  :class:`ExponentialFamily`, PyMC distributions whose logp is ``log γ`` and which are marked
  un-normalised (:func:`unnormalized_likelihoods`);
* :mod:`~pymc_bdmc.unnormalized.ising` and :mod:`~pymc_bdmc.unnormalized.ergm`: their
  simulators, exact where possible, and exact normalisers for test oracles;
* :mod:`~pymc_bdmc.unnormalized.cftp`: coupling from the past, exact draws of first-order
  ferromagnetic Ising fields too wide for the transfer matrix;
* :mod:`~pymc_bdmc.unnormalized.marker`: the marker that the AIS, SMC and BDMC drivers use to
  refuse such models;
* :mod:`~pymc_bdmc.unnormalized.importance`: SAVIS and MAVIS evidence estimators and
  bidirectional bounds on ``log Z`` (NumPy; the formulas and their unbiasedness are derived in
  that module's docstring);
* :mod:`~pymc_bdmc.unnormalized.exchange`: the exchange algorithm, for the posterior and for
  the pilot ``θ̂`` and importance proposal that SAVIS and MAVIS need;
* :mod:`~pymc_bdmc.unnormalized.smc`: random-weight SMC with data-point tempering (Ising
  fields, one row at a time).
* :mod:`~pymc_bdmc.unnormalized.summary`: ABC and synthetic-likelihood importance sampling,
  which estimate summary-statistic numbers for Bayes factors, not evidences.
* :mod:`~pymc_bdmc.unnormalized.pilot` and :mod:`~pymc_bdmc.unnormalized.results`: the
  compiled prior, the exchange pilot and the results of the estimators that
  :func:`~pymc_bdmc.sample_unnormalized_evidence` runs through the one driver
  (:mod:`pymc_bdmc.methods.unnormalized`).
"""

from pymc_bdmc.unnormalized.cftp import ising_cftp
from pymc_bdmc.unnormalized.distributions import (
    ERGM,
    ExponentialFamily,
    ExponentialFamilySimulator,
    Ising,
    unnormalized_simulator,
)
from pymc_bdmc.unnormalized.ergm import ERGMSimulator
from pymc_bdmc.unnormalized.exchange import ExchangeChain, exchange_sampler
from pymc_bdmc.unnormalized.importance import (
    ImportanceEvidence,
    log_inverse_normaliser,
    mavis,
    normaliser_bounds,
    savis,
)
from pymc_bdmc.unnormalized.ising import IsingSimulator
from pymc_bdmc.unnormalized.marker import (
    is_unnormalized,
    unnormalized_likelihoods,
    unnormalized_variables,
)
from pymc_bdmc.unnormalized.smc import IsingRowPath, SMCEvidence, random_weight_smc
from pymc_bdmc.unnormalized.summary import (
    SummaryEvidence,
    abc_evidence,
    synthetic_likelihood_evidence,
)

__all__ = [
    "ERGM",
    "ERGMSimulator",
    "ExchangeChain",
    "ExponentialFamily",
    "ExponentialFamilySimulator",
    "ImportanceEvidence",
    "Ising",
    "IsingRowPath",
    "IsingSimulator",
    "SMCEvidence",
    "SummaryEvidence",
    "abc_evidence",
    "exchange_sampler",
    "is_unnormalized",
    "ising_cftp",
    "log_inverse_normaliser",
    "mavis",
    "normaliser_bounds",
    "random_weight_smc",
    "savis",
    "synthetic_likelihood_evidence",
    "unnormalized_likelihoods",
    "unnormalized_simulator",
    "unnormalized_variables",
]
