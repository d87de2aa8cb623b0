"""The HMC metric of each pilot temperature, and the jumps the pilot measures in it.

The pilot (:func:`pymc_bdmc.kernels.tuning.run_pilot`) gives each of its temperatures one of
three metrics, and the plan freezes them:

* the diagonal of the population's variances;
* a dense factor ``L`` (:mod:`pymc_bdmc.kernels.mass`), its correlations from the population up
  to :attr:`~pymc_bdmc.config.Tuning.dense_max_dim` coordinates and from the model's curvature
  up to :attr:`~pymc_bdmc.config.Tuning.curvature_max_dim` (the curvature's Hessians measured
  at one temperature serve the next while ``beta`` grows by at most
  :data:`CURVATURE_REUSE_RATIO` times, and after the first are differenced along groups of
  their sparsity pattern, :mod:`~pymc_bdmc.kernels.sparse_hessian`);
* on a path from a Gaussian base fitted from the curvature (above ``dense_max_dim``), a
  diagonal in the base's principal coordinates ``z = A^{-1} (x - mean)``: a vector ``w`` of the
  population's sds there, the dense factor ``A diag(w)`` (:class:`~.hmc.HMCParams`).

The last is what the fitted path is for. The base is the Gaussian of the posterior's own
curvature, so along the whole path from it (``beta = 0``: the base exactly; ``beta = 1``: the
posterior it was fitted to) the targets are close to standard normal in ``z``, and a diagonal
there does the work of a dense metric per temperature. A leapfrog step then multiplies by the
base's basis twice, not three times (twice for a dense ``L``, once for the base's density), and
the pilot measures no curvature along that path: on the 1000-step random walk (1001 coordinates)
those products and that curvature were most of the time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import solve_triangular

from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.kernels.base_distribution import RebasedParts
from pymc_bdmc.kernels.mass import (
    correlation_from_hessian,
    curvature_hessians,
    dense_mass_factor,
    factor_from_correlation,
)
from pymc_bdmc.kernels.sparse_hessian import difference_groups, grouped_hessians
from pymc_bdmc.model.layout import DensityParts

__all__ = ["CURVATURE_REUSE_RATIO", "MetricChoice", "squared_jump"]

#: Smallest variance of a principal coordinate's metric (guards a collapsed population).
MIN_PRINCIPAL_VARIANCE = 1e-12
#: The prior's and the likelihood's Hessians measured at ``beta`` serve the following
#: temperatures up to this multiple of ``beta``, each weighted by its own ``beta``; the next
#: are measured afresh. Differencing took 0.19 s of a 0.4 s metric on the 1000-step random
#: walk, at each of 78 temperatures whose ``beta`` grew by 10-30 % a step (docs/performance.md).
CURVATURE_REUSE_RATIO = 1.5


class MetricChoice:
    """Which kind of metric a pilot run gives its temperatures (module doc).

    Parameters
    ----------
    parts_fn : callable
        The path's batched densities (a :class:`~.base_distribution.RebasedParts` on a path
        from a base).
    n_movable : int
        Coordinates HMC moves.
    dense : bool
        Whether metrics other than the population's diagonal are allowed at all.
    pinned : ndarray of int
        Coordinates HMC must not move (none allowed for principal coordinates).
    tuning : Tuning, optional
        Its ``dense_max_dim`` and ``curvature_max_dim`` say where each kind of metric applies.
    """

    def __init__(self, parts_fn: Callable[[np.ndarray], DensityParts], n_movable: int,
                 dense: bool, pinned: np.ndarray, tuning: Tuning = DEFAULT_TUNING):
        self.parts_fn = parts_fn
        self.max_dim = tuning.dense_max_dim
        base = parts_fn.base if isinstance(parts_fn, RebasedParts) else None
        self.curvature = n_movable > tuning.dense_max_dim
        # Only where the base came from the curvature: below, a base from 64 particles can be
        # full rank too (61 coordinates), and there the population's dense metrics stay.
        self.principal = (dense and self.curvature and not len(pinned) and base is not None
                          and base.principal_metrics)
        self.dense = dense and n_movable <= tuning.curvature_max_dim and not self.principal
        self._hessians_at: tuple[float, list] | None = None  # (beta, [prior's, likelihood's])
        self._groups: tuple | None = None  # (index, DifferenceGroups or None), once measured

    def factors(self, rng: np.random.Generator, x: np.ndarray, weights: np.ndarray,
                variance: np.ndarray, beta: float, parts: DensityParts) -> tuple:
        """Return the metric at ``beta`` for the plan, and the cross-fitted ones for the moves.

        ``(factor, cross)``: ``factor`` as :meth:`factor`; ``cross`` is None, or where
        ``factor`` is dense from the population, ``(halves, factors)``: two random halves of
        the particles, each moved with the dense metric estimated from the other half. A
        metric estimated from the very particles it moves is no fixed kernel for any of them:
        with about as many particles as coordinates each particle's own position shapes it,
        and the pilot's log Z came out biased high (28 nats on a hierarchical AR,
        docs/performance.md), while SMC's estimate is unbiased for kernels fixed before the
        particles move. The plan keeps the whole population's estimate: its chains are not
        the pilot's particles.
        """
        factor = self.factor(x, weights, variance, beta, parts)
        if factor is None or factor.ndim != 2 or self.curvature or len(x) < 4:
            return factor, None
        order = rng.permutation(len(x))
        halves = (order[: len(x) // 2], order[len(x) // 2:])
        grad, movable, crossed = parts.tempered_grad(beta), variance > 0, []
        for other in halves[::-1]:
            total = weights[other].sum()
            if not total > 0:
                return factor, None
            crossed.append(dense_mass_factor(x[other], weights[other] / total, variance,
                                             movable, grad[other], self.max_dim))
        return factor, (halves, tuple(crossed))

    def factor(self, x: np.ndarray, weights: np.ndarray, variance: np.ndarray, beta: float,
               parts: DensityParts) -> np.ndarray | None:
        """The metric at ``beta`` for the population ``x`` (None: the diagonal ``variance``)."""
        if self.principal:
            z = self.parts_fn.base.principal(x)
            spread = weights @ (z - weights @ z) ** 2
            return np.sqrt(np.maximum(spread, MIN_PRINCIPAL_VARIANCE))
        if not self.dense:
            return None
        movable = variance > 0
        if self.curvature:
            correlation = self.correlation_at(x, variance, movable, beta)
            if correlation is None:
                return None
            return factor_from_correlation(correlation, variance, movable, weights,
                                           parts.tempered_grad(beta))
        return dense_mass_factor(x, weights, variance, movable, parts.tempered_grad(beta),
                                 self.max_dim)

    def correlation_at(self, x: np.ndarray, variance: np.ndarray, movable: np.ndarray,
                       beta: float) -> np.ndarray | None:
        """Return the curvature's correlation at ``beta`` over the ``movable`` coordinates.

        The prior's and the likelihood's Hessians (the model's, and the base's constant one,
        on a path from a base) are measured at the population ``x``, or taken from the last
        temperature they were measured at if ``beta`` is at most :data:`CURVATURE_REUSE_RATIO`
        times its, and weighted by this ``beta``. None where fewer than two coordinates move,
        a gradient is not finite or the curvature vanishes.
        """
        index = np.flatnonzero(movable)
        if index.size < 2:
            return None
        if (self._hessians_at is None or beta > CURVATURE_REUSE_RATIO * self._hessians_at[0]
                or self._hessians_at[1][0].shape[0] != index.size):
            hessians = self._measure(x, variance, movable, index)
            if not all(np.all(np.isfinite(h)) for h in hessians):
                self._hessians_at = None  # measured afresh at the next temperature
                return None
            self._hessians_at = (beta, hessians)
        prior, likelihood = self._hessians_at[1]
        if isinstance(self.parts_fn, RebasedParts):  # beta log(p(x) p(y|x)) + (1 - beta) log q0
            offset = self.parts_fn.curvature_terms(beta)[1][np.ix_(index, index)]
            hessian = beta * (prior + likelihood) + offset
        else:
            hessian = prior + beta * likelihood
        return correlation_from_hessian(hessian, variance[index])

    def _measure(self, x: np.ndarray, variance: np.ndarray, movable: np.ndarray,
                 index: np.ndarray) -> list[np.ndarray]:
        """Return the prior's and the likelihood's Hessians at ``x`` (few gradients once sparse).

        The first Hessians over ``index`` are differenced along each coordinate; where their
        pattern is sparse, later ones along its groups (:mod:`~.sparse_hessian`).
        """
        known = self._groups
        if known is not None and np.array_equal(known[0], index):
            if known[1] is not None:
                return grouped_hessians(x, variance, known[1], self._gradient_parts)
            return curvature_hessians(x, variance, movable, self._gradient_parts)
        hessians = curvature_hessians(x, variance, movable, self._gradient_parts)
        if all(np.all(np.isfinite(h)) for h in hessians):
            self._groups = (index, difference_groups(hessians, index))
        return hessians

    def _gradient_parts(self, x: np.ndarray) -> list[np.ndarray]:
        """Return the model's prior and likelihood gradients at ``x`` (whatever the path)."""
        rebased = isinstance(self.parts_fn, RebasedParts)
        parts = self.parts_fn.model_parts(x) if rebased else self.parts_fn(x)
        return [parts.grad_log_prior, parts.grad_log_likelihood]

    def squared_jump(self, step: np.ndarray, variance: np.ndarray,
                     factor: np.ndarray | None) -> float:
        """:func:`squared_jump` on this run's path."""
        if factor is not None and factor.ndim == 1:
            whitened = self.parts_fn.base.principal_step(step) / factor
            return float(np.mean(np.sum(whitened**2, axis=1)))
        return squared_jump(step, variance, factor)


def squared_jump(step: np.ndarray, variance: np.ndarray, factor: np.ndarray | None) -> float:
    """Mean squared jump of the chains, in the metric of the mass matrix (whitened units)."""
    movable = variance > 0
    if factor is None:
        return float(np.mean(np.sum(step[:, movable] ** 2 / variance[movable], axis=1)))
    chol = factor[np.ix_(movable, movable)]  # lower triangular
    whitened = solve_triangular(chol, step[:, movable].T, lower=True)
    return float(np.mean(np.sum(whitened**2, axis=0)))
