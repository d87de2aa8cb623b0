"""The pilot's choice of HMC trajectory length: candidate lengths, probes and their score.

Where ``n_leapfrog`` is not given, each pilot temperature adapts its transitions at the first of
:data:`LEAPFROG_CANDIDATES` leapfrog steps and probes each other length with one more transition
(each length keeping its own step size). The length that moves the population furthest per
gradient, summed over the temperatures, becomes the measured runs' trajectory length
(:func:`best_candidate`).

A probe only measures a jump, so it is made by a random subset of the particles
(:func:`probe_size`): with every particle probing, the probes of 6 and 12 steps were two thirds
of the pilot's gradients (18 of 27 per temperature), and on a logistic regression over 10000
observations the prior path's pilot took 25.7 s; with a quarter of them, 12.6 s, the same
length chosen, and the geometry suite's gaps within their run-to-run noise
(docs/performance.md, "The pilot's probes"). The pilot and its choice see only the pilot's own
particles, so the plan stays frozen before any measured chain runs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pymc_bdmc.kernels.hmc import HMCInfo, HMCParams, PartsFn, hmc_step
from pymc_bdmc.model.layout import DensityParts

__all__ = ["LEAPFROG_CANDIDATES", "MIN_PROBE_PARTICLES", "PROBE_FRACTION", "best_candidate",
           "hmc_on_rows", "probe_size"]

#: Leapfrog steps per transition the pilot tries when ``n_leapfrog`` is not given.
LEAPFROG_CANDIDATES = (3, 6, 12)
#: Share of the pilot's particles that make each probe transition ...
PROBE_FRACTION = 0.25
#: ... and the fewest that do (all of them in a smaller population).
MIN_PROBE_PARTICLES = 16


def probe_size(n_particles: int) -> int:
    """How many of ``n_particles`` pilot particles make each probe transition."""
    return min(n_particles, max(MIN_PROBE_PARTICLES, round(PROBE_FRACTION * n_particles)))


def hmc_on_rows(rng: np.random.Generator, x: np.ndarray, parts: DensityParts,
                rows: np.ndarray | slice, beta: float, params: HMCParams, parts_fn: PartsFn,
                cross: tuple | None = None,
                ) -> tuple[np.ndarray, DensityParts, HMCInfo, np.ndarray]:
    """One HMC transition of the particles ``rows``; the others stay where they are.

    ``cross``: ``(halves, factors)`` (:meth:`~.pilot_metrics.MetricChoice.factors`), each half
    of the particles moved with its own dense metric instead of ``params``'.

    Returns
    -------
    tuple
        ``(x, parts, info, step)``: the whole population and its densities after the move,
        the moved rows' transition info, and their displacement.
    """
    if cross is not None:
        return _cross_fitted_rows(rng, x, parts, rows, beta, params, parts_fn, cross)
    before = x[rows]
    moved, moved_parts, info = hmc_step(rng, before, parts.select(rows), beta, params, parts_fn)
    if isinstance(rows, slice) and rows == slice(None):
        return moved, moved_parts, info, moved - before
    x = x.copy()
    x[rows] = moved
    return x, parts.put(rows, moved_parts), info, moved - before


def _cross_fitted_rows(rng, x, parts, rows, beta, params, parts_fn, cross):
    """:func:`hmc_on_rows` with each half of the particles on its own metric."""
    halves, factors = cross
    index = np.arange(len(x))[rows]
    chosen = np.zeros(len(x), dtype=bool)
    chosen[index] = True
    x, step = x.copy(), np.zeros_like(x)
    rate, accepted, divergent = np.zeros(len(x)), np.zeros(len(x), bool), np.zeros(len(x), bool)
    for half, factor in zip(halves, factors, strict=True):
        members = half[chosen[half]]
        if not members.size:
            continue
        before = x[members]
        moved, moved_parts, info = hmc_step(rng, before, parts.select(members), beta,
                                            replace(params, mass_factor=factor), parts_fn)
        x[members], step[members] = moved, moved - before
        parts = parts.put(members, moved_parts)
        rate[members], accepted[members] = info.acceptance_rate, info.accepted
        divergent[members] = info.divergent
    return (x, parts, HMCInfo(rate[index], accepted[index], divergent[index]), step[index])


def best_candidate(candidates: tuple[int, ...], jump: np.ndarray) -> int:
    """Return the candidate length with the largest summed, per-temperature-normalised jump.

    Parameters
    ----------
    candidates : tuple of int
    jump : numpy.ndarray, shape (temperatures, len(candidates))
        Mean squared jump per gradient of each length at each temperature (NaN where the
        length was not run).
    """
    if len(candidates) == 1:
        return candidates[0]
    finite = np.all(np.isfinite(jump), axis=1)
    rows = jump[finite]
    rows = rows[rows.max(axis=1) > 0]
    if not len(rows):
        return candidates[0]
    score = np.sum(rows / rows.max(axis=1, keepdims=True), axis=0)
    return candidates[int(np.argmax(score))]
