"""Held-out likelihood per case: AIS over each case's latents with the global parameters fixed.

Given ``theta`` the cases are independent, so case ``i``'s annealing path is
``f_t(z_i) = p(z_i | theta) p(y_i | z_i, theta)^beta_t``. Every (chain, case) pair is its own
AIS chain (:mod:`pymc_bdmc.model.cases` lays the flat vector out as one row per pair): its own
exact start, momentum, step-size jitter, Metropolis accept/reject and weight. A joint accept
over all cases would couple them, and the per-case weights would no longer be AIS weights. The
schedule and the kernels are shared by the cases, tuned by their own pilot
(:mod:`pymc_bdmc.kernels.case_pilot`) and frozen before the measured chains start.

Hence, per case, ``E[w_ik] = p(y_i | theta)`` (forward, from prior draws of ``z_i``) and
``E[v_ik] = 1 / p(y_i | theta)`` (reverse, from the ``z_i*`` that generated a simulated
``y_i``): ``lower_i`` and ``upper_i`` are stochastic bounds on ``log p(y_i | theta)``. The cases'
estimators are independent, so the totals over cases are stochastic bounds with the same Markov
guarantees.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xarray as xr
from pymc.backends.arviz import coords_and_dims_for_inferencedata

from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.case_pilot import run_case_pilot
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.tuning import PilotResult, plan_from_pilot, thermodynamic_schedule
from pymc_bdmc.methods.protocol import Job, Launch, Outcome, Problem, RunLabels, SharedPilot
from pymc_bdmc.model.cases import CaseDensity, condition_on_parameters
from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.compile import timed_build
from pymc_bdmc.pipeline.diagnostics import log_heldout_diagnostics
from pymc_bdmc.pipeline.progress import pilot_phase
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.results.datatree import annealing_dataset, named_dataset
from pymc_bdmc.results.heldout import (
    heldout_dataset,
    heldout_posterior_groups,
    heldout_summaries,
)

__all__ = ["DEFAULT_PILOT_CHAINS", "HeldOutAIS"]

logger = logging.getLogger("pymc_bdmc")

#: Default size of each case's pilot population.
DEFAULT_PILOT_CHAINS = 16

SIMULATED_CASES_HINT = (
    "The cases were simulated from the model with the parameters fixed, so its random "
    "generator produced values its own log-density rejects (e.g. draws that round to the edge "
    "of the support). Check the fixed parameter values, or try another `random_seed`."
)


def check_finite_rows(parts: DensityParts, n_cases: int, where: str,
                      hint: str | None = None) -> None:
    """Refuse starting rows (chain, case) whose density is not finite, naming the first."""
    bad = ~(np.isfinite(parts.log_prior) & np.isfinite(parts.log_likelihood))
    if not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    raise BDMCInputError(
        f"The density is not finite for {int(np.count_nonzero(bad))} of {len(bad)} (chain, case) "
        f"pairs of the {where} (first: case {row % n_cases}, log prior "
        f"{parts.log_prior[row]}, log-likelihood {parts.log_likelihood[row]}). "
        + (hint or "Check that the held-out data lie in the support of the likelihood for the "
           "fixed parameters and every latent value the prior allows.")
    )


def case_start(simulator: ModelSimulator, density: CaseDensity, chains: int,
               rng: np.random.Generator, where: str):
    """Exact prior draws of every case's latents, as rows, with their densities."""
    try:
        x = simulator.draw_prior(chains, rng)
    except NotImplementedError as err:
        raise BDMCInputError(
            f"Cannot draw the latent variables exactly from their prior ({err}); give them "
            "distributions with a random method."
        ) from err
    rows = density.layout.to_rows(x)
    parts = density.parts(rows)
    check_finite_rows(parts, density.layout.n_cases, where)
    return rows, parts


@dataclass(frozen=True)
class Tuned:
    """The frozen plan and the pilot that froze it (None for a given plan)."""

    plan: AnnealingPlan
    pilot: PilotResult | None


