"""The AIS / BDMC run on the vectorized kernels (HMC, and Gibbs sweeps of discrete variables).

Used by :func:`pymc_bdmc.sample_ais` and :func:`pymc_bdmc.sample_bdmc`; assembled from the
shared stages of :mod:`pymc_bdmc.pipeline`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import numpy as np
import pymc as pm
import xarray as xr
from pymc.progress_bar import create_simple_progress

from pymc_bdmc.estimators import evidence_bounds
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.pipeline.diagnostics import log_ais_diagnostics
from pymc_bdmc.pipeline.execution import (
    KernelTiming,
    choose_workers,
    count_sweeps,
    count_transitions,
    predicted_seconds,
    predicted_wall_seconds,
    use_fused_kernel,
)
from pymc_bdmc.pipeline.interrupts import no_bound_if_interrupted
from pymc_bdmc.pipeline.pilot import refreeze, tune
from pymc_bdmc.pipeline.progress import StepCounter, progress_enabled
from pymc_bdmc.pipeline.results import run_attrs
from pymc_bdmc.pipeline.runs import forward_and_reverse, start_runner
from pymc_bdmc.pipeline.settings import Parallel, Settings
from pymc_bdmc.pipeline.start import (
    check_plan_pins,
    generating_values,
    gibbs_kernel,
    prior_start,
    prior_start_blocks,
)
from pymc_bdmc.results.datatree import build_datatree
from pymc_bdmc.schedules import ADAPTIVE

__all__ = ["run_ais"]

logger = logging.getLogger("pymc_bdmc")


def run_ais(
    *,
    model: pm.Model,
    settings: Settings,
    density: ModelDensity,
    simulator: ModelSimulator,
    streams: dict[str, np.random.Generator],
    truth: JointDraw | None,
    progressbar: bool,
    attrs: dict,
    plan: AnnealingPlan | None = None,
    parallel: Parallel | None = None,
    pilot_memo: dict | None = None,
    fit_length: Callable[[int, float, float | None], int] | None = None,
) -> xr.DataTree:
    """Forward AIS (and reverse AIS from ``truth``) on the vectorized kernels, as a DataTree.

    The stages: exact prior draws (pilot and chains, per block of chains), the pilot and its
    frozen plan (unless ``plan`` is given), the choice of kernels and workers from timing,
    forward and reverse runs on an :class:`~pymc_bdmc.parallel.annealing.AnnealingRunner`,
    the bounds, diagnostics and the result.

    Parameters
    ----------
    model : pm.Model
    settings : Settings
    density : ModelDensity
        Compiled, and conditioned on the data (``y*`` for BDMC).
    simulator : ModelSimulator
    streams : dict
        From :func:`pymc_bdmc.pipeline.seeding.streams`.
    truth : JointDraw or None
        ``(theta*, y*)`` for BDMC; None for AIS on real data.
    progressbar : bool
    attrs : dict
        Extra attributes of the result (e.g. ``compile_time``).
    plan : AnnealingPlan, optional
        A frozen plan replacing the pilot.
    parallel : Parallel, optional
    pilot_memo : dict, optional
        Shared by the runs of one call at several lengths (``n_steps="auto"``): the first run
        stores its pilot and plan here, later ones re-freeze them onto their own number of
        temperatures (:func:`pymc_bdmc.pipeline.pilot.refreeze`) instead of piloting again.
    fit_length : callable, optional
        ``(n_steps, predicted_seconds, path_length) -> steps``: once the kernels are timed
        (``path_length`` is the pilot's thermodynamic length of the plan's path), the run is
        re-frozen onto ``steps`` temperatures if that is fewer (the ``n_steps="auto"`` search
        keeps its first attempt within ``max_time`` so, :mod:`pymc_bdmc.pipeline.auto_steps`).

    Returns
    -------
    xarray.DataTree
    """
    s = settings
    parallel = parallel or Parallel()
    parts_fn = density.parts
    x_pilot, parts_pilot = prior_start(simulator, density, s.pilot_chains,
                                        streams["pilot_init"])
    # Every block of chains has its own streams, so results do not depend on how chains are
    # grouped into batches or split across processes (parallel/streams.py).
    init_blocks = ChainBlocks.spawn(streams["forward_init"], s.chains)
    forward_blocks = ChainBlocks.spawn(streams["forward"], s.chains)
    reverse_blocks = ChainBlocks.spawn(streams["reverse"], s.chains)

    start = time.perf_counter()
    done = StepCounter()
    # NullSimpleProgress.__enter__ returns None, so keep our own reference to the bar.
    progress = create_simple_progress(progress_enabled(progressbar))
    n_steps = s.n_steps if plan is None else plan.n_steps
    gibbs = gibbs_kernel(density, x_pilot)
    if gibbs is not None and plan is not None:
        check_plan_pins(plan, gibbs)
    # The first attempt of the auto search may shorten the run once the pilot is done.
    with progress, no_bound_if_interrupted(done, lambda: n_steps):
        if plan is None and pilot_memo:
            pilot = pilot_memo["pilot"]
            plan = refreeze(pilot_memo["plan"], pilot, s)
            logger.info("Plan re-frozen on %d steps from an earlier attempt's pilot.", s.n_steps)
        elif plan is None:
            plan, pilot = tune(progress, s, streams["pilot"], x_pilot, parts_pilot, parts_fn,
                               ADAPTIVE if s.adaptive else s.betas,
                               discrete=None if gibbs is None else gibbs.bound_to(density.terms),
                               pinned=None if gibbs is None else gibbs.pinned,
                               draw_pilot=lambda n: prior_start(simulator, density, n,
                                                                streams["pilot_init"]),
                               fit_base=s.base == "auto" and gibbs is None and s.adaptive,
                               moves=scale_moves_for(density))
            if pilot_memo is not None:
                pilot_memo.update(plan=plan, pilot=pilot)
        else:
            pilot = None
            logger.info("Using the given frozen plan (%d steps); no pilot run.", plan.n_steps)
        pilot_time = time.perf_counter() - start
        # Each block of chains starts from exact draws of the path's first distribution.
        x0 = (prior_start_blocks(simulator, density, init_blocks)[0] if plan.base is None
              else np.concatenate([plan.start(g, n) for n, g in
                                   zip(init_blocks.sizes, init_blocks.generators, strict=True)]))
        directions = 1 if truth is None else 2
        auto = (parallel.fused_kernel is None or fit_length is not None
                or (parallel.cores is None and parallel.executor is None))
        timing = KernelTiming.measure(density, x0, plan, gibbs) if auto else None

        def how_to_run(plan: AnnealingPlan, announce: bool = True):
            n_transitions = count_transitions(plan, directions, s.reverse_spread)
            n_sweeps = count_sweeps(gibbs, n_transitions, plan)
            fused = use_fused_kernel(parallel.fused_kernel, density, timing, plan,
                                     n_transitions, n_sweeps)
            # Workers are chosen on the NumPy kernel's time, which a fused kernel does not
            # always cut much (on large models the model calls dominate either way).
            workers = choose_workers(parallel.cores, parallel.executor,
                                     predicted_seconds(timing, n_transitions, n_sweeps,
                                                       plan.n_leapfrog),
                                     len(forward_blocks), announce=announce)
            seconds = predicted_wall_seconds(timing, n_transitions, n_sweeps, fused,
                                             plan.n_leapfrog,
                                             min(workers.n_workers, len(forward_blocks)))
            return fused, workers, seconds

        fused, workers, seconds = how_to_run(plan, announce=fit_length is None)
        if fit_length is not None:
            steps = plan.n_steps if pilot is None or timing is None else fit_length(
                plan.n_steps, seconds, pilot.thermodynamic_length)
            if steps < plan.n_steps:
                s = s.with_n_steps(steps)
                plan = refreeze(plan, pilot, s)
                n_steps = plan.n_steps
            fused, workers, _ = how_to_run(plan)
        runner, groups = start_runner(density, workers, parallel.chains_per_batch,
                                      forward_blocks)
        n_groups = len(groups)
        observed = density.observed_data()  # workers may hold other data from earlier calls
        pending_forward = runner.submit("forward", forward_blocks, x0, plan, observed=observed,
                                        fused_kernel=fused, gibbs=gibbs)
        pending_reverse = None if truth is None else runner.submit(
            "reverse", reverse_blocks, truth.x, plan, observed=observed,
            spread_transitions=s.reverse_spread, fused_kernel=fused, gibbs=gibbs)
        forward, reverse, interrupted = forward_and_reverse(
            progress, done, n_steps * n_groups,
            lambda on_step, on_group: runner.collect(pending_forward, on_step=on_step,
                                                     on_group=on_group),
            None if truth is None else (
                lambda on_step, on_group: runner.collect(pending_reverse, on_step=on_step,
                                                         on_group=on_group)),
            cancel=lambda: runner.cancel(pending_reverse))
    sampling_time = time.perf_counter() - start
    if plan.base is not None:  # report the model's densities, not the path's
        forward = dataclasses.replace(forward, parts=density.parts(forward.x))
        if reverse is not None:
            reverse = dataclasses.replace(reverse, parts=density.parts(reverse.x))

    bounds = evidence_bounds(
        streams["summary"], forward.log_weight,
        None if reverse is None else reverse.log_weight, confidence=s.confidence,
    )
    # Labels only where a stuck reverse run may need to name a coordinate (BDMC).
    labels = None if truth is None else density.layout.coordinate_labels()
    log_ais_diagnostics(bounds, forward, reverse, plan.betas,
                        theta=None if truth is None else truth.x, labels=labels)
    attrs = {
        **attrs,
        **run_attrs(
            s, density, pilot, sampling_time, interrupted,
            algorithm="bdmc" if truth is not None else "ais",
            n_steps=plan.n_steps,
            pilot_time=pilot_time,
            model_evaluations=density.n_evaluations + runner.model_calls,
            workers=workers.description,
            chain_groups=n_groups,
            fused_kernel=fused,
            schedule="given plan" if pilot is None else "adaptive" if s.adaptive else "fixed",
            path_start="prior" if plan.base is None else "fitted gaussian",
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
        generating_values=None if truth is None else generating_values(density, truth),
        attrs=attrs,
    )
