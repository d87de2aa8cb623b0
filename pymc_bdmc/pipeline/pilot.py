"""The pilot run: tune the kernels along the path, then freeze them into an AnnealingPlan.

A dense mass matrix is estimated from the pilot population, and with fewer particles than
coordinates that estimate is mostly shrinkage: on a 201-coordinate random walk a 64-particle
pilot measured a dense metric but left a 4000-step gap of 6.7 nats, where 256 particles closed
it to 0.35 at 1000 steps (docs/performance.md). Most models never ask for a dense metric (the
pilot keeps the diagonal where the dense one is not less stiff, kernels/mass.py), and a large
pilot would only cost them time. So the pilot runs at its default size first, and only where
it chose a dense metric for more coordinates than it has particles for, it is run again, from
fresh prior draws of its own stream, with :data:`PILOT_PARTICLES_PER_COORDINATE` particles per
movable coordinate. A user's ``pilot_chains`` is never changed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from pymc_bdmc.kernels.mass import DENSE_MAX_DIM
from pymc_bdmc.kernels.tuning import PilotResult, tune_plan
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.settings import Settings

__all__ = ["PILOT_PARTICLES_PER_COORDINATE", "enlarged_pilot_size", "tune"]

logger = logging.getLogger("pymc_bdmc")

#: Pilot particles per movable coordinate where the pilot measures a dense metric.
PILOT_PARTICLES_PER_COORDINATE = 1.25


def enlarged_pilot_size(pilot: PilotResult, n_particles: int, n_movable: int) -> int | None:
    """Population size to re-run the pilot with, or None where its own size will do.

    Parameters
    ----------
    pilot : PilotResult
    n_particles : int
        The pilot's population size.
    n_movable : int
        Coordinates the HMC kernels move.

    Returns
    -------
    int or None
        A multiple of 8 of at least ``PILOT_PARTICLES_PER_COORDINATE * n_movable`` when the
        pilot used a dense metric at some temperature and had fewer particles than that.
    """
    if not any(f is not None for f in pilot.mass_factor) or n_movable > DENSE_MAX_DIM:
        return None
    wanted = 8 * math.ceil(PILOT_PARTICLES_PER_COORDINATE * n_movable / 8)
    return wanted if wanted > n_particles else None


def tune(progress, s: Settings, rng, x_pilot, parts_pilot, parts_fn, schedule,
         discrete=None, pinned=None, draw_pilot: Callable | None = None):
    """Run the pilot (with its progress row) and freeze the plan on ``schedule``.

    Parameters
    ----------
    progress : pymc progress bar
    s : Settings
    rng : numpy.random.Generator
        The pilot's own stream.
    x_pilot, parts_pilot : numpy.ndarray, DensityParts
        Exact prior draws and their densities.
    parts_fn : callable
        Batched densities.
    schedule : "adaptive" or numpy.ndarray
    discrete : callable, optional
        Gibbs sweep of the discrete coordinates.
    pinned : numpy.ndarray, optional
        Coordinates the HMC kernels must not move.
    draw_pilot : callable, optional
        ``n -> (x, parts)``: ``n`` more exact prior draws from the pilot's own stream. Given
        (and ``pilot_chains`` not fixed by the user), the pilot may be re-run on a larger
        population (see the module docstring).

    Returns
    -------
    tuple
        ``(AnnealingPlan, PilotResult)``.
    """

    def run(x, parts, report):
        return tune_plan(
            rng, x, parts, parts_fn, schedule=schedule, n_steps=s.n_steps,
            n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
            jitter=s.step_size_jitter, transitions_per_step=s.transitions_per_step,
            on_step=report, discrete=discrete, pinned=pinned,
        )

    with pilot_phase(progress) as report:
        plan, pilot = run(x_pilot, parts_pilot, report)
        n_movable = x_pilot.shape[1] - (0 if pinned is None else len(np.unique(pinned)))
        wanted = enlarged_pilot_size(pilot, len(x_pilot), n_movable)
        if wanted is not None and draw_pilot is not None and not s.pilot_chains_given:
            logger.info("The pilot measured a dense metric on %d coordinates with %d particles; "
                        "running it again with %d.", n_movable, len(x_pilot), wanted)
            x_pilot, parts_pilot = draw_pilot(wanted)
            plan, pilot = run(x_pilot, parts_pilot, report)
    logger.info("Pilot: %d particles, %d temperatures, %d resamplings, pilot log Z %.3f; plan "
                "frozen.", len(x_pilot), pilot.n_steps, pilot.n_resampled, pilot.log_z)
    return plan, pilot
