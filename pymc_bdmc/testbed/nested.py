"""Nested sampling (Skilling 2006) in PyMC's unconstrained space.

Notation of the BDMC paper (§5.3): prior ``pi(x)``, likelihood ``L(x) = p(y | x)``, prior volume
``V(C) = pi({x : L(x) > C})``. Start with ``N`` live points drawn exactly from the prior. At each
iteration remove the live point of lowest likelihood ``L_i``, credit it with the shell of prior
volume between ``X_{i-1}`` and ``X_i``, and replace it by a draw from the prior constrained to
``L > L_i``. With exact constrained draws the volumes shrink by independent ``Beta(N, 1)``
factors, ``E[log X_i] = -i / N``, and the standard estimate is

``Z^ = sum_i L_i (X_{i-1} - X_i) + X_n mean(L_live)``,  ``X_i = exp(-i / N)``,

the last term being the remainder of the final live points. Its error is dominated by the
randomness of ``log X``: ``sd(log Z^) ~= sqrt(H / N)`` with ``H = sum_i p_i log(L_i / Z)`` the
information (KL divergence from prior to posterior), ``p_i`` the posterior weights of the points.

Removing the ``k`` lowest live points at once (``batch = k``) is exact too: given the ``N``
volumes i.i.d. uniform on ``[0, X]``, the largest is ``X t`` with ``t ~ Beta(N, 1)``, and the
remaining ``N - 1`` are uniform on ``[0, X t]``, so the ``j``-th removed point has
``E[log shrinkage] = -1 / (N - j + 1)``. All ``k`` are then replaced by draws constrained to
``L > L_(k)``, the highest removed likelihood; here ``batch > 1`` lets ``k`` constrained MCMC
walks run as one batched model evaluation.

Constrained draws are not exact here: each replacement starts at a randomly chosen surviving
live point (already inside the constraint) and runs a random-walk Metropolis chain whose target
is the prior density **in the unconstrained space, Jacobian included**, with proposals outside
``L > L_min`` rejected. That chain leaves the constrained prior invariant, but it is not
stationary from its start, so nested sampling has **no** guaranteed bias direction (the BDMC paper
found it overestimates too often to be a stochastic lower bound).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from pymc_bdmc.testbed.base import (
    EstimateResult,
    as_problem,
    check_budget,
    compiled_problem,
    estimator_rng,
    log_likelihood_batched,
)

__all__ = ["NestedRun", "nested_sampling", "nested_sampling_estimator"]

logger = logging.getLogger(__name__)

#: ``replace(rng, starts, log_l_min, live_x) -> (x_new, log_l_new)``: one constrained prior draw
#: per row of ``starts`` (live points inside the constraint, where an MCMC walk may start);
#: ``live_x`` is the current live set (read-only), e.g. to scale proposals.
ReplaceFn = Callable[[np.random.Generator, np.ndarray, float, np.ndarray],
                     tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class NestedRun:
    """Result of a nested sampling run.

    Attributes
    ----------
    log_evidence : float
        ``log Z^``, remainder of the final live points included.
    information : float
        ``H`` (nats), estimated from the same weights.
    log_evidence_sd : float
        ``sqrt(H / N)``: Skilling's standard deviation of ``log Z^`` under exact draws.
    n_live : int
    n_iterations : int
        Points removed (dead points).
    converged : bool
        Whether the stopping rule was met before ``max_iterations``.
    dead_log_likelihood, dead_log_width : ndarray
        ``log L_i`` and ``log (X_{i-1} - X_i)`` of the removed points, in removal order.
    log_remainder : float
        ``log (X_n mean(L_live))``.
    """

    log_evidence: float
    information: float
    log_evidence_sd: float
    n_live: int
    n_iterations: int
    converged: bool
    dead_log_likelihood: np.ndarray
    dead_log_width: np.ndarray
    log_remainder: float


def nested_sampling(rng: np.random.Generator, live_x: np.ndarray, live_log_l: np.ndarray,
                    replace: ReplaceFn, *, batch: int = 1, dlogz: float = 0.01,
                    max_iterations: int = 200_000) -> NestedRun:
    """Run nested sampling from exact prior draws ``live_x``.

    Parameters
    ----------
    rng : numpy.random.Generator
    live_x : ndarray, shape (N, n_dim)
        ``N >= 2`` exact prior draws (the live points).
    live_log_l : ndarray, shape (N,)
        Their log-likelihoods.
    replace : callable
        ``replace(rng, starts, log_l_min, live_x) -> (x_new, log_l_new)``: a draw from the
        prior constrained to ``log L > log_l_min`` per row of ``starts`` (surviving live
        points); ``live_x`` is the current live set, not to be modified.
    batch : int, default 1
        Live points removed per iteration (``1 <= batch <= N // 2``); see the module notes.
    dlogz : float, default 0.01
        Stop once the live points could add at most this much to ``log Z``:
        ``log(Z + X_i max(L_live)) - log Z < dlogz``.
    max_iterations : int, default 200000
        Cap on removed points; the run is then reported as not converged.

    Returns
    -------
    NestedRun
    """
    live_x = np.array(live_x, dtype=float, copy=True)
    live_log_l = np.array(live_log_l, dtype=float, copy=True)
    n_live = len(live_x)
    if n_live < 2:
        raise ValueError(f"Nested sampling needs at least 2 live points, got {n_live}.")
    if not 1 <= batch <= n_live // 2:
        raise ValueError(f"`batch` must be in [1, {n_live // 2}], got {batch}.")
    if not np.all(np.isfinite(live_log_l)):
        raise ValueError("The initial live points have non-finite log-likelihoods.")
    # Expected log shrinkage of the j-th of `batch` points removed together: -1 / (N - j).
    shrink = -1.0 / (n_live - np.arange(batch))
    log_x = 0.0
    log_z = -np.inf
    dead_l, dead_w = [], []
    converged = False
    while len(dead_l) < max_iterations:
        order = np.argsort(live_log_l)
        removed = order[:batch]
        for j, idx in enumerate(removed):
            new_log_x = log_x + shrink[j]
            log_width = log_x + np.log(-np.expm1(new_log_x - log_x))
            dead_l.append(live_log_l[idx])
            dead_w.append(log_width)
            log_z = np.logaddexp(log_z, live_log_l[idx] + log_width)
            log_x = new_log_x
        survivors = order[batch:]
        if np.logaddexp(0.0, live_log_l[survivors].max() + log_x - log_z) < dlogz:
            converged = True
            live_log_l = live_log_l[survivors]
            break
        log_l_min = float(live_log_l[removed[-1]])
        starts = live_x[rng.choice(survivors, size=batch, replace=False)]
        new_x, new_log_l = replace(rng, starts, log_l_min, live_x)
        live_x[removed], live_log_l[removed] = new_x, new_log_l
    if not converged:
        logger.warning("Nested sampling stopped at max_iterations=%d before the live points' "
                       "remaining contribution fell below dlogz=%g.", max_iterations, dlogz)
    # Remainder: the surviving live points share the volume X_n equally.
    log_remainder = log_x + logsumexp(live_log_l) - np.log(len(live_log_l))
    log_l_all = np.concatenate([dead_l, live_log_l])
    log_w_all = np.concatenate([dead_w, np.full(len(live_log_l), log_x
                                                - np.log(len(live_log_l)))])
    log_evidence = float(logsumexp(log_l_all + log_w_all))
    post = np.exp(log_l_all + log_w_all - log_evidence)
    information = float(np.sum(post * (log_l_all - log_evidence)))
    return NestedRun(log_evidence, information, float(np.sqrt(max(information, 0.0) / n_live)),
                     n_live, len(dead_l), converged, np.asarray(dead_l), np.asarray(dead_w),
                     float(log_remainder))


class _ConstrainedWalk:
    """Random-walk Metropolis on the unconstrained prior restricted to ``log L > log_l_min``.

    Proposals are Gaussian with the live points' (shrunk) covariance times ``scale**2``; the
    scale is steered between replacements toward an acceptance rate of ``TARGET_ACCEPT`` (the
    walk of one replacement never changes its own proposal).
    """

    TARGET_ACCEPT = 0.3

    def __init__(self, density, n_steps: int):
        self.density = density
        self.n_steps = n_steps
        self.log_scale = 0.0
        self.chol = None
        self.n_proposed = 0
        self.n_accepted = 0

    def set_covariance(self, live_x: np.ndarray) -> None:
        """Proposal shape from the live points, shrunk toward its diagonal when they are few.

        ``n`` live points span at most ``n - 1`` directions: their sample covariance alone would
        confine the walk to that subspace when ``n <= d``. The weight ``max(0, 1 - d / n)`` on
        the full covariance (the rest on its diagonal) keeps every direction open.
        """
        n, d = live_x.shape
        sample = np.atleast_2d(np.cov(live_x, rowvar=False))
        weight = max(0.0, 1.0 - d / n)
        cov = weight * sample + (1 - weight) * np.diag(np.diag(sample)) + 1e-12 * np.eye(d)
        self.chol = np.linalg.cholesky(cov) * (2.38 / np.sqrt(d))

    def __call__(self, rng, starts, log_l_min):
        x = starts.copy()
        parts = self.density.parts(x)
        log_prior, log_l = parts.log_prior, parts.log_likelihood
        accepted = 0
        for _ in range(self.n_steps):
            proposal = x + np.exp(self.log_scale) * rng.standard_normal(x.shape) @ self.chol.T
            p = self.density.parts(proposal)
            with np.errstate(invalid="ignore"):
                ok = ((p.log_likelihood > log_l_min) & np.isfinite(p.log_prior)
                      & (np.log(rng.random(len(x))) < p.log_prior - log_prior))
            x[ok], log_prior[ok], log_l[ok] = proposal[ok], p.log_prior[ok], p.log_likelihood[ok]
            accepted += int(ok.sum())
        rate = accepted / (self.n_steps * len(x))
        self.n_proposed += self.n_steps * len(x)
        self.n_accepted += accepted
        self.log_scale += rate - self.TARGET_ACCEPT
        return x, log_l


def nested_sampling_estimator(problem, budget: int, seed: int, mcmc_steps: int = 20,
                              batch: int | None = None, dlogz: float = 0.01,
                              max_iterations: int = 200_000) -> EstimateResult:
    """Nested sampling with constrained random-walk replacements: **no** fixed direction.

    Live points start as exact prior draws from the model's compiled simulator (unconstrained
    space). Each replacement runs ``mcmc_steps`` random-walk Metropolis steps on the prior
    density (Jacobian included) restricted to ``L > L_min``, from a random surviving live point,
    with proposals scaled by the live points' covariance (recomputed as the run shrinks).

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of live points ``N`` (at least 2). The run length is set by the stopping rule,
        about ``N (H + a few)`` removed points for information ``H`` nats.
    seed : int
    mcmc_steps : int, default 20
        Metropolis steps per replacement.
    batch : int, optional
        Points removed and replaced per iteration (default ``max(1, N // 10)``).
    dlogz : float, default 0.01
    max_iterations : int, default 200000

    Returns
    -------
    EstimateResult
        ``info["log_evidence_sd"]`` is Skilling's ``sqrt(H / N)``, ``info["information"]`` is
        ``H``.
    """
    problem, n_live = as_problem(problem), check_budget(budget)
    if n_live < 2:
        raise ValueError(f"Nested sampling needs at least 2 live points, got budget={budget}.")
    batch = max(1, n_live // 10) if batch is None else int(batch)
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    rng = estimator_rng(seed)
    live_x = simulator.draw_prior(n_live, rng)
    live_log_l = log_likelihood_batched(density, live_x)
    walk = _ConstrainedWalk(density, mcmc_steps)
    refresh = max(1, n_live // (4 * batch))  # iterations between covariance updates
    calls = [0]

    def replace(rng_, starts, log_l_min, live):
        if calls[0] % refresh == 0:
            walk.set_covariance(live)
        calls[0] += 1
        return walk(rng_, starts, log_l_min)

    run = nested_sampling(rng, live_x, live_log_l, replace, batch=batch, dlogz=dlogz,
                          max_iterations=max_iterations)
    return EstimateResult(run.log_evidence, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "n_live": n_live,
        "log_evidence_sd": run.log_evidence_sd, "information": run.information,
        "iterations": run.n_iterations, "converged": run.converged,
        "acceptance_rate": walk.n_accepted / max(walk.n_proposed, 1)})

