"""Resampling schemes: ``(rng, normalized_weights, num_samples) -> indices``."""

from __future__ import annotations

import numpy as np

__all__ = ["systematic_resample"]


def systematic_resample(rng: np.random.Generator, weights: np.ndarray,
                        num_samples: int) -> np.ndarray:
    """Systematic resampling: one uniform offset, ``num_samples`` evenly spaced points.

    Parameters
    ----------
    rng : numpy.random.Generator
    weights : ndarray
        Normalized, non-negative weights summing to one.
    num_samples : int

    Returns
    -------
    ndarray of int
        Indices into ``weights``; index ``i`` appears ``num_samples * weights[i]`` times in
        expectation.
    """
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0  # guard against round-off below 1
    points = (rng.uniform() + np.arange(num_samples)) / num_samples
    return np.searchsorted(cumulative, points, side="right").clip(0, len(weights) - 1)