class HeldOutAIS:
    """Per-case AIS (and BDMC on simulated cases) with the global parameters fixed.

    Parameters
    ----------
    params : mapping
        The global parameters' fixed values.
    data : mapping or None
        Held-out data, or None for the model's own.
    """

    labels = RunLabels()

    def __init__(self, params: Mapping[str, np.ndarray], data: Mapping | None):
        self.params, self.data = params, data

    def prepare(self, job: Job) -> Problem:
        """Condition on the parameters, compile the per-case densities, simulate the cases."""
        def build():
            cond = condition_on_parameters(job.model, self.params, self.data,
                                           simulate=job.simulate)
            if job.plan is not None and job.plan.n_dim != cond.case_size:
                raise BDMCInputError(
                    f"The plan's kernels act on {job.plan.n_dim} latent coordinates per case, "
                    f"but this model has {cond.case_size}: a plan only transfers between runs "
                    "of the same model.")
            density = CaseDensity(cond, compile_kwargs=job.compile_kwargs)
            return cond, density, ModelSimulator(cond.model, density.density.layout,
                                                 compile_kwargs=job.compile_kwargs)

        (cond, density, simulator), seconds = timed_build(build)
        truth = None
        if job.simulate:
            try:
                truth = simulator.draw_joint(job.streams["simulate"])
            except NotImplementedError as err:
                raise BDMCInputError(
                    f"Cannot simulate the cases exactly ({err}); give the latent and observed "
                    "variables distributions with a random method.") from err
            density.density.set_observed(truth.observed)
            check_finite_rows(density.parts(density.layout.to_rows(truth.x[None, :])),
                              cond.n_cases, "simulated latents", hint=SIMULATED_CASES_HINT)
        attrs = {"n_cases": cond.n_cases, "case_dim": cond.case_dim,
                 "fixed_parameters": sorted(cond.params), "simulate": bool(job.simulate)}
        return Problem(density, simulator, truth, seconds, attrs, {"cond": cond})

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """Held-out runs take the model as written."""
        return None

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> Tuned:
        """The per-case pilot and its frozen plan, or the given plan."""
        if job.plan is not None:
            logger.debug("Using the given frozen plan (%d steps); no pilot run.", job.plan.n_steps)
            return Tuned(job.plan, None)
        density, n_cases = problem.density, problem.extra["cond"].n_cases
        x_pilot, parts_pilot = case_start(problem.simulator, density, s.pilot_chains,
                                          job.streams["pilot_init"], "pilot's prior draws")
        with pilot_phase(progress) as report:
            pilot = run_case_pilot(job.streams["pilot"], x_pilot, parts_pilot, density.parts,
                                   n_cases, n_leapfrog=s.n_leapfrog,
                                   target_accept=s.target_accept, jitter=s.step_size_jitter,
                                   on_step=report)
        betas = (thermodynamic_schedule(pilot.betas, pilot.sd_log_likelihood, s.n_steps)
                 if s.adaptive else s.betas)
        plan = plan_from_pilot(pilot, betas, s.n_leapfrog, s.step_size_jitter,
                               s.transitions_per_step)
        logger.debug("Pilot: %d temperatures, %d per-case resamplings, pilot total log "
                    "likelihood %.3f; plan frozen.", pilot.n_steps, pilot.n_resampled,
                    pilot.log_z)
        return Tuned(plan, pilot)

    def launch(self, job: Job, problem: Problem, tuned: Tuned, attempt: Attempt,
               s: Settings) -> Launch:
        """Exact starts of every (chain, case) pair, and both directions' runs in process."""
        density, truth, streams, plan = problem.density, problem.truth, job.streams, tuned.plan
        x0, parts0 = case_start(problem.simulator, density, s.chains, streams["forward_init"],
                                "prior draws")
        parts_fn = density.parts

        def forward_run(on_step, on_group):
            return ais_forward(streams["forward"], x0, parts0, plan.betas,
                               plan.transition(parts_fn), on_step=on_step)

        start_rows = (None if truth is None
                      else np.tile(density.layout.to_rows(truth.x[None, :]), (s.chains, 1)))

        def reverse_run(on_step, on_group):
            return ais_reverse(streams["reverse"], start_rows, len(start_rows), plan.betas,
                               plan.transition(parts_fn), parts_fn, on_step=on_step,
                               spread_transitions=s.reverse_spread)

        return Launch(forward_run, None if truth is None else reverse_run, plan.n_steps,
                      plan.n_steps, s)

    def result(self, job: Job, problem: Problem, tuned: Tuned, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """Per-case bounds and totals, the posterior groups and the plan."""
        density, truth, streams, s = problem.density, problem.truth, job.streams, launch.settings
        cond, plan, pilot = problem.extra["cond"], tuned.plan, tuned.pilot
        forward, reverse, n_cases = outcome.forward, outcome.reverse, cond.n_cases
        summary = heldout_summaries(
            streams["summary"], forward.log_weight.reshape(s.chains, n_cases),
            None if reverse is None else reverse.log_weight.reshape(s.chains, n_cases),
            s.confidence)
        log_heldout_diagnostics(forward, reverse, summary, s.chains)
        attrs = {
            **job.attrs, "compile_time": outcome.compile_time, **problem.attrs,
            "algorithm": "heldout_bdmc" if truth is not None else "heldout_ais",
            "kernel": "hmc", "n_steps": plan.n_steps, "chains": s.chains,
            "pilot_chains": s.pilot_chains,
            "pilot_log_z": np.nan if pilot is None else pilot.log_z,
            "pilot_steps": 0 if pilot is None else pilot.n_steps,
            "schedule": "given plan" if pilot is None else "adaptive" if s.adaptive else "fixed",
            "target_accept": s.target_accept, "confidence": s.confidence,
            "sampling_time": outcome.sampling_time, "model_evaluations": density.n_evaluations,
            "batching": density.batching, "interrupted": outcome.interrupted,
        }
        attrs = {k: v for k, v in attrs.items() if v is not None}
        dt = heldout_posterior_groups(streams["summary"], density, forward, s.chains,
                                      density.density.observed_data(), attrs)
        coords, dims = coords_and_dims_for_inferencedata(cond.model)
        coords = {**coords, cond.case_dim: cond.case_coords}
        if truth is not None:
            generating = {k: v[0] for k, v in density.density.constrain(truth.x[None, :]).items()}
            dt["generating_values"] = named_dataset(generating, dims, coords)
        dt["fixed_parameters"] = named_dataset(cond.params, dims, coords)
        dt["heldout"] = heldout_dataset(summary, forward, reverse, cond, s.chains, attrs)
        dt["annealing"] = annealing_dataset(plan, forward, reverse, density.layout.labels)
        return dt
