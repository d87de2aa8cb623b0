"""The pilot run: tune the kernels along the path, then freeze them into an AnnealingPlan.

Every run's kernels come from a pilot on its own population of exact prior draws, never from
the measured chains or ``theta*``, so the bounds stay valid whatever the pilot chooses
(docs/explanation/automatic-choices.md explains each choice and what it was measured
against):

* **Population size.** A dense metric estimated from fewer particles than coordinates is mostly
  shrinkage, so a pilot that chooses one stops there and runs again with
  :attr:`~pymc_bdmc.config.Tuning.particles_per_coordinate` particles per movable coordinate,
  its streams started afresh: the pilot of a call given that ``pilot_chains`` (never where the
  user fixed ``pilot_chains``, and not above :attr:`~pymc_bdmc.config.Tuning.dense_max_dim`
  coordinates, where metrics come from the model's curvature instead). From
  :attr:`~pymc_bdmc.config.Tuning.curvature_min_dim` coordinates, where that larger pilot would
  be needed, the prior path's pilot first takes its correlations from the curvature too, and
  keeps them where they agree from particle to particle (a near-Gaussian posterior;
  :func:`_with_curvature`).
* **Where the path starts** (``base="auto"``, continuous models, adaptive schedules). The pilot
  of the prior's path is followed by pilots of paths from Gaussians fitted to its population
  (:mod:`pymc_bdmc.pipeline.path_choice` fits, refits and ranks them), or, where the data are
  many and the posterior has a mode, starts from a Laplace fit (:func:`tune`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.kernels.base_distribution import laplace_base
from pymc_bdmc.kernels.mass import curvature_disagreement
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import ScaleMoves
from pymc_bdmc.kernels.tuning import PilotResult, freeze_plan, tune_plan, weighted_moments
from pymc_bdmc.pipeline.draws import PilotDraws
from pymc_bdmc.pipeline.path_choice import choose_path, continue_refits
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.seeding import rewind
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.pipeline.timing import timed
from pymc_bdmc.schedules import ADAPTIVE

__all__ = ["dense_pilot_size", "enlarged_pilot_size", "refreeze", "resume_refits", "tune"]

logger = logging.getLogger("pymc_bdmc")

def dense_pilot_size(n_particles: int, n_movable: int,
                     tuning: Tuning = DEFAULT_TUNING) -> int | None:
    """Return the population a pilot that chooses a dense metric is re-run with, or None.

    Parameters
    ----------
    n_particles : int
        The pilot's population size.
    n_movable : int
        Coordinates the HMC kernels move.
    tuning : Tuning, optional

    Returns
    -------
    int or None
        A multiple of 8 of at least ``tuning.particles_per_coordinate * n_movable``, where that
        is more than ``n_particles`` and dense metrics come from the population (at most
        ``tuning.dense_max_dim`` coordinates); else None.
    """
    if n_movable > tuning.dense_max_dim:
        return None
    wanted = 8 * math.ceil(tuning.particles_per_coordinate * n_movable / 8)
    return wanted if wanted > n_particles else None


def enlarged_pilot_size(pilot: PilotResult, n_particles: int, n_movable: int,
                        tuning: Tuning = DEFAULT_TUNING) -> int | None:
    """Return the population size to re-run ``pilot`` with, or None where its own will do.

    :func:`dense_pilot_size` (same other arguments) where the pilot used a dense metric at some
    temperature; None where it used none.
    """
    if not any(f is not None for f in pilot.mass_factor):
        return None
    return dense_pilot_size(n_particles, n_movable, tuning)


def tune(progress, s: Settings, rng, x_pilot, parts_pilot, parts_fn, schedule,
         discrete=None, pinned=None, draw_pilot: PilotDraws | None = None,
         fit_base: bool = False, moves: ScaleMoves | None = None, keep_fitted: bool = False,
         laplace_first: bool = False, prior_log_mass: float = 0.0):
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
    draw_pilot : PilotDraws, optional
        More exact prior draws from the pilot's own stream. Given (and ``pilot_chains`` not
        fixed by the user), the pilot may be re-run on a larger population (see the module
        docstring); its draws and the pilot's stream ``rng`` then start over, so that the
        re-run is the pilot of a call given that population as ``pilot_chains``.
    fit_base : bool, default False
        Also pilot the path from a Gaussian fitted to the pilot's final population, and keep
        it where :func:`prefer_second_path` says so. Only for continuous models.
    moves : ScaleMoves, optional
        The model's scale moves, for the pilots, the equilibration before each fit and the
        plan (:mod:`pymc_bdmc.kernels.scale_moves`).
    keep_fitted : bool, default False
        With ``fit_base``: keep the best fitted path whenever one was piloted, without
        weighing it against the prior's (``base="fitted"``).
    laplace_first : bool, default False
        With ``fit_base``: pilot the path from a Laplace fit first, and keep it without the
        prior's where it is at most ``tuning.laplace_path_length`` long.
    prior_log_mass : float, default 0.0
        Where ``x_pilot`` are draws restricted to where the data are possible
        (:func:`~pymc_bdmc.pipeline.draws.possible_prior_start`), the log of that prior mass:
        added to the prior path's estimates of ``log p(y)``, which the path choice compares.

    Returns
    -------
    tuple
        ``(AnnealingPlan, PilotResult)``.
    """
    def runner(settings: Settings):
        return _pilot_runner(settings, rng, schedule, discrete, pinned, moves, parts_fn)

    run = runner(s)
    # One BLAS thread, as in the measured runs (parallel/annealing.py says why).
    with pilot_phase(progress) as report, threadpool_limits(limits=1, user_api="blas"):
        tuned = None
        if fit_base and laplace_first:
            # From a Laplace fit where the posterior has a mode and its path is short.
            tuned = _from_laplace(x_pilot, parts_fn, rng,
                                  lambda x, p, f, **kw: run(x, p, report, f, **kw), s)
        if tuned is not None:
            plan, pilot = tuned
            n_movable = x_pilot.shape[1] - (0 if pinned is None else len(np.unique(pinned)))
        else:
            plan, pilot, n_movable = _from_the_prior(
                runner, report, (x_pilot, parts_pilot, prior_log_mass), draw_pilot, pinned,
                rng, parts_fn, moves, s, fit_base, keep_fitted)
    plan = dataclasses.replace(
        plan, transitions_per_step=s.transitions_on(pilot.thermodynamic_length))
    logger.debug("Pilot: %d particles, %d temperatures, %d resamplings, pilot log Z %.3f; plan "
                "frozen, %d HMC transitions per temperature.", pilot.n_particles, pilot.n_steps,
                pilot.n_resampled, pilot.log_z, plan.transitions_per_step)
    factors = [f for f in pilot.mass_factor if f is not None]
    if factors and factors[0].ndim == 1:
        logger.debug("Metrics diagonal in the fitted base's principal coordinates at %d of %d "
                    "pilot temperatures.", len(factors), len(pilot.mass_factor))
    elif factors:
        logger.debug("Dense mass matrices at %d of %d pilot temperatures, their correlations from "
                    "the %s.", len(factors), len(pilot.mass_factor),
                    "model's curvature" if n_movable > s.tuning.dense_max_dim
                    else "pilot population")
    return plan, pilot


