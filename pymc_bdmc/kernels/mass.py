"""Dense mass matrices for HMC, measured on a weighted pilot population.

A diagonal mass matrix cannot follow correlated posteriors (random walks, centered hierarchies,
latent fields): the step size is then set by the narrowest direction and a short trajectory
barely moves along the others. Where the pilot population is strongly correlated, its covariance
becomes the inverse mass matrix.

The population is small (64 particles by default, often fewer than dimensions), so its
correlation matrix is shrunk toward the identity with the Ledoit-Wolf intensity (Ledoit & Wolf
2004, "A well-conditioned estimator for large-dimensional covariance matrices"), computed with
the particles' importance weights. The result is well-conditioned for any population size. It is
used only where it matters: when the shrunk correlation matrix has a condition number above
:data:`DENSE_CONDITION`; otherwise the diagonal (and its faster, compiled kernel) is kept.

A population's covariance is the right metric only where it also describes the local curvature.
For a Gaussian target with covariance ``S`` the scores ``g = grad log f`` satisfy
``E[g g^T] = S^-1`` (the Fisher identity), so in the metric ``L L^T = S`` the whitened scores
``L^T g`` have identity covariance, and the largest eigenvalue of ``E[(L^T g)(L^T g)^T]`` (the
stiffest whitened direction, which bounds the stable leapfrog step) is 1. Where the population is
spread over directions the density does not curve along in the same way (a posterior identified
only up to rotations, like the BDMC paper's low-rank factorisation, or clusters that swap), the
dense metric stiffens the kernel instead. So, given the population's scores, the dense factor
is kept only where its largest whitened curvature is below the diagonal metric's
(:func:`stiffness`): no extra model evaluations, the scores come with the population.
Everything here runs in the pilot; the measured chains only ever see the frozen factors.

Above :attr:`~pymc_bdmc.config.Tuning.dense_max_dim` coordinates a population large enough for its
own correlation costs more than the run (a 504-particle pilot took 63 of 104 s on 402-coordinate stochastic volatility).
There the correlation comes from the model's curvature instead (:func:`curvature_mass_factor`):
the negative Hessian of the tempered log density, by forward differences of its gradient, at a
few particles of the pilot's own population, averaged, made positive definite (the magnitudes of
its eigenvalues, as in Betancourt's SoftAbs metric) and inverted. ``d + 1`` gradients per
particle in one batched call (far fewer for a sparse Hessian once its pattern is known,
:mod:`~pymc_bdmc.kernels.sparse_hessian`): a Gaussian's correlation exactly, from any population
size. The scales still come from the population's variances, and the same stiffness check decides.
The pilot differences the prior's and the likelihood's Hessians apart
(:func:`curvature_hessians`) and reuses them over nearby temperatures, weighted by each
one's ``beta`` (:mod:`pymc_bdmc.kernels.pilot_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import lapack

from pymc_bdmc.config import DEFAULT_TUNING

__all__ = ["CURVATURE_ANCHORS", "CURVATURE_STEP", "DENSE_CONDITION",
           "correlation_from_hessian", "curvature_anchors", "curvature_correlation",
           "curvature_disagreement", "curvature_hessians", "curvature_mass_factor",
           "dense_mass_factor", "exceeds_condition", "factor_from_correlation",
           "low_rank_shrunk_correlation", "shrunk_correlation", "stiffness"]

#: Condition number of the shrunk correlation matrix above which a dense mass matrix is used.
DENSE_CONDITION = 10.0
#: Particles of the pilot population at which the curvature is measured and averaged (one
#: gave a 1000-step random walk's fitted path a pilot 75 nats above the exact log p(y)).
CURVATURE_ANCHORS = 4
#: Forward-difference step of the Hessian, relative to each coordinate's population sd.
CURVATURE_STEP = 1e-5


def shrunk_correlation(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted correlation matrix shrunk toward the identity, and the weighted variances.

    Parameters
    ----------
    values : ndarray, shape (n, d)
    weights : ndarray, shape (n,)
        Normalised importance weights.

    Returns
    -------
    correlation : ndarray, shape (d, d)
    variance : ndarray, shape (d,)
    """
    rows, level, shrinkage, variance = _ledoit_wolf(values, weights)
    return _shrunk(rows, level, shrinkage), variance


