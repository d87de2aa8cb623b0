"""AIS and BDMC on the vectorized kernels: HMC, and chromatic Gibbs sweeps of discrete variables.

All chains are evaluated in one batched model call per leapfrog step; chains are cut into blocks
with their own random streams, which run here or on worker processes
(:class:`~pymc_bdmc.parallel.annealing.AnnealingRunner`), as the kernels' timing decides.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
import xarray as xr

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.kernels.tuning import PilotResult
from pymc_bdmc.methods.protocol import Job, Launch, Outcome, Problem, RunLabels, SharedPilot
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.parallel.annealing import AnnealingRunner
from pymc_bdmc.parallel.executors import Workers
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.compile import helpers_allowed, other_parameterization
from pymc_bdmc.pipeline.diagnostics import log_ais_diagnostics
from pymc_bdmc.pipeline.discrete import check_plan_pins, gibbs_kernel
from pymc_bdmc.pipeline.draws import (
    SIMULATED_DATA_HINT,
    PilotDraws,
    PossibleStarts,
    draw_prior,
    generating_values,
    possible_prior_start,
    possible_run_starts,
    prior_start_blocks,
)
from pymc_bdmc.pipeline.execution import (
    KernelTiming,
    choose_workers,
    count_sweeps,
    count_transitions,
    model_call_seconds,
    predicted_seconds,
    predicted_wall_seconds,
    use_fused_kernel,
)
from pymc_bdmc.pipeline.path_choice import frozen_log_z
from pymc_bdmc.pipeline.pilot import refreeze, resume_refits, tune
from pymc_bdmc.pipeline.problem import model_problem
from pymc_bdmc.pipeline.results import run_attrs
from pymc_bdmc.pipeline.runs import start_runner
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.results.datatree import build_datatree
from pymc_bdmc.schedules import ADAPTIVE

__all__ = ["VectorizedAIS", "check_plan_fits"]

logger = logging.getLogger("pymc_bdmc")


def observed_values(density) -> int:
    """How many observed values the density's data hold."""
    return int(sum(np.size(value) for value in density.observed_data().values()))


def laplace_start(density, s: Settings) -> bool:
    """Whether a fitted path may start from the posterior's Laplace fit, skipping the prior's.

    From ``tuning.laplace_min_observations`` observed values (fewer make the prior's path cheap),
    and not where the posterior may repeat its modes (sorted draws, a mixture of one family:
    ``ModelDensity.mirrored_modes``): a Gaussian at one copy would miss the others' mass,
    ``log k!`` nats for ``k`` draws or components.
    """
    if (s.base == "prior" or density.periodic
            or observed_values(density) < s.tuning.laplace_min_observations):
        return False
    if density.mirrored_modes:
        logger.debug("No Laplace start: the model sorts values or mixes components of one "
                     "family, so its posterior may have a mode for every order of them.")
        return False
    return True


@dataclass(frozen=True)
class Tuned:
    """The frozen plan, the pilot that froze it (None for a given plan), the Gibbs kernel."""

    plan: AnnealingPlan
    pilot: PilotResult | None
    gibbs: ChromaticGibbs | None


@dataclass(frozen=True)
class Running:
    """What the result needs of a launch: the plan run, and where and how it ran."""

    plan: AnnealingPlan
    runner: AnnealingRunner
    workers: Workers
    fused: bool
    n_groups: int
    possible: PossibleStarts


def check_plan_fits(plan: AnnealingPlan, density: ModelDensity) -> None:
    """Refuse a given plan whose kernels do not act on this model's coordinates."""
    if plan.n_dim != density.n_dim:
        raise BDMCInputError(
            f"The plan acts on {plan.n_dim} unconstrained dimensions but the model has "
            f"{density.n_dim}: a plan only transfers between data sets of the same model."
        )
    if plan.principal_metrics and plan.base is None:
        raise BDMCInputError(
            "The plan's metrics are scales in the principal coordinates of a fitted base, but "
            "the plan has no base: use the plan as AnnealingPlan.from_result "
            "gives it, base included."
        )