def _pilot_runner(s: Settings, rng, schedule, discrete=None, pinned=None, moves=None,
                  parts_fn=None):
    """``(x, parts, report, path_parts, until_dense, max_length) -> (plan, pilot)``: one pilot.

    ``path_parts`` defaults to ``parts_fn`` (the model's own path).
    """

    def run(x, parts, report, path_parts=None, until_dense=False, max_length=None):
        return tune_plan(
            rng, x, parts, parts_fn if path_parts is None else path_parts, schedule=schedule,
            n_steps=s.n_steps, n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
            jitter=s.step_size_jitter, transitions_per_step=s.transitions_per_step,
            on_step=report, discrete=discrete, pinned=pinned, moves=moves, tuning=s.tuning,
            until_dense=until_dense, max_length=max_length,
        )

    return run


def _from_the_prior(runner, report, start, draw_pilot, pinned, rng, parts_fn,
                    moves, s: Settings, fit_base: bool, keep_fitted: bool):
    """The prior path's pilot (re-run larger where it asks), then the fitted paths' if asked.

    ``runner(settings)`` gives the pilot runs with those settings; ``start`` is ``(x, parts,
    log_mass)`` (:class:`~pymc_bdmc.pipeline.draws.PilotDraws`). Returns ``(plan, pilot,
    n_movable)``.
    """
    x_pilot, parts_pilot, log_mass = start

    def shifted(tuned, log_mass):  # the prior path's log Z from draws where y is possible
        plan, pilot = tuned
        return plan, (pilot if log_mass == 0.0
                      else dataclasses.replace(pilot, log_z=pilot.log_z + log_mass))

    n_movable = x_pilot.shape[1] - (0 if pinned is None else len(np.unique(pinned)))
    # Where a dense metric would have the pilot re-run larger, it stops at the first one.
    may_enlarge = (draw_pilot is not None and not s.pilot_chains_given
                   and dense_pilot_size(len(x_pilot), n_movable, s.tuning) is not None)
    kept = None
    if may_enlarge and n_movable >= s.tuning.curvature_min_dim:
        kept = _with_curvature(runner, report, x_pilot, parts_pilot, parts_fn, s)
    if kept is not None:
        s, (plan, pilot) = kept[0], shifted(kept[1], log_mass)
        may_enlarge = False
    run = runner(s)
    if kept is None:
        with timed("pilot_prior_path"):
            plan, pilot = shifted(run(x_pilot, parts_pilot, report, until_dense=may_enlarge),
                                  log_mass)
    wanted = enlarged_pilot_size(pilot, len(x_pilot), n_movable, s.tuning)
    if wanted is not None and may_enlarge:
        logger.debug("The pilot chose a dense metric on %d coordinates with %d particles (at "
                     "beta %.2g); running it again with %d.", n_movable, len(x_pilot),
                     pilot.betas[-1], wanted)
        # Both pilot streams from their start: the pilot a call given `pilot_chains` runs.
        rewind(rng)
        x_pilot, parts_pilot, log_mass = draw_pilot.afresh(wanted)
        with timed("pilot_prior_path"):
            plan, pilot = shifted(run(x_pilot, parts_pilot, report), log_mass)
    if fit_base and pilot.final_x is not None:
        plan, pilot = choose_path(plan, pilot, lambda x, p, f, **kw: run(x, p, report, f, **kw),
                                  rng, parts_fn, moves, s.tuning,
                                  keep_fitted, draw_prior=draw_pilot,
                                  length_limit=s.refit_length_limit)
    if kept is not None:  # later refits (resume_refits) take their correlations as these did
        pilot = dataclasses.replace(pilot, path_choice={**pilot.path_choice,
                                                        "curvature_correlations": 1.0})
    return plan, pilot, n_movable


