"""SMC evidence, and the sequential harmonic mean estimator (reverse SMC) for BDMC.

Populations of particles anneal from exact prior draws through the pilot-tuned, frozen kernels
of the AIS path (:mod:`pymc_bdmc.algorithms.smc`): on the tempering path in groups here or on
workers, or adding the observations block by block (data-point tempering, in this process).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Literal

import pymc as pm
import xarray as xr

from pymc_bdmc.algorithms.smc import (
    DataPointPath,
    TemperingPath,
    merge_smc_runs,
    smc_forward,
    smc_reverse,
)
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.kernels.tuning import PilotResult
from pymc_bdmc.methods.protocol import Job, Launch, Outcome, Problem, RunLabels, SharedPilot
from pymc_bdmc.model.checks import check_positive_int
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.parallel.smc_groups import population_blocks, smc_tasks
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.diagnostics import log_smc_diagnostics
from pymc_bdmc.pipeline.discrete import gibbs_kernel
from pymc_bdmc.pipeline.draws import (
    PilotDraws,
    PossibleStarts,
    draw_prior,
    generating_values,
    only_impossible_data,
    prior_start,
    reverse_possible_mass,
)
from pymc_bdmc.pipeline.execution import (
    KernelTiming,
    choose_workers,
    count_sweeps,
    count_transitions,
    model_call_seconds,
    predicted_seconds,
)
from pymc_bdmc.pipeline.pilot import tune
from pymc_bdmc.pipeline.problem import model_problem
from pymc_bdmc.pipeline.results import run_attrs
from pymc_bdmc.pipeline.runs import start_runner
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.results.datatree import build_smc_datatree
from pymc_bdmc.schedules import ADAPTIVE

__all__ = ["SMC", "SMC_CHAINS", "SMC_N_STEPS", "SMC_PARTICLES", "SMC_TRANSITIONS_PER_STEP",
           "SMCSettings", "check_smc_model", "validate_smc"]

logger = logging.getLogger("pymc_bdmc")

PathName = Literal["tempering", "data"]

#: Defaults of the SMC runs: fewer stages than AIS (resampling restores the particles' balance),
#: more transitions per stage (they must diversify the copies made by resampling).
SMC_N_STEPS = 100
SMC_CHAINS = 4
SMC_PARTICLES = 128
SMC_TRANSITIONS_PER_STEP = 5


@dataclass(frozen=True)
class SMCSettings:
    """Validated SMC-specific options: particles per population, the path, the ESS threshold."""

    particles: int
    path: PathName
    ess_threshold: float


def validate_smc(particles, path, ess_threshold, schedule) -> SMCSettings:
    """Check the SMC-specific arguments (before any compilation or sampling)."""
    particles = check_positive_int(particles, "particles", minimum=2)
    if path not in ("tempering", "data"):
        raise BDMCInputError(f"`path` must be 'tempering' or 'data', got {path!r}.")
    if isinstance(ess_threshold, bool) or not isinstance(ess_threshold, int | float) or not (
        0.0 <= ess_threshold <= 1.0
    ):
        raise BDMCInputError(f"`ess_threshold` must be a number in [0, 1], got {ess_threshold!r}.")
    if path == "data" and not (isinstance(schedule, str) and schedule == ADAPTIVE):
        raise BDMCInputError(
            "`schedule` applies to the tempering path only; with path='data' the stages are "
            "set by `n_steps` (blocks of observations)."
        )
    return SMCSettings(particles, path, float(ess_threshold))


def check_smc_model(model: pm.Model, smc: SMCSettings, discrete: bool = False) -> None:
    """Refuse, before compiling, what data-point tempering cannot split by observation."""
    if smc.path == "data" and discrete:
        raise BDMCInputError(
            "The model has discrete free variables; their Gibbs updates follow the tempered "
            "path, not data-point tempering. Use path='tempering' (the default)."
        )
    if smc.path == "data" and model.potentials:
        raise BDMCInputError(
            f"The model has Potentials {[p.name for p in model.potentials]}, which cannot be "
            "split into per-observation likelihood terms: data-point tempering needs a "
            "likelihood that factorizes over observations. Use path='tempering'."
        )


def check_data_path(density: ModelDensity, smc: SMCSettings) -> None:
    """Compile the observation-weighted density now, so an unsuitable model fails early."""
    if smc.path != "data":
        return
    try:
        n_observations = density.n_observations
    except ValueError as err:
        raise BDMCInputError(str(err)) from err
    logger.debug("Data-point tempering over %d observations.", n_observations)


@dataclass(frozen=True)
class Tuned:
    """The frozen plan and its pilot, the Gibbs kernel, and the data path (if tempering data)."""

    plan: AnnealingPlan
    pilot: PilotResult
    gibbs: ChromaticGibbs | None
    path: DataPointPath | None


class SMC:
    """Forward SMC, and the sequential harmonic mean estimator in reverse from ``theta*``.

    Parameters
    ----------
    smc : SMCSettings
    """

    labels = RunLabels(algorithm="SMC", reverse_label="Reverse SMC (SHME)", unit="stage")

    def __init__(self, smc: SMCSettings):
        self.smc = smc

    def prepare(self, job: Job) -> Problem:
        """Compile (and the observation-weighted density on the data path), then the data."""
        return model_problem(job, check=lambda density: check_data_path(density, self.smc))

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """SMC runs the model as written."""
        return None

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> Tuned:
        """Pilot the tempering path (for data blocks, at the likelihood's share of each)."""
        density, simulator, streams = problem.density, problem.simulator, job.streams
        x_pilot, parts_pilot = prior_start(simulator, density, s.pilot_chains,
                                           streams["pilot_init"])
        path = None
        if self.smc.path == "data":
            n_obs = density.n_observations
            path = DataPointPath.in_blocks(n_obs, s.n_steps)
            # Kernels for "the first n observations" are tuned where the tempered path has
            # the same share of the likelihood, beta = n / N.
            schedule = path.n_included / n_obs
        else:
            schedule = ADAPTIVE if s.adaptive else s.betas
        # Discrete variables (tempering path only, checked earlier): Gibbs sweeps around HMC.
        gibbs = gibbs_kernel(density, x_pilot)
        plan, pilot = tune(progress, s, streams["pilot"], x_pilot, parts_pilot, density.parts,
                           schedule, discrete=None if gibbs is None else gibbs.bound_to(
                               density.terms),
                           pinned=None if gibbs is None else gibbs.pinned,
                           draw_pilot=PilotDraws(simulator, density, streams["pilot_init"]),
                           moves=scale_moves_for(density) if path is None else None)
        return Tuned(plan, pilot, gibbs, path)

    def launch(self, job: Job, problem: Problem, tuned: Tuned, attempt: Attempt,
               s: Settings) -> Launch:
        """Exact prior starts for every particle, and the populations' runs."""
        density, streams = problem.density, job.streams
        x0, parts0 = prior_start(problem.simulator, density, s.chains * self.smc.particles,
                                 streams["forward_init"])
        launch = (self._data_path(job, problem, tuned, s, x0) if tuned.path is not None
                  else self._tempering(job, problem, tuned, s, x0))
        # Resampling leaves particles where the data are impossible behind, but reverse runs
        # never reach that prior mass: their weights need it taken out, as AIS's do.
        possible = PossibleStarts()
        if problem.truth is not None and only_impossible_data(parts0, x0):
            possible = reverse_possible_mass(
                lambda n, rng: draw_prior(problem.simulator, n, rng), density.parts,
                streams["possible"])
        launch.state["possible"] = possible
        return launch

    def _data_path(self, job, problem, tuned, s, x0) -> Launch:
        density, streams, path, smc = problem.density, job.streams, tuned.path, self.smc
        parts0 = density.weighted_parts(x0, path.observation_weights(0))

        def target_parts(x):
            return density.weighted_parts(x, path.observation_weights(path.n_steps))

        transition = tuned.plan.observation_transition(density.weighted_parts,
                                                       path.observation_weights)

        def forward_run(on_step, on_group):
            return smc_forward(streams["forward"], x0, parts0, path, transition,
                               chains=s.chains, ess_threshold=smc.ess_threshold,
                               on_step=on_step)

        def reverse_run(on_step, on_group):
            return smc_reverse(streams["reverse"], problem.truth.x, smc.particles, path,
                               transition, target_parts, chains=s.chains,
                               ess_threshold=smc.ess_threshold,
                               spread_transitions=s.reverse_spread, on_step=on_step)

        return Launch(forward_run, None if problem.truth is None else reverse_run,
                      path.n_steps, path.n_steps, s,
                      state={"path": path, "target_parts": target_parts,
                             "where": {"workers": "this process", "chain_groups": 1}})

    def _tempering(self, job, problem, tuned, s, x0) -> Launch:
        """Populations in groups, here or on workers (:mod:`pymc_bdmc.parallel.smc_groups`)."""
        density, truth, streams, smc, parallel = (problem.density, problem.truth, job.streams,
                                                  self.smc, job.parallel)
        plan, gibbs = tuned.plan, tuned.gibbs
        directions = 1 if truth is None else 2
        n_transitions = count_transitions(plan, directions, s.reverse_spread, gibbs)
        auto = parallel.cores is None and parallel.executor is None
        timing = KernelTiming.measure(density, x0, plan, gibbs) if auto else None
        n_sweeps = count_sweeps(plan, directions, s.reverse_spread, gibbs)
        workers = choose_workers(parallel.cores, parallel.executor,
                                 predicted_seconds(timing, n_transitions, n_sweeps,
                                                   plan.n_leapfrog), s.chains,
                                 threshold=s.tuning.auto_parallel_seconds)
        forward_blocks = population_blocks(streams["forward"], s.chains, smc.particles)
        reverse_blocks = population_blocks(streams["reverse"], s.chains, smc.particles)
        runner, groups = start_runner(density, workers, parallel.chains_per_batch,
                                      forward_blocks, "SMC populations")
        observed = density.observed_data()  # workers may hold other data from earlier calls
        pending_forward = runner.submit_tasks(smc_tasks(
            "forward", forward_blocks, groups, x0, plan, smc.ess_threshold, observed=observed,
            gibbs=gibbs))
        pending_reverse = None if truth is None else runner.submit_tasks(smc_tasks(
            "reverse", reverse_blocks, groups, truth.x, plan, smc.ess_threshold,
            observed=observed, spread_transitions=s.reverse_spread, gibbs=gibbs))

        def collect(pending):
            return lambda on_step, on_group: runner.collect(
                pending, on_step=on_step, on_group=on_group, merge=merge_smc_runs)

        where = {"workers": workers.description, "chain_groups": len(groups)}
        return Launch(collect(pending_forward),
                      None if truth is None else collect(pending_reverse),
                      plan.n_steps * len(groups), plan.n_steps, s,
                      cancel=lambda: runner.cancel(pending_reverse),
                      state={"path": TemperingPath(plan.betas), "runner": runner,
                             "where": where},
                      evaluations=lambda: density.n_evaluations + runner.model_calls,
                      model_call_seconds=model_call_seconds(density, x0, timing))

    def result(self, job: Job, problem: Problem, tuned: Tuned, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """The bounds, the diagnostics and the result (with its per-stage ``smc`` group)."""
        density, truth, streams, smc = problem.density, problem.truth, job.streams, self.smc
        s, state, forward, reverse = launch.settings, launch.state, outcome.forward, outcome.reverse
        path, where = state["path"], dict(state["where"])
        if "runner" in state:
            where["model_evaluations"] = density.n_evaluations + state["runner"].model_calls
        else:  # the last stage reweights without a move: record f_T's densities
            forward = dataclasses.replace(forward, parts=state["target_parts"](forward.x))
        forward, reverse = state["possible"].apply(forward, reverse)
        bounds = evidence_bounds(
            streams["summary"], forward.log_weight,
            None if reverse is None else reverse.log_weight, confidence=s.confidence,
        )
        log_smc_diagnostics(bounds, forward, reverse, smc.path)
        attrs = {
            "compile_time": outcome.compile_time, **problem.attrs, **job.attrs,
            **run_attrs(
                s, density, tuned.pilot, outcome.sampling_time, outcome.interrupted,
                algorithm="bdmc" if truth is not None else "smc", method="smc",
                path=smc.path, n_steps=path.n_steps, particles=smc.particles,
                ess_threshold=smc.ess_threshold, **where,
                schedule=("data blocks" if smc.path == "data"
                          else "adaptive" if s.adaptive else "fixed"),
            ),
            **state["possible"].attrs,
        }
        if tuned.gibbs is not None:
            attrs["kernel"] = "hmc+gibbs"
            attrs["gibbs_colors"] = len(tuned.gibbs.colors)
            attrs["gibbs_coordinates"] = tuned.gibbs.n_coordinates
        return build_smc_datatree(
            rng=streams["summary"], density=density, plan=tuned.plan, path=path,
            forward=forward, reverse=reverse, bounds=bounds,
            ess_threshold=smc.ess_threshold, observed=density.observed_data(),
            generating_values=None if truth is None else generating_values(density, truth),
            attrs=attrs,
        )


def resolve_defaults(method: str, n_steps, chains, transitions_per_step, schedule):
    """``sample_bdmc``'s defaults, which differ between AIS and SMC.

    ``n_steps="auto"`` is the method's default, or the length of a schedule array;
    ``chains=None`` and ``transitions_per_step=None`` take the method's default (for AIS,
    None: the pilot's path decides, :meth:`~pymc_bdmc.pipeline.settings.Settings.transitions_on`).
    An explicit ``n_steps=None`` is kept (valid only with a schedule array).
    """
    defaults = ((SMC_N_STEPS, SMC_CHAINS, SMC_TRANSITIONS_PER_STEP) if method == "smc"
                else (1000, 32, None))
    if isinstance(n_steps, str) and n_steps == "auto":
        n_steps = defaults[0] if isinstance(schedule, str) else None
    return (n_steps, defaults[1] if chains is None else chains,
            defaults[2] if transitions_per_step is None else transitions_per_step)