class VectorizedAIS:
    """Forward AIS, and reverse AIS from ``theta*`` for BDMC, on the vectorized kernels."""

    labels = RunLabels()

    def prepare(self, job: Job) -> Problem:
        """Compile (the other form where asked, or where the given plan was frozen there)."""
        other = job.reparameterize or (job.plan is not None and job.plan.reparameterized)
        check = None if job.plan is None else (lambda density: check_plan_fits(job.plan,
                                                                               density))
        return model_problem(job, other=other, check=check)

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """The model's other parameterisation on the same ``theta*`` and ``y*``."""
        made = other_parameterization(job.model, problem.density, problem.truth,
                                      job.compile_kwargs, helpers_allowed(job.parallel))
        if made is None:
            return None
        density, simulator, truth, seconds = made
        return Problem(density, simulator, truth, seconds, problem.attrs)

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> Tuned:
        """Pilot and freeze, or re-freeze the search's shared pilot, or take the given plan."""
        density, simulator, streams = problem.density, problem.simulator, job.streams
        x_pilot, parts_pilot, log_mass = possible_prior_start(
            simulator, density, s.pilot_chains, streams["pilot_init"],
            impossible_note=None if problem.truth is None else SIMULATED_DATA_HINT)
        gibbs = gibbs_kernel(density, x_pilot)
        plan = job.plan
        if gibbs is not None and plan is not None:
            check_plan_pins(plan, gibbs)
        if plan is not None:
            logger.debug("Using the given frozen plan (%d steps); no pilot run.", plan.n_steps)
            return Tuned(plan, None, gibbs)
        if memo.tuned is not None and memo.continue_refits:
            memo.continue_refits = False
            plan, pilot = resume_refits(progress, s, streams["pilot"], memo.tuned.plan,
                                        memo.tuned.pilot, density.parts, scale_moves_for(density))
            memo.tuned = Tuned(plan, pilot, None)
            return Tuned(refreeze(plan, pilot, s), pilot, gibbs)
        if memo.tuned is not None:
            pilot = memo.tuned.pilot
            logger.debug("Plan re-frozen on %d steps from an earlier attempt's pilot.", s.n_steps)
            return Tuned(refreeze(memo.tuned.plan, pilot, s), pilot, gibbs)
        if density.periodic and s.base == "fitted":
            raise BDMCInputError(
                f"`base='fitted'` cannot serve {density.periodic}: on a circle (a VonMises "
                "variable) the density repeats along the unconstrained line, and a Gaussian "
                "base there would count every period it reaches. Use `base='auto'` or "
                "`'prior'`, which anneal from the prior.")
        plan, pilot = tune(progress, s, streams["pilot"], x_pilot, parts_pilot, density.parts,
                           ADAPTIVE if s.adaptive else s.betas,
                           discrete=None if gibbs is None else gibbs.bound_to(density.terms),
                           pinned=None if gibbs is None else gibbs.pinned,
                           draw_pilot=PilotDraws(simulator, density, streams["pilot_init"],
                                                 possible=True),
                           fit_base=(s.base != "prior" and gibbs is None and s.adaptive
                                     and not density.periodic),
                           keep_fitted=s.base == "fitted",
                           laplace_first=laplace_start(density, s),
                           moves=scale_moves_for(density), prior_log_mass=log_mass)
        if job.search is not None:
            memo.tuned = Tuned(plan, pilot, None)
        return Tuned(plan, pilot, gibbs)

    def frozen_estimate(self, job: Job, problem: Problem, tuned: Tuned) -> float | None:
        """``log p(y)`` by SMC along the pilot's path with its kernels frozen, from fresh draws.

        Checks a pilot's estimate (:func:`~pymc_bdmc.pipeline.path_choice.frozen_log_z`); None for
        a model with discrete coordinates or without a pilot.
        """
        if tuned.pilot is None or tuned.gibbs is not None:
            return None
        density = problem.density
        return frozen_log_z(job.streams["pilot"], tuned.plan, tuned.pilot, density.parts,
                            lambda n: possible_prior_start(problem.simulator, density, n,
                                                           job.streams["pilot_init"]),
                            scale_moves_for(density))

    def launch(self, job: Job, problem: Problem, tuned: Tuned, attempt: Attempt,
               s: Settings) -> Launch:
        """Exact starts per block of chains, fused kernels from counts, workers from timing."""
        density, truth, streams = problem.density, problem.truth, job.streams
        parallel = job.parallel
        plan, pilot, gibbs = tuned.plan, tuned.pilot, tuned.gibbs
        # Every block of chains has its own streams, so results do not depend on how chains are
        # grouped into batches or split across processes (parallel/streams.py).
        init_blocks = ChainBlocks.spawn(streams["forward_init"], s.chains)
        forward_blocks = ChainBlocks.spawn(streams["forward"], s.chains)
        reverse_blocks = ChainBlocks.spawn(streams["reverse"], s.chains)
        # Each block of chains starts from exact draws of the path's first distribution.
        if plan.base is None:
            x0, parts0 = prior_start_blocks(problem.simulator, density, init_blocks)
        else:
            x0 = np.concatenate([plan.start(g, n) for n, g in
                                 zip(init_blocks.sizes, init_blocks.generators, strict=True)])
            parts0 = density.parts(x0)
        start_draws = ((lambda n, rng: draw_prior(problem.simulator, n, rng)) if plan.base is None
                       else (lambda n, rng: plan.base.sample(rng, n)))
        x0, possible = possible_run_starts(
            x0, parts0, start_draws, density.parts, streams["possible"], density.layout,
            problem.simulator.model, "prior draws" if plan.base is None else "base draws",
            None if truth is None else SIMULATED_DATA_HINT, check=plan.base is None)
        directions = 1 if truth is None else 2
        # Timing chooses workers and fits a search's length to its budget; never the kernel.
        auto = (attempt.fit_length is not None
                or (parallel.cores is None and parallel.executor is None))
        timing = KernelTiming.measure(density, x0, plan, gibbs) if auto else None

        def how_to_run(plan: AnnealingPlan, announce: bool = True):
            n_transitions = count_transitions(plan, directions, s.reverse_spread, gibbs)
            n_sweeps = count_sweeps(plan, directions, s.reverse_spread, gibbs)
            fused = use_fused_kernel(parallel.fused_kernel, density, plan, n_transitions,
                                     n_sweeps)
            # Workers are chosen on the NumPy kernel's time, which a fused kernel does not
            # always cut much (on large models the model calls dominate either way).
            workers = choose_workers(parallel.cores, parallel.executor,
                                     predicted_seconds(timing, n_transitions, n_sweeps,
                                                       plan.n_leapfrog),
                                     len(forward_blocks), announce=announce,
                                     threshold=s.tuning.auto_parallel_seconds)
            seconds = predicted_wall_seconds(timing, n_transitions, n_sweeps, fused,
                                             plan.n_leapfrog,
                                             min(workers.n_workers, len(forward_blocks)))
            return fused, workers, seconds

        fused, workers, seconds = how_to_run(plan, announce=attempt.fit_length is None)
        if attempt.fit_length is not None:  # a search's attempt on a fresh pilot
            steps = plan.n_steps if pilot is None or timing is None else attempt.fit_length(
                plan.n_steps, seconds, pilot.thermodynamic_length)
            if steps < plan.n_steps:
                s = s.with_n_steps(steps)
                plan = refreeze(plan, pilot, s)
            fused, workers, _ = how_to_run(plan)
        runner, groups = start_runner(density, workers, parallel.chains_per_batch,
                                      forward_blocks)
        observed = density.observed_data()  # workers may hold other data from earlier calls
        pending_forward = runner.submit("forward", forward_blocks, x0, plan, observed=observed,
                                        fused_kernel=fused, gibbs=gibbs)
        pending_reverse = None if truth is None else runner.submit(
            "reverse", reverse_blocks, truth.x, plan, observed=observed,
            spread_transitions=s.reverse_spread, fused_kernel=fused, gibbs=gibbs)
        return Launch(
            forward=lambda on_step, on_group: runner.collect(pending_forward, on_step=on_step,
                                                             on_group=on_group),
            reverse=None if truth is None else (
                lambda on_step, on_group: runner.collect(pending_reverse, on_step=on_step,
                                                         on_group=on_group)),
            total=plan.n_steps * len(groups), n_steps=plan.n_steps, settings=s,
            cancel=lambda: runner.cancel(pending_reverse),
            state=Running(plan, runner, workers, fused, len(groups), possible),
            evaluations=lambda: density.n_evaluations + runner.model_calls,
            model_call_seconds=model_call_seconds(density, x0, timing))

    def result(self, job: Job, problem: Problem, tuned: Tuned, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """The bounds, the diagnostics and the result."""
        density, truth, streams = problem.density, problem.truth, job.streams
        running, s, pilot, gibbs = launch.state, launch.settings, tuned.pilot, tuned.gibbs
        plan, forward, reverse = running.plan, outcome.forward, outcome.reverse
        if plan.base is not None:  # report the model's densities, not the path's
            forward = dataclasses.replace(forward, parts=density.parts(forward.x))
            if reverse is not None:
                reverse = dataclasses.replace(reverse, parts=density.parts(reverse.x))
        forward, reverse = running.possible.apply(forward, reverse)
        bounds = evidence_bounds(
            streams["summary"], forward.log_weight,
            None if reverse is None else reverse.log_weight, confidence=s.confidence,
        )
        # Labels only where a stuck reverse run may need to name a coordinate (BDMC).
        labels = None if truth is None else density.layout.coordinate_labels()
        log_ais_diagnostics(bounds, forward, reverse, plan.betas,
                            theta=None if truth is None else truth.x, labels=labels,
                            from_prior=plan.base is None)
        attrs = {
            "compile_time": outcome.compile_time, **problem.attrs, **job.attrs,
            **run_attrs(
                s, density, pilot, outcome.sampling_time, outcome.interrupted,
                algorithm="bdmc" if truth is not None else "ais",
                n_steps=plan.n_steps,
                pilot_time=outcome.pilot_time,
                model_evaluations=density.n_evaluations + running.runner.model_calls,
                workers=running.workers.description,
                chain_groups=running.n_groups,
                fused_kernel=running.fused,
                schedule=("given plan" if pilot is None else "adaptive" if s.adaptive
                          else "fixed"),
                path_start="prior" if plan.base is None else "fitted gaussian",
            ),
        }
        attrs.update(running.possible.attrs)
        if gibbs is not None:
            attrs["kernel"] = "hmc+gibbs"
            attrs["gibbs_colors"] = len(gibbs.colors)
            attrs["gibbs_coordinates"] = gibbs.n_coordinates
            attrs["gibbs_compiled"] = bool(running.fused and gibbs.fusable
                                           and density.can_fuse_gibbs)
            attrs["term_evaluations"] = (density.n_term_evaluations
                                         + running.runner.term_calls)
        return build_datatree(
            rng=streams["summary"], density=density, plan=plan, forward=forward,
            reverse=reverse, bounds=bounds, observed=density.observed_data(),
            generating_values=None if truth is None else generating_values(density, truth),
            attrs=attrs,
        )
