"""The Chib-Murray-Salakhutdinov (CMS) estimator on Gibbs samplers with computable transitions.

Chib's identity ``p(y) = p(h*, y) / p(h* | y)`` holds for any latent state ``h*``. If ``T`` is a
Markov operator leaving the posterior ``p(h | y)`` invariant, stationarity gives
``p(h* | y) = sum_h T(h* <- h) p(h | y)``, which Chib (1995) estimated by averaging
``T(h* <- h_s)`` over MCMC states ``h_s``: consistent, but by Jensen's inequality biased *upward*
for ``p(y)``. Murray & Salakhutdinov (2009, §3, Fig. 1) draw the states instead from

``Q(H) = 1/S sum_s T~(h_s <- h*) prod_{s' > s} T(h_s' <- h_s'-1) prod_{s' < s} T~(h_s' <- h_s'+1)``

where ``T~(h <- h') = T(h' <- h) p(h | y) / p(h' | y)`` is the *reverse operator*:

1. draw ``s`` uniformly from ``1..S``;
2. draw ``h_s`` from ``T~(. <- h*)``;
3. run ``T`` forward from ``h_s`` for ``s' = s+1..S``, and ``T~`` backward for ``s' = s-1..1``;
4. ``p^(y) = p(h*, y) / (1/S sum_s' T(h* <- h_s'))``.

Substituting the definition of ``T~`` shows ``Q(H) = P(H) * [1/S sum_s T(h* <- h_s)] / p(h* | y)``
with ``P(H)`` the law of an equilibrium chain of ``S`` states, so
``E_Q[1 / (1/S sum_s T(h* <- h_s))] = 1 / p(h* | y)`` and ``E[p^(y)] = p(y)`` exactly, for any
``S >= 1`` and any fixed ``h*`` (M&S eq. 15). The estimate is unbiased for ``p(y)``, and its log is
a stochastic **lower** bound on ``log p(y)``. Poor mixing makes it underestimate (BDMC paper §5.2,
§6.4: by over 1000 nats on the low-rank model).

The operators are Gibbs sweeps (:mod:`.gibbs_models`), as in the paper's experiments. For the
clustering and binary-attribute models, a systematic scan over collapsed discrete latents
(continuous parameters integrated out) updates sites ``1..M`` in order from their exact
conditionals, so ``T(h* <- h) = prod_j p(h*_j | h*_<j, h_>j, y)`` (M&S eq. 11). For the low-rank
model, a two-block sweep ``U | V`` then ``V | U`` with Gaussian conditionals: ``T`` is then a
density, which the derivation allows because a Gibbs sweep has no point mass (M&S App. A). Each
single-site or block update is reversible, so the reverse operator ``T~`` is the sweep in reverse
order (checked exactly in the tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.testbed.base import EstimateResult, as_problem, check_budget, estimator_rng

__all__ = ["CMSRun", "DiscreteGibbs", "chib_murray_salakhutdinov", "cms_run"]

logger = logging.getLogger(__name__)


class DiscreteGibbs:
    """Systematic-scan Gibbs sampler over a discrete vector, with exact transition probabilities.

    Parameters
    ----------
    log_joint : callable
        ``log_joint(h)`` for a batch ``h`` of shape (B, n_sites) of integers: ``log p(h, y)`` up
        to a constant, shape (B,).
    n_sites : int
        Length ``M`` of the latent vector.
    n_values : int
        Each entry takes values ``0..n_values - 1``.

    Notes
    -----
    A *forward* sweep updates sites ``0..M-1`` in turn, each from its full conditional; a
    *reverse* sweep updates ``M-1..0``. The reverse sweep is the reverse operator of the forward
    sweep with respect to ``p(h | y)`` (tested exactly on small models).
    """

    dtype = np.int64

    def __init__(self, log_joint: Callable[[np.ndarray], np.ndarray], n_sites: int,
                 n_values: int):
        if n_sites < 1 or n_values < 2:
            raise ValueError(f"Need n_sites >= 1 and n_values >= 2, got {n_sites}, {n_values}.")
        self.log_joint = log_joint
        self.n_sites = int(n_sites)
        self.n_values = int(n_values)
        self.n_evaluations = 0

    def conditional(self, h: np.ndarray, site: int) -> np.ndarray:
        """Return the normalized log conditional of entry ``site``, shape (B, n_values)."""
        b = len(h)
        candidates = np.repeat(h[:, None, :], self.n_values, axis=1)
        candidates[:, :, site] = np.arange(self.n_values)
        logp = self.log_joint(candidates.reshape(b * self.n_values, self.n_sites))
        self.n_evaluations += b * self.n_values
        logp = logp.reshape(b, self.n_values)
        return logp - np.logaddexp.reduce(logp, axis=1, keepdims=True)

    def _order(self, reverse: bool) -> range:
        return range(self.n_sites - 1, -1, -1) if reverse else range(self.n_sites)

    def sweep(self, rng: np.random.Generator, h: np.ndarray, reverse: bool = False) -> np.ndarray:
        """One sweep from each row of ``h`` (B, n_sites); returns new states (a copy)."""
        h = np.array(h, dtype=np.int64, copy=True)
        for site in self._order(reverse):
            cdf = np.cumsum(np.exp(self.conditional(h, site)), axis=1)
            u = rng.random(len(h)) * cdf[:, -1]
            h[:, site] = np.minimum((cdf < u[:, None]).sum(axis=1), self.n_values - 1)
        return h

    def log_transition(self, h_to: np.ndarray, h_from: np.ndarray,
                       reverse: bool = False) -> np.ndarray:
        """``log T(h_to <- h_from)`` of one sweep (forward, or reverse order), shape (B,).

        ``h_to`` is one state (n_sites,) or one per row; ``h_from`` is (B, n_sites).
        """
        u = np.array(h_from, dtype=np.int64, copy=True)
        target = np.broadcast_to(np.asarray(h_to, dtype=np.int64), u.shape)
        rows = np.arange(len(u))
        total = np.zeros(len(u))
        for site in self._order(reverse):
            total += self.conditional(u, site)[rows, target[:, site]]
            u[:, site] = target[:, site]
        return total


@dataclass(frozen=True)
class CMSRun:
    """Per-chain results of the CMS estimator.

    Attributes
    ----------
    log_estimate : ndarray, shape (chains,)
        ``log p^(y)`` of each independent chain: each is unbiased for ``p(y)`` on the natural
        scale, so their log-mean-exp is too.
    log_joint_star : float
        ``log p(h*, y)``.
    log_posterior_star : ndarray, shape (chains,)
        Each chain's estimate of ``log p(h* | y)``.
    start_index : ndarray of int, shape (chains,)
        The uniformly drawn position ``s`` (1-based) of the state drawn from ``T~(. <- h*)``.
    """

    log_estimate: np.ndarray
    log_joint_star: float
    log_posterior_star: np.ndarray
    start_index: np.ndarray


def cms_run(rng: np.random.Generator, gibbs: DiscreteGibbs, h_star: np.ndarray, n_sweeps: int,
            chains: int = 1) -> CMSRun:
    """Run ``chains`` independent CMS estimates of ``S = n_sweeps`` states each (M&S Fig. 1).

    Parameters
    ----------
    rng : numpy.random.Generator
    gibbs : DiscreteGibbs
        The operator ``T`` (forward sweep) and its reverse ``T~`` (reverse sweep).
    h_star : ndarray of int, shape (n_sites,)
        The special state, fixed before the run (e.g. the best state of a separate pre-run).
    n_sweeps : int
        ``S``, states per chain (one sweep each, apart from the initial draw from ``T~``).
    chains : int, default 1

    Returns
    -------
    CMSRun
    """
    n_sweeps = check_budget(n_sweeps)
    h_star = np.asarray(h_star, dtype=gibbs.dtype)
    if h_star.shape != (gibbs.n_sites,):
        raise ValueError(f"`h_star` must have shape ({gibbs.n_sites},), got {h_star.shape}.")
    start = rng.integers(1, n_sweeps + 1, size=chains)
    h_s = gibbs.sweep(rng, np.tile(h_star, (chains, 1)), reverse=True)  # ~ T~(. <- h*)
    log_sum = gibbs.log_transition(h_star, h_s)  # running log sum_s' T(h* <- h_s')
    forward, backward = h_s, h_s.copy()
    for r in range(1, n_sweeps):
        for states, active, reverse in ((forward, r <= n_sweeps - start, False),
                                        (backward, r <= start - 1, True)):
            if not active.any():
                continue
            moved = gibbs.sweep(rng, states[active], reverse=reverse)
            states[active] = moved
            log_sum[active] = np.logaddexp(log_sum[active],
                                           gibbs.log_transition(h_star, moved))
    log_joint_star = float(gibbs.log_joint(h_star[None])[0])
    log_posterior_star = log_sum - np.log(n_sweeps)
    return CMSRun(log_joint_star - log_posterior_star, log_joint_star, log_posterior_star, start)


def _special_state(rng: np.random.Generator, gibbs: DiscreteGibbs, initial: np.ndarray,
                   sweeps: int) -> tuple[np.ndarray, float]:
    """Return the highest-``log p(h, y)`` state a Gibbs pre-run from ``initial`` visits."""
    h = initial
    best, best_lp = None, -np.inf
    for _ in range(sweeps):
        h = gibbs.sweep(rng, h)
        lp = gibbs.log_joint(h)
        i = int(np.argmax(lp))
        if lp[i] > best_lp:
            best, best_lp = h[i].copy(), float(lp[i])
    return best, best_lp


def chib_murray_salakhutdinov(problem, budget: int, seed: int, chains: int = 4,
                              prerun_sweeps: int = 20, prerun_chains: int = 4) -> EstimateResult:
    """Chib-Murray-Salakhutdinov estimator: unbiased for ``p(y)``, a stochastic **lower** bound.

    Runs on the problem's Gibbs form (:attr:`Problem.gibbs_model`): collapsed cluster
    assignments or binary attributes with a systematic-scan single-site Gibbs sampler, or the
    low-rank factors with two-block Gibbs. The special state ``h*`` is the most probable state
    visited by a separate pre-run of ``prerun_chains`` Gibbs chains from prior draws
    (``prerun_sweeps`` sweeps; its cost is included in ``seconds``); then ``chains``
    independent estimates of ``budget`` states each are averaged on the natural scale (see the
    module notes).

    Parameters
    ----------
    problem : Problem
        With ``gibbs_model`` (:func:`~pymc_bdmc.testbed.clustering`,
        :func:`~pymc_bdmc.testbed.binary_attributes`, :func:`~pymc_bdmc.testbed.low_rank`).
    budget : int
        Gibbs sweeps per chain (``S``, the states each chain averages over).
    seed : int
    chains : int, default 4
    prerun_sweeps, prerun_chains : int, default 20, 4

    Returns
    -------
    EstimateResult
        ``info`` holds the per-chain estimates, ``log p(h*, y)`` and the estimate of
        ``log p(h* | y)``.
    """
    problem, budget = as_problem(problem), check_budget(budget)
    model = problem.gibbs_model
    if model is None:
        raise ValueError(
            f"Problem {problem.name!r} has no Gibbs form (gibbs_model): the "
            "Chib-Murray-Salakhutdinov estimator needs a Gibbs sampler with computable "
            "transition probabilities (available for clustering, binary_attributes and "
            "low_rank).")
    start = time.perf_counter()
    pre_rng, run_rng = estimator_rng(seed).spawn(2)
    gibbs = model.gibbs()
    h_star, _ = _special_state(pre_rng, gibbs, model.sample_prior(prerun_chains, pre_rng),
                               prerun_sweeps)
    run = cms_run(run_rng, gibbs, h_star, budget, chains)
    estimate = float(np.logaddexp.reduce(run.log_estimate) - np.log(chains))
    return EstimateResult(estimate, time.perf_counter() - start, {
        "per_chain": run.log_estimate.tolist(), "log_joint_star": run.log_joint_star,
        "log_posterior_star": run.log_posterior_star.tolist(),
        "evaluations": gibbs.n_evaluations})
