"""Summary-statistic evidence: ABC and synthetic likelihood, for Bayes factors only.

Everitt, Johansen, Rowing & Evdemon-Hogan (2017), §2.2-2.4. Both estimators replace the data
``y`` by a summary ``S(y)`` and estimate, by importance sampling over ``θ_n ~ q``, a number that
is **not** the evidence ``p(y)``:

* **ABC** (:func:`abc_evidence`) estimates ``p_ε(S(y)) = ∫ p(θ) P(‖S(x) - S(y)‖_∞ <= ε | θ) dθ``
  with ``x ~ f(· | θ)``: the prior predictive probability that a simulated summary lands within
  ``ε`` of the observed one (each statistic, or ``ε`` per statistic). With ``M`` simulations per
  ``θ_n`` the weight ``p(θ_n)/q(θ_n) × (1/M) Σ_m 1{‖S(x_m) - S(y)‖_∞ <= ε}`` is unbiased for it.
  The uniform kernel's volume is left out: it is the same for every model compared with the same
  ``S`` and ``ε``, so it cancels in a Bayes factor.
* **Synthetic likelihood** (:func:`synthetic_likelihood_evidence`) estimates
  ``∫ p(θ) N(S(y); μ_θ, Σ_θ) dθ``, the moments fitted to ``M`` simulated summaries per ``θ_n``
  (Wood 2010): a density in summary space, biased (``log`` of a plug-in Gaussian, and the
  Gaussian itself is an approximation).

**When their ratio is a Bayes factor.** If both models' likelihoods depend on ``y`` only
through ``S(y)`` with the same base measure (for first- against second-order Ising fields with
``S = (s₁, s₂)``, the nearest-neighbour and diagonal pair sums: ``γ = exp(η · S(y))`` in both),
then ``p(y | M) = p(S(y) | M) · p(y | S(y))`` with ``p(y | S(y))`` uniform on the data sets
sharing ``S(y)``, the same for both models, so
``p(S(y) | M₁) / p(S(y) | M₂) = p(y | M₁) / p(y | M₂)``. (Poisson against geometric counts,
§2.3, fails this: ``Σ y`` is sufficient for each, but their base measures differ.) ABC with
``ε = 0`` on integer-valued statistics estimates exactly ``p(S(y) | M)``, so its Bayes factor is
the true one up to Monte Carlo error; ``ε > 0`` shrinks Bayes factors towards 1 and synthetic
likelihood is biased (§2.3). With a summary that is not jointly sufficient neither ratio is the
Bayes factor.

Either way the result is a *summary-statistic* number, not an evidence: ``pmb.compare`` and
``pmb.bayes_factor`` refuse to mix it with evidences, and compare such results only when they
share the method, the summary and ``ε``.
"""

# ruff: noqa: RUF002  (θ, ε and Σ are the paper's notation)

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.importance import importance_evidence

__all__ = ["SummaryEvidence", "abc_evidence", "synthetic_likelihood_evidence"]

#: Ridge added to the synthetic likelihood's covariance, relative to its mean diagonal (and at
#: least this absolute value): keeps ``Σ̂`` invertible when a statistic barely varies.
SL_RIDGE = 1e-6


@dataclass(frozen=True)
class SummaryEvidence:
    """A summary-statistic evidence estimate (ABC or synthetic likelihood).

    Attributes
    ----------
    log_evidence : float
        ``log p̂_ε(S(y))`` (ABC: log of a probability) or the log synthetic evidence (a log
        density in summary space). Only differences between models with the same method,
        summary and ``ε`` mean anything (module docstring).
    log_weights : numpy.ndarray
        Per-draw log importance weights, shape (N,); ``-inf`` where ABC matched nothing.
    ess : float
        Effective sample size of the weights (0 when every weight is zero).
    relative_se : float
        ``sd(ŵ) / (mean(ŵ) √N)`` (inf when every weight is zero).
    method : str
        ``"abc"`` or ``"sl"``.
    n_sim : int
        Simulations per ``θ_n``.
    epsilon : numpy.ndarray
        ABC tolerance per statistic (NaN for synthetic likelihood).
    acceptance_rate : float
        Fraction of all ABC simulations within ``ε`` (NaN for synthetic likelihood).
    exact : bool
        Whether the simulations were exact draws from ``f(· | θ)``.
    """

    log_evidence: float
    log_weights: np.ndarray
    ess: float
    relative_se: float
    method: str
    n_sim: int
    epsilon: np.ndarray
    acceptance_rate: float
    exact: bool


def _summaries(simulator, summary: Callable, eta, n_sim: int, rng) -> np.ndarray:
    draws = simulator.sample(eta, n_sim, rng)
    return np.atleast_2d(np.asarray(summary(draws), dtype=float)).reshape(n_sim, -1)


def _check(s_obs, eta, log_prior, log_proposal, n_sim):
    eta = np.atleast_2d(np.asarray(eta, dtype=float))
    if len(log_prior) != len(eta) or len(log_proposal) != len(eta) or not len(eta):
        raise BDMCInputError("`log_prior` and `log_proposal` need one entry per row of `eta`.")
    if int(n_sim) < 1:
        raise BDMCInputError(f"`n_sim` must be a positive integer, got {n_sim}.")
    return eta, np.atleast_1d(np.asarray(s_obs, dtype=float))


def _combine(log_prior, log_proposal, log_terms):
    log_terms = np.asarray(log_terms, dtype=float)
    if np.all(np.isneginf(log_terms)):
        n = len(log_terms)
        return -np.inf, np.full(n, -np.inf), 0.0, np.inf
    return importance_evidence(log_prior, log_proposal, np.zeros(len(log_terms)), log_terms)


