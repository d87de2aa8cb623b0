# ruff: noqa: RUF002  (γ is the paper's un-normalised density)
"""Models whose likelihood ``f(y|θ) = γ(y|θ) / Z(θ)`` has an intractable normaliser ``Z(θ)``.

Issue 18 (Everitt, Johansen, Rowing & Evdemon-Hogan 2017, "Bayesian model comparison with
un-normalised likelihoods", Stat. Comput. 27:403-422). This subpackage holds
:mod:`~pymc_bdmc.unnormalized.ising` and :mod:`~pymc_bdmc.unnormalized.ergm`: simulators,
exact where possible, and exact normalisers for test oracles.
"""

from pymc_bdmc.unnormalized.ergm import ERGMSimulator
from pymc_bdmc.unnormalized.ising import IsingSimulator

__all__ = ["ERGMSimulator", "IsingSimulator"]
