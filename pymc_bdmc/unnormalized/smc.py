"""Random-weight SMC with data-point tempering, for Ising fields tempered one row at a time.

Everitt, Johansen, Rowing & Evdemon-Hogan (2017), §3 and Appendix B. The targets
``π_t(θ) ∝ p(θ) f_t(y_{1:t} | θ)``, ``t = 0..T``, add the data one block at a time: here
``f_t`` is the Ising model on the first ``t`` rows (a ``t x W`` field, whose normaliser
``Z_t(θ)`` is intractable in general), ``π_0`` is the prior and ``π_T`` the posterior. The
incremental weight of a particle,

    γ_t(y_{1:t} | θ) / γ_{t-1}(y_{1:t-1} | θ) × Z_{t-1}(θ) / Z_t(θ),

has its intractable ratio replaced by an unbiased estimate from an exact draw
``u ~ f_t(· | θ)`` of the t-row field, with ``q`` uniform on the new row:

    E[γ_{t-1}(u_{1:t-1} | θ) q(u_t) / γ_t(u | θ)] = Σ_u γ_{t-1}(u_{1:t-1}) q(u_t) / Z_t
                                                 = Z_{t-1}(θ) / Z_t(θ)

(``Z_0 = 1``). Particles are resampled (systematic) when the ESS falls below a threshold and
moved by exchange-algorithm steps targeting ``π_t`` (one exact draw from ``f_t`` each; module
:mod:`~pymc_bdmc.unnormalized.exchange`). The product over ``t`` of the weighted means of the
incremental weights is an unbiased estimate of ``p(y)``, as for SMC with exact weights, because
each estimated weight is unbiased given the particle and independent of the rest (random-weight
SMC: Fearnhead, Papaspiliopoulos, Roberts & Stuart 2010; Everitt et al. 2017, App. B). So
``log p̂(y)`` is a stochastic lower bound. Inexact (Swendsen-Wang) simulation removes this,
and the result says so.
"""

# ruff: noqa: RUF001, RUF002, RUF003  (γ and π are the paper's notation)

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.resampling import systematic_resample
from pymc_bdmc.unnormalized.ising import IsingSimulator, check_spins, ising_statistics

__all__ = ["IsingRowPath", "SMCEvidence", "random_weight_smc"]


class IsingRowPath:
    """Data-point tempering of an Ising field by rows: target ``t`` sees the first ``t`` rows.

    Parameters
    ----------
    y : array_like of {-1, +1}, shape (H, W)
        The observed field.
    neighbourhood : {"first", "second"}, default "first"
    exact : bool, optional
        As for :class:`~pymc_bdmc.unnormalized.IsingSimulator`.
    sweeps : int, default 500
        Swendsen-Wang sweeps per draw when ``exact=False``.
    """

    def __init__(self, y, neighbourhood: str = "first", exact: bool | None = None,
                 sweeps: int = 500):
        self.y = check_spins(y)
        if self.y.ndim != 2:
            raise BDMCInputError(f"`y` must be one field of shape (H, W), got {self.y.shape}.")
        height, self.width = self.y.shape
        self.simulators = [IsingSimulator((t, self.width), neighbourhood, exact, sweeps)
                           for t in range(1, height + 1)]
        self.exact = all(s.exact for s in self.simulators)
        # s_t(y_{1:t}) for t = 0..H (row 0: no data)
        self.stats = np.array([ising_statistics(self.y[:t]) for t in range(height + 1)])

    @property
    def n_targets(self) -> int:
        """Number ``T`` of tempering steps (the field's height)."""
        return len(self.simulators)

    def simulator(self, t: int) -> IsingSimulator:
        """Return the exact simulator of ``f_t`` (the first ``t`` rows), ``t >= 1``."""
        return self.simulators[t - 1]

    def log_ratio_estimates(self, t: int, eta, n_aux: int, rng: np.random.Generator):
        """Return ``n_aux`` log-estimates of ``Z_{t-1}(η) / Z_t(η)``, each unbiased.

        Parameters
        ----------
        t : int
            Target index, ``1 <= t <= T``.
        eta : array_like, shape (2,)
        n_aux : int
        rng : numpy.random.Generator

        Returns
        -------
        numpy.ndarray
            Shape (n_aux,).
        """
        u = self.simulator(t).sample(eta, n_aux, rng)
        drop = ising_statistics(u[:, :-1]) - ising_statistics(u)  # s_{t-1}(u_{1:t-1}) - s_t(u)
        return drop @ np.asarray(eta, dtype=float) - self.width * np.log(2.0)


