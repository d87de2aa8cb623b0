"""AIS and BDMC whose transitions are PyMC's own step methods (any model, discrete included).

Used when ``step=`` is given, or when the model has discrete free variables the vectorized Gibbs
kernel cannot enumerate (PyMC's automatic assignment then picks Gibbs-type steps for them and a
gradient step for the rest). The steps are rebuilt on a tempered clone of the model, tuned on a
pilot population at a few anchor temperatures and frozen
(:mod:`pymc_bdmc.kernels.pymc_step_pilot`). Each chain runs through every temperature on its own
random stream, in this process or on workers (:mod:`pymc_bdmc.step_chains`); the pilot's time
per sweep predicts the run's, which decides between them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from pymc_bdmc.algorithms.ais import merge_runs
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.pymc_step_pilot import (
    SWEEPS_PER_ANCHOR,
    plan_from_step_pilot,
    run_step_pilot,
)
from pymc_bdmc.kernels.pymc_steps import REVERSAL_DESCRIPTION, StepSpec, StepSweep
from pymc_bdmc.methods.protocol import Job, Launch, Outcome, Problem, RunLabels, SharedPilot
from pymc_bdmc.model.checks import check_finite_start
from pymc_bdmc.parallel.executors import resolve_workers
from pymc_bdmc.pipeline import execution
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.compile import timed_build
from pymc_bdmc.pipeline.diagnostics import log_step_diagnostics
from pymc_bdmc.pipeline.draws import (
    draw_prior,
    generating_values,
    possible_prior_start,
    possible_run_starts,
)
from pymc_bdmc.pipeline.problem import model_problem
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.results.datatree import build_datatree
from pymc_bdmc.step_chains import ChainTask, StepRunner, StepRunnerRecipe, run_chains

__all__ = ["DEFAULT_STEP_PILOT_CHAINS", "StepMethodAIS", "step_methods_dataset", "sweep_label"]

logger = logging.getLogger("pymc_bdmc")

#: Default pilot population when step methods are the transitions (each particle costs sweeps
#: of Python-driven steps, so it is smaller than the vectorized pilot's).
DEFAULT_STEP_PILOT_CHAINS = 16


def sweep_label(sweep: StepSweep, direction: str = "forward") -> str:
    """``"NUTS[mu, tau_log__] -> CategoricalGibbsMetropolis[z]"`` in the order applied."""
    labels = [spec.label() for spec in sweep.specs]
    return " -> ".join(labels if direction == "forward" else labels[::-1])


def step_methods_dataset(sweep: StepSweep) -> xr.Dataset:
    """Which step method updates which variable, in sweep order, and how it is reversed.

    Dims ``step_method`` (position in the forward sweep) and ``variable`` (value variables).
    """
    records = sweep.describe()
    position = {name: i for i, rec in enumerate(records) for name in rec["variables"]}
    names = list(position)
    return xr.Dataset(
        {
            "method": ("step_method", [rec["method"] for rec in records]),
            "variables": ("step_method", [", ".join(rec["variables"]) for rec in records]),
            "assigned_by": ("step_method", [rec["assigned_by"] for rec in records]),
            "reversal": ("step_method", [REVERSAL_DESCRIPTION[rec["reversal"]]
                                         for rec in records]),
            "step_method_of_variable": ("variable", [position[n] for n in names]),
        },
        coords={"step_method": np.arange(len(records)), "variable": names},
        attrs={"forward_sweep": sweep_label(sweep), "reverse_sweep": sweep_label(sweep, "reverse")},
    )


def log_assignment(sweep: StepSweep) -> None:
    """Log which step updates which variable, and how the reverse runs reverse it."""
    for rec in sweep.describe():
        logger.debug("%s (%s) -> %s; %s.", rec["method"], rec["assigned_by"],
                    ", ".join(rec["variables"]), REVERSAL_DESCRIPTION[rec["reversal"]])
        if rec["reversal"] == "assumed_reversible":
            logger.warning(
                "%s is not a PyMC step method pymc_bdmc knows; it is assumed reversible with "
                "respect to its target (else the upper bound is not valid) and is not tuned.",
                rec["method"],
            )
    logger.debug("Sweep: %s; reverse runs apply %s.", sweep_label(sweep),
                sweep_label(sweep, "reverse"))


@dataclass(frozen=True)
class Tuned:
    """The step pilot, its frozen sampling states and the time one sweep took in it."""

    pilot: object
    states: object
    sweep_seconds: float
    n_pilot: int


class StepMethodAIS:
    """AIS (and BDMC) with PyMC step methods as the transitions.

    Parameters
    ----------
    specs : sequence of StepSpec
        The step methods and their variables
        (:func:`~pymc_bdmc.kernels.pymc_steps.resolve_step_methods`).
    pilot_chains : int
        Pilot particles.
    """

    labels = RunLabels(unit="chain", forward_label="AIS chains")

    def __init__(self, specs: Sequence[StepSpec], pilot_chains: int = DEFAULT_STEP_PILOT_CHAINS):
        self.specs = tuple(specs)
        self.pilot_chains = pilot_chains

    def prepare(self, job: Job) -> Problem:
        """Compile the densities and the step methods (on ``y*`` for BDMC); check the start."""
        problem = model_problem(job, gradients=False, check_start=False)
        density, truth = problem.density, problem.truth
        recipe = StepRunnerRecipe(job.model, density.layout, self.specs,
                                  job.potentials_in_likelihood,
                                  None if truth is None else truth.observed, job.compile_kwargs)
        runner, seconds = timed_build(lambda: StepRunner(recipe))
        problem.compile_time += seconds
        problem.extra.update(recipe=recipe, runner=runner)
        log_assignment(runner.sweep)
        if truth is not None:
            check_finite_start(runner.parts(truth.x[None, :]), "simulated parameters",
                               density.layout, truth.x[None, :])
        return problem

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """Step methods run the model as written."""
        return None

    def _draw_pilot(self, job: Job, problem: Problem, n: int, memo: SharedPilot) -> None:
        """``n`` exact prior draws for a (fresh) pilot, from the pilot's own stream.

        Restricted to where the data are possible, as the runs' starts are
        (:func:`~pymc_bdmc.pipeline.draws.possible_prior_start`): the log of that prior mass
        goes on the pilot's estimate of ``log p(y)``.
        """
        x, parts, log_mass = possible_prior_start(
            problem.simulator, problem.density, n, job.streams["pilot_init"],
            parts_fn=problem.extra["runner"].parts)
        memo.data.update(x=x, log_likelihood=parts.log_likelihood, log_mass=log_mass)

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> Tuned:
        """The step pilot (once per search, unless a fresh larger one is asked for)."""
        if "x" not in memo.data:
            self._draw_pilot(job, problem, attempt.pilot_chains or self.pilot_chains, memo)
        x_pilot = memo.data["x"]
        if memo.tuned is None:
            start = time.perf_counter()
            with pilot_phase(progress) as report:
                pilot, states = run_step_pilot(
                    job.streams["pilot"], problem.extra["runner"].sweep,
                    problem.density.layout, x_pilot, memo.data["log_likelihood"],
                    on_step=report)
            pilot = dataclasses.replace(pilot, log_z=pilot.log_z + memo.data["log_mass"])
            sweep_seconds = (time.perf_counter() - start) / (
                (pilot.n_steps + 1) * len(x_pilot) * SWEEPS_PER_ANCHOR)
            logger.debug("Pilot: %d anchor temperatures, %d resamplings, pilot log Z %.3f; "
                        "kernels frozen.", pilot.n_steps + 1, pilot.n_resampled, pilot.log_z)
            memo.tuned = Tuned(pilot, states, sweep_seconds, len(x_pilot))
        return memo.tuned

    def launch(self, job: Job, problem: Problem, tuned: Tuned, attempt: Attempt,
               s: Settings) -> Launch:
        """Starts, workers from the pilot's time per sweep, the frozen plan and the chains."""
        density, truth, streams = problem.density, problem.truth, job.streams
        runner = problem.extra["runner"]
        x0 = draw_prior(problem.simulator, s.chains, streams["forward_init"])
        x0, possible = possible_run_starts(
            x0, runner.parts(x0), lambda n, rng: draw_prior(problem.simulator, n, rng),
            runner.parts, streams["possible"], density.layout, job.model)
        n_tasks = s.chains * (1 if truth is None else 2)
        # One sweep per chain and temperature; step-method workers cost more to start.
        predicted = tuned.sweep_seconds * s.n_steps * n_tasks
        parallel = job.parallel
        workers = (resolve_workers(parallel.cores, parallel.executor)
                   if parallel.cores is not None or parallel.executor is not None
                   else execution.choose_workers(
                       None, None, predicted, n_tasks,
                       threshold=s.tuning.step_auto_parallel_seconds))
        if attempt.fit_length is not None:  # a search's first attempt: fit it to max_time
            steps = attempt.fit_length(s.n_steps,
                                       predicted / max(1, min(workers.n_workers, n_tasks)))
            if steps < s.n_steps:
                s = s.with_n_steps(steps)
        plan = plan_from_step_pilot(tuned.pilot, tuned.states,
                                    "adaptive" if job.settings.adaptive else s.betas, s.n_steps)
        tasks = [ChainTask("forward", x0[c], rng)
                 for c, rng in enumerate(streams["forward"].spawn(s.chains))]
        if truth is not None:
            tasks += [ChainTask("reverse", truth.x, rng, s.reverse_spread)
                      for rng in streams["reverse"].spawn(s.chains)]

        def run_all(on_step, on_group):
            return run_chains(problem.extra["recipe"], plan, tasks, workers=workers,
                              runner=runner, on_chain=lambda _: on_step())

        return Launch(run_all, None, len(tasks), s.n_steps, s,
                      state={"plan": plan, "workers": workers, "possible": possible})

    def result(self, job: Job, problem: Problem, tuned: Tuned, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """Bounds, diagnostics and the DataTree of the run's chains."""
        s, density, truth, streams = launch.settings, problem.density, problem.truth, job.streams
        plan, workers, runs = launch.state["plan"], launch.state["workers"], outcome.forward
        sweep = problem.extra["runner"].sweep
        forward = merge_runs(runs[:s.chains])
        reverse = None if truth is None else merge_runs(runs[s.chains:])
        possible = launch.state["possible"]
        forward, reverse = possible.apply(forward, reverse)
        bounds = evidence_bounds(streams["summary"], forward.log_weight,
                                 None if reverse is None else reverse.log_weight,
                                 confidence=s.confidence)
        log_step_diagnostics(bounds, forward)
        attrs = {
            "compile_time": outcome.compile_time,
            "algorithm": "bdmc" if truth is not None else "ais",
            "kernel": "pymc_step_methods",
            "step_methods": sweep_label(sweep),
            "reverse_step_methods": sweep_label(sweep, "reverse"),
            "n_steps": s.n_steps,
            "chains": s.chains,
            "cores": workers.n_workers,
            "workers": workers.description,
            "pilot_chains": tuned.n_pilot,
            "pilot_log_z": tuned.pilot.log_z,
            "pilot_time": outcome.pilot_time,
            "pilot_steps": tuned.pilot.n_steps,
            "schedule": "adaptive" if s.adaptive else "fixed",
            "sampling_time": outcome.sampling_time,
            **problem.attrs, **job.attrs, **possible.attrs,
        }
        generating = None if truth is None else generating_values(density, truth)
        dt = build_datatree(rng=streams["summary"], density=density, plan=plan, forward=forward,
                            reverse=reverse, bounds=bounds, observed=density.observed_data(),
                            generating_values=generating, attrs=attrs)
        dt["step_methods"] = step_methods_dataset(sweep)
        # Which pilot anchor's frozen kernel ran at each temperature.
        dt["annealing"] = dt["annealing"].to_dataset().assign(
            kernel_tuned_at_beta=("step", plan.anchor_betas[plan.anchor_index])
        )
        return dt
