"""Small models several test modules share.

A Gaussian process on a few points, squared-exponential kernel (the tests' per-chain matrix):
with its scale learnt, every chain factorizes a covariance of its own (compiled as a loop over
chains); with the scale fixed, one factor serves all chains (vectorized). A short Gaussian
random walk observed with noise (vectorized).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt


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


def walk_model(data=None) -> pm.Model:
    """12 steps of a random walk with a half-normal scale, observed with noise 0.5."""
    data = np.linspace(-1.0, 2.0, 12) if data is None else data
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        steps = pm.Normal("steps", 0.0, sigma, shape=12)
        pm.Normal("y", pt.cumsum(steps), 0.5, observed=data)
    return model
