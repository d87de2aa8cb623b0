"""SAVIS and MAVIS: importance sampling for the evidence of un-normalised likelihoods.

Everitt, Johansen, Rowing & Evdemon-Hogan (2017), "Bayesian model comparison with un-normalised
likelihoods", Stat. Comput. 27:403-422, §2.1 (arXiv 1504.00298). The model is an exponential
family ``f(y | θ) = γ(y | η) / Z(η)`` with ``γ(y | η) = exp(η · s(y))``, ``η = η(θ)`` and
``Z(η)`` intractable; the evidence is ``p(y) = ∫ p(θ) γ(y | η(θ)) / Z(η(θ)) dθ``.

**Importance sampling with a random weight** (:func:`importance_evidence`). With ``θ_n ~ q`` and
non-negative estimates ``R̂_n`` with ``E[R̂_n | θ_n] = 1 / Z(η_n)``,

    ŵ_n = p(θ_n) γ(y | η_n) R̂_n / q(θ_n),        p̂(y) = (1/N) Σ_n ŵ_n,

is unbiased for ``p(y)``, so ``log p̂(y)`` is a stochastic lower bound.

**1/Z by annealing in y-space** (:func:`log_inverse_normaliser`). From an exact draw
``u_0 ~ f(· | η)``, MCMC moves along the bridges ``η_k = (1 - β_k) η + β_k η_ref`` to a
reference with known ``Z(η_ref)`` give the annealed importance weight
``W = exp(Σ_k (η_{k+1} - η_k) · s(u_k))`` with ``E[W] = Z(η_ref) / Z(η)`` (Neal 2001), for any
number of sweeps; only the first draw must be exact. No bridges is **SAVIS** (eq. (10), with
``η_ref = η(θ̂)`` at a pilot estimate, Møller et al. 2006); bridges are **MAVIS** (after Murray,
Ghahramani & MacKay 2006), whose variance falls as their number grows.

**Where Z(η_ref) comes from.** With the exact ``Z(η(θ̂))`` (transfer matrix, closed form) the
estimate is unbiased, and so it is with ``exp(-log_z_ref)`` an independent unbiased estimate of
``1/Z(η_ref)``: the product of two independent unbiased estimators. A *biased* ``log Z(η_ref)``,
or a simulator with ``exact=False``, removes the guarantee; the result reports the latter.

**Bounds on log Z(η̂), and a lower bound on log p(y) without a plug-in**
(:func:`normaliser_bounds`). Annealing forward from exact draws at ``η_0`` (known normaliser,
e.g. the uniform field) to ``η̂`` gives a stochastic lower bound on ``log Z(η̂)``; annealing in
reverse from exact draws at ``η̂`` gives ``U``, a stochastic upper bound whose ``exp(-U)`` is
unbiased for ``1/Z(η̂)``. Passing ``log_z_ref = U`` to :func:`savis` or :func:`mavis` (reverse
chains independent of the rest) therefore gives an estimate unbiased for ``p(y)`` that rests on
no plugged-in ``Z(η̂)``. Plugging in the lower bound instead would not (``E[1/Ẑ] >= 1/Z``).
The argument in full: docs/explanation/validity.md, "Un-normalised likelihoods".
"""

# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import EvidenceBounds, evidence_bounds

__all__ = [
    "ImportanceEvidence",
    "auxiliary_log_weights",
    "importance_evidence",
    "log_inverse_normaliser",
    "mavis",
    "normaliser_bounds",
    "savis",
]


@dataclass(frozen=True)
class ImportanceEvidence:
    """An importance-sampling evidence estimate for an un-normalised likelihood.

    Attributes
    ----------
    log_evidence : float
        ``log p̂(y)``; ``p̂(y)`` is unbiased when ``exact`` is True and ``log_z_ref`` was exact
        (or ``exp(-log_z_ref)`` an independent unbiased estimate of ``1/Z(η_ref)``).
    log_weights : numpy.ndarray
        ``log ŵ_n``, shape (N,).
    log_inverse_z : numpy.ndarray
        ``log R̂_n``, the log of each ``θ_n``'s estimate of ``1/Z(η_n)``, shape (N,).
    ess : float
        Effective sample size of the weights, ``(Σ ŵ)² / Σ ŵ²``.
    relative_se : float
        Standard error of ``p̂(y) / p(y)`` estimated from the weights (``sd(ŵ) / (mean(ŵ) √N)``).
        With heavy-tailed weights (SAVIS far from ``θ̂``) it understates the spread over runs.
    method : str
        ``"savis"`` or ``"mavis"``.
    n_aux, n_bridges, sweeps : int
        Auxiliary chains per ``θ_n``, intermediate bridges ``K``, MCMC sweeps per bridge.
    exact : bool
        Whether the first auxiliary draws were exact (False: long-MCMC draws, no guarantee).
    """

    log_evidence: float
    log_weights: np.ndarray
    log_inverse_z: np.ndarray
    ess: float
    relative_se: float
    method: str
    n_aux: int
    n_bridges: int
    sweeps: int
    exact: bool


