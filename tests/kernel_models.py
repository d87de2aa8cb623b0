"""A Gaussian process on a few points, squared-exponential kernel: the tests' per-chain matrix.

With its scale learnt, every chain factorizes a covariance of its own (compiled as a loop over
chains); with the scale fixed, one factor serves all chains (vectorized).
"""

import numpy as np
import pymc as pm


def kernel_model(n_points: int = 6, learn_scale: bool = True, seed: int = 1) -> pm.Model:
    """``f ~ MvNormal(0, scale^2 K)`` on ``n_points`` of [0, 1], observed with noise 0.3."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, n_points)
    kernel = np.exp(-0.5 * np.subtract.outer(grid, grid) ** 2 / 0.3**2) + 1e-6 * np.eye(n_points)
    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0) if learn_scale else 1.0
        f = pm.MvNormal("f", 0.0, scale**2 * kernel)
        pm.Normal("y", f, 0.3, observed=rng.normal(size=n_points))
    return model
