"""User entry points: ``sample_ais`` (lower bound on real data) and ``sample_bdmc`` (sandwich).

This module is the driver: seeding, checks, compilation, progress, timing and result assembly.
The algorithms themselves live in :mod:`pymc_bdmc.algorithms` and :mod:`pymc_bdmc.kernels`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pymc as pm
import xarray as xr
from pymc.model import modelcontext
from pymc.progress_bar import create_simple_progress

from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.hmc import hmc_step
from pymc_bdmc.kernels.pymc_steps import has_discrete_free_variables, resolve_step_methods
from pymc_bdmc.kernels.tuning import AnnealingPlan, tune_plan
from pymc_bdmc.model.checks import (
    BDMCInputError,
    check_finite_start,
    check_model,
    check_positive_int,
    unsampleable_prior_message,
)
from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.discrete import UnsupportedDiscrete, discrete_coordinates
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.annealing import AnnealingRunner, DensityRecipe
from pymc_bdmc.parallel.executors import IN_PROCESS, Workers, resolve_workers
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.results.datatree import build_datatree
from pymc_bdmc.schedules import ADAPTIVE, ScheduleName, make_schedule
from pymc_bdmc.step_sampling import sample_with_step_methods

__all__ = ["sample_ais", "sample_bdmc"]

logger = logging.getLogger("pymc_bdmc")

#: HMC transitions at beta=1 that spread reverse chains out from the exact sample (they keep
#: each chain's start an exact posterior draw, and decorrelate the reverse weights).
REVERSE_SPREAD_TRANSITIONS = 10

#: Advice when the model's own simulated (theta*, y*) has a non-finite density.
_SIMULATED_START_HINT = (
    "The data were simulated from the model itself, so its random generator produced values "
    "its own log-density rejects: typically draws that round to the edge of the support (e.g. "
    "Beta or Dirichlet draws equal to 0 or 1, Gamma draws equal to 0, under extreme "
    "parameters). Choose priors that keep the parameters away from such regions, or try "
    "another `random_seed` if this is rare."
)

_STREAMS = ("simulate", "pilot_init", "pilot", "forward_init", "forward", "reverse", "summary")

#: With ``cores=None``, chains go to worker processes only when the run is predicted to take
#: longer than this (seconds): starting workers costs a few seconds each (import, compilation).
AUTO_PARALLEL_SECONDS = 20.0
#: With ``fused_kernel=None``, the fused kernel is compiled when the predicted saving exceeds
#: this multiple of the model's own compilation time (compiling it costs about 1-2 times that).
FUSED_PAYBACK = 2.0
#: A fused transition, measured, costs about this multiple of its model calls alone (1.2 on a
#: 4-parameter regression, 1.6 on the 375-parameter low-rank model).
FUSED_CALL_OVERHEAD = 1.6
#: Share of a NumPy Gibbs sweep's time the compiled color updates save (measured 44% on the
#: binary-attributes model, 750 parameters, 16 chains).
FUSED_SWEEP_SAVING = 0.4


@dataclass(frozen=True)
class _Settings:
    n_steps: int
    chains: int
    betas: np.ndarray
    n_leapfrog: int | None
    transitions_per_step: int
    reverse_spread: int
    target_accept: float
    step_size_jitter: float
    pilot_chains: int
    confidence: float
    adaptive: bool


def _validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step, target_accept,
              step_size_jitter, pilot_chains, confidence) -> _Settings:
    chains = check_positive_int(chains, "chains")
    if not isinstance(schedule, str) and n_steps is not None:
        n_steps = check_positive_int(n_steps, "n_steps")
    betas = make_schedule(schedule, n_steps)
    if n_leapfrog is not None:  # None: the pilot chooses
        n_leapfrog = check_positive_int(n_leapfrog, "n_leapfrog")
    transitions_per_step = check_positive_int(transitions_per_step, "transitions_per_step")
    if not 0 < target_accept < 1:
        raise BDMCInputError(f"`target_accept` must be in (0, 1), got {target_accept}.")
    if not 0 <= step_size_jitter < 1:
        raise BDMCInputError(f"`step_size_jitter` must be in [0, 1), got {step_size_jitter}.")
    if not 0 < confidence < 1:
        raise BDMCInputError(f"`confidence` must be in (0, 1), got {confidence}.")
    pilot_chains = check_positive_int(
        max(chains, 64) if pilot_chains is None else pilot_chains, "pilot_chains", minimum=2
    )
    return _Settings(len(betas) - 1, chains, betas, n_leapfrog, transitions_per_step,
                     REVERSE_SPREAD_TRANSITIONS, float(target_accept),
                     float(step_size_jitter), pilot_chains, float(confidence),
                     isinstance(schedule, str) and schedule == ADAPTIVE)


def _streams(random_seed) -> dict[str, np.random.Generator]:
    # Independent child streams: the pilot never shares randomness with the measured runs.
    root = np.random.default_rng(random_seed)
    return dict(zip(_STREAMS, root.spawn(len(_STREAMS)), strict=True))


def _progress_enabled(progressbar: bool) -> bool:
    return bool(progressbar) and not os.environ.get("CI")


@contextmanager
def _phase(progress, description: str, total: int):
    task = progress.add_task(description, completed=0, total=total)

    def advance():
        progress.advance(task)

    yield advance


@contextmanager
def _pilot_phase(progress):
    # The pilot's length is not known in advance: show progress in sqrt(beta), which moves
    # roughly evenly along a typical path.
    task = progress.add_task("Pilot tuning", completed=0, total=100)

    def report(beta: float):
        progress.update(task, refresh=False, completed=round(100 * np.sqrt(beta)))

    yield report


def _draw_prior(simulator: ModelSimulator, n: int, rng: np.random.Generator) -> np.ndarray:
    try:
        return simulator.draw_prior(n, rng)
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err


def _prior_start(simulator: ModelSimulator, density: ModelDensity, n: int,
                 rng: np.random.Generator):
    """``n`` exact prior draws and their densities, refused unless all are finite."""
    x = _draw_prior(simulator, n, rng)
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model)
    return x, parts


def _prior_start_blocks(simulator: ModelSimulator, density: ModelDensity,
                        blocks: ChainBlocks):
    """Exact prior draws, each block of chains from its own stream; refused unless finite."""
    x = np.concatenate([_draw_prior(simulator, n, g)
                        for n, g in zip(blocks.sizes, blocks.generators, strict=True)])
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model)
    return x, parts


def _tune(progress, s: _Settings, rng, x_pilot, parts_pilot, parts_fn, schedule,
          discrete=None, pinned=None):
    """Run the pilot (with its progress row) and freeze the plan on ``schedule``."""
    with _pilot_phase(progress) as report:
        plan, pilot = tune_plan(
            rng, x_pilot, parts_pilot, parts_fn, schedule=schedule, n_steps=s.n_steps,
            n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
            jitter=s.step_size_jitter, transitions_per_step=s.transitions_per_step,
            on_step=report, discrete=discrete, pinned=pinned,
        )
    logger.info("Pilot: %d temperatures, %d resamplings, pilot log Z %.3f; plan frozen.",
                pilot.n_steps, pilot.n_resampled, pilot.log_z)
    return plan, pilot


def _compile(model, potentials_in_likelihood, compile_kwargs):
    # Compiled once per model structure and reused across calls (see model/cache.py).
    compiled = compiled_model(model, potentials_in_likelihood=potentials_in_likelihood,
                              compile_kwargs=compile_kwargs)
    return compiled.density, compiled.simulator, compiled.compile_time


@dataclass(frozen=True)
class _KernelTiming:
    """Measured cost of the hot path on all chains, to choose how to run (never the result)."""

    model_call: float  # seconds per batched model call
    transition: float  # seconds per NumPy HMC transition (n_leapfrog model calls and Python)
    sweep: float = 0.0  # seconds per Gibbs sweep of the discrete coordinates (with its parts)

    @classmethod
    def measure(cls, density: ModelDensity, x: np.ndarray, plan: AnnealingPlan,
                gibbs: ChromaticGibbs | None = None) -> _KernelTiming:
        calls_before = density.n_evaluations  # timing is not part of the run's cost
        terms_before = density.n_term_evaluations
        parts = density.parts(x)
        rng = np.random.default_rng(0)  # a throwaway stream: the chains' own are untouched
        beta, params = float(plan.betas[-1]), plan.kernel(plan.n_steps)
        calls, transitions = [], []
        for _ in range(3):
            start = time.perf_counter()
            density.parts(x)
            calls.append(time.perf_counter() - start)
            start = time.perf_counter()
            hmc_step(rng, x, parts, beta, params, density.parts)
            transitions.append(time.perf_counter() - start)
        sweep = 0.0
        if gibbs is not None:
            start = time.perf_counter()
            density.parts(gibbs.sweep(rng, x, beta, density.terms)[0])
            sweep = time.perf_counter() - start
        density.n_evaluations, density.n_term_evaluations = calls_before, terms_before
        return cls(float(np.median(calls)), float(np.median(transitions)), sweep)

    def fused_transition(self, n_leapfrog: int) -> float:
        """Predicted seconds per fused transition: its model calls and a little more."""
        return FUSED_CALL_OVERHEAD * n_leapfrog * self.model_call


def _n_transitions(plan: AnnealingPlan, directions: int, spread: int) -> int:
    """HMC transitions of the measured runs (each chain group runs all of them)."""
    return plan.transitions_per_step * (directions * plan.n_steps + (spread if directions == 2
                                                                     else 0))


def _use_fused_kernel(setting: bool | None, density: ModelDensity, timing: _KernelTiming,
                      plan: AnnealingPlan, n_transitions: int, n_sweeps: int = 0) -> bool:
    """Whether to run the compiled kernels (see ``fused_kernel`` in the docstrings)."""
    if setting is False:
        return False
    if not density.can_fuse_hmc:
        if setting:
            logger.info("No fused kernel for this model (its densities are evaluated chain by "
                        "chain); using the NumPy kernel.")
        return False
    if setting or density.has_fused_hmc:  # asked for, or already compiled (free)
        return True
    saving = (n_transitions * (timing.transition - timing.fused_transition(plan.n_leapfrog))
              + n_sweeps * FUSED_SWEEP_SAVING * timing.sweep)
    return saving > FUSED_PAYBACK * density.compile_seconds


def _choose_workers(cores, executor, predicted_seconds: float, n_blocks: int) -> Workers:
    if executor is not None or cores is not None:
        return resolve_workers(cores, executor)
    if n_blocks < 2 or predicted_seconds < AUTO_PARALLEL_SECONDS:
        return IN_PROCESS
    logger.info("Predicted run of %.0f s: using all cores (set `cores=1` to stay in this "
                "process).", predicted_seconds)
    return resolve_workers(None)


def _reverse_interrupted(run: str, unit: str, reached: int, total: int) -> str:
    """Warn that a reverse run was interrupted; return the note stored in the result."""
    logger.warning(
        "Interrupted during %s (%s %d of %d). Returning the finished forward run: `lower` is a "
        "valid stochastic lower bound; `upper` and `gap` are NaN.", run, unit, reached, total,
    )
    return f"{run} at {unit} {reached} of {total}; upper bound and gap not computed"


def _run_attrs(settings: _Settings, density: ModelDensity, pilot, sampling_time: float,
               interrupted: str | None, **specific) -> dict:
    """Attributes every AIS/SMC result carries, plus the method-specific ones."""
    return {
        "interrupted": interrupted,
        "kernel": "hmc",
        "chains": settings.chains,
        "pilot_chains": settings.pilot_chains,
        "pilot_log_z": np.nan if pilot is None else pilot.log_z,
        "pilot_steps": 0 if pilot is None else pilot.n_steps,
        "target_accept": settings.target_accept,
        "sampling_time": sampling_time,
        "model_evaluations": density.n_evaluations,
        "batching": density.batching,
        **specific,
    }


def _vectorized_discrete(model: pm.Model, step) -> bool:
    """Whether the model's discrete variables go to the vectorized Gibbs kernel.

    True when ``step`` is None and every discrete free variable has a fixed, small support
    (:mod:`pymc_bdmc.model.discrete`); otherwise they go to PyMC's step methods.
    """
    if step is not None or not has_discrete_free_variables(model):
        return False
    layout = FlatLayout.from_point([v.name for v in model.value_vars], model.initial_point())
    try:
        discrete_coordinates(model, layout)
    except UnsupportedDiscrete as reason:
        logger.info("Discrete variables go to PyMC's step methods: %s.", reason)
        return False
    return True


def _gibbs_kernel(density: ModelDensity, x_prior: np.ndarray) -> ChromaticGibbs | None:
    """The chromatic Gibbs sweep over the discrete coordinates, or None if there are none."""
    coordinates = discrete_coordinates(density.model, density.layout)
    if coordinates is None:
        return None
    probe = x_prior[:2]
    terms = density.terms(probe)
    parts = density.parts(probe)
    if not (np.allclose(terms[0].sum(axis=1), parts.log_prior, rtol=1e-8, atol=1e-8)
            and np.allclose(terms[1].sum(axis=1), parts.log_likelihood, rtol=1e-8, atol=1e-8)):
        raise BDMCInputError(
            "The model's elementwise log-density terms do not add up to its log-density, so "
            "its discrete variables cannot be updated by the vectorized Gibbs kernel. Pass "
            "PyMC step methods for them with `step=`."
        )
    gibbs = ChromaticGibbs.build(coordinates, density.terms, probe)
    logger.info("Discrete variables %s: %d coordinates in %d colors (%d batched evaluations "
                "per Gibbs sweep).", list(coordinates.names), gibbs.n_coordinates,
                len(gibbs.colors), gibbs.evaluations_per_sweep)
    return gibbs


def _run(
    *,
    model: pm.Model,
    settings: _Settings,
    density: ModelDensity,
    simulator: ModelSimulator,
    streams: dict[str, np.random.Generator],
    truth: JointDraw | None,
    progressbar: bool,
    attrs: dict,
    plan: AnnealingPlan | None = None,
    parallel: _Parallel | None = None,
) -> xr.DataTree:
    s = settings
    parallel = parallel or _Parallel()
    parts_fn = density.parts
    x_pilot, parts_pilot = _prior_start(simulator, density, s.pilot_chains,
                                        streams["pilot_init"])
    # Every block of chains has its own streams, so results do not depend on how chains are
    # grouped into batches or split across processes (parallel/streams.py).
    x0, _ = _prior_start_blocks(simulator, density,
                                ChainBlocks.spawn(streams["forward_init"], s.chains))
    forward_blocks = ChainBlocks.spawn(streams["forward"], s.chains)
    reverse_blocks = ChainBlocks.spawn(streams["reverse"], s.chains)

    start = time.perf_counter()
    done, interrupted = _StepCounter(), None
    # NullSimpleProgress.__enter__ returns None, so keep our own reference to the bar.
    progress = create_simple_progress(_progress_enabled(progressbar))
    n_steps = s.n_steps if plan is None else plan.n_steps
    gibbs = _gibbs_kernel(density, x_pilot)
    if gibbs is not None and plan is not None:
        _check_plan_pins(plan, gibbs)
    with progress, _no_bound_if_interrupted(done, n_steps):
        if plan is None:
            plan, pilot = _tune(progress, s, streams["pilot"], x_pilot, parts_pilot, parts_fn,
                                ADAPTIVE if s.adaptive else s.betas,
                                discrete=None if gibbs is None else gibbs.bound_to(density.terms),
                                pinned=None if gibbs is None else gibbs.pinned)
        else:
            pilot = None
            logger.info("Using the given frozen plan (%d steps); no pilot run.", plan.n_steps)
        directions = 1 if truth is None else 2
        n_transitions = _n_transitions(plan, directions, s.reverse_spread)
        auto = parallel.fused_kernel is None or (parallel.cores is None
                                                 and parallel.executor is None)
        timing = _KernelTiming.measure(density, x0, plan, gibbs) if auto else None
        # Two Gibbs sweeps per step (the palindrome around the HMC transitions).
        n_sweeps = 0 if gibbs is None else 2 * n_transitions // plan.transitions_per_step
        fused = _use_fused_kernel(parallel.fused_kernel, density, timing, plan, n_transitions,
                                  n_sweeps)
        # Workers are chosen on the NumPy kernel's time, which a fused kernel does not always
        # cut much (on large models the model calls dominate either way).
        workers = _choose_workers(
            parallel.cores, parallel.executor,
            0.0 if timing is None else n_transitions * timing.transition + n_sweeps * timing.sweep,
            len(forward_blocks))
        runner = AnnealingRunner(density, lambda: DensityRecipe.from_density(density), workers,
                                 parallel.chains_per_batch)
        n_groups = len(runner.groups(forward_blocks))
        if not workers.local:
            logger.info("Running %d groups of chains per direction on %s.", n_groups,
                        workers.description)
        observed = density.observed_data()  # workers may hold other data from earlier calls
        pending_forward = runner.submit("forward", forward_blocks, x0, plan, observed=observed,
                                        fused_kernel=fused, gibbs=gibbs)
        pending_reverse = None if truth is None else runner.submit(
            "reverse", reverse_blocks, truth.x, plan, observed=observed,
            spread_transitions=s.reverse_spread, fused_kernel=fused, gibbs=gibbs)
        with _phase(progress, "Forward AIS", n_steps * n_groups) as advance:
            forward = runner.collect(pending_forward, on_step=done.counting("forward", advance),
                                     on_group=done.counting_groups("forward", advance))
        reverse = None
        if truth is not None:
            try:
                with _phase(progress, "Reverse AIS", n_steps * n_groups) as advance:
                    reverse = runner.collect(
                        pending_reverse, on_step=done.counting("reverse", advance),
                        on_group=done.counting_groups("reverse", advance))
            except KeyboardInterrupt:  # the finished forward run is still a valid lower bound
                runner.cancel(pending_reverse)
                interrupted = _reverse_interrupted("reverse AIS", "step", done["reverse"],
                                                   n_steps * n_groups)
    sampling_time = time.perf_counter() - start

    bounds = evidence_bounds(
        streams["summary"], forward.log_weight,
        None if reverse is None else reverse.log_weight, confidence=s.confidence,
    )
    _log_diagnostics(bounds, forward, reverse, plan.betas)
    attrs = {
        **attrs,
        **_run_attrs(
            s, density, pilot, sampling_time, interrupted,
            algorithm="bdmc" if truth is not None else "ais",
            n_steps=plan.n_steps,
            model_evaluations=density.n_evaluations + runner.model_calls,
            workers=workers.description,
            chain_groups=n_groups,
            fused_kernel=fused,
            schedule="given plan" if pilot is None else "adaptive" if s.adaptive else "fixed",
        ),
    }
    if gibbs is not None:
        attrs["kernel"] = "hmc+gibbs"
        attrs["gibbs_colors"] = len(gibbs.colors)
        attrs["gibbs_coordinates"] = gibbs.n_coordinates
        attrs["gibbs_compiled"] = bool(fused and gibbs.fusable and density.can_fuse_gibbs)
        attrs["term_evaluations"] = density.n_term_evaluations + runner.term_calls
    return build_datatree(
        rng=streams["summary"],
        density=density,
        plan=plan,
        forward=forward,
        reverse=reverse,
        bounds=bounds,
        observed=density.observed_data(),
        generating_values=None if truth is None else _generating_values(density, truth),
        attrs=attrs,
    )


def _check_plan_pins(plan: AnnealingPlan, gibbs: ChromaticGibbs) -> None:
    if np.any(plan.inv_mass[1:, gibbs.pinned] != 0):
        raise BDMCInputError(
            "The given plan's HMC kernels move the model's discrete coordinates; a plan for a "
            "model with discrete variables must come from a run of the same model "
            "(AnnealingPlan.from_result)."
        )


@dataclass(frozen=True)
class _Parallel:
    """Where the chains of an AIS run go, and whether their transitions are fused."""

    cores: int | None = 1
    executor: object = None
    chains_per_batch: int | None = None
    fused_kernel: bool | None = False


def _parallel_settings(cores, executor, chains_per_batch, step_methods: bool,
                       fused_kernel: bool | None = None, smc=None) -> _Parallel:
    """Check the parallelism and execution arguments before anything runs.

    ``step_methods``: the run uses PyMC step methods; ``smc``: the SMC settings of an SMC run.
    """
    if fused_kernel is not None and not isinstance(fused_kernel, bool):
        raise BDMCInputError(f"`fused_kernel` must be True, False or None, got {fused_kernel!r}.")
    if fused_kernel and (step_methods or smc is not None):
        raise BDMCInputError(
            "`fused_kernel` compiles the vectorized kernels of method='ais'; it does not "
            "apply to PyMC step methods or method='smc'."
        )
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)
                              or cores < 1):
        raise BDMCInputError(f"`cores` must be a positive integer or None, got {cores!r}.")
    if chains_per_batch is not None:
        chains_per_batch = check_positive_int(chains_per_batch, "chains_per_batch")
    if smc is not None and smc.path == "data" and (executor is not None or (cores or 1) > 1
                                                    or chains_per_batch is not None):
        raise BDMCInputError(
            "path='data' runs its populations in this process; `cores`, `executor` and "
            "`chains_per_batch` apply to path='tempering'."
        )
    if executor is not None:
        if step_methods:
            raise BDMCInputError(
                "`executor` runs the vectorized kernels; PyMC step methods use `cores`."
            )
        resolve_workers(None, executor)  # refuses anything that is not an executor
    return _Parallel(cores, executor, chains_per_batch, fused_kernel)


def _generating_values(density: ModelDensity, truth: JointDraw) -> dict[str, np.ndarray]:
    # Constrained free variables and Deterministics at theta*, from the same constrain map.
    return {k: v[0] for k, v in density.constrain(truth.x[None, :]).items()}


class _StepCounter(dict):
    """Annealing steps completed per phase, for messages about interrupted runs."""

    def counting(self, phase: str, advance):
        self[phase] = 0

        def step():
            self[phase] += 1
            advance()

        return step

    def counting_groups(self, phase: str, advance):
        """Like :meth:`counting`, for a group of ``n`` steps finished elsewhere at once."""
        self.setdefault(phase, 0)

        def group(n: int):
            self[phase] += n
            for _ in range(n):
                advance()

        return group


@contextmanager
def _no_bound_if_interrupted(done: _StepCounter, n_steps: int, algorithm: str = "AIS"):
    # Ctrl-C before the forward run reaches beta = 1 leaves nothing valid: say so, re-raise.
    try:
        yield
    except KeyboardInterrupt:
        where = (f"during forward {algorithm} at step {done['forward']} of {n_steps}"
                 if "forward" in done else "during pilot tuning")
        logger.warning("Interrupted %s: no bound is valid before the forward run reaches "
                       "beta = 1, so nothing is returned.", where)
        raise


def _log_diagnostics(bounds, forward, reverse, betas=None) -> None:
    def at(step):  # where a step is on the path, for messages
        return f"step {step}" + ("" if betas is None else f" (beta {betas[step]:.3g})")

    # chains that failed numerically are reported below, not twice
    dead = int(np.count_nonzero(~np.isfinite(forward.log_weight))) - forward.n_failed_total
    if dead:
        logger.warning("%d forward chains ended with zero weight (log weight -inf).", dead)
    for name, run in (("forward", forward), ("reverse", reverse)):
        if run is None:
            continue
        if run.n_divergent.sum():
            worst = int(np.argmax(run.n_divergent))
            logger.warning(
                "%d divergent HMC trajectories in the %s run, at %d of %d steps (most at %s); "
                "per step: annealing['n_divergent_%s'].",
                int(run.n_divergent.sum()), name, int(np.count_nonzero(run.n_divergent)),
                len(run.n_divergent) - 1, at(worst), name,
            )
        if run.n_failed_total:
            first = int(np.flatnonzero(run.n_failed)[0])
            logger.warning(
                "%d of %d %s chains reached a non-finite state or density (NaN or infinite), "
                "first at %s. They carry zero weight, which keeps the %s bound valid but "
                "looser; per chain: evidence['failed_step_%s'].",
                run.n_failed_total, len(run.log_weight), name, at(first),
                "lower" if name == "forward" else "upper", name,
            )
    if bounds.ess_forward < 2:
        logger.warning(
            "The forward weights have an effective sample size of %.1f: the lower bound rests on "
            "one chain. Increase `n_steps`.", bounds.ess_forward,
        )


_COMMON_DOC = """
    n_steps : int, default 1000
        Number of annealing steps (intermediate distributions). Ignored if ``schedule`` is an
        array, whose length then sets it.
    chains : int, default 32
        Independent annealing chains per direction, evaluated together in one batched call.
    model : pm.Model, optional
        The model; taken from the ``with`` context when omitted. It is never modified.
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures. ``"adaptive"`` lets the pilot run place ``n_steps`` temperatures
        at equal thermodynamic length (even weight variance per step); ``"sigmoid"`` is the
        BDMC paper's schedule (§6.2, delta=4); or an explicit array rising from 0 to 1.
    n_leapfrog : int, optional
        Leapfrog steps per HMC transition. By default the pilot run chooses among 3, 6 and 12
        the one that moves its population furthest per gradient evaluation (squared jumps in
        the metric of the mass matrix), then freezes it: short on near-Gaussian posteriors,
        longer on correlated or funnel-shaped ones.
    transitions_per_step : int, default 2
        HMC transitions at each temperature.
    target_accept : float, default 0.9
        Acceptance rate the pilot run tunes the step sizes for.
    step_size_jitter : float, default 0.5
        Relative jitter of the step size, drawn independently of the state.
    pilot_chains : int, optional
        Size of the pilot population (default ``max(chains, 64)``).
    confidence : float, default 0.95
        Level of the Markov-inequality bounds ``lower_markov`` / ``upper_markov``.
    random_seed : int, array_like of int, SeedSequence or Generator, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
        Show a progress bar (never in CI, where the ``CI`` environment variable is set).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`, e.g. ``{"mode": "NUMBA"}``.
    step : PyMC step method or list of them, optional
        Transitions driven by PyMC's own step methods, as for :func:`pymc.sample`: NUTS,
        HamiltonianMC, Metropolis, Slice, BinaryGibbsMetropolis, CategoricalGibbsMetropolis,
        compound steps and user subclasses, each over some value variables; the others get
        PyMC's automatic assignment. Without ``step``, models with discrete free variables get
        the automatic assignment (Gibbs-type steps for discrete variables), and all-continuous
        models the vectorized HMC kernel. Steps are rebuilt on a tempered clone of the model,
        tuned on a pilot run and frozen; reverse runs apply the sweep in reverse order. The
        assignment is logged and stored in the ``step_methods`` group. ``n_leapfrog``,
        ``transitions_per_step``, ``target_accept`` and ``step_size_jitter`` only concern the
        vectorized HMC kernel (one sweep of the step methods is made per temperature).
    cores : int, optional
        Local worker processes running the chains (SMC: the populations); each compiles the
        model once and keeps it for later calls. Default: with the vectorized kernels, all
        cores when the run is predicted (from timing the model) to take over 20 s, otherwise
        this process; with PyMC step methods, 1. A seed gives the same chains whatever
        ``cores`` (see Notes).
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Run the chains on this executor instead of local processes, e.g. a Dask cluster for
        runs that outgrow one machine (vectorized kernels; SMC on the tempering path).
    chains_per_batch : int, optional
        Most chains evaluated together in one batched model call, which bounds memory when
        ``chains`` is large. Default: all chains of a worker at once.
    fused_kernel : bool, optional
        Compile each HMC transition (all its leapfrog steps and the accept/reject) into one
        function, which removes most of the Python around every model call: on small models
        several times faster per step. With discrete variables on the vectorized Gibbs kernel,
        each color's update is compiled too. These are the same kernels with the same random
        draws, so results agree to round-off. Compiling costs about as much again as compiling
        the model. Default: only when timing the model predicts that the runs save more than
        that (long runs, cheap models); the chosen setting is stored in ``evidence.attrs``.
"""

_PARALLEL_NOTES = """
    Chains are cut into blocks of 8, each with its own random stream, and are split across
    batches, processes or executor workers only at block boundaries: a seed gives the same
    chains however they are split. Numbers agree exactly where the model's batched evaluation
    is row by row, and otherwise up to floating-point round-off (BLAS kernels may round
    differently for a different number of rows).
"""


def sample_ais(
    n_steps: int | None = 1000,
    chains: int = 32,
    *,
    model: pm.Model | None = None,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int = 2,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    potentials_in_likelihood: bool = False,
    plan: AnnealingPlan | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    step=None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
    fused_kernel: bool | None = None,
) -> xr.DataTree:
    """Estimate a stochastic lower bound on ``log p(y)`` by annealed importance sampling.

    Runs AIS from exact prior draws to the posterior along ``p(x) p(y|x)^beta`` with a
    vectorized HMC kernel, whose step sizes and mass matrices are tuned on a separate pilot run
    and then frozen.

    Parameters
    ----------%s
    potentials_in_likelihood : bool, default False
        Declare that the model's ``pm.Potential`` terms are likelihood terms (tempered with it).
        Without it, a model with Potentials is refused.
    plan : AnnealingPlan, optional
        A frozen plan to run instead of tuning one (e.g. ``AnnealingPlan.from_result(bdmc)``,
        the plan certified on simulated data). Its schedule and kernels replace ``n_steps``,
        ``schedule`` and the kernel settings.

    Returns
    -------
    xarray.DataTree
        With groups ``posterior`` (weighted-resampled final states), ``sample_stats``,
        ``observed_data``, ``evidence`` (``lower``; ``upper`` and ``gap`` are NaN) and
        ``annealing``.

    Notes
    -----
    ``lower = log mean_k w_k`` with ``E[w_k] = p(y)``: on average it underestimates ``log p(y)``
    and it overestimates it by more than ``b`` nats with probability below ``exp(-b)``
    (Grosse, Ghahramani & Adams 2015, §4.1).
%s
    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    ...     result = pmb.sample_ais(n_steps=100, chains=8, random_seed=1, progressbar=False)
    >>> float(result["evidence"]["lower"]) < 0
    True
    """
    model = modelcontext(model)
    settings = _validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                         target_accept, step_size_jitter, pilot_chains, confidence)
    gibbs = _vectorized_discrete(model, step)
    specs = None if gibbs else resolve_step_methods(model, step)
    check_model(model, potentials_in_likelihood=potentials_in_likelihood,
                gradient_kernel=specs is None and not gibbs)
    if specs is not None and plan is not None:
        raise BDMCInputError(
            "`plan` holds frozen HMC kernels; it cannot be combined with PyMC step methods "
            "(`step=`, or a model with discrete free variables)."
        )
    parallel = _parallel_settings(cores, executor, chains_per_batch, specs is not None,
                                  fused_kernel)
    streams = _streams(random_seed)
    if specs is not None:
        return sample_with_step_methods(
            model=model, specs=specs, settings=settings, streams=streams, simulate=False,
            potentials_in_likelihood=potentials_in_likelihood, pilot_chains=pilot_chains,
            cores=cores or 1, progressbar=progressbar, compile_kwargs=compile_kwargs,
        )
    density, simulator, compile_time = _compile(model, potentials_in_likelihood, compile_kwargs)
    if plan is not None and plan.n_dim != density.n_dim:
        raise BDMCInputError(
            f"The plan acts on {plan.n_dim} unconstrained dimensions but the model has "
            f"{density.n_dim}: a plan only transfers between data sets of the same model."
        )
    return _run(model=model, settings=settings, density=density, simulator=simulator,
                streams=streams, truth=None, progressbar=progressbar,
                attrs={"compile_time": compile_time}, plan=plan, parallel=parallel)


def sample_bdmc(
    n_steps: int | Literal["auto"] | None = "auto",
    chains: int | None = None,
    *,
    model: pm.Model | None = None,
    method: Literal["ais", "smc"] = "ais",
    particles: int | None = None,
    path: Literal["tempering", "data"] = "tempering",
    ess_threshold: float = 0.5,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int | None = None,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    step=None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
    fused_kernel: bool | None = None,
) -> xr.DataTree:
    """Sandwich ``log p(y*)`` between stochastic bounds by bidirectional Monte Carlo.

    Simulates ``(theta*, y*)`` from the model's prior predictive, then runs forward AIS on
    ``y*`` (stochastic lower bound) and reverse AIS from ``theta*``, an exact posterior sample
    (stochastic upper bound), through the same frozen kernels. The gap measures how far the
    estimator is from the truth on data like the model's own.

    Parameters
    ----------%s
    method : {"ais", "smc"}, default "ais"
        ``"smc"`` runs forward SMC (lower bound) and the sequential harmonic mean estimator,
        SMC in reverse from ``theta*`` (upper bound), through the same frozen kernels and path:
        ``n_steps`` stages, ``chains`` independent populations of ``particles`` particles.
    particles : int, optional
        ``method="smc"`` only: particles per population (default 128).
    path : {"tempering", "data"}, default "tempering"
        ``method="smc"`` only: tempering, or data-point tempering (observations enter in
        ``n_steps`` blocks along the leading data dimension; see
        :func:`pymc_bdmc.sample_smc_evidence`).
    ess_threshold : float, default 0.5
        ``method="smc"`` only: resample a population when its ESS falls below this fraction
        of ``particles``.

    Returns
    -------
    xarray.DataTree
        As :func:`sample_ais`, plus ``generating_values`` (``theta*``); ``observed_data`` holds
        ``y*``, and the ``evidence`` group has ``lower``, ``upper`` and ``gap``. With
        ``method="smc"`` the per-stage group is ``smc`` (see
        :func:`pymc_bdmc.sample_smc_evidence`).

    Notes
    -----
    Reverse AIS weights ``v_k`` satisfy ``E[v_k] = 1 / p(y*)``, so
    ``upper = -log mean_k v_k`` overestimates ``log p(y*)`` on average, and underestimates it
    by more than ``b`` nats with probability below ``exp(-b)`` (Grosse, Ghahramani & Adams
    2015, §4.2.1). The plan is tuned on prior draws only, never on ``theta*``, so ``theta*``
    remains an exact posterior sample given the plan.

    Interrupting the run (Ctrl-C) during reverse AIS returns the finished forward run: ``lower``
    is valid, ``upper`` and ``gap`` are NaN and ``evidence.attrs["interrupted"]`` says where the
    reverse run stopped. An interrupt before the forward run ends is re-raised (no bound exists
    yet). Chains whose density becomes non-finite get zero weight and are counted in
    ``evidence`` (``n_failed_*``, ``failed_step_*``); see ``docs/bad-input.md``.
%s
    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, shape=5, observed=[0.0] * 5)
    ...     result = pmb.sample_bdmc(n_steps=200, chains=16, random_seed=1, progressbar=False)
    >>> float(result["evidence"]["gap"]) < 1
    True
    """
    model = modelcontext(model)
    if method not in ("ais", "smc"):
        raise BDMCInputError(f"`method` must be 'ais' or 'smc', got {method!r}.")
    from pymc_bdmc import sampling_smc  # imports this module: resolved at call time

    n_steps, chains, transitions_per_step = sampling_smc.resolve_defaults(
        method, n_steps, chains, transitions_per_step, schedule
    )
    settings = _validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                         target_accept, step_size_jitter, pilot_chains, confidence)
    smc = None
    if method == "smc":
        smc = sampling_smc.validate_smc(
            sampling_smc.SMC_PARTICLES if particles is None else particles, path,
            ess_threshold, schedule,
        )
    elif particles is not None or path != "tempering":
        raise BDMCInputError("`particles` and `path` apply to method='smc' only.")
    gibbs = _vectorized_discrete(model, step)
    specs = None if gibbs else resolve_step_methods(model, step)
    if specs is not None and smc is not None:
        raise BDMCInputError(
            "method='smc' runs the vectorized kernels (HMC, and Gibbs sweeps of finite discrete "
            "variables); PyMC step methods, given with `step=` or needed by discrete variables "
            "without a finite support, work with method='ais'."
        )
    check_model(model, needs_simulation=True, gradient_kernel=specs is None and not gibbs)
    if smc is not None:
        sampling_smc.check_smc_model(model, smc, discrete=gibbs)
    parallel = _parallel_settings(cores, executor, chains_per_batch, specs is not None,
                                  fused_kernel, smc)
    streams = _streams(random_seed)
    if specs is not None:
        return sample_with_step_methods(
            model=model, specs=specs, settings=settings, streams=streams, simulate=True,
            potentials_in_likelihood=False, pilot_chains=pilot_chains, cores=cores or 1,
            progressbar=progressbar, compile_kwargs=compile_kwargs,
        )
    density, simulator, compile_time = _compile(model, False, compile_kwargs)
    if smc is not None:
        sampling_smc.check_data_path(density, smc)
    try:
        truth = simulator.draw_joint(streams["simulate"])
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err
    density.set_observed(truth.observed)
    check_finite_start(density.parts(truth.x[None, :]), "simulated parameters",
                       density.layout, truth.x[None, :], hint=_SIMULATED_START_HINT)
    if smc is not None:
        return sampling_smc.run_smc(settings=settings, smc=smc, density=density,
                                    simulator=simulator, streams=streams, truth=truth,
                                    progressbar=progressbar, attrs={"compile_time": compile_time},
                                    parallel=parallel)
    return _run(model=model, settings=settings, density=density, simulator=simulator,
                streams=streams, truth=truth, progressbar=progressbar,
                attrs={"compile_time": compile_time}, parallel=parallel)


sample_ais.__doc__ = sample_ais.__doc__ % (_COMMON_DOC, _PARALLEL_NOTES)


def _replace_entries(doc: str, entries: dict[str, str]) -> str:
    for old, new in entries.items():
        if old not in doc:
            raise RuntimeError(f"Parameter entry {old.strip()!r} not found in the shared doc.")
        doc = doc.replace(old, new)
    return doc


# sample_bdmc's defaults depend on ``method``: its entries say so.
sample_bdmc.__doc__ = sample_bdmc.__doc__ % (_replace_entries(_COMMON_DOC, {
    """    n_steps : int, default 1000
        Number of annealing steps (intermediate distributions). Ignored if ``schedule`` is an
        array, whose length then sets it.
""": """    n_steps : int, "auto" or None, default "auto"
        Number of annealing steps (intermediate distributions), or SMC stages. ``"auto"``: 1000
        for AIS, 100 for SMC, or the length of a ``schedule`` array (which ``None`` also
        accepts).
""",
    """    chains : int, default 32
        Independent annealing chains per direction, evaluated together in one batched call.
""": """    chains : int, optional
        Independent annealing chains (AIS, default 32) or SMC populations (default 4) per
        direction, evaluated together in one batched call.
""",
    """    transitions_per_step : int, default 2
        HMC transitions at each temperature.
""": """    transitions_per_step : int, optional
        HMC transitions at each temperature (default 2 for AIS, 5 for SMC).
""",
}), _PARALLEL_NOTES)