def auxiliary_log_weights(stats_u, eta, eta_ref, log_z_ref: float) -> np.ndarray:
    """Return SAVIS's ``log(q_u(u) / γ(u | η))`` with ``q_u = f(· | η_ref)``.

    Parameters
    ----------
    stats_u : array_like, shape (..., k)
        Statistics ``s(u)`` of auxiliary draws ``u ~ f(· | η)``.
    eta : array_like, shape (..., k)
        Natural parameters the draws come from.
    eta_ref : array_like, shape (k,)
        Natural parameters of the auxiliary density.
    log_z_ref : float
        ``log Z(η_ref)`` (see the module docstring for when an estimate may be used).

    Returns
    -------
    numpy.ndarray
        ``(η_ref - η) · s(u) - log Z(η_ref)``; its exponential has mean ``1/Z(η)``.
    """
    diff = np.asarray(eta_ref, dtype=float) - np.asarray(eta, dtype=float)
    return (np.asarray(stats_u, dtype=float) * diff).sum(-1) - float(log_z_ref)


def _bridges(n_bridges: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, int(n_bridges) + 2)


def log_inverse_normaliser(simulator, eta, eta_ref, log_z_ref: float, n_aux: int,
                           rng: np.random.Generator, n_bridges: int = 0,
                           sweeps: int = 1, on_step: Callable[[], None] | None = None
                           ) -> np.ndarray:
    """Return ``M`` independent log-estimates of ``1/Z(η)``, each unbiased in ``1/Z`` space.

    Parameters
    ----------
    simulator : IsingSimulator or ERGMSimulator
        Any object with ``sample(eta, size, rng)``, ``mcmc(y, eta, rng, sweeps)``,
        ``statistics(y)`` and ``exact``.
    eta : array_like, shape (k,)
        Natural parameters whose ``1/Z`` is estimated; ``u_0`` is drawn exactly there.
    eta_ref : array_like, shape (k,)
        End of the path, with known ``log Z(η_ref)``.
    log_z_ref : float
        ``log Z(η_ref)``.
    n_aux : int
        Number ``M`` of independent auxiliary chains.
    rng : numpy.random.Generator
    n_bridges : int, default 0
        Intermediate bridges ``K`` (0: SAVIS, a single auxiliary draw per chain).
    sweeps : int, default 1
        MCMC sweeps per intermediate bridge.
    on_step : callable, optional
        Called with no arguments after each bridge, ``K + 1`` times (progress reporting).

    Returns
    -------
    numpy.ndarray
        ``log R̂_m``, shape (M,); ``E[exp(log R̂_m)] = 1/Z(η)``.
    """
    eta = np.asarray(eta, dtype=float)
    eta_ref = np.asarray(eta_ref, dtype=float)
    betas = _bridges(n_bridges)
    u = simulator.sample(eta, int(n_aux), rng)
    log_w = np.zeros(int(n_aux))
    for k in range(len(betas) - 1):
        if k > 0:  # u_k from u_{k-1} by a kernel leaving f(· | η_k) invariant
            u = simulator.mcmc(u, (1 - betas[k]) * eta + betas[k] * eta_ref, rng, sweeps)
        log_w += (betas[k + 1] - betas[k]) * (simulator.statistics(u) @ (eta_ref - eta))
        if on_step is not None:
            on_step()
    return log_w - float(log_z_ref)


