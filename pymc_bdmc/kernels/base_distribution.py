"""A fitted Gaussian base distribution, and the annealing path from it to the posterior.

AIS needs a normalised distribution it can sample exactly at ``beta = 0``. The prior is one,
but for many models people write it is a poor start: a random walk or a centered hierarchy
with an unknown scale is a funnel under its prior, far wider than its posterior and curved at
scales no fixed kernel fits. Any other normalised ``q0`` works as well (Neal 2001):

    f_beta(x) = q0(x)^(1 - beta) * (p(x) p(y|x))^beta,   Z_0 = 1,   Z_1 = p(y).

Written as ``log f_beta = log q0 + beta * l`` with ``l = log p(x) + log p(y|x) - log q0(x)``,
this is the tempered density with ``q0`` in the prior's role and ``l`` in the likelihood's, so
the annealing code, the kernels, the weights (``log w += (beta_t - beta_{t-1}) l(x)``) and both
bounds carry over unchanged: ``E[w] = Z_1 / Z_0 = p(y)`` forward, and ``E[v] = 1 / p(y)`` in
reverse from an exact posterior sample, which still starts at ``theta*``.

``q0`` is a Gaussian fitted to the pilot's final population (weighted mean, and the covariance
with its correlations shrunk as for dense mass matrices, :mod:`pymc_bdmc.kernels.mass`) in the
unconstrained space. It is fitted on the pilot only, never on the measured chains or ``theta*``,
so the bounds stay valid; it need not be close to the posterior for validity, only for a short
path, and :func:`pymc_bdmc.pipeline.pilot.tune` keeps it only where the pilot measures a shorter
thermodynamic length from it than from the prior.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.linalg import solve_triangular

from pymc_bdmc.kernels.mass import DENSE_MAX_DIM, shrunk_correlation
from pymc_bdmc.model.layout import DensityParts

__all__ = ["GaussianBase"]

#: Smallest variance of a fitted coordinate (guards a collapsed pilot population).
MIN_BASE_VARIANCE = 1e-12


@dataclass(frozen=True)
class GaussianBase:
    """A Gaussian ``N(mean, factor @ factor.T)`` on the flat unconstrained space.

    Attributes
    ----------
    mean : ndarray, shape (n_dim,)
    factor : ndarray, shape (n_dim, n_dim)
        Lower-triangular Cholesky factor of the covariance.
    """

    mean: np.ndarray
    factor: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray, weights: np.ndarray) -> GaussianBase:
        """Fit to a weighted population (e.g. the pilot's at ``beta = 1``).

        Parameters
        ----------
        values : ndarray, shape (n, n_dim)
        weights : ndarray, shape (n,)
            Normalised importance weights.

        Returns
        -------
        GaussianBase
            With correlations shrunk toward the identity (Ledoit-Wolf) up to
            :data:`~pymc_bdmc.kernels.mass.DENSE_MAX_DIM` coordinates, independent above.
        """
        weights = np.asarray(weights, dtype=float)
        mean = weights @ values
        if values.shape[1] <= DENSE_MAX_DIM and len(values) >= 3:
            correlation, variance = shrunk_correlation(values, weights)
        else:
            variance = weights @ (values - mean) ** 2
            correlation = np.eye(values.shape[1])
        scale = np.sqrt(np.maximum(variance, MIN_BASE_VARIANCE))
        factor = np.linalg.cholesky(correlation * np.outer(scale, scale))
        return cls(mean, factor)

    @property
    def n_dim(self) -> int:
        """Dimension of the space."""
        return self.mean.size

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` exact draws, shape ``(n, n_dim)``."""
        return self.mean + rng.standard_normal((n, self.n_dim)) @ self.factor.T

    @cached_property
    def whitening(self) -> np.ndarray:
        """The inverse of ``factor``: ``(x - mean) @ whitening.T`` is standard normal."""
        # Whitening by one matrix product per call, in NumPy's BLAS: alternating it with
        # SciPy's triangular solves (a second OpenBLAS with its own threads) made each call
        # 50x slower on 2 cores, where the two libraries' idle threads spin against each other.
        return solve_triangular(self.factor, np.eye(self.n_dim), lower=True)

    @cached_property
    def log_norm(self) -> float:
        """The log normaliser ``-log|det factor| - n_dim log(2 pi) / 2`` of the density."""
        return float(-np.sum(np.log(np.diag(self.factor))) - 0.5 * self.n_dim * np.log(2 * np.pi))

    def logpdf_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised log density and its gradient at each row of ``x``."""
        # Divergent proposals may hold non-finite values: they get a NaN density, as the
        # model's own densities do there, and are rejected.
        whitened = (x - self.mean) @ self.whitening.T
        logp = self.log_norm - 0.5 * np.sum(whitened**2, axis=1)
        return logp, -(whitened @ self.whitening)

    def rebase(self, parts: DensityParts, x: np.ndarray) -> DensityParts:
        """The model's densities at ``x`` as parts of the path from this base (module doc)."""
        log_q, grad_q = self.logpdf_and_grad(x)
        with np.errstate(invalid="ignore"):
            joint = parts.log_prior + parts.log_likelihood
        return DensityParts(log_q, joint - log_q, grad_q,
                            parts.grad_log_prior + parts.grad_log_likelihood - grad_q)

    def parts_fn(self, parts_fn):
        """Wrap a batched ``x -> DensityParts`` of the model into one of the path from here."""

        def rebased(x: np.ndarray) -> DensityParts:
            return self.rebase(parts_fn(x), x)

        return rebased
