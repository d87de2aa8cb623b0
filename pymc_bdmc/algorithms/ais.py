"""Annealed importance sampling, forward (lower bound) and reverse (upper bound).

Notation follows Grosse, Ghahramani & Adams (2015, Alg. 1 and §4.2.1) with temperatures indexed
``0..T``: ``f_t(x) = p(x) p(y|x)^beta_t`` and ``T_t`` a kernel leaving ``f_t`` invariant.

Forward, from ``x ~ p(x)``::

    for t = 1..T:   log w += log f_t(x) - log f_{t-1}(x)  (= (beta_t - beta_{t-1}) log p(y|x))
                    if t < T: x <- T_t(x)

so ``E[w] = p(y)``. Reverse, from an exact posterior sample ``x*``::

    for t = T..1:   log v += log f_{t-1}(x) - log f_t(x)
                    if t > 1: x <- T_{t-1}(x)

so ``E[v] = 1 / p(y)``: the reverse chain applies the forward kernels in reverse order. The
log-likelihood is evaluated once per state and reused for the weight and the gradient.

Numerical failures
------------------
A chain whose state or densities stop being finite (NaN, or an infinite log prior or
log-likelihood) is *failed* from the first weight update that sees it: its weight is set to zero
(log weight ``-inf``) for the rest of the run, in both directions, and the step is recorded.
Zero weights can only lower the mean forward weight and the mean reverse weight, so the lower
bound stays a stochastic lower bound and the upper bound a stochastic upper bound; they just get
looser. Without this, one NaN poisons the whole estimate, and one reverse chain reaching
``log p(y|x) = -inf`` would send the upper bound to ``-inf``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.model.density import DensityParts

__all__ = ["AISRun", "ais_forward", "ais_reverse", "merge_runs"]


@dataclass(frozen=True)
class AISRun:
    """Result of one annealing run over ``chains`` chains.

    Attributes
    ----------
    log_weight : ndarray, shape (chains,)
        Final log weights (forward: estimates of ``log p(y)``; reverse: of ``-log p(y)``).
    x : ndarray, shape (chains, n_dim)
        Final states.
    parts : DensityParts
        Densities at the final states.
    acceptance_rate : ndarray, shape (n_steps + 1,)
        Mean acceptance probability of the transition targeting ``beta_t`` (NaN if none ran).
    mean_log_weight : ndarray, shape (n_steps + 1,)
        Mean cumulative log weight once the run has reached ``beta_t``.
    n_divergent : ndarray, shape (n_steps + 1,)
        Chains whose trajectory diverged at each transition.
    n_failed : ndarray, shape (n_steps + 1,)
        Chains first found with a non-finite state or density at the weight update of step
        ``t`` (see the module notes); they carry zero weight from then on.
    failed_step : ndarray of int, shape (chains,)
        That step for each chain, ``-1`` for chains that never failed.
    """

    log_weight: np.ndarray
    x: np.ndarray
    parts: DensityParts
    acceptance_rate: np.ndarray
    mean_log_weight: np.ndarray
    n_divergent: np.ndarray
    n_failed: np.ndarray | None = None
    failed_step: np.ndarray | None = None

    @property
    def n_failed_total(self) -> int:
        """Number of chains that failed numerically during the run."""
        return 0 if self.failed_step is None else int(np.count_nonzero(self.failed_step >= 0))


def weight_increment(delta_beta: float, log_likelihood: np.ndarray) -> np.ndarray:
    # A zero step adds nothing, even where the log-likelihood is -inf.
    return np.zeros_like(log_likelihood) if delta_beta == 0 else delta_beta * log_likelihood


class _FailureMonitor:
    """Tracks chains whose state or densities became non-finite, and zeroes their weights."""

    def __init__(self, n_chains: int, n_steps: int):
        self.failed_step = np.full(n_chains, -1)
        self.n_failed = np.zeros(n_steps + 1, dtype=int)

    def update(self, t: int, x: np.ndarray, parts: DensityParts, log_w: np.ndarray) -> np.ndarray:
        """Record chains newly non-finite at step ``t``; return ``log_w`` with failed ones -inf."""
        finite = (np.isfinite(parts.log_likelihood) & np.isfinite(parts.log_prior)
                  & np.all(np.isfinite(x), axis=1))
        new = ~finite & (self.failed_step < 0)
        if new.any():
            self.failed_step[new] = t
            self.n_failed[t] = int(np.count_nonzero(new))
        failed = self.failed_step >= 0
        return np.where(failed, -np.inf, log_w) if failed.any() else log_w


def ais_forward(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    betas: np.ndarray,
    transition: Transition,
    on_step: Callable[[], None] | None = None,
) -> AISRun:
    """Run forward AIS from exact prior draws ``x0``.

    Parameters
    ----------
    rng : numpy.random.Generator
    x0 : ndarray, shape (chains, n_dim)
        Exact prior draws.
    parts0 : DensityParts
        Densities at ``x0``.
    betas : ndarray, shape (n_steps + 1,)
        The frozen schedule.
    transition : callable
        ``transition(rng, x, parts, t)`` applies the frozen kernel that leaves ``f_t``
        invariant (e.g. :meth:`AnnealingPlan.transition`).
    on_step : callable, optional
        Called after every annealing step.
    """
    n_steps = len(betas) - 1
    x, parts = x0, parts0
    log_w = np.zeros(len(x0))
    acceptance = np.full(n_steps + 1, np.nan)
    mean_log_w = np.zeros(n_steps + 1)
    n_divergent = np.zeros(n_steps + 1, dtype=int)
    monitor = _FailureMonitor(len(x0), n_steps)
    for t in range(1, n_steps + 1):
        with np.errstate(invalid="ignore"):  # NaN increments belong to failed chains
            log_w = log_w + weight_increment(betas[t] - betas[t - 1], parts.log_likelihood)
        log_w = monitor.update(t, x, parts, log_w)
        mean_log_w[t] = np.mean(log_w)
        if t < n_steps:
            x, parts, info = transition(rng, x, parts, t)
            acceptance[t] = np.mean(info.acceptance_rate)
            n_divergent[t] = np.count_nonzero(info.divergent)
        if on_step is not None:
            on_step()
    return AISRun(log_w, x, parts, acceptance, mean_log_w, n_divergent, monitor.n_failed,
                  monitor.failed_step)


def ais_reverse(
    rng: np.random.Generator,
    x_star: np.ndarray,
    n_chains: int,
    betas: np.ndarray,
    transition: Transition,
    parts_fn: Callable[[np.ndarray], DensityParts],
    on_step: Callable[[], None] | None = None,
    spread_transitions: int = 0,
) -> AISRun:
    """Run reverse AIS from exact posterior samples.

    ``x_star`` is one sample of shape (n_dim,), which every chain starts from (BDMC on one
    simulated data set), or one sample per chain, shape (n_chains, n_dim). The other arguments
    are as for :func:`ais_forward`; ``parts_fn`` evaluates the densities at the start.

    ``spread_transitions`` kernel steps at ``beta = 1`` are applied first, independently per
    chain. They leave the posterior invariant, so each chain still starts from an exact posterior
    sample, but the chains no longer share one starting point: their weights are less correlated
    and the upper bound less variable.
    """
    n_steps = len(betas) - 1
    x_star = np.asarray(x_star, dtype=float)
    x = np.tile(x_star, (n_chains, 1)) if x_star.ndim == 1 else x_star.copy()
    parts = parts_fn(x)
    for _ in range(spread_transitions):
        x, parts, _ = transition(rng, x, parts, n_steps)
    log_v = np.zeros(n_chains)
    acceptance = np.full(n_steps + 1, np.nan)
    mean_log_v = np.zeros(n_steps + 1)
    n_divergent = np.zeros(n_steps + 1, dtype=int)
    monitor = _FailureMonitor(n_chains, n_steps)
    for t in range(n_steps, 0, -1):
        with np.errstate(invalid="ignore"):  # NaN increments belong to failed chains
            log_v = log_v - weight_increment(betas[t] - betas[t - 1], parts.log_likelihood)
        log_v = monitor.update(t, x, parts, log_v)
        mean_log_v[t - 1] = np.mean(log_v)
        if t > 1:
            x, parts, info = transition(rng, x, parts, t - 1)
            acceptance[t - 1] = np.mean(info.acceptance_rate)
            n_divergent[t - 1] = np.count_nonzero(info.divergent)
        if on_step is not None:
            on_step()
    return AISRun(log_v, x, parts, acceptance, mean_log_v, n_divergent, monitor.n_failed,
                  monitor.failed_step)


def merge_runs(runs: Sequence[AISRun]) -> AISRun:
    """Combine runs over disjoint sets of chains into one run over all of them, in order.

    Per-chain arrays are concatenated; per-step means are averaged with weights equal to the
    chains of each run (steps where a run made no transition are skipped), counts are summed.
    """
    if len(runs) == 1:
        return runs[0]
    sizes = np.array([len(r.log_weight) for r in runs], dtype=float)

    def weighted_mean(values, skip_nan=False):
        values = np.stack(values)  # (runs, steps)
        weights = np.broadcast_to(sizes[:, None], values.shape)
        if skip_nan:
            weights = np.where(np.isnan(values), 0.0, weights)
            values = np.where(np.isnan(values), 0.0, values)
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            total = weights.sum(axis=0)
            mean = (weights * values).sum(axis=0) / total
        return np.where(total > 0, mean, np.nan)

    def stacked(field):
        return np.concatenate([getattr(r.parts, field) for r in runs])

    failed = [r.failed_step for r in runs]
    return AISRun(
        log_weight=np.concatenate([r.log_weight for r in runs]),
        x=np.concatenate([r.x for r in runs]),
        parts=DensityParts(*(stacked(f) for f in ("log_prior", "log_likelihood",
                                                   "grad_log_prior", "grad_log_likelihood"))),
        acceptance_rate=weighted_mean([r.acceptance_rate for r in runs], skip_nan=True),
        mean_log_weight=weighted_mean([r.mean_log_weight for r in runs]),
        n_divergent=np.sum([r.n_divergent for r in runs], axis=0),
        n_failed=(None if any(r.n_failed is None for r in runs)
                  else np.sum([r.n_failed for r in runs], axis=0)),
        failed_step=None if any(f is None for f in failed) else np.concatenate(failed),
    )
