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

The shrunk correlation of ``n`` particles is the identity plus a rank ``r < n`` term, and the
Gaussian is kept in that form: drawing, whitening and the density cost ``O(d r)`` per point
instead of the ``O(d^2)`` of a dense factor, which at 500 coordinates (a 500-step random walk)
was most of a run's time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import optimize

from pymc_bdmc.kernels.mass import low_rank_shrunk_correlation
from pymc_bdmc.model.layout import DensityParts

__all__ = ["LAPLACE_MAX_DECREMENT", "LAPLACE_MAX_ITERATIONS", "GaussianBase", "RebasedParts",
           "laplace_base"]

#: Most L-BFGS iterations the Laplace fit may take (about one model evaluation each).
LAPLACE_MAX_ITERATIONS = 400
#: Largest Newton decrement ``g^T P^-1 g`` at a Laplace fit's mode (a Newton step from it would
#: gain about half of it, in nats): L-BFGS can report success where its line search stalls on
#: round-off, short of any mode (down a funnel's neck, the gradient still 9 in log tau).
LAPLACE_MAX_DECREMENT = 1.0

#: Smallest variance of a fitted coordinate (guards a collapsed pilot population).
MIN_BASE_VARIANCE = 1e-12
#: A correlation measured from the curvature keeps only its eigenvalues further than this from 1
#: (in ``|log eigenvalue|``) where fewer than half its directions are: the rest are taken as 1,
#: which moves the base by about ``d * tolerance^2 / 4`` nats of KL divergence at most, and makes
#: every product with its basis ``O(d r)`` instead of ``O(d^2)`` (a hierarchy's curvature differs
#: from the identity in a few directions only).
BASE_EIGENVALUE_TOLERANCE = 0.01