def abc_evidence(simulator, summary: Callable, s_obs, eta, log_prior, log_proposal, *,
                 n_sim: int = 50, epsilon=0.0, rng: np.random.Generator,
                 on_step: Callable[[], None] | None = None) -> SummaryEvidence:
    """Estimate ``p_ε(S(y))`` by ABC importance sampling (module docstring).

    Parameters
    ----------
    simulator : IsingSimulator, ERGMSimulator or ExponentialFamilySimulator
        ``sample(eta, size, rng)`` draws data sets at one ``η``.
    summary : callable
        ``summary(x)`` maps data sets of shape (M, ...) to summaries of shape (M, k).
    s_obs : array_like, shape (k,)
        The observed summary ``S(y)``.
    eta : array_like, shape (N, k_η)
        Natural parameters ``η(θ_n)`` of the importance draws ``θ_n ~ q``.
    log_prior, log_proposal : array_like, shape (N,)
        ``log p(θ_n)`` and ``log q(θ_n)``.
    n_sim : int, default 50
        Simulations per ``θ_n`` (the paper's ``M``).
    epsilon : float or array_like of shape (k,), default 0.0
        Tolerance on each statistic; 0 asks for an exact match (integer-valued statistics).
    rng : numpy.random.Generator
    on_step : callable, optional
        Called with no arguments after each importance draw ``θ_n`` (progress reporting).

    Returns
    -------
    SummaryEvidence
    """
    eta, s_obs = _check(s_obs, eta, log_prior, log_proposal, n_sim)
    eps = np.broadcast_to(np.asarray(epsilon, dtype=float), s_obs.shape)
    if not np.all(np.isfinite(eps)) or np.any(eps < 0):
        raise BDMCInputError(f"`epsilon` must be finite and >= 0, got {epsilon!r}.")
    hits = np.empty(len(eta))
    for n, e in enumerate(eta):
        s = _summaries(simulator, summary, e, int(n_sim), rng)
        if s.shape[1] != len(s_obs):
            raise BDMCInputError(f"The summary of a simulation has {s.shape[1]} statistics, "
                                 f"the observed summary {len(s_obs)}.")
        # a hair of slack for summaries computed in floating point
        hits[n] = np.count_nonzero(np.all(np.abs(s - s_obs) <= eps + 1e-9, axis=1))
        if on_step is not None:
            on_step()
    with np.errstate(divide="ignore"):
        log_terms = np.log(hits / int(n_sim))
    log_ev, log_w, ess, rse = _combine(log_prior, log_proposal, log_terms)
    return SummaryEvidence(log_ev, log_w, ess, rse, "abc", int(n_sim), np.array(eps),
                           float(hits.sum() / (len(eta) * int(n_sim))), bool(simulator.exact))


def synthetic_likelihood_evidence(simulator, summary: Callable, s_obs, eta, log_prior,
                                  log_proposal, *, n_sim: int = 50,
                                  rng: np.random.Generator,
                                  on_step: Callable[[], None] | None = None
                                  ) -> SummaryEvidence:
    """Estimate the synthetic-likelihood evidence ``∫ p(θ) N(S(y); μ̂_θ, Σ̂_θ) dθ``.

    Parameters
    ----------
    simulator : IsingSimulator, ERGMSimulator or ExponentialFamilySimulator
        ``sample(eta, size, rng)`` draws data sets at one ``η``.
    summary : callable
        ``summary(x)`` maps data sets of shape (M, ...) to summaries of shape (M, k).
    s_obs : array_like, shape (k,)
        The observed summary ``S(y)``.
    eta : array_like, shape (N, k_η)
        Natural parameters ``η(θ_n)`` of the importance draws ``θ_n ~ q``.
    log_prior, log_proposal : array_like, shape (N,)
        ``log p(θ_n)`` and ``log q(θ_n)``.
    n_sim : int, default 50
        Simulations per ``θ_n`` for the mean and covariance (at least ``k + 2``).
    rng : numpy.random.Generator
    on_step : callable, optional
        Called with no arguments after each importance draw ``θ_n`` (progress reporting).

    Returns
    -------
    SummaryEvidence
        Biased even with exact simulation (module docstring).
    """
    eta, s_obs = _check(s_obs, eta, log_prior, log_proposal, n_sim)
    k = len(s_obs)
    if int(n_sim) < k + 2:
        raise BDMCInputError(f"Synthetic likelihood needs `n_sim` >= {k + 2} simulations per "
                             f"θ for {k} statistics, got {n_sim}.")
    log_terms = np.empty(len(eta))
    for n, e in enumerate(eta):
        s = _summaries(simulator, summary, e, int(n_sim), rng)
        if s.shape[1] != k:
            raise BDMCInputError(f"The summary of a simulation has {s.shape[1]} statistics, "
                                 f"the observed summary {k}.")
        mean = s.mean(0)
        cov = np.atleast_2d(np.cov(s, rowvar=False))
        cov = cov + max(SL_RIDGE, SL_RIDGE * float(np.trace(cov)) / k) * np.eye(k)
        chol = np.linalg.cholesky(cov)
        z = np.linalg.solve(chol, s_obs - mean)
        log_terms[n] = (-0.5 * z @ z - np.log(np.diag(chol)).sum()
                        - 0.5 * k * np.log(2 * np.pi))
        if on_step is not None:
            on_step()
    log_ev, log_w, ess, rse = _combine(log_prior, log_proposal, log_terms)
    return SummaryEvidence(log_ev, log_w, ess, rse, "sl", int(n_sim), np.full(k, np.nan),
                           float("nan"), bool(simulator.exact))