def _curvature_settings(s: Settings) -> Settings:
    """Return ``s`` with dense metrics' correlations from the curvature from fewer coordinates.

    From ``tuning.curvature_min_dim`` movable coordinates up, instead of above
    ``tuning.dense_max_dim``.
    """
    return dataclasses.replace(s, tuning=dataclasses.replace(
        s.tuning, dense_max_dim=max(s.tuning.curvature_min_dim - 1, 0)))


def _with_curvature(runner, report, x_pilot, parts_pilot, parts_fn, s: Settings):
    """Run the prior path's pilot with the curvature's correlations; keep it where they agree.

    Returns ``(settings, (plan, pilot))`` to go on with, or None where the curvature differs
    from particle to particle (the population's correlations and a larger pilot then).
    """
    trial = _curvature_settings(s)
    with timed("pilot_prior_path"):
        plan, pilot = runner(trial)(x_pilot, parts_pilot, report)
    if pilot.final_x is None or not np.isfinite(pilot.log_z):
        return None
    variance = weighted_moments(pilot.final_x, pilot.final_weights)[1]
    disagreement = curvature_disagreement(pilot.final_x, pilot.final_weights, variance,
                                          variance > 0,
                                          lambda x: parts_fn(x).tempered_grad(1.0))
    agree = disagreement <= s.tuning.curvature_agreement
    logger.debug("The curvature's correlations differ by %.2f of their size from particle to "
                 "particle: %s.", disagreement,
                 "kept" if agree else "the population's instead, from a larger pilot")
    return (trial, (plan, pilot)) if agree else None


