# ruff: noqa: RUF002, RUF003  (γ and α are the paper's notation)
"""The exchange algorithm: posterior MCMC for un-normalised likelihoods, and a SAVIS/MAVIS pilot.

Murray, Ghahramani & MacKay (2006), used by Everitt et al. (2017, §1.1.2 and §2.6) to find the
pilot estimate ``θ̂`` and to fit the importance proposal ``q(θ)``. The posterior
``p(θ | y) ∝ p(θ) γ(y | η(θ)) / Z(η(θ))`` is the θ-marginal of the extended target
``p(θ) f(y | θ) g(θ' | θ) f(u | θ')``. A random-walk proposal ``θ'`` with an exact auxiliary
draw ``u ~ f(· | η(θ'))``, followed by swapping ``(θ, θ')`` in the likelihood terms, is accepted
with probability ``min(1, α)``,

    log α = log p(θ') - log p(θ) + (η' - η) · (s(y) - s(u)),

in which every ``Z`` cancels (symmetric ``g``). The chain then targets ``p(θ | y)`` exactly when
``u`` is an exact draw; with an inexact simulator (``exact=False``) it does so only
approximately, which the result reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy

from pymc_bdmc.errors import BDMCInputError

__all__ = ["ExchangeChain", "exchange_sampler"]


@dataclass(frozen=True)
class ExchangeChain:
    """Draws of an exchange-algorithm chain.

    Attributes
    ----------
    theta : numpy.ndarray
        Draws after burn-in, shape (n_draws, d).
    acceptance_rate : float
        Over the kept draws.
    exact : bool
        Whether the auxiliary draws were exact (else the chain's target is approximate).
    """

    theta: np.ndarray
    acceptance_rate: float
    exact: bool

    def pilot(self) -> np.ndarray:
        """Return the pilot estimate ``θ̂``: the posterior mean of the draws.

        Returns
        -------
        numpy.ndarray
            Shape (d,).
        """
        return self.theta.mean(0)

    def proposal(self, scale: float = 1.5, df: float | None = None):
        """Return an importance proposal fitted to the draws (Everitt et al. 2017, §2.6).

        Parameters
        ----------
        scale : float, default 1.5
            Multiplies the standard deviations, so that ``q`` has heavier tails than the
            posterior (importance weights then stay bounded near the mode).
        df : float, optional
            Degrees of freedom of a multivariate t; a Gaussian when None.

        Returns
        -------
        scipy.stats frozen distribution
            With ``rvs(size, random_state)`` and ``logpdf``; draws have shape (size, d).
        """
        mean = self.pilot()
        cov = np.atleast_2d(np.cov(self.theta, rowvar=False)) * scale**2
        if df is None:
            return scipy.stats.multivariate_normal(mean, cov)
        return scipy.stats.multivariate_t(mean, cov, df=df)


def exchange_sampler(simulator, stats_y, natural: Callable, log_prior: Callable, theta0,
                     n_draws: int, rng: np.random.Generator, *, step_size=0.1,
                     burn_in: int = 500,
                     on_step: Callable[[], None] | None = None) -> ExchangeChain:
    """Sample ``p(θ | y)`` by the exchange algorithm with a Gaussian random walk.

    Parameters
    ----------
    simulator : IsingSimulator or ERGMSimulator
        Draws ``u ~ f(· | η)`` with ``sample(eta, 1, rng)``; ``statistics(u)`` gives ``s(u)``.
    stats_y : array_like, shape (k,)
        Statistics ``s(y)`` of the data.
    natural : callable
        ``natural(θ)`` returns ``η(θ)``, shape (k,), for ``θ`` of shape (d,).
    log_prior : callable
        ``log_prior(θ)``: the prior log density, ``-inf`` outside its support.
    theta0 : array_like, shape (d,)
        Starting point (inside the prior's support).
    n_draws : int
        Draws kept after ``burn_in``.
    rng : numpy.random.Generator
    step_size : float or array_like, default 0.1
        Standard deviation of the random walk, per coordinate (or a (d, d) covariance's
        Cholesky factor).
    burn_in : int, default 500
        Iterations discarded first.
    on_step : callable, optional
        Called with no arguments after each iteration, burn-in included (progress reporting).

    Returns
    -------
    ExchangeChain
    """
    theta = np.atleast_1d(np.asarray(theta0, dtype=float))
    stats_y = np.asarray(stats_y, dtype=float)
    step = np.asarray(step_size, dtype=float)
    chol = step if step.ndim == 2 else np.diag(np.broadcast_to(step, theta.shape))
    if chol.shape != (len(theta), len(theta)):
        raise BDMCInputError(f"`step_size` does not match θ of length {len(theta)}.")
    if int(n_draws) < 1 or int(burn_in) < 0:
        raise BDMCInputError("Need n_draws >= 1 and burn_in >= 0.")
    lp = float(log_prior(theta))
    if not np.isfinite(lp):
        raise BDMCInputError(f"`theta0` = {theta.tolist()} is outside the prior's support.")
    eta = np.asarray(natural(theta), dtype=float)
    if eta.shape != stats_y.shape:
        raise BDMCInputError(
            f"natural(θ) has shape {eta.shape} but the data's statistics have {stats_y.shape}."
        )
    total = int(burn_in) + int(n_draws)
    draws = np.empty((int(n_draws), len(theta)))
    accepted = 0
    for it in range(total):
        proposal = theta + chol @ rng.standard_normal(len(theta))
        lp_new = float(log_prior(proposal))
        if np.isfinite(lp_new):  # outside the support: rejected without simulating
            eta_new = np.asarray(natural(proposal), dtype=float)
            s_u = simulator.statistics(simulator.sample(eta_new, 1, rng)[0])
            log_alpha = lp_new - lp + (eta_new - eta) @ (stats_y - s_u)
            if np.log(rng.random()) < log_alpha:
                theta, lp, eta = proposal, lp_new, eta_new
                accepted += it >= burn_in
        if it >= burn_in:
            draws[it - burn_in] = theta
        if on_step is not None:
            on_step()
    return ExchangeChain(draws, accepted / int(n_draws), bool(simulator.exact))