def importance_evidence(log_prior, log_proposal, log_gamma_y,
                        log_inverse_z) -> tuple[float, np.ndarray, float, float]:
    """Combine per-draw terms into ``log p̂(y) = log mean_n ŵ_n``.

    Parameters
    ----------
    log_prior, log_proposal : array_like, shape (N,)
        ``log p(θ_n)`` and ``log q(θ_n)`` (both normalised densities, same parametrisation).
    log_gamma_y : array_like, shape (N,)
        ``log γ(y | η(θ_n))``.
    log_inverse_z : array_like, shape (N,)
        Log of unbiased estimates of ``1/Z(η(θ_n))``.

    Returns
    -------
    log_evidence : float
    log_weights : numpy.ndarray
        ``log ŵ_n``, shape (N,).
    ess : float
        ``(Σ ŵ)² / Σ ŵ²``.
    relative_se : float
        ``sd(ŵ) / (mean(ŵ) √N)``.
    """
    log_w = (np.asarray(log_prior, dtype=float) - np.asarray(log_proposal, dtype=float)
             + np.asarray(log_gamma_y, dtype=float) + np.asarray(log_inverse_z, dtype=float))
    if log_w.ndim != 1 or not len(log_w):
        raise BDMCInputError("The importance terms must be non-empty vectors of equal length.")
    n = len(log_w)
    log_mean = float(logsumexp(log_w) - np.log(n))
    ess = float(np.exp(2 * logsumexp(log_w) - logsumexp(2 * log_w)))
    ratio = np.exp(log_w - log_mean)  # ŵ / mean(ŵ): finite even when ŵ under/overflows
    return log_mean, log_w, ess, float(ratio.std(ddof=1) / np.sqrt(n)) if n > 1 else np.inf


def _evidence(method, simulator, stats_y, eta, log_prior, log_proposal, eta_ref, log_z_ref,
              n_aux, rng, n_bridges, sweeps, on_step) -> ImportanceEvidence:
    eta = np.atleast_2d(np.asarray(eta, dtype=float))
    stats_y = np.asarray(stats_y, dtype=float)
    if eta.shape[-1] != stats_y.shape[-1] or np.shape(eta_ref) != stats_y.shape:
        raise BDMCInputError(
            f"`eta` rows, `eta_ref` and the data's statistics must have the same length; got "
            f"{eta.shape}, {np.shape(eta_ref)} and {stats_y.shape}."
        )
    if len(log_prior) != len(eta) or len(log_proposal) != len(eta):
        raise BDMCInputError("`log_prior` and `log_proposal` need one entry per row of `eta`.")
    if int(n_aux) < 1 or int(n_bridges) < 0 or int(sweeps) < 1:
        raise BDMCInputError("Need n_aux >= 1, n_bridges >= 0 and sweeps >= 1.")
    log_inv_z = np.empty(len(eta))
    for n, e in enumerate(eta):
        log_inv_z[n] = logsumexp(log_inverse_normaliser(simulator, e, eta_ref, log_z_ref, n_aux,
                                                        rng, n_bridges, sweeps)) - np.log(n_aux)
        if on_step is not None:
            on_step()
    log_ev, log_w, ess, rse = importance_evidence(log_prior, log_proposal, eta @ stats_y,
                                                  log_inv_z)
    return ImportanceEvidence(log_ev, log_w, log_inv_z, ess, rse, method, int(n_aux),
                              int(n_bridges), int(sweeps), bool(simulator.exact))


def savis(simulator, stats_y, eta, log_prior, log_proposal, eta_ref, log_z_ref: float, *,
          n_aux: int = 1, rng: np.random.Generator,
          on_step: Callable[[], None] | None = None) -> ImportanceEvidence:
    """Estimate the evidence by single auxiliary variable importance sampling (SAVIS).

    Parameters
    ----------
    simulator : IsingSimulator or ERGMSimulator
        Draws ``u ~ f(· | η)``; exact draws make ``p̂(y)`` unbiased.
    stats_y : array_like, shape (k,)
        Statistics ``s(y)`` of the data.
    eta : array_like, shape (N, k)
        Natural parameters ``η(θ_n)`` of the importance draws ``θ_n ~ q``.
    log_prior, log_proposal : array_like, shape (N,)
        ``log p(θ_n)`` and ``log q(θ_n)``.
    eta_ref : array_like, shape (k,)
        Natural parameters of the auxiliary density ``f(· | η_ref)``, typically ``η(θ̂)``.
    log_z_ref : float
        Exact ``log Z(η_ref)``, or minus the log of an independent unbiased estimate of
        ``1/Z(η_ref)``.
    n_aux : int, default 1
        Auxiliary draws per ``θ_n`` (the paper's ``M``).
    rng : numpy.random.Generator
    on_step : callable, optional
        Called with no arguments after each importance draw ``θ_n`` (progress reporting).

    Returns
    -------
    ImportanceEvidence
    """
    return _evidence("savis", simulator, stats_y, eta, log_prior, log_proposal, eta_ref,
                     log_z_ref, n_aux, rng, 0, 1, on_step)


