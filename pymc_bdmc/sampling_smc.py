"""SMC evidence: ``sample_smc_evidence`` (lower bound), and ``sample_bdmc(method="smc")``'s driver.

The entry point is named ``sample_smc_evidence``, not ``sample_smc``: :func:`pymc.sample_smc`
already exists and returns posterior draws from PyMC's own SMC, with its evidence as a by-product;
this function's product is the evidence, with the BDMC package's guarantees (exact prior start,
frozen pilot-tuned kernels, the same result layout as :func:`pymc_bdmc.sample_ais`). A
``method="smc"`` switch on ``sample_ais`` would have been shorter but would make a function named
after one algorithm run another. For the sandwich, ``sample_bdmc(method="smc")`` runs the forward
SMC and the sequential harmonic mean estimator (reverse SMC) of
:mod:`pymc_bdmc.algorithms.smc`.

Seeding, checks, compilation, the pilot, progress and interrupts are the shared stages of
:mod:`pymc_bdmc.pipeline`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pymc as pm
import xarray as xr
from pymc.model import modelcontext
from pymc.progress_bar import create_simple_progress

from pymc_bdmc.algorithms.smc import (
    DataPointPath,
    TemperingPath,
    merge_smc_runs,
    smc_forward,
    smc_reverse,
)
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.model.checks import check_model, check_positive_int
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.smc_groups import population_blocks, smc_tasks
from pymc_bdmc.pipeline.diagnostics import log_smc_diagnostics
from pymc_bdmc.pipeline.execution import (
    KernelTiming,
    choose_workers,
    count_sweeps,
    count_transitions,
    predicted_seconds,
)
from pymc_bdmc.pipeline.interrupts import no_bound_if_interrupted
from pymc_bdmc.pipeline.pilot import tune
from pymc_bdmc.pipeline.progress import StepCounter, progress_enabled
from pymc_bdmc.pipeline.results import run_attrs
from pymc_bdmc.pipeline.runs import forward_and_reverse, start_runner
from pymc_bdmc.pipeline.seeding import streams as make_streams
from pymc_bdmc.pipeline.settings import Parallel, Settings, parallel_settings, validate
from pymc_bdmc.pipeline.start import (
    compile_model,
    generating_values,
    gibbs_kernel,
    prior_start,
    vectorized_discrete,
)
from pymc_bdmc.results.datatree import build_smc_datatree
from pymc_bdmc.schedules import ADAPTIVE, ScheduleName

__all__ = ["sample_smc_evidence"]

logger = logging.getLogger("pymc_bdmc")

PathName = Literal["tempering", "data"]

#: Defaults of the SMC runs: fewer stages than AIS (resampling restores the particles' balance),
#: more transitions per stage (they must diversify the copies made by resampling).
SMC_N_STEPS = 100
SMC_CHAINS = 4
SMC_PARTICLES = 128
SMC_TRANSITIONS_PER_STEP = 5

#: How the SMC runs are named in progress rows and interrupt messages.
SMC_RUNS = {"algorithm": "SMC", "reverse_label": "Reverse SMC (SHME)", "unit": "stage"}


@dataclass(frozen=True)
class SMCSettings:
    """Validated SMC-specific options."""

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


def run_smc(
    *,
    settings: Settings,
    smc: SMCSettings,
    density: ModelDensity,
    simulator: ModelSimulator,
    streams: dict[str, np.random.Generator],
    truth: JointDraw | None,
    progressbar: bool,
    attrs: dict,
    parallel: Parallel | None = None,
) -> xr.DataTree:
    """Pilot, forward SMC and (given ``truth``) reverse SMC; the result as a DataTree."""
    s = settings
    x_pilot, parts_pilot = prior_start(simulator, density, s.pilot_chains,
                                       streams["pilot_init"])
    x0, parts0 = prior_start(simulator, density, s.chains * smc.particles,
                             streams["forward_init"])
    if smc.path == "data":
        n_obs = density.n_observations
        path = DataPointPath.in_blocks(n_obs, s.n_steps)
        # Kernels for "the first n observations" are tuned where the tempered path has the
        # same share of the likelihood, beta = n / N.
        schedule = path.n_included / n_obs
        parts0 = density.weighted_parts(x0, path.observation_weights(0))

        def target_parts(x):
            return density.weighted_parts(x, path.observation_weights(path.n_steps))
    else:
        schedule = ADAPTIVE if s.adaptive else s.betas
        target_parts = density.parts

    start = time.perf_counter()
    done = StepCounter()
    progress = create_simple_progress(progress_enabled(progressbar))
    n_steps = path.n_steps if smc.path == "data" else s.n_steps
    # Discrete variables (tempering path only, checked earlier): Gibbs sweeps around HMC.
    gibbs = gibbs_kernel(density, x_pilot)
    discrete = None if gibbs is None else gibbs.bound_to(density.terms)
    where = {"workers": "this process", "chain_groups": 1}
    with progress, no_bound_if_interrupted(done, n_steps, "SMC"):
        plan, pilot = tune(progress, s, streams["pilot"], x_pilot, parts_pilot, density.parts,
                           schedule, discrete=discrete,
                           pinned=None if gibbs is None else gibbs.pinned,
                           draw_pilot=lambda n: prior_start(simulator, density, n,
                                                            streams["pilot_init"]),
                           moves=scale_moves_for(density) if smc.path == "tempering" else None)
        if smc.path == "data":
            transition = plan.observation_transition(density.weighted_parts,
                                                     path.observation_weights)

            def forward_run(on_step, on_group):
                return smc_forward(streams["forward"], x0, parts0, path, transition,
                                   chains=s.chains, ess_threshold=smc.ess_threshold,
                                   on_step=on_step)

            def reverse_run(on_step, on_group):
                return smc_reverse(streams["reverse"], truth.x, smc.particles, path,
                                   transition, target_parts, chains=s.chains,
                                   ess_threshold=smc.ess_threshold,
                                   spread_transitions=s.reverse_spread, on_step=on_step)

            forward, reverse, interrupted = forward_and_reverse(
                progress, done, path.n_steps, forward_run,
                None if truth is None else reverse_run, **SMC_RUNS)
        else:
            path = TemperingPath(plan.betas)
            forward, reverse, interrupted, where = _tempering_runs(
                progress, done, s, smc, density, plan, gibbs, streams, x0, truth,
                parallel or Parallel())
    sampling_time = time.perf_counter() - start
    if smc.path == "data":  # the last stage reweights without a move: record f_T's densities
        forward = dataclasses.replace(forward, parts=target_parts(forward.x))

    bounds = evidence_bounds(
        streams["summary"], forward.log_weight,
        None if reverse is None else reverse.log_weight, confidence=s.confidence,
    )
    log_smc_diagnostics(bounds, forward, reverse, smc.path)
    attrs = {
        **attrs,
        **run_attrs(
            s, density, pilot, sampling_time, interrupted,
            algorithm="bdmc" if truth is not None else "smc",
            method="smc",
            path=smc.path,
            n_steps=path.n_steps,
            particles=smc.particles,
            ess_threshold=smc.ess_threshold,
            **where,
            schedule=("data blocks" if smc.path == "data"
                      else "adaptive" if s.adaptive else "fixed"),
        ),
    }
    if gibbs is not None:
        attrs["kernel"] = "hmc+gibbs"
        attrs["gibbs_colors"] = len(gibbs.colors)
        attrs["gibbs_coordinates"] = gibbs.n_coordinates
    return build_smc_datatree(
        rng=streams["summary"],
        density=density,
        plan=plan,
        path=path,
        forward=forward,
        reverse=reverse,
        bounds=bounds,
        ess_threshold=smc.ess_threshold,
        observed=density.observed_data(),
        generating_values=None if truth is None else generating_values(density, truth),
        attrs=attrs,
    )


def _tempering_runs(progress, done: StepCounter, s: Settings, smc: SMCSettings,
                    density: ModelDensity, plan, gibbs, streams, x0: np.ndarray,
                    truth: JointDraw | None, parallel: Parallel):
    """Forward and reverse SMC on the tempering path, populations in groups here or on workers.

    Returns ``(forward, reverse, interrupted, where)``, ``where`` the attrs saying where the
    populations ran.
    """
    directions = 1 if truth is None else 2
    n_transitions = count_transitions(plan, directions, s.reverse_spread)
    auto = parallel.cores is None and parallel.executor is None
    timing = KernelTiming.measure(density, x0, plan, gibbs) if auto else None
    n_sweeps = count_sweeps(gibbs, n_transitions, plan)
    workers = choose_workers(parallel.cores, parallel.executor,
                             predicted_seconds(timing, n_transitions, n_sweeps,
                                               plan.n_leapfrog), s.chains)
    forward_blocks = population_blocks(streams["forward"], s.chains, smc.particles)
    reverse_blocks = population_blocks(streams["reverse"], s.chains, smc.particles)
    runner, groups = start_runner(density, workers, parallel.chains_per_batch, forward_blocks,
                                  "SMC populations")
    observed = density.observed_data()  # workers may hold other data from earlier calls
    pending_forward = runner.submit_tasks(smc_tasks(
        "forward", forward_blocks, groups, x0, plan, smc.ess_threshold, observed=observed,
        gibbs=gibbs))
    pending_reverse = None if truth is None else runner.submit_tasks(smc_tasks(
        "reverse", reverse_blocks, groups, truth.x, plan, smc.ess_threshold, observed=observed,
        spread_transitions=s.reverse_spread, gibbs=gibbs))
    forward, reverse, interrupted = forward_and_reverse(
        progress, done, plan.n_steps * len(groups),
        lambda on_step, on_group: runner.collect(pending_forward, on_step=on_step,
                                                 on_group=on_group, merge=merge_smc_runs),
        None if truth is None else (
            lambda on_step, on_group: runner.collect(pending_reverse, on_step=on_step,
                                                     on_group=on_group, merge=merge_smc_runs)),
        cancel=lambda: runner.cancel(pending_reverse), **SMC_RUNS)
    return forward, reverse, interrupted, {
        "workers": workers.description, "chain_groups": len(groups),
        "model_evaluations": density.n_evaluations + runner.model_calls}


def resolve_defaults(method: str, n_steps, chains, transitions_per_step, schedule):
    """``sample_bdmc``'s defaults, which differ between AIS and SMC.

    ``n_steps="auto"`` is the method's default, or the length of a schedule array;
    ``chains=None`` and ``transitions_per_step=None`` take the method's default. An explicit
    ``n_steps=None`` is kept (valid only with a schedule array).
    """
    defaults = ((SMC_N_STEPS, SMC_CHAINS, SMC_TRANSITIONS_PER_STEP) if method == "smc"
                else (1000, 32, 2))
    if isinstance(n_steps, str) and n_steps == "auto":
        n_steps = defaults[0] if isinstance(schedule, str) else None
    return (n_steps, defaults[1] if chains is None else chains,
            defaults[2] if transitions_per_step is None else transitions_per_step)


def sample_smc_evidence(
    n_steps: int | None = SMC_N_STEPS,
    particles: int = SMC_PARTICLES,
    *,
    chains: int = SMC_CHAINS,
    model: pm.Model | None = None,
    path: PathName = "tempering",
    ess_threshold: float = 0.5,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int = SMC_TRANSITIONS_PER_STEP,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    potentials_in_likelihood: bool = False,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
) -> xr.DataTree:
    """Estimate a stochastic lower bound on ``log p(y)`` by sequential Monte Carlo.

    Runs ``chains`` independent SMC populations of ``particles`` particles from exact prior
    draws to the posterior, evaluated together in one batched call: reweight, resample
    (systematically) when the effective sample size drops below ``ess_threshold * particles``,
    and move with HMC kernels tuned on a separate pilot run and then frozen.

    Parameters
    ----------
    n_steps : int, default 100
        Number of SMC stages. With ``path="data"``, the number of blocks in which the
        observations enter (at most one stage per observation). Ignored if ``schedule`` is an
        array, whose length then sets it (pass ``None``).
    particles : int, default 128
        Particles per population.
    chains : int, default 4
        Independent populations; the bound averages their estimates, and their spread gives
        the standard errors.
    model : pm.Model, optional
        The model; taken from the ``with`` context when omitted. It is never modified.
    path : {"tempering", "data"}, default "tempering"
        ``"tempering"``: ``p(x) p(y|x)^beta`` over the ``schedule``. ``"data"``: data-point
        tempering, the observations entering in data order along the leading data dimension
        that every observed variable must share (a clear error otherwise).
    ess_threshold : float, default 0.5
        Resampling threshold, as a fraction of ``particles`` (0 never resamples: AIS).
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures of the tempering path (see :func:`pymc_bdmc.sample_ais`).
    n_leapfrog : int, optional
        Leapfrog steps per HMC transition; by default chosen by the pilot (see
        :func:`pymc_bdmc.sample_ais`).
    transitions_per_step : int, default 5
        HMC transitions at each stage.
    target_accept : float, default 0.9
    step_size_jitter : float, default 0.5
    pilot_chains : int, optional
        Size of the pilot population (default ``max(chains, 64)``).
    confidence : float, default 0.95
    potentials_in_likelihood : bool, default False
        Declare that the model's ``pm.Potential`` terms are likelihood terms (tempering only).
    random_seed : int, array_like of int, SeedSequence or Generator, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
    compile_kwargs : dict, optional
    cores : int, optional
        Local worker processes running the populations (tempering path). Default: all cores
        when the run is predicted to take over 20 s, otherwise this process. Each population
        has its own random streams, so a seed gives the same result whatever ``cores``.
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Run the populations on this executor instead, e.g. a Dask cluster (tempering path).
    chains_per_batch : int, optional
        Most particles evaluated together in one batched model call (whole populations),
        which bounds memory (tempering path).

    Returns
    -------
    xarray.DataTree
        With groups ``posterior`` (final particles resampled by weight), ``sample_stats``,
        ``observed_data``, ``evidence`` (``lower``; ``upper`` and ``gap`` are NaN; per-population
        ``log_weight_forward`` over ``smc_chain``) and ``smc`` (per-stage diagnostics, dim
        ``stage``).

    Notes
    -----
    Each population's estimate ``Z^ = prod_t sum_k W_k g_k`` satisfies ``E[Z^] = p(y)``, so
    ``lower = log mean_c Z^_c`` is a stochastic lower bound exactly as for AIS (Grosse,
    Ghahramani & Adams 2015, §3.4, §4.1). See :mod:`pymc_bdmc.algorithms.smc`.

    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    ...     result = pmb.sample_smc_evidence(n_steps=20, particles=32, random_seed=1,
    ...                                      progressbar=False)
    >>> float(result["evidence"]["lower"]) < 0
    True
    """
    model = modelcontext(model)
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter, pilot_chains, confidence)
    smc = validate_smc(particles, path, ess_threshold, schedule)
    gibbs = vectorized_discrete(model, None)
    check_model(model, potentials_in_likelihood=potentials_in_likelihood,
                gradient_kernel=not gibbs)
    check_smc_model(model, smc, discrete=gibbs)
    parallel = parallel_settings(cores, executor, chains_per_batch, False, None, smc)
    streams = make_streams(random_seed)
    density, simulator, compile_time = compile_model(model, potentials_in_likelihood,
                                                     compile_kwargs)
    check_data_path(density, smc)
    return run_smc(settings=settings, smc=smc, density=density, simulator=simulator,
                   streams=streams, truth=None, progressbar=progressbar,
                   attrs={"compile_time": compile_time}, parallel=parallel)

