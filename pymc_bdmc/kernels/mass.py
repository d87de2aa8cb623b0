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
"""

from __future__ import annotations

import numpy as np

__all__ = ["DENSE_CONDITION", "DENSE_MAX_DIM", "dense_mass_factor", "low_rank_shrunk_correlation",
           "shrunk_correlation", "stiffness"]

#: Condition number of the shrunk correlation matrix above which a dense mass matrix is used.
DENSE_CONDITION = 10.0
#: Largest number of movable coordinates for which the pilot measures dense mass matrices. A
#: dense metric needs a pilot population of about that many particles
#: (:mod:`pymc_bdmc.pipeline.pilot` enlarges it to 1.25 per coordinate), and its cost grows with
#: the square of the dimension. (The trajectory length is chosen at every dimension.)
DENSE_MAX_DIM = 400


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
    correlation = level * np.eye(rows.shape[1]) + (1.0 - shrinkage) * (rows.T @ rows)
    return correlation, variance


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
    return float(np.linalg.eigvalsh(gram)[-1])


def dense_mass_factor(values: np.ndarray, weights: np.ndarray, variance: np.ndarray,
                      movable: np.ndarray, scores: np.ndarray | None = None
                      ) -> np.ndarray | None:
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

    Returns
    -------
    ndarray, shape (d, d), or None
        Lower-triangular ``L`` with ``L L^T`` the inverse mass matrix.
    """
    index = np.flatnonzero(movable)
    if not 2 <= index.size <= DENSE_MAX_DIM or len(values) < 3:
        return None
    correlation, _ = shrunk_correlation(values[:, index], weights)
    eigenvalues = np.linalg.eigvalsh(correlation)
    if not eigenvalues[0] > 0 or eigenvalues[-1] / eigenvalues[0] <= DENSE_CONDITION:
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
