"""The pilot run: tune the kernels along the path, then freeze them into an AnnealingPlan.

A dense mass matrix is estimated from the pilot population, and with fewer particles than
coordinates that estimate is mostly shrinkage: on a 201-coordinate random walk a 64-particle
pilot measured a dense metric but left a 4000-step gap of 6.7 nats, where 256 particles closed
it to 0.35 at 1000 steps (docs/performance.md). Most models never ask for a dense metric (the
pilot keeps the diagonal where the dense one is not less stiff, kernels/mass.py), and a large
pilot would only cost them time. So the pilot runs at its default size first, and only where
it chose a dense metric for more coordinates than it has particles for, it is run again, from
fresh prior draws of its own stream, with :data:`PILOT_PARTICLES_PER_COORDINATE` particles per
movable coordinate. A user's ``pilot_chains`` is never changed. Above
:data:`~pymc_bdmc.kernels.mass.DENSE_MAX_DIM` coordinates the pilot is not enlarged: its dense
metrics, and the fitted base's correlation (:func:`fit_base`), come from the model's curvature
at a few of its particles (:mod:`pymc_bdmc.kernels.mass`).

Where the path may start elsewhere than the prior (``base="auto"``, continuous models, adaptive
schedules), the pilot then fits a Gaussian to its final population
(:mod:`pymc_bdmc.kernels.base_distribution`), runs a second pilot from that base's exact draws
along ``q0^(1 - beta) (p(x) p(y|x))^beta``. Each pilot estimates ``log p(y)`` by SMC, and
a path its particles cannot follow loses mass they never reach, so its estimate falls short;
the thermodynamic length measured on those same particles cannot see that mass, and looks
*short*. Measured: a Gaussian fitted across a posterior's symmetric modes (the BDMC paper's
clustering and low-rank models) gave paths half as long as the prior's, but pilots 15-18 nats
short, and measured runs 80 nats apart; on a 201-step random walk the prior's funnel gave the
shorter-looking path, but a pilot 5-9 nats short. So the estimates decide first (the margin
was 2 nats while the Gaussian was fitted once to an unequilibrated population, which could be
a poor start; with the fits below, 0.5 nats: on the 60-step random walk the fitted paths'
pilots were 0.55-1.4 nats above the prior's, and taking them changed the 1000-step AIS
errors on the real data on seeds 1, 3 and 4 from -0.23, -0.50 and -0.28 to +0.09, +0.04 and
-0.09):

* the fitted path is refused if its pilot's estimate is more than :data:`BASE_LOG_Z_TOLERANCE`
  below the prior pilot's, and taken if it is more than :data:`BASE_LOG_Z_GAIN` above; both
  margins widen to twice the two estimates' combined noise
  (:attr:`~pymc_bdmc.kernels.tuning.PilotResult.log_z_sd`) where that is larger: on the
  demo's regression the prior's pilot overestimated by 0.49 nats (sd about 0.3), and refused
  a fitted path 15 times shorter whose two fits were within 0.03 of the exact value;
* in between, it is taken where its thermodynamic length is at most :data:`BASE_PATH_GAIN`
  times the prior path's (for a fixed number of steps the variance of the log weights grows
  as its square).

A Gaussian is only as good as the population it is fitted to, and a pilot's final population can
be far from the posterior: on a 201-step random walk the prior path's pilot came out 43 nats
short of the exact ``log p(y)``, and a Gaussian fitted to it gave a pilot still 42 short and a
1000-step gap of 7.3 nats. Two things fix that. Before a Gaussian is fitted to a pilot's final
population, that population makes :data:`BASE_FIT_MOVES` more transitions at ``beta = 1``
(:func:`equilibrate`; they tune nothing and change no estimate). Under the ``n_steps="auto"``
search, whose results depend on timing anyway, each equilibration stops once it has taken
:data:`EQUILIBRATION_SHARE` of ``max_time``: on the 80-input latent GP the first took 14.2 s of
a 45.5 s pilot. Fewer transitions for every model (the same gradients at longer trajectories)
cost the 450-group centred hierarchy its certificate: a gap of 414 nats where it had 0.01.
And while a fitted path's pilot gains more than :data:`BASE_REFIT_GAIN` nats on the pilot it
was fitted from, a new Gaussian is fitted to its final population, up to
:data:`MAX_BASE_FITS` fits; the fit with the highest
estimate is the fitted path the rules above compare with the prior's. On that random walk the
three fits' pilots reached -180.9, -169.9 and -169.8 against the exact -169.5, and the gap was
-0.17 nats at 1000 steps (40 s in all). On near-Gaussian models the first fit gains nothing and
no second is made. A first fit whose pilot comes out more than :data:`BASE_LOG_Z_TOLERANCE` below
the pilot it was fitted from gets one more try from its own final population, which the fitted
path brought nearer the posterior: on a 500-step walk (seed 0) the first fit lost 3.6 nats to
the prior's pilot, the second gained 10.5 on the first, and the run certified (AIS error -0.43
at 1000 steps) where the prior's path, kept on the first fit alone, was 83 nats short. On a
1000-step walk the fits kept gaining (41, 183, 119, 59 and 29 nats) until the sixth lost: with
at most 3 fits the last pilot was 99 nats short of the exact value and ``sample_ais`` 28.7
nats short at 1000 steps, with at most 8 fits 11 and 1.8. The paper's models, whose first two
fits lose, and the random walks up to 500 steps make the same fits as with at most 3.

Every pilot sees only its own draws and ``y``, never the measured chains or ``theta*``, so
the choice leaves the bounds valid.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.hmc import hmc_step
from pymc_bdmc.kernels.mass import CURVATURE_MAX_DIM, DENSE_MAX_DIM, curvature_correlation
from pymc_bdmc.kernels.scale_moves import ScaleMoves
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.tuning import (
    PilotResult,
    freeze_plan,
    tune_plan,
    weighted_moments,
)
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.schedules import ADAPTIVE

__all__ = ["BASE_FIT_MOVES", "BASE_LOG_Z_GAIN", "BASE_LOG_Z_TOLERANCE",
           "BASE_PATH_GAIN", "BASE_REFIT_GAIN", "EQUILIBRATION_SHARE", "MAX_BASE_FITS",
           "PILOT_PARTICLES_PER_COORDINATE", "choose_path", "enlarged_pilot_size", "equilibrate",
           "fit_base", "prefer_fitted_base", "refreeze", "tune"]

logger = logging.getLogger("pymc_bdmc")

#: Most Gaussians fitted in turn, each to the previous fitted path's final population (a
#: safety cap: the fits stop as soon as one gains too little, see BASE_REFIT_GAIN).
MAX_BASE_FITS = 8
#: Another Gaussian is fitted while the last one's pilot estimate gained more than this (nats).
BASE_REFIT_GAIN = 1.0
#: Transitions of a pilot's final population at ``beta = 1`` before a Gaussian is fitted to it
#: (each after the scale moves) ...
BASE_FIT_MOVES = 60
#: ... or as many as fit in this share of ``max_time`` (the ``n_steps="auto"`` search only).
EQUILIBRATION_SHARE = 0.05

#: Pilot particles per movable coordinate where the pilot measures a dense metric.
PILOT_PARTICLES_PER_COORDINATE = 1.25
#: A path from a fitted base is refused if its pilot's estimate of log p(y) is more than this
#: many nats below the prior pilot's ...
BASE_LOG_Z_TOLERANCE = 0.5
#: ... taken if it is more than this many nats above ...
BASE_LOG_Z_GAIN = 0.5
#: ... and otherwise taken if its thermodynamic length is at most this fraction of the prior's.
BASE_PATH_GAIN = 0.75


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
         discrete=None, pinned=None, draw_pilot: Callable | None = None,
         fit_base: bool = False, moves: ScaleMoves | None = None):
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
    fit_base : bool, default False
        Also pilot the path from a Gaussian fitted to the pilot's final population, and keep
        it where :func:`prefer_fitted_base` says so. Only for continuous models.
    moves : ScaleMoves, optional
        The model's scale moves, for the pilots, the equilibration before each fit and the
        plan (:mod:`pymc_bdmc.kernels.scale_moves`).

    Returns
    -------
    tuple
        ``(AnnealingPlan, PilotResult)``.
    """

    def run(x, parts, report, path_parts=parts_fn):
        return tune_plan(
            rng, x, parts, path_parts, schedule=schedule, n_steps=s.n_steps,
            n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
            jitter=s.step_size_jitter, transitions_per_step=s.transitions_per_step,
            on_step=report, discrete=discrete, pinned=pinned, moves=moves,
        )

    # One BLAS thread, as in the measured runs (parallel/annealing.py says why).
    with pilot_phase(progress) as report, threadpool_limits(limits=1, user_api="blas"):
        plan, pilot = run(x_pilot, parts_pilot, report)
        n_movable = x_pilot.shape[1] - (0 if pinned is None else len(np.unique(pinned)))
        wanted = enlarged_pilot_size(pilot, len(x_pilot), n_movable)
        if wanted is not None and draw_pilot is not None and not s.pilot_chains_given:
            logger.info("The pilot measured a dense metric on %d coordinates with %d particles; "
                        "running it again with %d.", n_movable, len(x_pilot), wanted)
            x_pilot, parts_pilot = draw_pilot(wanted)
            plan, pilot = run(x_pilot, parts_pilot, report)
        if fit_base and pilot.final_x is not None:
            plan, pilot = choose_path(plan, pilot, lambda x, p, f: run(x, p, report, f),
                                      rng, parts_fn, moves, s.equilibration_seconds)
    logger.info("Pilot: %d particles, %d temperatures, %d resamplings, pilot log Z %.3f; plan "
                "frozen.", len(x_pilot), pilot.n_steps, pilot.n_resampled, pilot.log_z)
    factors = [f for f in pilot.mass_factor if f is not None]
    if factors and factors[0].ndim == 1:
        logger.info("Metrics diagonal in the fitted base's principal coordinates at %d of %d "
                    "pilot temperatures.", len(factors), len(pilot.mass_factor))
    elif factors:
        logger.info("Dense mass matrices at %d of %d pilot temperatures, their correlations from "
                    "the %s.", len(factors), len(pilot.mass_factor),
                    "model's curvature" if n_movable > DENSE_MAX_DIM else "pilot population")
    return plan, pilot


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
                        s.step_size_jitter, s.transitions_per_step)
    return dataclasses.replace(fresh, base=plan.base, scale_moves=plan.scale_moves)


