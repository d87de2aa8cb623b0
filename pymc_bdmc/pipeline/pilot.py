"""The pilot run: tune the kernels along the path, then freeze them into an AnnealingPlan."""

from __future__ import annotations

import logging

from pymc_bdmc.kernels.tuning import tune_plan
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.settings import Settings

__all__ = ["tune"]

logger = logging.getLogger("pymc_bdmc")


def tune(progress, s: Settings, rng, x_pilot, parts_pilot, parts_fn, schedule,
         discrete=None, pinned=None):
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

    Returns
    -------
    tuple
        ``(AnnealingPlan, PilotResult)``.
    """
    with pilot_phase(progress) as report:
        plan, pilot = tune_plan(
            rng, x_pilot, parts_pilot, parts_fn, schedule=schedule, n_steps=s.n_steps,
            n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
            jitter=s.step_size_jitter, transitions_per_step=s.transitions_per_step,
            on_step=report, discrete=discrete, pinned=pinned,
        )
    logger.info("Pilot: %d temperatures, %d resamplings, pilot log Z %.3f; plan frozen.",
                pilot.n_steps, pilot.n_resampled, pilot.log_z)
    return plan, pilot