@dataclass(frozen=True)
class SMCEvidence:
    """A random-weight SMC evidence estimate.

    Attributes
    ----------
    log_evidence : float
        ``log p̂(y)``; ``p̂(y)`` is unbiased when ``exact`` is True.
    log_increments : numpy.ndarray
        ``log`` of the weighted mean incremental weight at each target, shape (T,).
    theta : numpy.ndarray
        Final particles, shape (N, d).
    log_weights : numpy.ndarray
        Their normalised log weights, shape (N,).
    n_resamples : int
        Resampling events.
    acceptance_rate : float
        Of the exchange moves, over all targets.
    exact : bool
        Whether every auxiliary and move draw was exact.
    """

    log_evidence: float
    log_increments: np.ndarray
    theta: np.ndarray
    log_weights: np.ndarray
    n_resamples: int
    acceptance_rate: float
    exact: bool


def _exchange_moves(path, t, theta, eta, lp, natural, log_prior, n_moves, chol, rng):
    accepted = 0
    for _ in range(n_moves):
        for i in range(len(theta)):
            proposal = theta[i] + chol @ rng.standard_normal(theta.shape[1])
            lp_new = float(log_prior(proposal))
            if not np.isfinite(lp_new):
                continue
            eta_new = np.asarray(natural(proposal), dtype=float)
            s_u = ising_statistics(path.simulator(t).sample(eta_new, 1, rng)[0])
            log_alpha = lp_new - lp[i] + (eta_new - eta[i]) @ (path.stats[t] - s_u)
            if np.log(rng.random()) < log_alpha:
                theta[i], eta[i], lp[i] = proposal, eta_new, lp_new
                accepted += 1
    return accepted


def random_weight_smc(path: IsingRowPath, natural: Callable, log_prior: Callable, prior_draws,
                      rng: np.random.Generator, *, n_aux: int = 1, n_moves: int = 2,
                      ess_threshold: float = 0.5,
                      on_step: Callable[[], None] | None = None) -> SMCEvidence:
    """Estimate ``p(y)`` by random-weight SMC along a data-point tempering path.

    Parameters
    ----------
    path : IsingRowPath
        The targets and their simulators.
    natural : callable
        ``natural(θ)`` returns ``η(θ)`` of shape (2,).
    log_prior : callable
        ``log_prior(θ)``, ``-inf`` outside the support.
    prior_draws : array_like, shape (N, d)
        Exact prior draws: the initial particles.
    rng : numpy.random.Generator
    n_aux : int, default 1
        Auxiliary draws per particle and target for each ratio ``Z_{t-1}/Z_t``.
    n_moves : int, default 2
        Exchange moves per particle and target (random walk scaled by the particles' weighted
        covariance, ``2.38² / d``).
    ess_threshold : float, default 0.5
        Resample when the ESS falls below this fraction of ``N``.
    on_step : callable, optional
        Called with no arguments after each target, i.e. row (progress reporting).

    Returns
    -------
    SMCEvidence
    """
    theta = np.array(prior_draws, dtype=float)
    if theta.ndim == 1:
        theta = theta[:, None]
    if theta.ndim != 2 or len(theta) < 2:
        raise BDMCInputError("`prior_draws` must have shape (N, d) with N >= 2.")
    if int(n_aux) < 1 or int(n_moves) < 0 or not 0 < ess_threshold <= 1:
        raise BDMCInputError("Need n_aux >= 1, n_moves >= 0 and 0 < ess_threshold <= 1.")
    n, d = theta.shape
    eta = np.array([natural(x) for x in theta], dtype=float)
    lp = np.array([log_prior(x) for x in theta], dtype=float)
    if not np.all(np.isfinite(lp)):
        raise BDMCInputError("Every prior draw must lie in the prior's support.")
    log_w = np.full(n, -np.log(n))
    increments, n_resamples, accepted, tried = [], 0, 0, 0
    for t in range(1, path.n_targets + 1):
        log_ratio = np.array([logsumexp(path.log_ratio_estimates(t, e, n_aux, rng))
                              - np.log(n_aux) for e in eta])
        log_inc = eta @ (path.stats[t] - path.stats[t - 1]) + log_ratio
        increments.append(logsumexp(log_w + log_inc))
        log_w = log_w + log_inc - increments[-1]
        if np.exp(-logsumexp(2 * log_w)) < ess_threshold * n:
            idx = systematic_resample(rng, np.exp(log_w), n)
            theta, eta, lp = theta[idx], eta[idx], lp[idx]
            log_w = np.full(n, -np.log(n))
            n_resamples += 1
        if n_moves:
            w = np.exp(log_w)
            centred = theta - w @ theta
            cov = np.atleast_2d((centred * w[:, None]).T @ centred) * 2.38**2 / d
            chol = np.linalg.cholesky(cov + 1e-10 * np.eye(d))
            accepted += _exchange_moves(path, t, theta, eta, lp, natural, log_prior,
                                        int(n_moves), chol, rng)
            tried += int(n_moves) * n
        if on_step is not None:
            on_step()
    return SMCEvidence(float(np.sum(increments)), np.array(increments), theta, log_w,
                       n_resamples, accepted / max(tried, 1), path.exact)