def prefer_fitted_base(prior: PilotResult, fitted: PilotResult) -> bool:
    """Whether the path from a fitted base beats the prior's (see the module docstring).

    Parameters
    ----------
    prior, fitted : PilotResult
        The pilots of the path from the prior and of the path from the fitted base.

    Returns
    -------
    bool
    """
    # Two pilots' estimates closer than twice their noise do not rank the paths.
    noise = 2.0 * float(np.hypot(prior.log_z_sd, fitted.log_z_sd))
    if (not np.isfinite(fitted.log_z)
            or fitted.log_z < prior.log_z - max(BASE_LOG_Z_TOLERANCE, noise)):
        return False
    if fitted.log_z > prior.log_z + max(BASE_LOG_Z_GAIN, noise) or not np.isfinite(prior.log_z):
        return True
    return bool(fitted.thermodynamic_length <= BASE_PATH_GAIN * prior.thermodynamic_length)


def equilibrate(rng: np.random.Generator, x: np.ndarray, plan: AnnealingPlan,
                path_parts: Callable, n_moves: int,
                moves: ScaleMoves | None = None, seconds: float | None = None) -> np.ndarray:
    """``n_moves`` transitions of a pilot's final population by its plan's kernel at ``beta = 1``.

    The kernel leaves the posterior invariant, so importance weights stay valid; the moves only
    bring a population that lagged behind the posterior closer to it before a Gaussian is
    fitted to it (module docstring).

    Parameters
    ----------
    rng : numpy.random.Generator
        The pilot's stream.
    x : numpy.ndarray, shape (n, n_dim)
        The population (a pilot's ``final_x``).
    plan : AnnealingPlan
        The plan frozen from that pilot (its kernel at the last step targets ``beta = 1``).
    path_parts : callable
        The batched densities of that plan's path.
    n_moves : int
    moves : ScaleMoves, optional
        The model's scale moves, made before each transition.
    seconds : float, optional
        Stop after the first transition that ends past this wall time (at least one is made).

    Returns
    -------
    numpy.ndarray
        The moved population.
    """
    if n_moves <= 0 or plan.n_steps < 1:
        return x
    started = time.perf_counter()
    parts = path_parts(x)
    params = plan.kernel(plan.n_steps)
    sd = np.sqrt(plan.inv_mass[plan.n_steps])
    for i in range(n_moves):
        if moves is not None:
            x, parts, _ = moves.sweep(rng, x, parts, 1.0, sd, path_parts)
        x, parts, _ = hmc_step(rng, x, parts, 1.0, params, path_parts)
        if seconds is not None and time.perf_counter() - started > seconds:
            logger.debug("Equilibration stopped after %d of %d transitions (%.1f s).", i + 1,
                         n_moves, time.perf_counter() - started)
            break
    return x


