"""Pilot tuning of the annealing path and HMC kernels, frozen into an :class:`AnnealingPlan`.

AIS and reverse AIS are valid for *any* fixed sequence of temperatures and transition kernels,
but not for kernels tuned on the measured chains' own history. So everything is tuned once, on a
separate pilot population, and frozen; the measured forward run and the reverse run use the frozen
plan, the reverse run visiting its kernels in reverse order. The pilot starts from its own prior
draws and never sees the generating parameters of simulated data.

The pilot is an adaptive-tempering SMC run. At each pilot temperature it

1. picks the next ``beta`` so that ``(beta' - beta) * sd(log-likelihood)`` (the standard
   deviation of the incremental log weight) equals ``pilot_step_length`` nats;
2. reweights, and resamples systematically when the ESS falls below half the population;
3. sets the diagonal inverse mass matrix to the population's weighted variance;
4. runs a few HMC transitions, steering the step size toward ``target_accept``, and probes
   longer trajectories (:mod:`~pymc_bdmc.kernels.trajectory_length`).

From the pilot's record, ``schedule="adaptive"`` places the measured run's ``n_steps``
temperatures at equal increments of the estimated thermodynamic length
``Lambda(beta) = integral sd_beta(log-likelihood) d beta``. Per-step weight variance is then even
along the path, which for a fixed budget keeps the variance of log-weights (and so the bias of the
bounds) down. Step sizes and mass matrices are interpolated to every temperature in ``log beta``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.gibbs import BoundSweep
from pymc_bdmc.kernels.hmc import HMCParams, PartsFn
from pymc_bdmc.kernels.pilot_metrics import MetricChoice
from pymc_bdmc.kernels.plan import AnnealingPlan, sweep_outweighs_transition
from pymc_bdmc.kernels.trajectory_length import (
    LEAPFROG_CANDIDATES,
    best_candidate,
    hmc_on_rows,
    probe_size,
)
from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.resampling import systematic_resample

if TYPE_CHECKING:
    from pymc_bdmc.kernels.scale_moves import ScaleMoves


__all__ = ["PilotResult", "freeze_plan", "plan_from_pilot",
           "thermodynamic_length", "thermodynamic_schedule", "tune_plan"]

#: Smallest variance allowed in the diagonal inverse mass matrix (guards collapsed pilots).
MIN_VARIANCE = 1e-12
#: Smallest relative growth of beta per pilot step (bounds the pilot's length on long paths).
MIN_PILOT_GROWTH = 0.05
#: Largest number of pilot temperatures.
MAX_PILOT_STEPS = 2000


@dataclass(frozen=True)
class PilotResult:
    """What the pilot run measured (reported; never used as the evidence estimate).

    Attributes
    ----------
    log_z : float
        The pilot's own SMC estimate of ``log p(y)`` (a rough check, from few particles).
    betas : ndarray
        Temperatures the pilot visited, from 0 to 1.
    sd_log_likelihood : ndarray
        Weighted standard deviation of the log-likelihood at each of them.
    step_size, variance : ndarray
        Tuned step size and diagonal variance at each of them.
    acceptance_rate : ndarray
        Mean acceptance of the pilot's transitions there.
    n_resampled : int
    mass_factor : tuple
        Per temperature, the factor of the dense inverse mass matrix used there, or None where
        the diagonal ``variance`` was used.
    n_leapfrog : int
        Leapfrog steps per transition for the measured runs: given, or chosen by the pilot.
    jump_per_gradient : ndarray, shape (n_steps + 1, n_candidates), optional
        When chosen: the mean squared jump (in the mass matrix's metric) per gradient evaluation
        of each candidate at each temperature.
    n_particles : int
        The pilot's population size.
    final_x, final_weights : ndarray, optional
        The population at ``beta = 1`` and its normalised weights (to fit a base distribution).
    path_choice : dict
        Where both paths were piloted (:func:`pymc_bdmc.pipeline.pilot.tune`): their
        thermodynamic lengths and pilot estimates of ``log p(y)``
        (``thermodynamic_length_prior``, ``thermodynamic_length_fitted``,
        ``pilot_log_z_prior``, ``pilot_log_z_fitted``, and where those estimates were checked
        with frozen kernels ``frozen_log_z_prior``, ``frozen_log_z_fitted``); empty otherwise.
    complete : bool
        False for a pilot stopped at its first dense metric (``run_pilot(until_dense=True)``)
        or past ``run_pilot(max_length=...)``: it estimates nothing (``log_z`` is NaN).
    """

    log_z: float
    betas: np.ndarray = field(repr=False)
    sd_log_likelihood: np.ndarray = field(repr=False)
    step_size: np.ndarray = field(repr=False)
    variance: np.ndarray = field(repr=False)
    acceptance_rate: np.ndarray = field(repr=False)
    n_resampled: int = 0
    mass_factor: tuple = field(default=(), repr=False)
    n_leapfrog: int = 3
    jump_per_gradient: np.ndarray | None = field(default=None, repr=False)
    n_particles: int = 0
    final_x: np.ndarray | None = field(default=None, repr=False)
    final_weights: np.ndarray | None = field(default=None, repr=False)
    path_choice: dict = field(default_factory=dict, repr=False)
    complete: bool = True

    @classmethod
    def from_record(cls, log_z: float, record: dict, n_resampled: int,
                    **chosen) -> PilotResult:
        """Assemble from a pilot's per-temperature lists (keys beta, sd, eps, var, acc)."""
        return cls(
            log_z=log_z,
            betas=np.array(record["beta"]),
            sd_log_likelihood=np.array(record["sd"]),
            step_size=np.array(record["eps"]),
            variance=np.array(record["var"]),
            acceptance_rate=np.array(record["acc"]),
            n_resampled=n_resampled,
            mass_factor=tuple(record.get("factor", ())),
            **chosen,
        )

    @classmethod
    def stopped(cls, record: dict, n_resampled: int, n_particles: int) -> PilotResult:
        """An incomplete pilot's result (``complete=False``): its record so far, no estimate."""
        return cls.from_record(np.nan, record, n_resampled, n_particles=n_particles,
                               complete=False)

    @property
    def n_steps(self) -> int:
        """Number of pilot temperatures after 0."""
        return len(self.betas) - 1

    @property
    def thermodynamic_length(self) -> float:
        """The path's estimated thermodynamic length (see :func:`thermodynamic_length`)."""
        return float(thermodynamic_length(self.betas, self.sd_log_likelihood)[-1])

    @property
    def log_z_sd(self) -> float:
        """Rough standard deviation of :attr:`log_z` from the pilot's own measurements.

        Each reweighting multiplies the estimate by the mean of ``n_particles`` incremental
        weights whose log has sd ``d_beta * sd(log-likelihood)``: a relative variance of about
        ``(d_beta sd)^2 / n`` per step, summed over the steps (resampling's correlations
        ignored). 0 when the population size is unknown.
        """
        if not self.n_particles:
            return 0.0
        steps = np.diff(thermodynamic_length(self.betas, self.sd_log_likelihood))
        return float(np.sqrt(np.sum(steps**2) / self.n_particles))


def normalized_weights(log_w: np.ndarray) -> np.ndarray:
    w = np.exp(log_w - np.max(log_w))
    return w / w.sum()


def weighted_moments(values: np.ndarray, weights: np.ndarray):
    mean = weights @ values
    return mean, weights @ (values - mean) ** 2


def likelihood_sd(log_likelihood: np.ndarray, weights: np.ndarray) -> float:
    """Return the weighted sd of the finite log-likelihoods (NaN if none is finite).

    Particles at ``-inf`` (impossible data) are lost at any ``beta > 0``: no schedule helps.
    """
    finite = np.isfinite(log_likelihood)
    if not finite.all():
        finite &= weights > 0
        if not finite.any():
            return float("nan")
        log_likelihood, weights = log_likelihood[finite], weights[finite] / weights[finite].sum()
    return float(np.sqrt(weighted_moments(log_likelihood, weights)[1]))


def next_pilot_beta(beta: float, sd: float, step_length: float,
                    min_growth: float = MIN_PILOT_GROWTH) -> float:
    """Next pilot temperature: the incremental log weight's sd is ``step_length`` nats."""
    if not np.isfinite(sd) or sd <= 0:
        return 1.0
    increment = step_length / sd
    if beta > 0:
        increment = max(increment, min_growth * beta)
    return float(min(1.0, beta + increment))


def _add_temperature(record: dict, **values) -> None:
    """Append one pilot temperature's ``values`` to the lists of ``record`` of those names."""
    for key, value in values.items():
        record[key].append(value)


def _longer_than(record: dict, max_length: float | None) -> bool:
    """Whether a pilot's path so far is longer than ``max_length`` (never, where None)."""
    return max_length is not None and float(thermodynamic_length(
        np.array(record["beta"]), np.array(record["sd"]))[-1]) > max_length


def run_pilot(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    parts_fn: PartsFn,
    *,
    n_leapfrog: int | None,
    target_accept: float,
    jitter: float,
    step_length: float = 0.5,
    adapt_per_step: int = 3,
    initial_step_size: float = 0.5,
    on_step: Callable[[float], None] | None = None,
    discrete: BoundSweep | None = None,
    pinned: np.ndarray | None = None,
    dense: bool = True,
    moves: ScaleMoves | None = None,
    tuning: Tuning = DEFAULT_TUNING,
    until_dense: bool = False,
    max_length: float | None = None,
) -> PilotResult:
    """Adaptive-tempering SMC pilot from prior draws ``x0`` to the posterior (see module doc).

    ``discrete`` sweeps the discrete coordinates before each adaptation transition (not
    before the probes of other trajectory lengths, which measure HMC alone; a sweep of one
    color that costs more than a transition, before the first only). ``moves`` (the
    model's scale moves, with proposals scaled by the population's spread) are made before
    every transition, so that the population follows a funnel into its neck; ``pinned`` are
    the coordinates HMC must not move (their variance, so their inverse mass, is 0). With
    ``dense``, temperatures where the population is strongly correlated get a dense mass
    matrix (:func:`~pymc_bdmc.kernels.mass.dense_mass_factor`), and a path from a base fitted
    from the curvature a diagonal one in its principal coordinates (:mod:`~.pilot_metrics`). With
    ``n_leapfrog=None``, each temperature's adaptation transitions use the first of
    :data:`~pymc_bdmc.kernels.trajectory_length.LEAPFROG_CANDIDATES`, and one more transition
    of a random quarter of the particles probes each other length (each length with its own
    step size); the length with the largest squared jump per gradient (each temperature's
    values scaled by their maximum, then summed over temperatures) becomes the measured runs'
    trajectory length (:mod:`~pymc_bdmc.kernels.trajectory_length`).

    With ``until_dense``, the pilot stops at the first temperature that chose a dense metric
    and returns an incomplete result (``complete=False``), for a caller that would re-run it on
    a population large enough for one (:func:`pymc_bdmc.pipeline.pilot.tune`). With
    ``max_length``, it stops (incomplete too) at the first temperature where the path's
    thermodynamic length so far exceeds it: the whole path's length, which only grows along it,
    would too, for a caller that keeps no path that long.
    """
    n_chains = len(x0)
    x, parts = x0, parts0
    log_w = np.zeros(n_chains)
    beta, log_z, n_resampled = 0.0, 0.0, 0
    pinned = np.zeros(0, dtype=int) if pinned is None else np.asarray(pinned, dtype=int)
    # Each temperature's metric: kernels/pilot_metrics.py. The trajectory length is chosen at
    # every dimension.
    metric = MetricChoice(parts_fn, x0.shape[1] - len(np.unique(pinned)), dense, pinned, tuning)
    candidates = LEAPFROG_CANDIDATES if n_leapfrog is None else (n_leapfrog,)
    n_probe = probe_size(n_chains)
    sweep_before = _sweep_before(discrete, candidates, adapt_per_step)
    # Each trajectory length has its own step size (longer ones accept less at a given step).
    log_eps = np.full(len(candidates), np.log(initial_step_size))
    weights = np.full(n_chains, 1.0 / n_chains)

    def spread(values):
        variance = np.maximum(weighted_moments(values, weights)[1], MIN_VARIANCE)
        variance[pinned] = 0.0
        return variance

    variance = spread(x)
    sd = likelihood_sd(parts.log_likelihood, weights)
    record = {"beta": [0.0], "sd": [sd], "eps": [np.exp(log_eps)],
              "var": [variance], "acc": [np.nan], "factor": [None],
              "jump": [np.full(len(candidates), np.nan)]}
    while beta < 1.0 and len(record["beta"]) <= MAX_PILOT_STEPS:
        new_beta = 1.0 if len(record["beta"]) == MAX_PILOT_STEPS else next_pilot_beta(beta, sd,
                                                                                      step_length)
        log_w = log_w + (new_beta - beta) * parts.log_likelihood
        beta = new_beta
        weights = normalized_weights(log_w)
        if 1.0 / np.sum(weights**2) < 0.5 * n_chains:
            log_z += float(log_mean_exp(log_w))
            idx = systematic_resample(rng, weights, n_chains)
            x, parts, log_w = x[idx], parts.select(idx), np.zeros(n_chains)
            weights = np.full(n_chains, 1.0 / n_chains)
            n_resampled += 1
        variance = spread(x)
        factor, cross = metric.factors(rng, x, weights, variance, beta, parts)
        if until_dense and factor is not None:  # nothing moved at this temperature
            _add_temperature(record, beta=beta, sd=np.nan, eps=np.exp(log_eps), var=variance,
                             acc=np.nan, factor=factor, jump=np.full(len(candidates), np.nan))
            return PilotResult.stopped(record, n_resampled, n_chains)
        rates = []
        jumps = np.zeros(len(candidates))
        probes = np.zeros(len(candidates))
        # The first candidate adapts as a single fixed length always did; each other one is
        # probed by one transition per temperature.
        for i, which in enumerate([0] * adapt_per_step + list(range(1, len(candidates)))):
            if sweep_before[i]:
                x = discrete(rng, x, beta, False)
                parts = parts_fn(x)
            if moves is not None:
                x, parts, _ = moves.sweep(rng, x, parts, beta, np.sqrt(variance), parts_fn)
            params = HMCParams(float(np.exp(log_eps[which])), variance, candidates[which], jitter,
                               factor)
            movers = slice(None) if which == 0 else rng.choice(n_chains, n_probe, replace=False)
            x, parts, info, step = hmc_on_rows(rng, x, parts, movers, beta, params, parts_fn, cross)
            jumps[which] += metric.squared_jump(step, variance, factor) / candidates[which]
            probes[which] += 1
            rate = float(np.mean(info.acceptance_rate))
            rates.append(rate)
            # Robbins-Monro step on log(eps) toward the target acceptance (pilot only).
            log_eps[which] += 2.0 * (rate - target_accept)
        sd = likelihood_sd(parts.log_likelihood, weights)
        _add_temperature(record, beta=beta, sd=sd, eps=np.exp(log_eps), var=variance,
                         acc=float(np.mean(rates)), factor=factor,
                         jump=np.where(probes > 0, jumps / np.maximum(probes, 1), np.nan))
        if on_step is not None:
            on_step(beta)
        if _longer_than(record, max_length):
            return PilotResult.stopped(record, n_resampled, n_chains)
    log_z += float(log_mean_exp(log_w))
    jump = np.array(record["jump"])
    best = best_candidate(candidates, jump)
    record["eps"] = [eps[candidates.index(best)] for eps in record["eps"]]
    return PilotResult.from_record(log_z, record, n_resampled, n_leapfrog=best,
                                   jump_per_gradient=jump if n_leapfrog is None else None,
                                   n_particles=n_chains, final_x=x,
                                   final_weights=normalized_weights(log_w))


def _sweep_before(discrete: BoundSweep | None, candidates, adapt_per_step: int) -> list[bool]:
    """Which of a pilot temperature's transitions a sweep of the discrete coordinates precedes.

    The adaptation transitions (the probes of other lengths measure HMC alone). A sweep of one
    color draws all its coordinates exactly at once: where it evaluates more states than the
    transition's gradients, it precedes the first only.
    """
    probes = [False] * (len(candidates) - 1)
    if discrete is None:
        return [False] * adapt_per_step + probes
    once = discrete.gibbs.reversible and sweep_outweighs_transition(discrete.gibbs,
                                                                     candidates[0])
    return [i == 0 or not once for i in range(adapt_per_step)] + probes


def thermodynamic_length(betas: np.ndarray, sd_log_likelihood: np.ndarray) -> np.ndarray:
    """Cumulative thermodynamic length ``Lambda(beta) = integral sd_beta(log-likelihood)``.

    Integrated over the pilot's temperatures with the geometric mean of the two ends of each
    interval (exact when ``sd`` is proportional to ``1 / beta``, the usual behaviour once the
    likelihood dominates the prior). For a fixed number of steps on an optimal schedule, the
    variance of the log weights grows as its square.
    """
    sd = np.maximum(np.nan_to_num(sd_log_likelihood, nan=0.0, posinf=0.0), 0.0)
    if len(sd) < 2:
        return np.zeros(len(sd))
    sd_interval = np.sqrt(sd[:-1] * sd[1:])
    sd_interval[0] = 0.5 * (sd[0] + sd[1])  # from beta = 0, where 1/beta behaviour cannot hold
    return np.concatenate([[0.0], np.cumsum(np.diff(betas) * sd_interval)])


def thermodynamic_schedule(betas: np.ndarray, sd_log_likelihood: np.ndarray,
                           n_steps: int) -> np.ndarray:
    """Place ``n_steps + 1`` temperatures at equal increments of thermodynamic length.

    ``Lambda(beta)`` is :func:`thermodynamic_length` of the pilot's measurements.
    """
    length = thermodynamic_length(betas, sd_log_likelihood)
    if not length[-1] > 0:  # the likelihood does not vary: any path is exact
        return np.linspace(0.0, 1.0, n_steps + 1)
    # Ties in length (flat stretches) would make interpolation ill-defined; keep them increasing.
    length = length + np.linspace(0.0, 1e-12 * length[-1], len(length))
    out = np.interp(np.linspace(0.0, length[-1], n_steps + 1), length, betas)
    out[0], out[-1] = 0.0, 1.0
    return np.maximum.accumulate(out)


def plan_from_pilot(pilot: PilotResult, betas: np.ndarray, n_leapfrog: int,
                    jitter: float, transitions_per_step: int = 1) -> AnnealingPlan:
    """Freeze the pilot's tuned kernels, interpolated in ``log beta``, onto ``betas``."""
    n_steps = len(betas) - 1
    n_dim = pilot.variance.shape[1]
    step_size = np.full(n_steps + 1, np.nan)
    inv_mass = np.full((n_steps + 1, n_dim), np.nan)
    inner = np.arange(1, n_steps + 1)
    if inner.size:
        grid = np.log(pilot.betas[1:])
        where = np.log(np.maximum(betas[inner], pilot.betas[1] * 1e-12))
        step_size[inner] = np.exp(np.interp(where, grid, np.log(pilot.step_size[1:])))
        pinned = np.all(pilot.variance[1:] == 0, axis=0)  # coordinates HMC must not move
        with np.errstate(divide="ignore"):
            log_var = np.log(pilot.variance[1:])
        for d in range(n_dim):
            inv_mass[inner, d] = 0.0 if pinned[d] else np.exp(np.interp(where, grid,
                                                                        log_var[:, d]))
    factors, mass_index = _dense_kernels(pilot, betas, step_size, inv_mass)
    return AnnealingPlan(np.asarray(betas, dtype=float).copy(), step_size, inv_mass,
                         n_leapfrog, jitter, transitions_per_step, factors, mass_index)


def _dense_kernels(pilot: PilotResult, betas: np.ndarray, step_size: np.ndarray,
                   inv_mass: np.ndarray):
    """Give each step the pilot's dense kernel at the nearest pilot temperature (log beta).

    A step whose nearest pilot temperature used a dense mass matrix takes that matrix and the
    step size tuned with it there (``step_size`` and ``inv_mass`` are updated in place); the
    others keep the interpolated diagonal kernel. Returns ``(factors, mass_index)``, or
    ``(None, None)`` when no step is dense.
    """
    if not any(f is not None for f in pilot.mass_factor[1:]) or len(betas) < 2:
        return None, None
    grid = np.log(pilot.betas[1:])
    where = np.log(np.maximum(betas[1:], pilot.betas[1] * 1e-12))
    nearest = 1 + np.argmin(np.abs(where[:, None] - grid[None, :]), axis=1)
    used = sorted({int(a) for a in nearest if pilot.mass_factor[a] is not None})
    if not used:
        return None, None
    slot = {a: i for i, a in enumerate(used)}
    factors = np.stack([pilot.mass_factor[a] for a in used])
    mass_index = np.full(len(betas), -1, dtype=int)
    for t, a in enumerate(nearest, start=1):
        if a in slot:
            mass_index[t] = slot[a]
            step_size[t] = pilot.step_size[a]
            if factors.ndim == 3:  # diag(L L^T); principal scales keep the population's
                inv_mass[t] = np.sum(factors[slot[a]] ** 2, axis=1)
    return factors, mass_index


def tune_plan(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    parts_fn: PartsFn,
    *,
    schedule: np.ndarray | str,
    n_steps: int,
    n_leapfrog: int | None = 10,
    target_accept: float = 0.9,
    jitter: float = 0.2,
    transitions_per_step: int = 1,
    on_step: Callable[[float], None] | None = None,
    discrete: BoundSweep | None = None,
    pinned: np.ndarray | None = None,
    dense: bool = True,
    moves: ScaleMoves | None = None,
    tuning: Tuning = DEFAULT_TUNING,
    until_dense: bool = False,
    max_length: float | None = None,
) -> tuple[AnnealingPlan | None, PilotResult]:
    """Run the pilot and freeze its tuning into a plan of ``n_steps`` steps.

    Parameters
    ----------
    rng : numpy.random.Generator
        The pilot's own random stream (independent of the measured runs).
    x0 : ndarray, shape (pilot_chains, n_dim)
        Exact prior draws for the pilot population.
    parts0 : DensityParts
        Densities at ``x0``.
    parts_fn : callable
        Batched model evaluation.
    schedule : "adaptive" or ndarray
        ``"adaptive"`` for the thermodynamic-length schedule, or fixed inverse temperatures.
    n_steps : int
        Number of annealing steps of the measured runs.
    n_leapfrog : int or None, default 10
        Leapfrog steps per transition; None lets the pilot choose (see :func:`run_pilot`).
    target_accept : float, default 0.9
        Mean Metropolis acceptance probability the step size is steered to.
    jitter : float, default 0.2
    transitions_per_step : int, default 1
        HMC transitions at each temperature of the measured runs.
    on_step : callable, optional
        Called with the pilot's inverse temperature after each pilot step.
    discrete : callable, optional
        Gibbs sweeps of the discrete coordinates (see :meth:`AnnealingPlan.transition`).
    pinned : ndarray of int, optional
        Coordinates the HMC kernels must leave alone (the discrete ones).
    dense : bool, default True
        Allow dense mass matrices where the pilot population is strongly correlated.
    moves : ScaleMoves, optional
        The model's scale moves: made in the pilot, and frozen into the plan
        (:attr:`AnnealingPlan.scale_moves`).
    tuning : Tuning, optional
        Where dense metrics apply (:class:`~pymc_bdmc.config.Tuning`).
    until_dense : bool, default False
        Stop the pilot at its first dense metric (see :func:`run_pilot`).
    max_length : float, optional
        Stop the pilot once its path is longer than this (see :func:`run_pilot`).

    Returns
    -------
    plan : AnnealingPlan or None
        None where the pilot stopped early (``until_dense``, ``max_length``).
    pilot : PilotResult
    """
    pilot = run_pilot(rng, x0, parts0, parts_fn, n_leapfrog=n_leapfrog,
                      target_accept=target_accept, jitter=jitter, on_step=on_step,
                      discrete=discrete, pinned=pinned, dense=dense, moves=moves, tuning=tuning,
                      until_dense=until_dense, max_length=max_length)
    if not pilot.complete:
        return None, pilot
    plan = freeze_plan(pilot, schedule, n_steps, jitter, transitions_per_step)
    return dataclasses.replace(plan, scale_moves=moves is not None), pilot


def freeze_plan(pilot: PilotResult, schedule: np.ndarray | str, n_steps: int, jitter: float,
                transitions_per_step: int = 1) -> AnnealingPlan:
    """Freeze ``pilot``'s kernels onto ``n_steps`` temperatures of ``schedule``.

    Parameters
    ----------
    pilot : PilotResult
    schedule : "adaptive" or ndarray
        ``"adaptive"`` places the temperatures at equal thermodynamic length; an array is used
        as it is.
    n_steps : int
    jitter : float
    transitions_per_step : int, default 1

    Returns
    -------
    AnnealingPlan
        On the prior's path (a caller that piloted another path attaches its base).
    """
    if isinstance(schedule, str):
        betas = thermodynamic_schedule(pilot.betas, pilot.sd_log_likelihood, n_steps)
    else:
        betas = np.asarray(schedule, dtype=float)
    return plan_from_pilot(pilot, betas, pilot.n_leapfrog, jitter, transitions_per_step)