def _shrunk(rows: np.ndarray, level: float, shrinkage: float) -> np.ndarray:
    """Return the shrunk correlation ``level * I + (1 - shrinkage) * R^T R``."""
    return level * np.eye(rows.shape[1]) + (1.0 - shrinkage) * (rows.T @ rows)


def low_rank_shrunk_correlation(values: np.ndarray, weights: np.ndarray
                                ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`shrunk_correlation` in the low-rank form it has, without a ``d x d`` matrix.

    The sample correlation of ``n`` particles has rank below ``n``, so the shrunk one is
    ``level * (I + basis @ diag(eigenvalues - 1) @ basis.T)`` with ``basis`` the sample's
    ``r <= n`` principal directions: ``O(n d min(n, d))`` to compute and ``O(d r)`` to store.

    Returns
    -------
    level : float
        The correlation's eigenvalue off ``basis`` (the shrunk identity's level, > 0).
    basis : ndarray, shape (d, r)
        Orthonormal columns.
    eigenvalues : ndarray, shape (r,)
        The correlation's eigenvalues along ``basis``, divided by ``level`` (all >= 1).
    variance : ndarray, shape (d,)
        The weighted variances.

    Raises
    ------
    numpy.linalg.LinAlgError
        Where nothing is shrunk and the sample correlation is singular.
    """
    rows, level, shrinkage, variance = _ledoit_wolf(values, weights)
    if not level > 0:
        raise np.linalg.LinAlgError("the population's correlation matrix is singular")
    _, singular, directions = np.linalg.svd(rows, full_matrices=False)
    keep = singular > 1e-12 * singular.max(initial=0.0)  # drop the numerically null directions
    eigenvalues = 1.0 + (1.0 - shrinkage) * singular[keep] ** 2 / level
    return level, directions[keep].T, eigenvalues, variance


def _ledoit_wolf(values: np.ndarray, weights: np.ndarray):
    """Rows ``R`` with ``R^T R`` the weighted sample correlation, and its Ledoit-Wolf shrinkage.

    Returns ``(rows, level, shrinkage, variance)``: the shrunk correlation is
    ``level * I + (1 - shrinkage) * R^T R``. Every sum runs over the ``n x n`` Gram matrix of the
    particles where there are fewer particles than coordinates, so no ``d x d`` matrix is formed.
    """
    mean = weights @ values
    centered = values - mean
    variance = weights @ centered**2
    z = centered / np.sqrt(np.where(variance > 0, variance, 1.0))
    rows = z * np.sqrt(weights)[:, None]
    d = z.shape[1]
    # Ledoit-Wolf: shrink the sample S = R^T R toward mu I (mu = tr(S)/d = 1 here) by
    # beta^2 / delta^2, where delta^2 is the squared distance of S to the target and beta^2 the
    # estimated squared error of S. ||S||_F = ||R R^T||_F and z_k^T S z_k = ||R z_k||^2.
    # Whichever of the n x n and d x d Gram matrices is smaller gives the same sums.
    if len(rows) <= d:
        gram = rows @ rows.T
        quad = np.sum((z @ rows.T) ** 2, axis=1)
    else:
        gram = rows.T @ rows
        quad = np.sum((z @ gram) * z, axis=1)
    trace = float(np.trace(gram))
    squared_norm = float(np.sum(gram**2))
    target = trace / d
    delta2 = (squared_norm - 2.0 * target * trace + target**2 * d) / d
    norms = np.sum(z**2, axis=1)
    per_particle = norms**2 - 2.0 * quad + squared_norm
    beta2 = min(float(np.sum(weights**2 * per_particle)) / d, delta2)
    shrinkage = 1.0 if delta2 <= 0 else beta2 / delta2
    return rows, shrinkage * target, shrinkage, variance


def stiffness(scores: np.ndarray, weights: np.ndarray, factor: np.ndarray) -> float:
    """Largest eigenvalue of the weighted second moment of the whitened scores ``scores @ factor``.

    Parameters
    ----------
    scores : ndarray, shape (n, d)
        Gradients of the log target at the population.
    weights : ndarray, shape (n,)
        Normalised importance weights.
    factor : ndarray, shape (d, d) or (d,)
        ``L`` with ``L L^T`` the inverse mass matrix, or the square roots of a diagonal one.

    Returns
    -------
    float
        1 for a Gaussian target in its own covariance metric; larger means a smaller stable
        leapfrog step in that metric.
    """
    whitened = scores * factor if factor.ndim == 1 else scores @ factor
    whitened = whitened * np.sqrt(weights)[:, None]
    # The top singular value of an (n, d) matrix: the smaller Gram matrix's top eigenvalue.
    gram = whitened @ whitened.T if len(whitened) <= whitened.shape[1] else whitened.T @ whitened
    if not np.all(np.isfinite(gram)):  # scores from far-out particles: no verdict, no metric
        return np.inf
    try:
        return float(np.linalg.eigvalsh(gram)[-1])
    except np.linalg.LinAlgError:
        return np.inf


def dense_mass_factor(values: np.ndarray, weights: np.ndarray, variance: np.ndarray,
                      movable: np.ndarray, scores: np.ndarray | None = None,
                      max_dim: int = DEFAULT_TUNING.dense_max_dim) -> np.ndarray | None:
    """Factor ``L`` of a dense inverse mass matrix, or None where a diagonal one will do.

    Parameters
    ----------
    values : ndarray, shape (n, d)
        The population.
    weights : ndarray, shape (n,)
        Normalised importance weights.
    variance : ndarray, shape (d,)
        The diagonal inverse mass matrix the dense one replaces (its diagonal is kept, so the
        dense matrix only adds correlations).
    movable : ndarray of bool, shape (d,)
        Coordinates HMC may move; the others get zero rows and columns in ``L``.
    scores : ndarray, shape (n, d), optional
        Gradients of the log target at ``values``. Given, the dense factor is returned only
        where it is less stiff than the diagonal metric (see the module docstring).
    max_dim : int, optional
        Above this many movable coordinates, no dense factor
        (:attr:`~pymc_bdmc.config.Tuning.dense_max_dim`).

    Returns
    -------
    ndarray, shape (d, d), or None
        Lower-triangular ``L`` with ``L L^T`` the inverse mass matrix.
    """
    index = np.flatnonzero(movable)
    if not 2 <= index.size <= max_dim or len(values) < 3:
        return None
    rows, level, shrinkage, _ = _ledoit_wolf(values[:, index], weights)
    return factor_from_correlation(_shrunk(rows, level, shrinkage), variance, movable, weights,
                                   scores, _shrunk_extremes(rows, level, shrinkage))


def _shrunk_extremes(rows: np.ndarray, level: float, shrinkage: float
                     ) -> tuple[float, float] | None:
    """Smallest and largest eigenvalue of ``level * I + (1 - shrinkage) * R^T R``, or None.

    With fewer particles than coordinates ``R^T R`` is singular and its nonzero eigenvalues are
    those of the small Gram matrix ``R R^T``: the extremes are ``level`` and ``level`` plus the
    largest of them, without a ``d x d`` eigendecomposition. None with as many particles as
    coordinates or more.
    """
    if len(rows) >= rows.shape[1]:
        return None
    largest = float(np.linalg.eigvalsh(rows @ rows.T)[-1])
    return level, level + (1.0 - shrinkage) * largest


def curvature_correlation(values: np.ndarray, variance: np.ndarray, movable: np.ndarray,
                          gradient: Callable[[np.ndarray], np.ndarray],
                          hessian_offset: np.ndarray | None = None,
                          n_anchors: int = CURVATURE_ANCHORS) -> np.ndarray | None:
    """Correlation matrix of the target's local Gaussian, from its curvature at a population.

    The Hessian of the log target, by forward differences of ``gradient`` (steps of
    :data:`CURVATURE_STEP` population sds), at ``n_anchors`` particles spread evenly over the
    population (after a systematic resampling its order follows the weights), averaged; its
    negative made positive definite by taking its eigenvalues' magnitudes (in the units of the
    population's sds), inverted and normalised to unit diagonal.

    Parameters
    ----------
    values : ndarray, shape (n, d)
        The population.
    variance : ndarray, shape (d,)
        Its variances (they set the difference steps).
    movable : ndarray of bool, shape (d,)
        The coordinates to correlate.
    gradient : callable
        ``(m, d) -> (m, d)``: gradients of the log target, or of its part whose Hessian is not
        ``hessian_offset``, batched over rows.
    hessian_offset : ndarray, shape (d, d), optional
        A constant Hessian added to the measured one (a Gaussian part of the target).
    n_anchors : int, default CURVATURE_ANCHORS

    Returns
    -------
    ndarray, shape (k, k), or None
        Over the ``k`` movable coordinates; None where a gradient is not finite or the
        curvature vanishes.
    """
    index = np.flatnonzero(movable)
    if index.size < 2 or not len(values):
        return None
    (hessian,) = curvature_hessians(values, variance, movable, lambda x: [gradient(x)],
                                    n_anchors)
    if hessian_offset is not None:
        hessian = hessian + hessian_offset[np.ix_(index, index)]
    return correlation_from_hessian(hessian, variance[index])


def curvature_anchors(values: np.ndarray, n_anchors: int = CURVATURE_ANCHORS) -> np.ndarray:
    """Return the ``n_anchors`` particles, spread over a population, its curvature is taken at.

    After a systematic resampling the population's order follows the weights.
    """
    return values[np.unique(np.linspace(0, len(values) - 1, n_anchors).astype(int))]


def curvature_hessians(values: np.ndarray, variance: np.ndarray, movable: np.ndarray,
                       gradients: Callable[[np.ndarray], list[np.ndarray]],
                       n_anchors: int = CURVATURE_ANCHORS,
                       per_anchor: bool = False) -> list[np.ndarray]:
    """Mean Hessians of several functions over the movable coordinates, by forward differences.

    The differencing of :func:`curvature_correlation`: steps of :data:`CURVATURE_STEP`
    population sds from ``n_anchors`` particles spread over the population, all in one batched
    call of ``gradients``, which returns the gradients of each function (e.g. the log prior's
    and the log likelihood's, which a tempered target weights by ``beta``).

    Parameters
    ----------
    values : ndarray, shape (n, d)
    variance : ndarray, shape (d,)
    movable : ndarray of bool, shape (d,)
    gradients : callable
        ``(m, d) -> list of (m, d)`` arrays.
    n_anchors : int, default CURVATURE_ANCHORS
    per_anchor : bool, default False
        Each anchor's Hessian, not their mean.

    Returns
    -------
    list of ndarray, shape (k, k), or (anchors, k, k) with ``per_anchor``
        Symmetrised, over the ``k`` movable coordinates (not finite where a gradient is not).
    """
    index = np.flatnonzero(movable)
    scale = np.sqrt(variance[index])
    step = CURVATURE_STEP * scale
    m = index.size
    anchors = curvature_anchors(values, n_anchors)
    # Each anchor, then one step per axis from it: all anchors' points in one batched call.
    points = np.repeat(anchors, m + 1, axis=0)
    stepped = (np.arange(len(anchors))[:, None] * (m + 1) + 1 + np.arange(m)).ravel()
    points[stepped, np.tile(index, len(anchors))] += np.tile(step, len(anchors))
    hessians = []
    for grad in gradients(points):
        grads = grad[:, index].reshape(len(anchors), m + 1, m)
        # Row i: d grad / d x_i, at each anchor (or averaged over them).
        if per_anchor:
            hessian = (grads[:, 1:] - grads[:, :1]) / step[:, None]
            hessians.append(0.5 * (hessian + hessian.transpose(0, 2, 1)))
            continue
        hessian = np.sum(grads[:, 1:] - grads[:, :1], axis=0) / (step[:, None] * len(anchors))
        hessians.append(0.5 * (hessian + hessian.T))
    return hessians


def curvature_disagreement(values: np.ndarray, weights: np.ndarray, variance: np.ndarray,
                           movable: np.ndarray, gradient: Callable[[np.ndarray], np.ndarray],
                           n_anchors: int = 8) -> float:
    """How much the curvature's correlations differ from particle to particle.

    For a Gaussian target the Hessian is the same everywhere, and the correlations of
    :func:`curvature_correlation` are exact from any particle; where it varies (a bilinear
    posterior) their average describes no particle. Measured at the ``n_anchors`` heaviest
    particles, one Hessian each (all in one batched call): the root mean square of the pairwise
    differences of their off-diagonal correlations, over the root mean square of those
    correlations (infinite where fewer than two are defined).

    Parameters
    ----------
    values : ndarray, shape (n, d)
    weights : ndarray, shape (n,)
    variance : ndarray, shape (d,)
        The population's variances (they set the difference steps).
    movable : ndarray of bool, shape (d,)
    gradient : callable
        ``(m, d) -> (m, d)``: gradients of the log target, batched over rows.
    n_anchors : int, default 8

    Returns
    -------
    float
    """
    heaviest = values[np.argsort(-np.asarray(weights))[:n_anchors]]
    (hessians,) = curvature_hessians(heaviest, variance, movable, lambda x: [gradient(x)],
                                     len(heaviest), per_anchor=True)
    correlations = [c for c in (correlation_from_hessian(h, variance[movable])
                                for h in hessians if np.all(np.isfinite(h)))
                    if c is not None]
    if len(correlations) < 2 or correlations[0].shape[0] < 2:
        return float("inf")
    off = ~np.eye(correlations[0].shape[0], dtype=bool)
    parts = np.array([c[off] for c in correlations])
    size = float(np.sqrt(np.mean(parts**2)))
    pairs = [np.mean((parts[a] - parts[b]) ** 2) for a in range(len(parts))
             for b in range(a + 1, len(parts))]
    return float(np.sqrt(np.mean(pairs)) / size) if size > 0 else float("inf")


def correlation_from_hessian(hessian: np.ndarray, variance: np.ndarray) -> np.ndarray | None:
    """Return the correlation of the Gaussian with precision ``-hessian``, made positive definite.

    In the units of ``variance``'s sds the negative Hessian is inverted through its Cholesky
    factor; where it is not positive definite, its eigenvalues' magnitudes are taken (SoftAbs).

    Parameters
    ----------
    hessian : ndarray, shape (k, k)
        Symmetric.
    variance : ndarray, shape (k,)
        Positive variances (they only condition the arithmetic).

    Returns
    -------
    ndarray, shape (k, k), or None
        None where the Hessian is not finite or vanishes.
    """
    scale = np.sqrt(variance)
    whitened = -hessian * np.outer(scale, scale)
    if not np.all(np.isfinite(whitened)):
        return None
    # Positive definite (the usual case): inverted from its Cholesky factor by LAPACK's potri
    # (39 ms at 1001 coordinates, where a triangular solve and a product took 66).
    factor, info = lapack.dpotrf(whitened, lower=1, clean=0)
    if info == 0:
        covariance, info = lapack.dpotri(factor, lower=1)
        covariance = np.tril(covariance) + np.tril(covariance, -1).T
    if info != 0:
        eigenvalues, vectors = np.linalg.eigh(whitened)
        magnitude = np.abs(eigenvalues)
        if not magnitude.max(initial=0.0) > 0:
            return None
        magnitude = np.maximum(magnitude, 1e-10 * magnitude.max())
        covariance = (vectors / magnitude) @ vectors.T
    sd = np.sqrt(np.diag(covariance))
    if not np.all(np.isfinite(sd)) or not np.all(sd > 0):
        return None
    return covariance / np.outer(sd, sd)


def curvature_mass_factor(values: np.ndarray, weights: np.ndarray, variance: np.ndarray,
                          movable: np.ndarray, gradient: Callable[[np.ndarray], np.ndarray],
                          scores: np.ndarray | None = None,
                          hessian_offset: np.ndarray | None = None) -> np.ndarray | None:
    """:func:`dense_mass_factor` with the correlation of :func:`curvature_correlation`.

    Parameters
    ----------
    values, weights, variance, movable, scores
        As for :func:`dense_mass_factor`.
    gradient, hessian_offset
        As for :func:`curvature_correlation`.

    Returns
    -------
    ndarray, shape (d, d), or None
        As for :func:`dense_mass_factor`.
    """
    correlation = curvature_correlation(values, variance, movable, gradient, hessian_offset)
    if correlation is None:
        return None
    return factor_from_correlation(correlation, variance, movable, weights, scores)


def exceeds_condition(correlation: np.ndarray, condition: float = DENSE_CONDITION,
                      extremes: tuple[float, float] | None = None) -> bool:
    """Whether a correlation matrix's condition number is above ``condition``.

    Any two coordinates correlated by ``r`` bound it from below by ``(1 + r) / (1 - r)`` (the
    eigenvalues of their 2 x 2 block, ``1 +- r``, lie within the extreme ones by Cauchy
    interlacing). Where that bound already exceeds ``condition`` (``|r| > 9 / 11`` at 10: a
    random walk's neighbours) no eigendecomposition is needed, which on 1001 coordinates cost
    as much as the rest of a curvature metric's linear algebra. A correlation that is not
    positive definite is left to the Cholesky factorisation that follows. ``extremes``, where
    known, are the smallest and largest eigenvalue (:func:`_shrunk_extremes`).
    """
    off_diagonal = np.abs(correlation - np.diag(np.diag(correlation)))
    r = float(off_diagonal.max(initial=0.0))
    if r >= 1.0 or (1.0 + r) / (1.0 - r) > condition:
        return True
    if extremes is None:
        eigenvalues = np.linalg.eigvalsh(correlation)
        extremes = eigenvalues[0], eigenvalues[-1]
    smallest, largest = extremes
    return bool(smallest > 0 and largest / smallest > condition)


def factor_from_correlation(correlation: np.ndarray, variance: np.ndarray, movable: np.ndarray,
                            weights: np.ndarray, scores: np.ndarray | None = None,
                            extremes: tuple[float, float] | None = None) -> np.ndarray | None:
    """Return the dense factor of ``correlation`` at the population's scales, or None.

    Parameters
    ----------
    correlation : ndarray, shape (k, k)
        Over the ``k`` movable coordinates.
    variance, movable, weights, scores
        As for :func:`dense_mass_factor`.
    extremes : tuple of float, optional
        The smallest and largest eigenvalue of ``correlation``, where known.

    Returns
    -------
    ndarray, shape (d, d), or None
        As for :func:`dense_mass_factor`: None where ``correlation`` is too weakly correlated,
        not positive definite, or not less stiff than the diagonal metric.
    """
    index = np.flatnonzero(movable)
    if not exceeds_condition(correlation, extremes=extremes):
        return None
    scale = np.sqrt(variance[index])
    try:
        chol = np.linalg.cholesky(correlation * np.outer(scale, scale))
    except np.linalg.LinAlgError:
        return None
    if scores is not None:
        movable_scores = scores[:, index]
        if not (stiffness(movable_scores, weights, chol)
                < stiffness(movable_scores, weights, scale)):
            return None
    factor = np.zeros((variance.size, variance.size))
    factor[np.ix_(index, index)] = chol
    return factor