def fit_base(values: np.ndarray, weights: np.ndarray, parts_fn: Callable) -> GaussianBase:
    """Fit a Gaussian base to a pilot's final population at ``beta = 1``.

    Up to :data:`~pymc_bdmc.kernels.mass.DENSE_MAX_DIM` coordinates the population's own
    shrunk correlation; above, where a pilot population is smaller than the dimension, the
    correlation of the posterior's curvature at the population
    (:func:`~pymc_bdmc.kernels.mass.curvature_correlation`), which for a Gaussian posterior is
    exact from any population size.

    Parameters
    ----------
    values : numpy.ndarray, shape (n, n_dim)
    weights : numpy.ndarray, shape (n,)
        Normalised importance weights.
    parts_fn : callable
        The model's batched densities.

    Returns
    -------
    GaussianBase

    Raises
    ------
    numpy.linalg.LinAlgError
        Where no positive-definite correlation is found.
    """
    n_dim = values.shape[1]
    if DENSE_MAX_DIM < n_dim <= CURVATURE_MAX_DIM:
        variance = weighted_moments(values, weights)[1]
        correlation = curvature_correlation(values, variance, variance > 0,
                                            lambda x: parts_fn(x).tempered_grad(1.0))
        if correlation is not None and correlation.shape[0] == n_dim:
            return GaussianBase.from_correlation(values, weights, correlation)
    return GaussianBase.fit(values, weights)