def mavis(simulator, stats_y, eta, log_prior, log_proposal, eta_ref, log_z_ref: float, *,
          n_aux: int = 1, n_bridges: int = 10, sweeps: int = 1,
          rng: np.random.Generator,
          on_step: Callable[[], None] | None = None) -> ImportanceEvidence:
    """Estimate the evidence by multiple auxiliary variable importance sampling (MAVIS).

    As :func:`savis`, but each ``1/Z(η_n)`` estimate anneals from an exact draw at ``η_n``
    through ``n_bridges`` geometric bridges to ``η_ref`` (module docstring).

    Parameters
    ----------
    simulator : IsingSimulator or ERGMSimulator
        Exact first draws and an MCMC kernel (``mcmc``) for the bridges.
    stats_y : array_like, shape (k,)
        Statistics ``s(y)`` of the data.
    eta : array_like, shape (N, k)
        Natural parameters ``η(θ_n)`` of the importance draws ``θ_n ~ q``.
    log_prior, log_proposal : array_like, shape (N,)
        ``log p(θ_n)`` and ``log q(θ_n)``.
    eta_ref : array_like, shape (k,)
        End of the annealing path.
    log_z_ref : float
        Exact ``log Z(η_ref)``, or minus the log of an independent unbiased estimate of
        ``1/Z(η_ref)``.
    n_aux : int, default 1
        Annealing chains per ``θ_n``.
    n_bridges : int, default 10
        Intermediate bridges ``K``.
    sweeps : int, default 1
        MCMC sweeps per bridge.
    rng : numpy.random.Generator
    on_step : callable, optional
        Called with no arguments after each importance draw ``θ_n`` (progress reporting).

    Returns
    -------
    ImportanceEvidence
    """
    return _evidence("mavis", simulator, stats_y, eta, log_prior, log_proposal, eta_ref,
                     log_z_ref, n_aux, rng, n_bridges, sweeps, on_step)


def normaliser_bounds(simulator, eta, eta_ref, log_z_ref: float, n_chains: int,
                      rng: np.random.Generator, n_bridges: int = 200, sweeps: int = 1,
                      confidence: float = 0.95,
                      on_step: Callable[[], None] | None = None) -> EvidenceBounds:
    """Return stochastic lower and upper bounds on ``log Z(η)`` by annealing in y-space.

    Forward chains start from exact draws at ``η_ref`` (known ``Z``) and anneal to ``η``;
    reverse chains start from exact draws at ``η`` and anneal to ``η_ref`` (module docstring).

    Parameters
    ----------
    simulator : IsingSimulator or ERGMSimulator
        Exact draws at both ends (``exact=True``) make the bounds valid.
    eta : array_like, shape (k,)
        Natural parameters whose ``log Z`` is bounded (e.g. ``η(θ̂)``).
    eta_ref : array_like, shape (k,)
        Natural parameters with known ``log Z`` (e.g. zeros: the uniform Ising field).
    log_z_ref : float
        ``log Z(η_ref)`` (``H W log 2`` for the uniform Ising field).
    n_chains : int
        Chains in each direction.
    rng : numpy.random.Generator
    n_bridges : int, default 200
        Intermediate bridges.
    sweeps : int, default 1
        MCMC sweeps per bridge.
    confidence : float, default 0.95
        Level of the Markov-inequality bounds in the result.
    on_step : callable, optional
        Called with no arguments after each bridge of either direction, ``2 (K + 1)``
        times in all (progress reporting).

    Returns
    -------
    EvidenceBounds
        ``lower`` and ``upper`` bound ``log Z(η)``; ``exp(-upper)`` is an unbiased estimate of
        ``1/Z(η)``, so ``upper`` can be passed as ``log_z_ref`` to :func:`savis`/:func:`mavis`.
    """
    forward = log_inverse_normaliser(simulator, eta_ref, eta, 0.0, n_chains, rng, n_bridges,
                                     sweeps, on_step) + float(log_z_ref)
    reverse = log_inverse_normaliser(simulator, eta, eta_ref, log_z_ref, n_chains, rng,
                                     n_bridges, sweeps, on_step)
    return evidence_bounds(rng, forward, reverse, confidence)