@dataclass(frozen=True)
class GaussianBase:
    """A Gaussian on the flat unconstrained space, its correlations of low rank plus identity.

    The covariance is ``S (I + U diag(eigenvalues - 1) U^T) S`` with ``S = diag(scale)`` and
    ``U = basis`` orthonormal: its symmetric square root ``S (I + U diag(sqrt(eigenvalues) - 1)
    U^T)`` draws, and its inverse whitens, in ``O(d r)``.

    Attributes
    ----------
    mean : ndarray, shape (n_dim,)
    scale : ndarray, shape (n_dim,)
        Positive.
    basis : ndarray, shape (n_dim, r)
        Orthonormal columns (``r >= 1``; a column with eigenvalue 1 adds nothing).
    eigenvalues : ndarray, shape (r,)
        Positive: the correlation's eigenvalues along ``basis`` (1 elsewhere).
    principal_metrics : bool, default False
        Whether pilots give the path from this base metrics diagonal in its principal
        coordinates (:mod:`~pymc_bdmc.kernels.pilot_metrics`): set for a base from the
        posterior's curvature, which the whole path stays close to. Only pilots read it (a
        saved plan's metrics say what they are).
    """

    mean: np.ndarray
    scale: np.ndarray
    basis: np.ndarray
    eigenvalues: np.ndarray
    principal_metrics: bool = False

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
            The weighted mean, and the weighted covariance with its correlations shrunk
            toward the identity (Ledoit-Wolf); independent coordinates from fewer than 3
            particles.

        Raises
        ------
        numpy.linalg.LinAlgError
            Where the population's correlation matrix is singular even after shrinkage.
        """
        weights = np.asarray(weights, dtype=float)
        mean = weights @ values
        d = values.shape[1]
        if len(values) >= 3:
            level, basis, eigenvalues, variance = low_rank_shrunk_correlation(values, weights)
        else:
            level, basis, eigenvalues = 1.0, np.zeros((d, 0)), np.zeros(0)
            variance = weights @ (values - mean) ** 2
        if not basis.shape[1]:  # one inert column keeps every array non-empty
            basis, eigenvalues = np.eye(d, 1), np.ones(1)
        scale = np.sqrt(np.maximum(variance, MIN_BASE_VARIANCE) * level)
        return cls(mean, scale, basis, eigenvalues)

    @classmethod
    def from_covariance(cls, mean: np.ndarray, covariance: np.ndarray) -> GaussianBase:
        """``N(mean, covariance)`` for a dense positive-definite ``covariance`` (full rank)."""
        scale = np.sqrt(np.diag(covariance))
        eigenvalues, basis = np.linalg.eigh(covariance / np.outer(scale, scale))
        if not eigenvalues[0] > 0:
            raise np.linalg.LinAlgError("the covariance matrix is not positive definite")
        return cls(np.asarray(mean, dtype=float), scale, basis, eigenvalues,
                   principal_metrics=True)

    @classmethod
    def from_correlation(cls, values: np.ndarray, weights: np.ndarray,
                         correlation: np.ndarray) -> GaussianBase:
        """Take the population's weighted mean and variances, with a given ``correlation``.

        For a correlation measured elsewhere than in the population (e.g. from the target's
        curvature, :func:`pymc_bdmc.kernels.mass.curvature_correlation`), where too few
        particles measure their own.

        Parameters
        ----------
        values : ndarray, shape (n, n_dim)
        weights : ndarray, shape (n,)
            Normalised importance weights.
        correlation : ndarray, shape (n_dim, n_dim)
            Positive definite, unit diagonal. Where fewer than half its eigenvalues are further
            than :data:`BASE_EIGENVALUE_TOLERANCE` from 1, only those are kept.

        Raises
        ------
        numpy.linalg.LinAlgError
            Where ``correlation`` is not positive definite.
        """
        weights = np.asarray(weights, dtype=float)
        mean = weights @ values
        variance = np.maximum(weights @ (values - mean) ** 2, MIN_BASE_VARIANCE)
        eigenvalues, basis = np.linalg.eigh(correlation)
        if not eigenvalues[0] > 0:
            raise np.linalg.LinAlgError("the correlation matrix is not positive definite")
        kept = np.abs(np.log(eigenvalues)) > BASE_EIGENVALUE_TOLERANCE
        if 2 * np.count_nonzero(kept) < eigenvalues.size:
            if not np.any(kept):  # one inert column keeps every array non-empty
                kept[0] = True
            basis, eigenvalues = basis[:, kept], eigenvalues[kept]
        return cls(mean, np.sqrt(variance), basis, eigenvalues, principal_metrics=True)

    @property
    def n_dim(self) -> int:
        """Dimension of the space."""
        return self.mean.size

    @property
    def covariance(self) -> np.ndarray:
        """The dense covariance matrix (``O(d^2)``: for checks, not for the runs)."""
        correlation = np.eye(self.n_dim) + (self.basis * (self.eigenvalues - 1.0)) @ self.basis.T
        return correlation * np.outer(self.scale, self.scale)

    @cached_property
    def _inverse_scale(self) -> np.ndarray:
        # Computed once per base, not once per compiled transition (kernel_inputs).
        return 1.0 / self.scale

    @cached_property
    def _root(self) -> np.ndarray:
        return np.sqrt(self.eigenvalues) - 1.0

    @cached_property
    def _inverse_root(self) -> np.ndarray:
        return 1.0 / np.sqrt(self.eigenvalues) - 1.0

    @cached_property
    def _inverse(self) -> np.ndarray:
        # The correlation's inverse is I + U diag(1 / eigenvalues - 1) U^T.
        return 1.0 / self.eigenvalues - 1.0

    def _correlate(self, u: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
        # (I + U diag(coefficients) U^T) applied to each row of u.
        return u + ((u @ self.basis) * coefficients) @ self.basis.T

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` exact draws, shape ``(n, n_dim)``."""
        normals = rng.standard_normal((n, self.n_dim))
        return self.mean + self.scale * self._correlate(normals, self._root)

    def whiten(self, x: np.ndarray) -> np.ndarray:
        """Rows of ``x`` mapped to standard normal coordinates (the inverse of :meth:`sample`)."""
        return self._correlate((x - self.mean) / self.scale, self._inverse_root)

    @cached_property
    def log_norm(self) -> float:
        """The log normaliser ``-log|det cov| / 2 - n_dim log(2 pi) / 2`` of the density."""
        return float(-np.sum(np.log(self.scale)) - 0.5 * np.sum(np.log(self.eigenvalues))
                     - 0.5 * self.n_dim * np.log(2 * np.pi))

    def kernel_inputs(self) -> tuple:
        """Return the arrays :mod:`pymc_bdmc.kernels.fused_hmc` evaluates this density from.

        ``(mean, 1 / scale, basis, 1 / eigenvalues - 1, log_norm)``.
        """
        return (self.mean, self._inverse_scale, self.basis, self._inverse,
                np.float64(self.log_norm))

    def logpdf_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised log density and its gradient at each row of ``x``."""
        # With u the standardised rows, both need only u U (U orthonormal): the Mahalanobis
        # form is |u|^2 + sum_k (u . U_k)^2 (1 / eigenvalue_k - 1), and the gradient is
        # -(u + (u U) diag(1 / eigenvalues - 1) U^T) / scale: two products with U, not four.
        # Divergent proposals may hold non-finite values: they get a NaN density, as the
        # model's own densities do there, and are rejected.
        # Where the basis has more than half the dimension's columns, one product with the
        # dense precision costs less than those two.
        if 2 * self.basis.shape[1] > self.n_dim:
            step = x - self.mean
            grad = -(step @ self.precision)
            return self.log_norm + 0.5 * np.sum(step * grad, axis=1), grad
        u = (x - self.mean) / self.scale
        projected = u @ self.basis
        quadratic = np.sum(u**2, axis=1) + (projected**2) @ self._inverse
        grad = -(u + (projected * self._inverse) @ self.basis.T) / self.scale
        return self.log_norm - 0.5 * quadratic, grad

    def rebase(self, parts: DensityParts, x: np.ndarray) -> DensityParts:
        """The model's densities at ``x`` as parts of the path from this base (module doc)."""
        log_q, grad_q = self.logpdf_and_grad(x)
        with np.errstate(invalid="ignore"):
            joint = parts.log_prior + parts.log_likelihood
        return DensityParts(log_q, joint - log_q, grad_q,
                            parts.grad_log_prior + parts.grad_log_likelihood - grad_q)

    # -- principal coordinates: HMC whitened by the base (kernels/hmc.py) ----------------------
    @property
    def full_rank(self) -> bool:
        """Whether ``basis`` spans the space (``A = S U diag(sqrt(eigenvalues))`` is square)."""
        return self.basis.shape == (self.n_dim, self.n_dim)

    @cached_property
    def _sqrt_eigenvalues(self) -> np.ndarray:
        return np.sqrt(self.eigenvalues)

    def principal(self, x: np.ndarray) -> np.ndarray:
        """Rows of ``x`` in principal coordinates ``z = A^{-1} (x - mean)``.

        ``A`` factors the covariance, ``A A^T``: on a full-rank base ``S U diag(sqrt(
        eigenvalues))``, which costs one product with ``U`` (unlike :meth:`whiten`'s symmetric
        root), otherwise that symmetric root, two products with the narrow ``U``. Under the
        base ``z`` is standard normal, and ``log q0 = log_norm - |z|^2 / 2``.
        """
        return self.principal_step(x - self.mean)

    def principal_step(self, step: np.ndarray) -> np.ndarray:
        """Rows ``A^{-1} step``: displacements in principal coordinates."""
        if not self.full_rank:
            return self._correlate(step * self._inverse_scale, self._inverse_root)
        return ((step * self._inverse_scale) @ self.basis) / self._sqrt_eigenvalues

    def from_principal(self, z: np.ndarray) -> np.ndarray:
        """Rows ``mean + A z`` (the inverse of :meth:`principal`)."""
        if not self.full_rank:
            return self.mean + self._correlate(z, self._root) * self.scale
        return self.mean + ((z * self._sqrt_eigenvalues) @ self.basis.T) * self.scale

    def principal_gradient(self, grad: np.ndarray) -> np.ndarray:
        """Rows ``A^T grad``: a gradient in ``x`` as one in principal coordinates."""
        if not self.full_rank:
            return self._correlate(grad * self.scale, self._root)
        return ((grad * self.scale) @ self.basis) * self._sqrt_eigenvalues

    def gradient_at_principal(self, z: np.ndarray) -> np.ndarray:
        """``grad log q0`` at ``x = mean + A z``, which is ``-A^{-T} z``."""
        if not self.full_rank:
            return -self._correlate(z, self._inverse_root) * self._inverse_scale
        return -((z / self._sqrt_eigenvalues) @ self.basis.T) * self._inverse_scale

    def principal_inputs(self) -> tuple:
        """Return the arrays the compiled kernel's principal form takes (:mod:`~.fused_hmc`).

        Full rank only: the compiled form has the full-rank ``A``.

        ``(mean, scale, basis, sqrt(eigenvalues), log_norm)``.
        """
        return (self.mean, self.scale, self.basis, self._sqrt_eigenvalues,
                np.float64(self.log_norm))

    @cached_property
    def precision(self) -> np.ndarray:
        """The dense inverse covariance matrix (the negative of the log density's Hessian)."""
        inverse_correlation = (np.eye(self.n_dim)
                               + (self.basis * self._inverse) @ self.basis.T)
        return inverse_correlation * np.outer(self._inverse_scale, self._inverse_scale)

    def parts_fn(self, parts_fn) -> RebasedParts:
        """Wrap a batched ``x -> DensityParts`` of the model into one of the path from here."""
        return RebasedParts(self, parts_fn)