def choose_path(plan, pilot, run, rng, parts_fn, moves=None, equilibration_seconds=None):
    """Pilot paths from Gaussians fitted in turn (module docstring); keep the best or the prior.

    Parameters
    ----------
    plan, pilot : AnnealingPlan, PilotResult
        The prior path's plan and pilot (the first Gaussian is fitted to its final population).
    run : callable
        ``(x, parts, path_parts) -> (plan, pilot)``: a pilot from the draws ``x`` of a path.
    rng : numpy.random.Generator
        The pilot's stream (draws from the fitted bases).
    parts_fn : callable
        The model's batched densities.
    moves : ScaleMoves, optional
        The model's scale moves, for the equilibration before each fit.
    equilibration_seconds : float, optional
        Wall time each equilibration may take (:func:`equilibrate`).

    Returns
    -------
    tuple
        ``(plan, pilot)`` of the path kept, the plan carrying its base if it is a fitted one;
        ``pilot.path_choice`` records both paths' lengths and estimates.
    """
    fitted = None
    source, source_plan, source_parts = pilot, plan, parts_fn
    for fit in range(MAX_BASE_FITS):
        population = equilibrate(rng, source.final_x, source_plan, source_parts, BASE_FIT_MOVES,
                                 moves, equilibration_seconds)
        # A population with impossible states or undefined weights has no Gaussian to give.
        if not (np.all(np.isfinite(population)) and np.all(np.isfinite(source.final_weights))):
            break
        try:
            base = fit_base(population, source.final_weights, parts_fn)
        except np.linalg.LinAlgError:
            break
        based_parts = base.parts_fn(parts_fn)
        x = base.sample(rng, pilot.n_particles)
        based_plan, based_pilot = run(x, based_parts(x), based_parts)
        gained = based_pilot.log_z - source.log_z
        logger.debug("Pilot from a fitted Gaussian: log Z %.2f (sd %.2f; %+.2f).",
                     based_pilot.log_z, based_pilot.log_z_sd, gained)
        if not np.isfinite(based_pilot.log_z):  # a failed pilot says nothing for its base
            break
        if fitted is None or based_pilot.log_z > fitted[2].log_z:
            fitted = (base, based_plan, based_pilot)
        # A first fit that loses to the pilot it came from was fitted to a poor population: it
        # gets one more try from its own path's population (module docstring).
        lost_first = fit == 0 and gained < -BASE_LOG_Z_TOLERANCE
        if not (gained > BASE_REFIT_GAIN or lost_first):
            break
        source, source_plan, source_parts = based_pilot, based_plan, based_parts
    if fitted is None:
        return plan, pilot
    base, based_plan, based_pilot = fitted
    base_length = based_pilot.thermodynamic_length
    choice = {"thermodynamic_length_prior": pilot.thermodynamic_length,
              "thermodynamic_length_fitted": base_length,
              "pilot_log_z_prior": pilot.log_z, "pilot_log_z_fitted": based_pilot.log_z}
    keep_base = prefer_fitted_base(pilot, based_pilot)
    logger.info("Pilot paths: from the prior length %.2f and log Z %.2f, from a fitted Gaussian "
                "length %.2f and log Z %.2f; annealing from the %s.", pilot.thermodynamic_length,
                pilot.log_z, base_length, based_pilot.log_z,
                "fitted Gaussian" if keep_base else "prior")
    if keep_base:
        return (dataclasses.replace(based_plan, base=base),
                dataclasses.replace(based_pilot, path_choice=choice))
    return plan, dataclasses.replace(pilot, path_choice=choice)
