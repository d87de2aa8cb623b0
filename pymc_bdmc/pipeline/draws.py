"""Exact draws that runs start from: prior draws, and the simulated ``(theta*, y*)`` of BDMC."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pymc as pm

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.cache import observed_values
from pymc_bdmc.model.checks import (
    check_finite_start,
    unsampleable_prior_message,
    unsimulable_data_message,
)
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.pipeline.matching import guarded_draw, matched_draw, n_candidates
from pymc_bdmc.pipeline.seeding import rewind

__all__ = ["PilotDraws", "draw_prior", "generating_values", "impossible_start_offset",
           "prior_start", "prior_start_blocks", "simulate_truth"]

#: Prior draws at which the data are possible that :func:`impossible_start_offset` counts (the
#: relative noise of its estimate is about ``sqrt((1 - P) / n)``), and the most it draws.
POSSIBLE_DRAWS, MAX_POSSIBLE_DRAWS = 256, 1 << 16


def simulate_truth(simulator: ModelSimulator, model: pm.Model,
                   streams: Mapping[str, np.random.Generator],
                   match_data: bool | int | None) -> tuple[JointDraw, dict]:
    """``(theta*, y*)`` from the prior predictive, chosen as ``match_data`` says.

    Parameters
    ----------
    simulator : ModelSimulator
    model : pm.Model
        Holds the real data that matching and the guard compare with.
    streams : mapping
        The run's streams (:func:`~pymc_bdmc.pipeline.seeding.streams`): ``"simulate"`` for
        the draw, or the matched candidates, and ``"candidates"`` for the guard's.
    match_data : bool, int or None
        ``False``: one draw. ``None``: one draw, guarded against data far from the real data
        (:func:`~pymc_bdmc.pipeline.matching.guarded_draw`). ``True`` or a number: the nearest
        of that many (:func:`~pymc_bdmc.pipeline.matching.matched_draw`).

    Returns
    -------
    tuple
        ``(JointDraw, attrs)``, the attrs saying how the data were chosen (empty for one
        unguarded draw).
    """
    n = n_candidates(match_data)
    try:
        if n:
            chosen = matched_draw(simulator, observed_values(model), n, streams["simulate"])
        elif match_data is None:
            chosen = guarded_draw(simulator, observed_values(model), streams["simulate"],
                                  streams["candidates"])
        else:
            return simulator.draw_joint(streams["simulate"]), {}
    except NotImplementedError as err:
        # The prior itself, or only the data? A throwaway stream leaves the run's untouched.
        draw_prior(simulator, 1, np.random.default_rng(0))
        raise BDMCInputError(unsimulable_data_message(str(err))) from err
    return chosen.truth, chosen.attrs()


def draw_prior(simulator: ModelSimulator, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` exact prior draws, or a :class:`BDMCInputError` if the prior cannot be sampled.

    Parameters
    ----------
    simulator : ModelSimulator
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray
        Shape (n, n_dim).
    """
    try:
        return simulator.draw_prior(n, rng)
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err


def impossible_start_offset(draw, parts_fn, rng: np.random.Generator,
                            failed_step: np.ndarray | None) -> tuple[float, dict]:
    """Return what BDMC's reverse log weights need where the data are impossible at start draws.

    Reverse chains never reach the mass of the path's start (the prior, or a fitted base) where
    the (simulated) data are impossible: at any ``beta > 0`` the path's densities are zero
    there. So each reverse weight estimates ``P / p(y)``, ``P`` the start's mass where the data
    are possible, and the upper bound sits ``-log P`` too high at any length. ``draw(n, rng)``
    draws from the start, from ``rng`` (a stream of its own), until :data:`POSSIBLE_DRAWS` of
    them make the data possible: with ``M`` draws in all, ``M / n`` is an unbiased estimate of
    ``1 / P`` (negative binomial sampling), independent of the weights, so adding
    ``log(M / n)`` to every reverse log weight keeps the upper bound a stochastic upper bound
    and removes that floor. Nothing is drawn unless some forward chain started where the data
    are impossible (``failed_step`` 1); past :data:`MAX_POSSIBLE_DRAWS` draws no offset is
    added.

    Returns
    -------
    tuple
        ``(offset, attrs)``: 0.0 and no attrs where nothing applies.
    """
    if failed_step is None or not np.any(np.asarray(failed_step) == 1):
        return 0.0, {}
    possible, drawn, batch = 0, 0, 1024
    while drawn < MAX_POSSIBLE_DRAWS:
        x = draw(batch, rng)
        found = np.cumsum(np.isfinite(parts_fn(x).log_likelihood))
        if possible + found[-1] >= POSSIBLE_DRAWS:
            drawn += int(np.searchsorted(found, POSSIBLE_DRAWS - possible)) + 1
            mass = POSSIBLE_DRAWS / drawn
            return float(np.log(drawn / POSSIBLE_DRAWS)), {"possible_start_mass": mass,
                                                             "possible_start_draws": drawn}
        possible, drawn = possible + int(found[-1]), drawn + batch
    return 0.0, {"possible_start_mass_below": (possible + 1) / drawn}


def prior_start(simulator: ModelSimulator, density: ModelDensity, n: int,
                rng: np.random.Generator):
    """``n`` exact prior draws and their densities (:func:`check_finite_start` says when refused).

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = draw_prior(simulator, n, rng)
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="allow")
    return x, parts


class PilotDraws:
    """Exact prior draws for a pilot, from its own stream (:func:`prior_start` each).

    ``draws(n)`` goes on along the stream; ``draws.afresh(n)`` first sets it back to its start,
    so that a pilot re-run on a larger population draws what a call given that population
    (``pilot_chains``) draws.
    """

    def __init__(self, simulator: ModelSimulator, density: ModelDensity,
                 rng: np.random.Generator):
        self.simulator, self.density, self.rng = simulator, density, rng

    def __call__(self, n: int):
        """Return ``n`` more draws and their densities."""
        return prior_start(self.simulator, self.density, n, self.rng)

    def afresh(self, n: int):
        """Return the stream's first ``n`` draws and their densities."""
        return prior_start(self.simulator, self.density, n, rewind(self.rng))


def prior_start_blocks(simulator: ModelSimulator, density: ModelDensity,
                       blocks: ChainBlocks):
    """Exact prior draws, each block of chains from its own stream (refused as above).

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    blocks : ChainBlocks

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = np.concatenate([draw_prior(simulator, n, g)
                        for n, g in zip(blocks.sizes, blocks.generators, strict=True)])
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="warn")
    return x, parts


def generating_values(density: ModelDensity, truth: JointDraw) -> dict[str, np.ndarray]:
    """Constrained free variables and Deterministics at ``theta*``, from the same constrain map.

    Parameters
    ----------
    density : ModelDensity
    truth : JointDraw

    Returns
    -------
    dict
    """
    return {k: v[0] for k, v in density.constrain(truth.x[None, :]).items()}
