"""Which path a pilot anneals along: Gaussians fitted in turn, and two pilots ranked.

A pilot (:mod:`pymc_bdmc.pipeline.pilot`) first runs the path from the prior; this module
fits a Gaussian to its final population, pilots the path from that Gaussian, and refits while
the pilot's estimate gains (docs/explanation/automatic-choices.md explains each choice and
what it was measured against):

* **Fitting a good Gaussian.** A population that lags the posterior first makes up to
  :attr:`~pymc_bdmc.config.Tuning.base_fit_moves` transitions at ``beta = 1``, until its mean
  log density stops moving (:func:`equilibrate`), and while a fitted path's pilot gains more than
  :attr:`~pymc_bdmc.config.Tuning.base_refit_gain` nats on the pilot it came from, a new
  Gaussian is fitted to its final population (:func:`choose_path`; not past a length the caller
  already knows to be too long, ``Settings.refit_length_limit``, unless it then keeps that
  path after all: :func:`continue_refits`; the first fitted path's pilot stops at that length).
  A fit that loses to the pilot it came from gets one more try where it is the first fit, or
  where that pilot's own fit had gained more than
  :attr:`~pymc_bdmc.config.Tuning.base_refit_unsettled` nats: the fits had not settled, and
  one poor population must not end them (two losses in a row do).
* **Ranking two paths.** Each pilot estimates ``log p(y)`` by SMC; a path its particles cannot
  follow falls short, while its measured thermodynamic length looks *shorter*. So the
  estimates decide first (:func:`prefer_second_path`), the lengths only between close
  estimates. A pilot tunes its metric, step size and next temperature on the particles those
  kernels then move, so its estimate is no unbiased SMC estimate: along long paths in many
  coordinates it came out nats *high* (a 200-group hierarchy: +2 to +6 nats at 64-256
  particles; 5,000 groups: +528). Where the estimates would choose the longer path, both paths
  are estimated again by SMC with the pilot's kernels frozen, from fresh draws
  (:func:`frozen_log_z`, :func:`prefer_second_checked`), and those decide.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np

from pymc_bdmc.algorithms.smc import TemperingPath, smc_forward
from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.hmc import hmc_step
from pymc_bdmc.kernels.mass import curvature_correlation
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import ScaleMoves
from pymc_bdmc.kernels.tuning import PilotResult, freeze_plan, weighted_moments
from pymc_bdmc.pipeline.timing import timed

__all__ = ["better_fit", "choose_path", "continue_refits", "equilibrate", "fit_base",
           "frozen_log_z", "much_shorter", "prefer_second_checked", "prefer_second_path",
           "rank_by_estimates", "settled"]

logger = logging.getLogger("pymc_bdmc")


def prefer_second_path(first: PilotResult, second: PilotResult,
                       tuning: Tuning = DEFAULT_TUNING) -> bool:
    """Whether the path piloted second beats the first, both ending at the same posterior.

    The paths are the prior's and a fitted base's (:func:`choose_path`), or the model's as
    written and in its other parameterisation (the lower-bound search's choice of form). The
    estimates rank the paths first (:func:`rank_by_estimates`); between close estimates, the
    second is taken where its thermodynamic length is at most ``tuning.base_path_gain`` times
    the first's (for a fixed number of steps the variance of the log weights grows as its
    square).

    Parameters
    ----------
    first, second : PilotResult
        The pilots of the two paths (e.g. from the prior, and from the fitted base).
    tuning : Tuning, optional

    Returns
    -------
    bool
    """
    ranked = rank_by_estimates(first, second, tuning)
    if ranked is not None:
        return ranked
    return much_shorter(second, first, tuning)


def much_shorter(path: PilotResult, than: PilotResult, tuning: Tuning = DEFAULT_TUNING) -> bool:
    """Whether ``path`` is at most ``tuning.base_path_gain`` times as long as ``than``."""
    return bool(path.thermodynamic_length <= tuning.base_path_gain * than.thermodynamic_length)


def rank_by_estimates(first: PilotResult, second: PilotResult,
                      tuning: Tuning = DEFAULT_TUNING) -> bool | None:
    """Whether the second path wins on its pilot's estimate, or None where they are close.

    The second is refused where its estimate is more than ``tuning.base_log_z_tolerance``
    below the first's, and taken where it is more than ``tuning.base_log_z_gain`` above; both
    margins widen to twice the two estimates' combined noise where that is larger. A failed
    pilot (a non-finite estimate) loses.
    """
    # Two pilots' estimates closer than twice their noise do not rank the paths.
    noise = 2.0 * float(np.hypot(first.log_z_sd, second.log_z_sd))
    if (not np.isfinite(second.log_z)
            or second.log_z < first.log_z - max(tuning.base_log_z_tolerance, noise)):
        return False
    if (second.log_z > first.log_z + max(tuning.base_log_z_gain, noise)
            or not np.isfinite(first.log_z)):
        return True
    return None


def frozen_log_z(rng: np.random.Generator, plan: AnnealingPlan, pilot: PilotResult,
                 parts_fn: Callable, draw_prior: Callable, moves: ScaleMoves | None = None,
                 n: int | None = None) -> float:
    """``log p(y)`` by SMC along ``pilot``'s temperatures with its kernels frozen beforehand.

    The pilot's own estimate comes from kernels (metric, step size, next temperature) tuned on
    the very particles they move, and can be biased high by nats where a long path meets many
    coordinates (module docstring). The same kernels frozen into a plan and run on fresh exact
    draws of the path's start give an estimate whose exponential is unbiased.

    Parameters
    ----------
    rng : numpy.random.Generator
    plan : AnnealingPlan
        The plan frozen from ``pilot`` (its base and scale moves are kept): the path starts at
        its base, or at the prior where it has none.
    pilot : PilotResult
    parts_fn : callable
        The model's batched densities.
    draw_prior : callable
        ``n -> (x, parts, log_mass)``: ``n`` exact prior draws (for a path from the prior),
        and where they are restricted to where the data are possible, the log of that prior
        mass (:class:`~pymc_bdmc.pipeline.draws.PilotDraws`), added to the estimate.
    moves : ScaleMoves, optional
        The model's scale moves (made where the plan makes them).
    n : int, optional
        Particles (default: the pilot's).

    Returns
    -------
    float
    """
    n = pilot.n_particles if n is None else n
    x, log_mass = plan.start(rng, n), 0.0
    if x is None:
        x, _, log_mass = draw_prior(n)
    frozen = dataclasses.replace(
        freeze_plan(pilot, pilot.betas, pilot.n_steps, plan.jitter, plan.transitions_per_step),
        base=plan.base, scale_moves=plan.scale_moves)
    path_parts = plan.path_parts(parts_fn)
    transition = frozen.transition(path_parts, moves=moves if frozen.scale_moves else None)
    run = smc_forward(rng, x, path_parts(x), TemperingPath(frozen.betas), transition)
    return float(run.log_weight[0]) + log_mass


def equilibrate(rng: np.random.Generator, x: np.ndarray, plan: AnnealingPlan,
                path_parts: Callable, n_moves: int, moves: ScaleMoves | None = None, *,
                block: int = 0, made: list | None = None) -> np.ndarray:
    """Up to ``n_moves`` transitions of a pilot's final population at ``beta = 1``.

    The kernel leaves the posterior invariant, so importance weights stay valid; the moves only
    bring a population that lagged behind the posterior closer to it before a Gaussian is
    fitted to it (module docstring). A lagging population's mean log density drifts as it
    moves; one at the posterior only fluctuates. So, with ``block``, the transitions stop once
    the mean over the last ``block`` of them differs from the mean over the ``block`` before
    by less than the population's standard error of it (:func:`settled`). Never by wall time:
    the population a Gaussian is fitted to must not depend on the machine's speed, or a result
    would not be replayed by its recorded settings.

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
    block : int, default 0
        Transitions per block of the stopping check (0: all ``n_moves``).
    made : list, optional
        The number of transitions made is appended to it (where any were to be made).

    Returns
    -------
    numpy.ndarray
        The moved population.
    """
    if n_moves <= 0 or plan.n_steps < 1:
        return x
    parts = path_parts(x)
    params = plan.kernel(plan.n_steps)
    sd = np.sqrt(plan.inv_mass[plan.n_steps])
    means = []
    for i in range(n_moves):
        if moves is not None:
            x, parts, _ = moves.sweep(rng, x, parts, 1.0, sd, path_parts)
        x, parts, _ = hmc_step(rng, x, parts, 1.0, params, path_parts)
        if block > 0:
            # Zero-weight particles (where the data are impossible) stay at -inf: left out.
            log_density = parts.tempered_logp(1.0)
            log_density = log_density[np.isfinite(log_density)]
            if log_density.size < 2:
                continue
            means.append(float(np.mean(log_density)))
            if settled(means, float(np.std(log_density)) / np.sqrt(log_density.size), block):
                logger.debug("Equilibration settled after %d of %d transitions.", i + 1,
                             n_moves)
                break
    if made is not None:
        made.append(i + 1)
    return x


def settled(means: list, standard_error: float, block: int) -> bool:
    """Whether a population's mean log density stopped moving (:func:`equilibrate`).

    ``means``: its mean after each transition so far; checked at whole blocks from the second
    on: the last block's average and the one before differ by less than ``standard_error``.
    """
    n = len(means)
    if n < 2 * block or n % block or not np.isfinite(standard_error):
        return False
    last, before = np.mean(means[-block:]), np.mean(means[-2 * block:-block])
    return bool(abs(last - before) < standard_error)


def fit_base(values: np.ndarray, weights: np.ndarray, parts_fn: Callable,
             tuning: Tuning = DEFAULT_TUNING) -> GaussianBase:
    """Fit a Gaussian base to a pilot's final population at ``beta = 1``.

    Up to ``tuning.dense_max_dim`` coordinates the population's own
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
    tuning : Tuning, optional

    Returns
    -------
    GaussianBase

    Raises
    ------
    numpy.linalg.LinAlgError
        Where no positive-definite correlation is found.
    """
    n_dim = values.shape[1]
    if tuning.dense_max_dim < n_dim <= tuning.curvature_max_dim:
        variance = weighted_moments(values, weights)[1]
        correlation = curvature_correlation(values, variance, variance > 0,
                                            lambda x: parts_fn(x).tempered_grad(1.0))
        if correlation is not None and correlation.shape[0] == n_dim:
            return GaussianBase.from_correlation(values, weights, correlation)
    return GaussianBase.fit(values, weights)


def choose_path(plan, pilot, run, rng, parts_fn, moves=None, tuning: Tuning = DEFAULT_TUNING,
                keep_fitted: bool = False, draw_prior: Callable | None = None,
                length_limit: float | None = None):
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
    tuning : Tuning, optional
        How many fits at most, and what gain makes another one.
    keep_fitted : bool, default False
        Keep the best fitted path whatever the prior path's pilot says.
    draw_prior : callable, optional
        ``n -> (x, parts)``: fresh exact prior draws. Where the pilots' estimates would choose
        the longer path, both paths are then estimated again with frozen kernels
        (:func:`frozen_log_z`), and those estimates rank them instead.
    length_limit : float, optional
        No refit after a fitted path longer than this (``Settings.refit_length_limit``), and
        the first fitted path's pilot stops once its path is.

    Returns
    -------
    tuple
        ``(plan, pilot)`` of the path kept, the plan carrying its base if it is a fitted one;
        ``pilot.path_choice`` records both paths' lengths and estimates, and where
        ``length_limit`` ended the refits, the fitted paths piloted until then (``refits_cut``,
        and the last one's gain, ``refits_cut_gain``: the refits can go on from the fitted path
        kept, :func:`continue_refits`). Where it stopped the first fitted path's pilot, the
        prior path's plan and pilot, with ``fitted_cut`` in ``path_choice`` (a caller that
        keeps this form pilots it afresh).
    """
    fitted, fits, cut, last_gain = _fit_in_turn(None, (pilot, plan, parts_fn), 0,
                                                pilot.n_particles, run, rng, parts_fn, moves,
                                                tuning, length_limit)
    if fitted is None:
        if cut:
            return plan, dataclasses.replace(pilot, path_choice={**pilot.path_choice,
                                                                 "fitted_cut": 1.0})
        return plan, pilot
    base, based_plan, based_pilot = fitted
    base_length = based_pilot.thermodynamic_length
    choice = {"thermodynamic_length_prior": pilot.thermodynamic_length,
              "thermodynamic_length_fitted": base_length,
              "pilot_log_z_prior": pilot.log_z, "pilot_log_z_fitted": based_pilot.log_z,
              **({"refits_cut": float(fits), "refits_cut_gain": float(last_gain)} if cut
                 else {})}
    keep_base = keep_fitted or _prefer_fitted(plan, pilot, (base, based_plan, based_pilot),
                                              choice, rng, parts_fn, moves, tuning, draw_prior)
    logger.debug("Pilot paths: from the prior length %.2f and log Z %.2f, from a fitted Gaussian "
                "length %.2f and log Z %.2f; annealing from the %s.", pilot.thermodynamic_length,
                pilot.log_z, base_length, based_pilot.log_z,
                "fitted Gaussian" if keep_base else "prior")
    if keep_base:
        return (dataclasses.replace(based_plan, base=base),
                dataclasses.replace(based_pilot, path_choice=choice))
    return plan, dataclasses.replace(pilot, path_choice=choice)


def continue_refits(plan, pilot, run, rng, parts_fn, moves=None,
                    tuning: Tuning = DEFAULT_TUNING):
    """Go on refitting Gaussians from a kept fitted path whose refits a length limit cut.

    For a pilot that keeps its fitted path whatever the prior's (``keep_fitted`` in
    :func:`choose_path`): the refits go on from that path's population as if never cut (on the
    same stream, the same fits), and the best fitted path of all is kept, without piloting the
    prior's path again.

    Parameters
    ----------
    plan, pilot : AnnealingPlan, PilotResult
        What :func:`choose_path` returned with ``refits_cut`` in ``pilot.path_choice``.
    run, rng, parts_fn, moves, tuning
        As for :func:`choose_path`.

    Returns
    -------
    tuple
        ``(plan, pilot)`` of the best fitted path, as :func:`choose_path` returns it.
    """
    base, choice = plan.base, dict(pilot.path_choice)
    fits = int(choice.pop("refits_cut"))
    last_gain = float(choice.pop("refits_cut_gain"))
    fitted, _, _, _ = _fit_in_turn((base, plan, pilot), (pilot, plan, base.parts_fn(parts_fn)),
                                   fits, pilot.n_particles, run, rng, parts_fn, moves, tuning,
                                   None, last_gain)
    base, based_plan, based_pilot = fitted
    choice.update(thermodynamic_length_fitted=based_pilot.thermodynamic_length,
                  pilot_log_z_fitted=based_pilot.log_z)
    logger.debug("Refits continued: the fitted path kept is %.2f long, log Z %.2f.",
                 based_pilot.thermodynamic_length, based_pilot.log_z)
    return (dataclasses.replace(based_plan, base=base),
            dataclasses.replace(based_pilot, path_choice=choice))


def _fit_in_turn(fitted, source, fits, n_particles, run, rng, parts_fn, moves, tuning,
                 length_limit, previous_gain=0.0):
    """Fit Gaussians in turn, each to the last path's equilibrated population (module docstring).

    ``fitted``: the best ``(base, plan, pilot)`` so far, or None; ``source``: ``(pilot, plan,
    path_parts)`` of the path the next Gaussian is fitted to; ``fits``: fitted paths piloted
    before; ``previous_gain``: what the source's own fit gained (refits continued after a cut).
    Returns ``(fitted, fits, cut, last_gain)``: the best fitted path, the fitted paths piloted,
    whether ``length_limit`` ended the refits, and the last fit's gain. The first fit's pilot
    stops once its path passes ``length_limit`` (where it did, ``fitted`` is None and ``cut``
    true): it is not kept, and the caller pilots the model's other form.
    """
    source, source_plan, source_parts = source
    cut = False
    while fits < tuning.max_base_fits:
        with timed("pilot_equilibration"):
            population = equilibrate(rng, source.final_x, source_plan, source_parts,
                                     tuning.base_fit_moves, moves, block=tuning.base_fit_block)
        # A population with impossible states or undefined weights has no Gaussian to give.
        if not (np.all(np.isfinite(population)) and np.all(np.isfinite(source.final_weights))):
            break
        try:
            base = fit_base(population, source.final_weights, parts_fn, tuning)
        except np.linalg.LinAlgError:
            break
        based_parts = base.parts_fn(parts_fn)
        x = base.sample(rng, n_particles)
        first = fitted is None and length_limit is not None
        with timed("pilot_fitted_paths"):
            based_plan, based_pilot = run(x, based_parts(x), based_parts,
                                          **({"max_length": length_limit} if first else {}))
        fits += 1
        if not based_pilot.complete:
            logger.debug("The fitted path is over %.2f long (%.2f at beta %.2g): its pilot "
                         "stopped there.", length_limit, based_pilot.thermodynamic_length,
                         based_pilot.betas[-1])
            cut = True
            break
        gained = based_pilot.log_z - source.log_z
        logger.debug("Pilot from a fitted Gaussian: log Z %.2f (sd %.2f; %+.2f), path length "
                     "%.2f.", based_pilot.log_z, based_pilot.log_z_sd, gained,
                     based_pilot.thermodynamic_length)
        if not np.isfinite(based_pilot.log_z):  # a failed pilot says nothing for its base
            break
        if fitted is None or better_fit(fitted[2], based_pilot, tuning):
            fitted = (base, based_plan, based_pilot)
        # A fit that loses to the pilot it came from was fitted to a poor population: it gets
        # one more try from its own path's population where the fits had not settled (the first
        # fit, or after a large gain; module docstring).
        lost = gained < -tuning.base_log_z_tolerance
        unsettled = fits == 1 or previous_gain > tuning.base_refit_unsettled
        if not (gained > tuning.base_refit_gain or (lost and unsettled)):
            break
        previous_gain = gained
        if length_limit is not None and based_pilot.thermodynamic_length > length_limit:
            logger.debug("No refit: the fitted path is longer than %.2f.", length_limit)
            cut = True
            break
        source, source_plan, source_parts = based_pilot, based_plan, based_parts
    return fitted, fits, cut, previous_gain


def better_fit(best: PilotResult, candidate: PilotResult, tuning: Tuning = DEFAULT_TUNING) -> bool:
    """Whether a later fitted path's pilot beats the best fitted one so far.

    As two paths are ranked (:func:`prefer_second_path`): the estimates first; between close
    estimates, a path at most ``tuning.base_path_gain`` times as long as the other wins, and
    between paths of about one length, the higher estimate. The length search takes its first
    length from the kept path's, so a higher estimate within noise must not keep a path several
    times as long.
    """
    ranked = rank_by_estimates(best, candidate, tuning)
    if ranked is not None:
        return ranked
    if much_shorter(candidate, best, tuning):
        return True
    if much_shorter(best, candidate, tuning):
        return False
    return bool(candidate.log_z > best.log_z)


def _prefer_fitted(plan, pilot, fitted, choice, rng, parts_fn, moves, tuning, draw_prior):
    """:func:`prefer_second_checked` for the prior's path and the fitted one.

    The frozen-kernel estimates, where made, are recorded in ``choice``.
    """
    base, based_plan, based_pilot = fitted

    def recheck():
        with timed("pilot_frozen_estimates"):
            prior_log_z = frozen_log_z(rng, plan, pilot, parts_fn, draw_prior, moves)
            fitted_log_z = frozen_log_z(rng, dataclasses.replace(based_plan, base=base),
                                        based_pilot, parts_fn, draw_prior, moves)
        choice.update(frozen_log_z_prior=prior_log_z, frozen_log_z_fitted=fitted_log_z)
        logger.debug("Pilot estimates with frozen kernels: %.2f from the prior, %.2f from the "
                     "fitted Gaussian.", prior_log_z, fitted_log_z)
        return prior_log_z, fitted_log_z

    return prefer_second_checked(pilot, based_pilot, tuning,
                                 None if draw_prior is None else recheck)


def prefer_second_checked(first: PilotResult, second: PilotResult, tuning: Tuning,
                          recheck: Callable[[], tuple[float | None, float | None]] | None
                          ) -> bool:
    """:func:`prefer_second_path`, unless the pilots' estimates would choose the longer path.

    That estimate is the one most exposed to the pilot's adaptive bias (module docstring):
    there ``recheck()`` estimates both paths again with their kernels frozen
    (:func:`frozen_log_z`), and those estimates replace the pilots' (where it gives both).

    Parameters
    ----------
    first, second : PilotResult
    tuning : Tuning
    recheck : callable or None
        ``() -> (first's, second's)`` estimates with frozen kernels; None: no check.

    Returns
    -------
    bool
    """
    ranked = rank_by_estimates(first, second, tuning)
    if ranked is None or recheck is None:
        return prefer_second_path(first, second, tuning)
    chosen, other = (second, first) if ranked else (first, second)
    if not chosen.thermodynamic_length > other.thermodynamic_length:
        return ranked
    first_log_z, second_log_z = recheck()
    if first_log_z is None or second_log_z is None:
        return ranked
    return prefer_second_path(dataclasses.replace(first, log_z=first_log_z),
                              dataclasses.replace(second, log_z=second_log_z), tuning)
