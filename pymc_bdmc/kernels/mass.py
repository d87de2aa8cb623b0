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
Everything here runs in the pilot; the measured chains only ever see the frozen factors.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DENSE_CONDITION", "DENSE_MAX_DIM", "dense_mass_factor", "shrunk_correlation"]

#: Condition number of the shrunk correlation matrix above which a dense mass matrix is used.
DENSE_CONDITION = 10.0
#: Largest number of movable coordinates for which the pilot tunes the kernel's geometry (dense
#: mass matrices, and the trajectory length in :mod:`~pymc_bdmc.kernels.tuning`). Above it a
#: 64-particle pilot estimates a covariance poorly, and on the BDMC paper's 375-parameter low-rank
#: model (benchmarks/geometry.py) both a dense matrix (gap 0.95 -> 11.8 nats) and the longer
#: trajectories the pilot preferred (gap 0.95 -> 1.7 at 4x the cost) did worse than the
#: diagonal kernel with 3 leapfrog steps, which larger models keep.
DENSE_MAX_DIM = 100


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
    mean = weights @ values
    centered = values - mean
    variance = weights @ centered**2
    z = centered / np.sqrt(np.where(variance > 0, variance, 1.0))
    sample = (z * weights[:, None]).T @ z
    d = sample.shape[0]
    # Ledoit-Wolf: shrink toward mu I (mu = tr(S)/d = 1 here) by beta^2 / delta^2, where delta^2
    # is the squared distance of S to the target and beta^2 the estimated squared error of S.
    target = np.trace(sample) / d
    delta2 = np.sum((sample - target * np.eye(d)) ** 2) / d
    norms = np.sum(z**2, axis=1)
    quad = np.einsum("ki,ij,kj->k", z, sample, z)
    per_particle = norms**2 - 2.0 * quad + np.sum(sample**2)
    beta2 = min(float(np.sum(weights**2 * per_particle)) / d, delta2)
    shrinkage = 1.0 if delta2 <= 0 else beta2 / delta2
    correlation = shrinkage * target * np.eye(d) + (1.0 - shrinkage) * sample
    return correlation, variance


def dense_mass_factor(values: np.ndarray, weights: np.ndarray, variance: np.ndarray,
                      movable: np.ndarray) -> np.ndarray | None:
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
    factor = np.zeros((variance.size, variance.size))
    factor[np.ix_(index, index)] = chol
    return factor