def _from_laplace(x_pilot, parts_fn, rng, run, s: Settings):
    """The path from a Laplace fit, without the prior's path (nor refits: it is short).

    Skips the prior path's pilot, the longest stage where the data are many (its likelihood
    makes the path from the prior long). None where the posterior has no mode to fit
    (:func:`~pymc_bdmc.kernels.base_distribution.laplace_base`), where the Laplace path's pilot
    fails, or where its thermodynamic length exceeds ``tuning.laplace_path_length``: then the
    prior's path starts as usual. (A mode's Gaussian can be far from the posterior: in the
    non-centred form of a 500-group hierarchy whose group scale sits near zero, the Laplace
    path was 34 long and its pilot 350 nats short.)
    """
    with timed("pilot_laplace"):
        start = laplace_base(x_pilot, parts_fn, s.tuning.curvature_max_dim)
    if start is None:
        logger.debug("No Laplace fit (no mode, or not a negative definite Hessian there).")
        return None
    based_parts = start.parts_fn(parts_fn)
    x = start.sample(rng, len(x_pilot))
    with timed("pilot_fitted_paths"):
        # A longer path is not kept: its pilot stops as soon as it is known to be one.
        plan, pilot = run(x, based_parts(x), based_parts,
                          max_length=s.tuning.laplace_path_length)
    if not pilot.complete:
        logger.debug("The Laplace fit's path is over %.2f long (%.2f at beta %.2g): piloting "
                     "the prior's path too.", s.tuning.laplace_path_length,
                     pilot.thermodynamic_length, pilot.betas[-1])
        return None
    logger.debug("Pilot from the Laplace fit: log Z %.2f (sd %.2f).", pilot.log_z,
                 pilot.log_z_sd)
    if not np.isfinite(pilot.log_z) or pilot.final_x is None:
        return None
    choice = {"thermodynamic_length_prior": float("nan"),
              "thermodynamic_length_fitted": pilot.thermodynamic_length,
              "pilot_log_z_prior": float("nan"), "pilot_log_z_fitted": pilot.log_z,
              "base_from_laplace": 1.0}
    return (dataclasses.replace(plan, base=start),
            dataclasses.replace(pilot, path_choice=choice))


def refreeze(plan: AnnealingPlan, pilot: PilotResult, s: Settings) -> AnnealingPlan:
    """The plan ``pilot`` froze, frozen again onto ``s.n_steps`` temperatures (same path).

    Parameters
    ----------
    plan : AnnealingPlan
        A plan frozen from ``pilot`` (its base, if any, is kept).
    pilot : PilotResult
        The pilot of ``plan``'s path.
    s : Settings
        Settings with the new ``n_steps`` (and ``betas`` for a fixed schedule).

    Returns
    -------
    AnnealingPlan
    """
    fresh = freeze_plan(pilot, ADAPTIVE if s.adaptive else s.betas, s.n_steps,
                        s.step_size_jitter, s.transitions_on(pilot.thermodynamic_length))
    return dataclasses.replace(fresh, base=plan.base, scale_moves=plan.scale_moves)


def resume_refits(progress, s: Settings, rng, plan: AnnealingPlan, pilot: PilotResult,
                  parts_fn: Callable, moves: ScaleMoves | None = None):
    """:func:`continue_refits` of ``plan`` and ``pilot``, on the pilot's progress row.

    Its pilots run as :func:`tune`'s do with settings ``s``, on the pilot's own stream ``rng``,
    over the model's batched densities ``parts_fn`` with its scale ``moves``. Returns
    ``(plan, pilot)``.
    """
    if pilot.path_choice.get("curvature_correlations"):
        s = _curvature_settings(s)
    pilot_run = _pilot_runner(s, rng, ADAPTIVE, moves=moves)
    with pilot_phase(progress) as report, threadpool_limits(limits=1, user_api="blas"):
        return continue_refits(plan, pilot, lambda x, p, f: pilot_run(x, p, report, f), rng,
                               parts_fn, moves, s.tuning)
