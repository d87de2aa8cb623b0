"""Pilot tuning of PyMC step methods along the annealing path, frozen into a :class:`StepPlan`.

The pilot is an adaptive-tempering SMC run over a small population, started from its own exact
prior draws (it never sees the generating parameters of simulated data). At each *anchor*
temperature it

1. picks the next ``beta`` so that ``(beta' - beta) * sd(log-likelihood)`` equals
   ``step_length`` nats (and ``beta`` grows by at least ``min_growth`` per anchor);
2. reweights the population, and resamples it systematically when the ESS is below half;
3. runs ``sweeps_per_anchor`` sweeps of the step methods per particle *with PyMC's own tuning
   switched on*, the population's draws feeding one set of step objects, so that the tuning
   sees the whole tempered distribution: NUTS/HMC dual averaging restarts from the current step
   size and the diagonal mass matrix is set to the population's weighted variance; Metropolis
   tunes its scaling every few steps; Slice averages its widths over the anchor only;
4. stores each step's ``sampling_state`` with tuning off: the frozen kernel of this anchor.

Each measured temperature then uses the kernel of the last anchor at or below it. The
temperatures the pilot visited and the spread of the log-likelihood there also give the
thermodynamic-length schedule (:func:`~pymc_bdmc.kernels.tuning.thermodynamic_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from pymc.step_methods.hmc.base_hmc import BaseHMC
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt
from pymc.step_methods.metropolis import BinaryMetropolis, Metropolis
from pymc.step_methods.slicer import Slice
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.pymc_steps import (
    StepPlan,
    StepSweep,
    anchor_index_for,
    hmc_parameters,
)
from pymc_bdmc.kernels.tuning import (
    MIN_VARIANCE,
    PilotResult,
    likelihood_sd,
    next_pilot_beta,
    normalized_weights,
    thermodynamic_schedule,
    weighted_moments,
)
from pymc_bdmc.model.density import FlatLayout
from pymc_bdmc.resampling import systematic_resample

__all__ = ["SWEEPS_PER_ANCHOR", "plan_from_step_pilot", "run_step_pilot"]

#: Sweeps per particle at each anchor temperature.
SWEEPS_PER_ANCHOR = 3
#: Incremental-weight spread (nats) between anchors; anchors are costly, so coarser than HMC's.
STEP_LENGTH = 1.0
#: Smallest relative growth of beta between anchors (bounds their number).
MIN_GROWTH = 0.3
#: Largest number of anchors; the last one is forced to beta = 1.
MAX_ANCHORS = 60


def _begin_anchor(sweep: StepSweep, layout: FlatLayout, x: np.ndarray, weights: np.ndarray,
                  n_tune_steps: int) -> None:
    """Restart each tunable step's adaptation for a new temperature (see module docstring)."""
    variance = np.maximum(weighted_moments(x, weights)[1], MIN_VARIANCE)
    for leaf in sweep.leaves:
        if not getattr(leaf, "tune", False):
            continue
        if isinstance(leaf, BaseHMC):
            adapt = leaf.step_adapt
            leaf.step_adapt = DualAverageAdaptation(
                float(adapt.current(False)), adapt._target, adapt._gamma, adapt._k, adapt._t0
            )
            if isinstance(leaf.potential, QuadPotentialDiagAdapt):
                var = np.concatenate([variance[layout.slices[layout.names.index(v.name)]]
                                      for v in leaf.vars])
                potential = leaf.potential
                potential.reset()  # its own estimate restarts too (discards its first samples)
                potential._var = var.astype(potential.dtype)
                potential._stds = np.sqrt(potential._var)
                potential._inv_stds = 1.0 / potential._stds
                potential._var_pytensor.set_value(potential._var)
        elif isinstance(leaf, Metropolis | BinaryMetropolis):
            interval = max(5, n_tune_steps // 4)
            leaf.tune_interval = leaf.steps_until_tune = interval
            if hasattr(leaf, "accepted_sum"):
                leaf.accepted_sum[:] = 0
            else:
                leaf.accepted = 0
        elif isinstance(leaf, Slice):
            leaf.n_tunes = 0.0


def run_step_pilot(
    rng: np.random.Generator,
    sweep: StepSweep,
    layout: FlatLayout,
    x0: np.ndarray,
    log_likelihood0: np.ndarray,
    *,
    sweeps_per_anchor: int = SWEEPS_PER_ANCHOR,
    step_length: float = STEP_LENGTH,
    min_growth: float = MIN_GROWTH,
    max_anchors: int = MAX_ANCHORS,
    on_step: Callable[[float], None] | None = None,
) -> tuple[PilotResult, list]:
    """Tune the step methods along the path; return the pilot record and per-anchor states.

    Parameters
    ----------
    rng : numpy.random.Generator
        The pilot's own stream.
    sweep : StepSweep
        Step methods built on the tempered clone (their tuning is switched on here).
    layout : FlatLayout
    x0 : ndarray, shape (particles, n_dim)
        Exact prior draws.
    log_likelihood0 : ndarray, shape (particles,)
        Their log-likelihoods.
    sweeps_per_anchor, step_length, min_growth, max_anchors
        See the module constants.
    on_step : callable, optional
        Called with the pilot's inverse temperature after each anchor.

    Returns
    -------
    pilot : PilotResult
        Anchors (``betas``), log-likelihood spread, NUTS step size and variance at each anchor,
        acceptance, and the pilot's own SMC estimate of ``log p(y)``.
    anchor_states : list
        ``sweep.snapshot()`` at each anchor.
    """
    clone = sweep.clone
    n = len(x0)
    for leaf, leaf_rng in zip(sweep.leaves, rng.spawn(len(sweep.leaves)), strict=True):
        leaf.setup_chain(leaf_rng, 1, 1)
    points = [layout.to_point(row) for row in x0]
    x, lik = np.array(x0, dtype=float), np.asarray(log_likelihood0, dtype=float).copy()
    log_w, log_z, n_resampled = np.zeros(n), 0.0, 0
    weights = np.full(n, 1.0 / n)
    beta = 0.0
    record = {"beta": [], "sd": [], "eps": [], "var": [], "acc": []}
    states = []
    while True:
        _begin_anchor(sweep, layout, x, weights, n * sweeps_per_anchor)
        clone.set_beta(beta)
        accepts = []
        # Particles of zero weight (impossible data at their start) are left where they are:
        # PyMC's steps refuse to start from them, and nothing of theirs counts.
        alive = weights > 0
        for _ in range(sweeps_per_anchor):
            for i in np.flatnonzero(alive):
                points[i], accept, _ = sweep.sweep(points[i])
                accepts.append(accept)
        x = np.stack([layout.ravel(p) for p in points])
        lik = np.array([clone.log_prior_and_likelihood(p)[1] for p in points])
        sd = likelihood_sd(lik, weights)
        states.append(sweep.snapshot())
        eps, inv_mass = hmc_parameters(sweep, layout)
        record["beta"].append(beta)
        record["sd"].append(sd)
        record["eps"].append(eps)
        record["var"].append(inv_mass)
        record["acc"].append(float(np.nanmean(accepts)) if np.any(np.isfinite(accepts))
                             else np.nan)
        if on_step is not None:
            on_step(beta)
        if beta >= 1.0:
            break
        if len(record["beta"]) >= max_anchors - 1:
            new_beta = 1.0
        else:
            new_beta = next_pilot_beta(beta, sd, step_length, min_growth)
        with np.errstate(invalid="ignore"):
            increment = np.where(new_beta == beta, 0.0, (new_beta - beta) * lik)
        log_w = log_w + increment
        beta = new_beta
        weights = normalized_weights(log_w)
        if 1.0 / np.sum(weights**2) < 0.5 * n:
            log_z += float(log_mean_exp(log_w))
            idx = systematic_resample(rng, weights, n)
            points = [dict(points[i]) for i in idx]
            x, lik, log_w = x[idx], lik[idx], np.zeros(n)
            weights = np.full(n, 1.0 / n)
            n_resampled += 1
    log_z += float(log_mean_exp(log_w))
    pilot = PilotResult.from_record(log_z, record, n_resampled)
    return pilot, states


def plan_from_step_pilot(pilot: PilotResult, anchor_states: Sequence,
                         schedule: np.ndarray | str, n_steps: int) -> StepPlan:
    """Freeze the pilot's anchors onto the measured schedule (``"adaptive"`` or an array)."""
    if isinstance(schedule, str):
        betas = thermodynamic_schedule(pilot.betas, pilot.sd_log_likelihood, n_steps)
    else:
        betas = np.asarray(schedule, dtype=float)
    index = anchor_index_for(betas, pilot.betas)
    step_size = pilot.step_size[index].astype(float)
    inv_mass = pilot.variance[index].astype(float)
    step_size[0] = np.nan  # the prior is sampled exactly: no transition at t = 0
    inv_mass[0] = np.nan
    return StepPlan(betas=np.asarray(betas, dtype=float).copy(), anchor_betas=pilot.betas,
                    anchor_states=list(anchor_states), anchor_index=index,
                    step_size=step_size, inv_mass=inv_mass,
                    attrs={"n_anchor_temperatures": len(pilot.betas)})