@dataclass(frozen=True)
class RebasedParts:
    """The batched densities of the path from ``base``: ``x -> DensityParts``.

    Attributes
    ----------
    base : GaussianBase
    model_parts : callable
        The model's own batched densities.
    """

    base: GaussianBase
    model_parts: object

    def __call__(self, x: np.ndarray) -> DensityParts:
        """Densities of the path at each row of ``x``."""
        return self.base.rebase(self.model_parts(x), x)

    def curvature_terms(self, beta: float):
        """``(gradient, hessian_offset)`` of the tempered path density, for its curvature.

        The base's part, ``(1 - beta) log q0``, has the constant Hessian
        ``-(1 - beta) * precision``; only the model's part needs differencing (see
        :func:`pymc_bdmc.kernels.mass.curvature_correlation`).
        """
        def gradient(x: np.ndarray) -> np.ndarray:
            parts = self.model_parts(x)
            return beta * (parts.grad_log_prior + parts.grad_log_likelihood)

        return gradient, -(1.0 - beta) * self.base.precision


def laplace_base(starts: np.ndarray, parts_fn: Callable[[np.ndarray], DensityParts],
                 max_dim: int) -> GaussianBase | None:
    """``N(mode, -H^-1)`` at the posterior's mode (Laplace), or None where it has none.

    The mode by L-BFGS on the unconstrained log posterior from the best of ``starts`` (exact
    prior draws); the Hessian ``H`` by central differences of its gradient, all ``2 d``
    points in one batched call. None where the optimiser does not converge or stops short of a
    stationary point (a density without a maximum: a centred funnel whose scale can shrink to
    zero; :data:`LAPLACE_MAX_DECREMENT`), where ``H`` is not negative definite, or above
    ``max_dim`` coordinates (the ``2 d`` points would not fit one call).

    Parameters
    ----------
    starts : numpy.ndarray, shape (n, n_dim)
    parts_fn : callable
        The model's batched densities.
    max_dim : int

    Returns
    -------
    GaussianBase or None
    """
    n_dim = starts.shape[1]
    if n_dim > max_dim:
        return None
    with np.errstate(all="ignore"):
        log_p = parts_fn(starts).tempered_logp(1.0)
    if not np.any(np.isfinite(log_p)):
        return None

    def negative_log_p(x):
        with np.errstate(all="ignore"):
            parts = parts_fn(x[None, :])
            value, grad = float(parts.tempered_logp(1.0)[0]), parts.tempered_grad(1.0)[0]
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            return np.inf, np.zeros(n_dim)
        return -value, -grad

    start = starts[int(np.argmax(np.where(np.isfinite(log_p), log_p, -np.inf)))]
    found = optimize.minimize(negative_log_p, start, jac=True, method="L-BFGS-B",
                              options={"maxiter": LAPLACE_MAX_ITERATIONS})
    if not (found.success and np.isfinite(found.fun)):
        return None
    mode = found.x
    step = 1e-5 * np.maximum(1.0, np.abs(mode))
    with np.errstate(all="ignore"):
        grads = parts_fn(np.concatenate([mode + np.diag(step), mode - np.diag(step)])
                         ).tempered_grad(1.0)
    hessian = (grads[:n_dim] - grads[n_dim:]) / (2 * step)[:, None]
    precision = -(hessian + hessian.T) / 2
    if not np.all(np.isfinite(precision)):
        return None
    try:
        np.linalg.cholesky(precision)
        covariance = np.linalg.inv(precision)
    except np.linalg.LinAlgError:
        return None
    gradient = np.asarray(found.jac, dtype=float)
    if not gradient @ covariance @ gradient <= LAPLACE_MAX_DECREMENT:  # not a stationary point
        return None
    return GaussianBase.from_covariance(mode, covariance)
