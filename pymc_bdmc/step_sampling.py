"""Driver of ``sample_ais`` / ``sample_bdmc`` when PyMC step methods are the transitions.

Used when ``step=`` is given, or when the model has discrete free variables (PyMC's automatic
assignment then picks Gibbs-type steps for them and a gradient step for the rest). The order of
work mirrors the vectorized path: compile, simulate ``(theta*, y*)`` for BDMC, tune on a
separate pilot population and freeze (:mod:`pymc_bdmc.kernels.pymc_step_pilot`), then run
forward chains from exact prior draws and reverse chains from ``theta*``, each chain through
every temperature on its own random stream, in this process or on the workers of ``cores`` /
``executor`` (:mod:`pymc_bdmc.step_chains`). Without either, the pilot's time per sweep
predicts the run's, and runs predicted to take
:data:`~pymc_bdmc.pipeline.execution.STEP_AUTO_PARALLEL_SECONDS` or more use all cores, as on
the vectorized path (whose workers start faster, and whose threshold is lower).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import pymc as pm
import xarray as xr
from pymc.progress_bar import create_simple_progress

from pymc_bdmc.algorithms.ais import merge_runs
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.pymc_step_pilot import (
    SWEEPS_PER_ANCHOR,
    plan_from_step_pilot,
    run_step_pilot,
)
from pymc_bdmc.kernels.pymc_steps import REVERSAL_DESCRIPTION, StepSpec, StepSweep
from pymc_bdmc.model.checks import check_finite_start, check_positive_int
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.parallel.allocator import retain_freed_memory
from pymc_bdmc.parallel.executors import resolve_workers
from pymc_bdmc.pipeline import execution
from pymc_bdmc.pipeline.auto_steps import search_n_steps
from pymc_bdmc.pipeline.diagnostics import log_step_diagnostics
from pymc_bdmc.pipeline.progress import phase, pilot_phase, progress_enabled
from pymc_bdmc.pipeline.start import draw_prior, generating_values, simulate_truth
from pymc_bdmc.results.datatree import build_datatree
from pymc_bdmc.step_chains import ChainTask, StepRunner, StepRunnerRecipe, run_chains

__all__ = ["DEFAULT_STEP_PILOT_CHAINS", "sample_with_step_methods", "step_methods_dataset"]

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


def _log_assignment(sweep: StepSweep) -> None:
    for rec in sweep.describe():
        logger.info("%s (%s) -> %s; %s.", rec["method"], rec["assigned_by"],
                    ", ".join(rec["variables"]), REVERSAL_DESCRIPTION[rec["reversal"]])
        if rec["reversal"] == "assumed_reversible":
            logger.warning(
                "%s is not a PyMC step method pymc_bdmc knows; it is assumed reversible with "
                "respect to its target (else the upper bound is not valid) and is not tuned.",
                rec["method"],
            )
    logger.info("Sweep: %s; reverse runs apply %s.", sweep_label(sweep),
                sweep_label(sweep, "reverse"))


def sample_with_step_methods(
    *,
    model: pm.Model,
    specs: Sequence[StepSpec],
    settings,
    streams: dict[str, np.random.Generator],
    simulate: bool,
    potentials_in_likelihood: bool,
    pilot_chains: int | None,
    cores: int | None,
    executor=None,
    progressbar: bool,
    compile_kwargs: dict | None,
    search: dict | None = None,
    match_data: bool | int | None = None,
) -> xr.DataTree:
    """Run AIS (``simulate=False``) or BDMC with PyMC step methods; see ``sample_ais``.

    ``match_data``: which simulated data set to certify on
    (:func:`~pymc_bdmc.pipeline.start.simulate_truth`).

    ``search``: the keywords of :func:`~pymc_bdmc.pipeline.auto_steps.search_n_steps`
    (``target_gap``, ``max_time``, ``started``) for ``sample_bdmc(n_steps="auto")``. Every
    attempt then sandwiches the same simulated data through the first attempt's pilot,
    re-frozen onto its length, with fresh chains, as on the vectorized path; the pilot's time
    per sweep predicts the first attempt's, which is shortened where it would not fit.
    """
    s = settings
    # Where the user did not say, the pilot's time per sweep decides: a worker costs seconds to
    # start and build the steps, so only runs predicted to be long use all cores.
    chosen = None if cores is None and executor is None else resolve_workers(cores, executor)
    n_pilot = check_positive_int(DEFAULT_STEP_PILOT_CHAINS if pilot_chains is None
                                 else pilot_chains, "pilot_chains", minimum=2)
    start = time.perf_counter()
    retain_freed_memory()  # as compile_model does for the other entry points
    density = ModelDensity(model, potentials_in_likelihood=potentials_in_likelihood,
                           compile_kwargs=compile_kwargs, gradients=False)
    simulator = ModelSimulator(model, density.layout, compile_kwargs=compile_kwargs)
    truth, match_attrs = None, {}
    if simulate:
        truth, match_attrs = simulate_truth(simulator, model, streams, match_data)
        density.set_observed(truth.observed)
    recipe = StepRunnerRecipe(model, density.layout, tuple(specs), potentials_in_likelihood,
                              None if truth is None else truth.observed, compile_kwargs)
    runner = StepRunner(recipe)
    compile_time = time.perf_counter() - start
    _log_assignment(runner.sweep)

    layout = density.layout
    if truth is not None:
        check_finite_start(runner.parts(truth.x[None, :]), "simulated parameters", layout,
                           truth.x[None, :])
    pilot_memo = {}  # the search's attempts share one pilot

    def draw_pilot(n: int) -> None:
        pilot_memo.clear()
        x = draw_prior(simulator, n, streams["pilot_init"])
        parts = runner.parts(x)
        check_finite_start(parts, "prior draws", layout, x, model=model)
        pilot_memo.update(x=x, log_likelihood=parts.log_likelihood)

    draw_pilot(n_pilot)

    def run(n_steps: int, fit_length=None, chains: int | None = None,
            pilot_chains: int | None = None) -> xr.DataTree:
        run_settings = s if n_steps == s.n_steps else s.with_n_steps(n_steps)
        if chains is not None:
            run_settings = run_settings.with_chains(chains)
        if pilot_chains is not None:  # a fresh, larger pilot replaces the shared one
            draw_pilot(pilot_chains)
        x_pilot = pilot_memo["x"]
        x0 = draw_prior(simulator, run_settings.chains, streams["forward_init"])
        check_finite_start(runner.parts(x0), "prior draws", layout, x0, model=model)
        n_tasks = run_settings.chains * (1 if truth is None else 2)
        start = time.perf_counter()
        progress = create_simple_progress(progress_enabled(progressbar))
        with progress:
            if "pilot" not in pilot_memo:
                with pilot_phase(progress) as report:
                    pilot_memo["pilot"], pilot_memo["states"] = run_step_pilot(
                        streams["pilot"], runner.sweep, layout, x_pilot,
                        pilot_memo["log_likelihood"], on_step=report,
                    )
                pilot = pilot_memo["pilot"]
                pilot_memo["sweep_seconds"] = (time.perf_counter() - start) / (
                    (pilot.n_steps + 1) * len(x_pilot) * SWEEPS_PER_ANCHOR)
                logger.info("Pilot: %d anchor temperatures, %d resamplings, pilot log Z %.3f; "
                            "kernels frozen.", pilot.n_steps + 1, pilot.n_resampled,
                            pilot.log_z)
            pilot = pilot_memo["pilot"]
            # One sweep per chain and temperature.
            predicted = pilot_memo["sweep_seconds"] * run_settings.n_steps * n_tasks
            # Step-method workers cost more to start: their own threshold.
            workers = chosen if chosen is not None else execution.choose_workers(
                None, None, predicted, n_tasks,
                threshold=execution.STEP_AUTO_PARALLEL_SECONDS)
            if fit_length is not None:  # the search's first attempt: fit it to max_time
                steps = fit_length(run_settings.n_steps,
                                   predicted / max(1, min(workers.n_workers, n_tasks)))
                if steps < run_settings.n_steps:
                    run_settings = run_settings.with_n_steps(steps)
            plan = plan_from_step_pilot(pilot, pilot_memo["states"],
                                        "adaptive" if s.adaptive else run_settings.betas,
                                        run_settings.n_steps)
            pilot_time = time.perf_counter() - start
            tasks = [ChainTask("forward", x0[c], rng)
                     for c, rng in enumerate(streams["forward"].spawn(run_settings.chains))]
            if truth is not None:
                tasks += [ChainTask("reverse", truth.x, rng, run_settings.reverse_spread)
                          for rng in streams["reverse"].spawn(run_settings.chains)]
            with phase(progress, "AIS chains", len(tasks)) as advance:
                runs = run_chains(recipe, plan, tasks, workers=workers, runner=runner,
                                  on_chain=lambda _: advance())
        sampling_time = time.perf_counter() - start
        return _step_result(run_settings, runs, plan, pilot, pilot_time, sampling_time,
                            truth=truth, streams=streams, density=density, runner=runner,
                            workers=workers, n_pilot=len(x_pilot),
                            compile_time=compile_time, match_attrs=match_attrs)

    if search is None:
        return run(s.n_steps)
    return search_n_steps(run, **search)


def _step_result(s, runs, plan, pilot, pilot_time, sampling_time, *, truth, streams, density,
                 runner, workers, n_pilot, compile_time, match_attrs) -> xr.DataTree:
    """Bounds, diagnostics and the DataTree of one run's chains."""
    forward = merge_runs(runs[:s.chains])
    reverse = None if truth is None else merge_runs(runs[s.chains:])
    bounds = evidence_bounds(streams["summary"], forward.log_weight,
                             None if reverse is None else reverse.log_weight,
                             confidence=s.confidence)
    log_step_diagnostics(bounds, forward)
    attrs = {
        "compile_time": compile_time,
        "algorithm": "bdmc" if truth is not None else "ais",
        "kernel": "pymc_step_methods",
        "step_methods": sweep_label(runner.sweep),
        "reverse_step_methods": sweep_label(runner.sweep, "reverse"),
        "n_steps": s.n_steps,
        "chains": s.chains,
        "cores": workers.n_workers,
        "workers": workers.description,
        "pilot_chains": n_pilot,
        "pilot_log_z": pilot.log_z,
        "pilot_time": pilot_time,
        "pilot_steps": pilot.n_steps,
        "schedule": "adaptive" if s.adaptive else "fixed",
        "sampling_time": sampling_time,
        **match_attrs,
    }
    generating = None if truth is None else generating_values(density, truth)
    dt = build_datatree(rng=streams["summary"], density=density, plan=plan, forward=forward,
                        reverse=reverse, bounds=bounds, observed=density.observed_data(),
                        generating_values=generating, attrs=attrs)
    dt["step_methods"] = step_methods_dataset(runner.sweep)
    # Which pilot anchor's frozen kernel ran at each temperature.
    dt["annealing"] = dt["annealing"].to_dataset().assign(
        kernel_tuned_at_beta=("step", plan.anchor_betas[plan.anchor_index])
    )
    return dt
