"""Held-out log-likelihood of a latent-variable model, with bidirectional Monte Carlo validation.

With a model's global parameters ``theta`` fixed (e.g. at trained values), the held-out
likelihood of data cases ``y_1..y_n`` integrates out each case's own latent variables:

    log p(y_1..y_n | theta) = sum_i log p(y_i | theta),
    p(y_i | theta) = integral p(z_i | theta) p(y_i | z_i, theta) dz_i.

This is the evaluation of the BDMC paper (Grosse, Ghahramani & Adams 2015, §1) and of its
follow-up on decoder-based generative models (Wu, Burda, Salakhutdinov & Grosse 2017): AIS per
case, batched over cases and chains, validated by BDMC on cases simulated from the model with
``theta`` fixed.

How the per-case estimates stay valid
-------------------------------------
Given ``theta`` the cases are independent, so case ``i``'s annealing path is
``f_t(z_i) = p(z_i | theta) p(y_i | z_i, theta)^beta_t``. Every (chain, case) pair is its own
AIS chain (:mod:`pymc_bdmc.model.cases` lays the flat vector out as one row per pair): its own
exact start, its own HMC momentum, step-size jitter and **Metropolis accept/reject**, and its own
weight. A joint accept over all cases would couple them and the per-case weights would no longer
be AIS weights. The temperature schedule and the HMC step sizes and mass matrices are shared by
all cases; they are tuned on a pilot run (its own chains, its own random stream, per-case
populations resampled within their case) and frozen before the measured chains start.

Hence, per case, ``E[w_ik] = p(y_i | theta)`` (forward, from prior draws of ``z_i``) and
``E[v_ik] = 1 / p(y_i | theta)`` (reverse, from the ``z_i*`` that generated a simulated
``y_i``), and ``lower_i = log mean_k w_ik``, ``upper_i = -log mean_k v_ik`` are stochastic lower
and upper bounds on ``log p(y_i | theta)``. The cases' estimators are independent, so the
product over cases of ``mean_k w_ik`` is unbiased for ``p(y_1..y_n | theta)``: the totals
``sum_i lower_i`` and ``sum_i upper_i`` are stochastic bounds with the same Markov guarantees
(``P(total_lower > log p + b) < exp(-b)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pymc as pm
import xarray as xr
from arviz_base import from_dict, make_attrs
from pymc.backends.arviz import coords_and_dims_for_inferencedata
from pymc.model import modelcontext
from pymc.progress_bar import create_simple_progress
from scipy.special import logsumexp

from pymc_bdmc.algorithms.ais import AISRun, ais_forward, ais_reverse
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.hmc import HMCParams, PartsFn, hmc_step
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.tuning import (
    MAX_PILOT_STEPS,
    MIN_VARIANCE,
    PilotResult,
    next_pilot_beta,
    plan_from_pilot,
    thermodynamic_schedule,
)
from pymc_bdmc.model.cases import CaseDensity, ConditionedModel, condition_on_parameters
from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.allocator import retain_freed_memory
from pymc_bdmc.pipeline.diagnostics import log_heldout_diagnostics
from pymc_bdmc.pipeline.interrupts import no_bound_if_interrupted
from pymc_bdmc.pipeline.progress import StepCounter, pilot_phase, progress_enabled
from pymc_bdmc.pipeline.runs import forward_and_reverse
from pymc_bdmc.pipeline.seeding import streams as make_streams
from pymc_bdmc.pipeline.settings import Settings, validate
from pymc_bdmc.results.datatree import annealing_dataset, named_dataset
from pymc_bdmc.schedules import ScheduleName
from pymc_bdmc.version import __version__

__all__ = ["sample_heldout_likelihood"]

logger = logging.getLogger("pymc_bdmc")

#: Default size of each case's pilot population.
DEFAULT_PILOT_CHAINS = 16
#: Bootstrap resamples for the per-case standard errors.
N_BOOTSTRAP = 1000

_SIMULATED_START_HINT = (
    "The cases were simulated from the model with the parameters fixed, so its random "
    "generator produced values its own log-density rejects (e.g. draws that round to the edge "
    "of the support). Check the fixed parameter values, or try another `random_seed`."
)


# -- pilot tuning ------------------------------------------------------------------------------
def resample_within_cases(rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """Systematic resampling of every column of ``weights`` on its own.

    Parameters
    ----------
    rng : numpy.random.Generator
    weights : ndarray, shape (particles, cases)
        Normalized weights of each case's population (columns sum to one).

    Returns
    -------
    ndarray of int, shape (particles, cases)
        For each case, indices into its own population.
    """
    n, cases = weights.shape
    cumulative = np.cumsum(weights, axis=0)
    cumulative[-1] = 1.0
    offset = np.arange(cases)
    # Case c's cumulative weights, shifted to [c, c + 1], searched with points in (c, c + 1).
    points = (rng.uniform(size=cases)[None, :] + np.arange(n)[:, None]) / n + offset
    found = np.searchsorted((cumulative + offset).T.ravel(), points.T.ravel(), side="right")
    return (found.reshape(cases, n).T - offset * n).clip(0, n - 1)


def _column_weights(log_w: np.ndarray) -> np.ndarray:
    finite = np.isfinite(log_w)
    top = np.max(np.where(finite, log_w, -np.inf), axis=0)
    w = np.where(finite, np.exp(log_w - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = w.sum(axis=0)
    uniform = np.full_like(w, 1.0 / len(w))
    return np.where(total > 0, w / np.where(total > 0, total, 1.0), uniform)


def _pooled_moments(values: np.ndarray, weights: np.ndarray):
    """Within-case weighted variance of ``values`` (particles, cases, ...), averaged over cases."""
    w = weights.reshape(weights.shape + (1,) * (values.ndim - 2))
    mean = np.sum(w * values, axis=0)
    return np.sum(w * (values - mean) ** 2, axis=0).mean(axis=0)


def _rms_sd(values: np.ndarray, weights: np.ndarray) -> float:
    """Root mean square over cases of the within-case weighted sd of ``values`` (n, cases)."""
    return float(np.sqrt(_pooled_moments(values[..., None], weights)[0]))


def run_case_pilot(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    parts_fn: PartsFn,
    n_cases: int,
    *,
    n_leapfrog: int,
    target_accept: float,
    jitter: float,
    step_length: float = 0.5,
    adapt_per_step: int = 3,
    initial_step_size: float = 0.5,
    on_step: Callable[[float], None] | None = None,
) -> PilotResult:
    """Adaptive-tempering SMC pilot with one population per case and shared kernels.

    Like :func:`pymc_bdmc.kernels.tuning.run_pilot`, but the rows of ``x0`` (row
    ``p * n_cases + i``: particle ``p`` of case ``i``) form ``n_cases`` independent
    populations: weights and resampling are per case. What is shared, and recorded for the
    frozen plan, is

    * the inverse temperature, advanced so that the root-mean-square over cases of the
      incremental log weight's standard deviation is ``step_length`` nats (for the adaptive
      schedule, the thermodynamic length of the *sum* of the cases' weight variances);
    * the diagonal mass matrix: the within-case weighted variance, averaged over cases;
    * the step size, steered toward ``target_accept`` by the mean acceptance over all rows.

    Returns
    -------
    PilotResult
        ``log_z`` is the sum over cases of the pilot's per-case SMC estimates (a rough check);
        ``n_resampled`` counts per-case resampling events.
    """
    n = len(x0) // n_cases
    x, parts = x0, parts0
    log_w = np.zeros((n, n_cases))
    beta, n_resampled = 0.0, 0
    log_z = np.zeros(n_cases)
    log_eps = float(np.log(initial_step_size))
    weights = np.full((n, n_cases), 1.0 / n)
    variance = np.maximum(_pooled_moments(x.reshape(n, n_cases, -1), weights), MIN_VARIANCE)
    sd = _rms_sd(parts.log_likelihood.reshape(n, n_cases), weights)
    record = {"beta": [0.0], "sd": [sd], "eps": [np.exp(log_eps)], "var": [variance],
              "acc": [np.nan]}
    while beta < 1.0 and len(record["beta"]) <= MAX_PILOT_STEPS:
        new_beta = (1.0 if len(record["beta"]) == MAX_PILOT_STEPS
                    else next_pilot_beta(beta, sd, step_length))
        with np.errstate(invalid="ignore"):
            log_w = log_w + (new_beta - beta) * parts.log_likelihood.reshape(n, n_cases)
        beta = new_beta
        weights = _column_weights(log_w)
        low = 1.0 / np.sum(weights**2, axis=0) < 0.5 * n
        if low.any():
            log_z[low] += log_mean_exp(log_w[:, low], axis=0)
            source = np.tile(np.arange(n)[:, None], (1, n_cases))
            source[:, low] = resample_within_cases(rng, weights[:, low])
            rows = (source * n_cases + np.arange(n_cases)).ravel()
            x, parts = x[rows], parts.select(rows)
            log_w[:, low] = 0.0
            weights[:, low] = 1.0 / n
            n_resampled += int(np.count_nonzero(low))
        variance = np.maximum(_pooled_moments(x.reshape(n, n_cases, -1), weights), MIN_VARIANCE)
        rates = []
        for _ in range(adapt_per_step):
            params = HMCParams(float(np.exp(log_eps)), variance, n_leapfrog, jitter)
            x, parts, info = hmc_step(rng, x, parts, beta, params, parts_fn)
            rate = float(np.mean(info.acceptance_rate))
            rates.append(rate)
            log_eps += 2.0 * (rate - target_accept)  # Robbins-Monro on log(eps), pilot only
        sd = _rms_sd(parts.log_likelihood.reshape(n, n_cases), weights)
        record["beta"].append(beta)
        record["sd"].append(sd)
        record["eps"].append(float(np.exp(log_eps)))
        record["var"].append(variance)
        record["acc"].append(float(np.mean(rates)))
        if on_step is not None:
            on_step(beta)
    log_z += log_mean_exp(log_w, axis=0)
    return PilotResult.from_record(float(np.sum(log_z)), record, n_resampled)


# -- per-case summaries ------------------------------------------------------------------------
def _ess(log_w: np.ndarray) -> np.ndarray:
    """Return the importance ESS of each column of ``log_w`` (chains, cases); 0 if all are 0."""
    with np.errstate(invalid="ignore"):
        ess = np.exp(2 * logsumexp(log_w, axis=0) - logsumexp(2 * log_w, axis=0))
    return np.where(np.any(np.isfinite(log_w), axis=0), ess, 0.0)


def _bootstrap_se(rng: np.random.Generator, log_w: np.ndarray) -> np.ndarray:
    """Bootstrap standard error over chains of each case's ``log mean exp`` (chunked)."""
    chains, cases = log_w.shape
    if chains < 2:
        return np.full(cases, np.nan)
    idx = rng.integers(0, chains, size=(N_BOOTSTRAP, chains))
    chunk = max(1, 4_000_000 // (N_BOOTSTRAP * chains))
    out = np.empty(cases)
    for start in range(0, cases, chunk):
        block = log_w[:, start:start + chunk][idx]  # (boot, chains, block)
        with np.errstate(invalid="ignore"):
            out[start:start + chunk] = np.std(log_mean_exp(block, axis=1), axis=0, ddof=1)
    return out


def _summaries(rng: np.random.Generator, forward: np.ndarray, reverse: np.ndarray | None,
               confidence: float) -> dict:
    """Per-case bounds and their totals from log weights of shape (chains, cases)."""
    cases = forward.shape[1]
    nan = np.full(cases, np.nan)
    lower = log_mean_exp(forward, axis=0)
    lower_se = _bootstrap_se(rng, forward)
    if reverse is None:
        upper, upper_se, ess_reverse = nan, nan, nan
    else:
        upper = -log_mean_exp(reverse, axis=0)
        upper_se = _bootstrap_se(rng, reverse)
        ess_reverse = _ess(reverse)
    slack = float(-np.log1p(-confidence))
    total_lower, total_upper = float(np.sum(lower)), float(np.sum(upper))
    return {
        "lower": lower, "upper": upper, "gap": upper - lower,
        "lower_se": lower_se, "upper_se": upper_se,
        "ess_forward": _ess(forward), "ess_reverse": ess_reverse,
        "total_lower": total_lower, "total_upper": total_upper,
        "total_gap": total_upper - total_lower,
        # Independent cases: the variances of the per-case estimates add up.
        "total_lower_se": float(np.sqrt(np.sum(lower_se**2))),
        "total_upper_se": float(np.sqrt(np.sum(upper_se**2))),
        "total_lower_markov": total_lower - slack,
        "total_upper_markov": total_upper + slack,
    }


# -- result ------------------------------------------------------------------------------------
def _failed_per_case(run: AISRun | None, chains: int, cases: int) -> np.ndarray:
    if run is None or run.failed_step is None:
        return np.zeros(cases, dtype=int)
    return np.count_nonzero(run.failed_step.reshape(chains, cases) >= 0, axis=0)


def _heldout_dataset(summary: dict, forward: AISRun, reverse: AISRun | None,
                     cond: ConditionedModel, chains: int, attrs: dict) -> xr.Dataset:
    case = cond.case_dim
    cases = cond.n_cases
    data = {}
    for name in ("lower", "upper", "gap", "lower_se", "upper_se", "ess_forward", "ess_reverse"):
        data[name] = (case, np.asarray(summary[name], dtype=float))
    data["n_failed_forward"] = (case, _failed_per_case(forward, chains, cases))
    data["n_failed_reverse"] = (case, _failed_per_case(reverse, chains, cases))
    data["log_weight_forward"] = (("ais_chain", case),
                                  forward.log_weight.reshape(chains, cases))
    if reverse is not None:
        data["log_weight_reverse"] = (("ais_chain", case),
                                      reverse.log_weight.reshape(chains, cases))
    for name in ("total_lower", "total_upper", "total_gap", "total_lower_se", "total_upper_se",
                 "total_lower_markov", "total_upper_markov"):
        data[name] = ((), np.float64(summary[name]))
    data["n_divergent_forward"] = ((), int(forward.n_divergent.sum()))
    if reverse is not None:
        data["n_divergent_reverse"] = ((), int(reverse.n_divergent.sum()))
    return xr.Dataset(data, coords={case: cond.case_coords, "ais_chain": np.arange(chains)},
                      attrs=attrs)


def _posterior_groups(rng: np.random.Generator, density: CaseDensity, forward: AISRun,
                      chains: int, observed: dict, attrs: dict) -> xr.DataTree:
    """Build ``posterior``, ``sample_stats`` and ``observed_data``.

    The posterior holds the final forward states resampled by weight *within each case*.
    """
    cond = density.conditioned
    cases = cond.n_cases
    log_w = forward.log_weight.reshape(chains, cases)
    source = resample_within_cases(rng, _column_weights(log_w))
    rows = (source * cases + np.arange(cases)).ravel()
    constrained = density.density.constrain(density.layout.to_flat(forward.x[rows]))
    coords, dims = coords_and_dims_for_inferencedata(cond.model)
    coords = {**coords, cond.case_dim: cond.case_coords}
    per_case = [cond.case_dim]
    parts = forward.parts.select(rows)
    sample_stats = {
        "log_weight": np.take_along_axis(log_w, source, axis=0)[None],
        "source_chain": source[None],
        "log_prior": parts.log_prior.reshape(chains, cases)[None],
        "log_likelihood": parts.log_likelihood.reshape(chains, cases)[None],
    }
    stats_dims = {name: per_case for name in sample_stats}
    run_attrs = make_attrs(
        {**attrs, "inference_library_version": __version__}, inference_library=pm
    )
    run_attrs["inference_library"] = "pymc_bdmc"
    return from_dict(
        {"posterior": {k: v[None] for k, v in constrained.items()},
         "sample_stats": sample_stats, "observed_data": observed},
        coords=coords, dims={**dims, **stats_dims}, sample_dims=["chain", "draw"],
        attrs={"posterior": run_attrs, "sample_stats": run_attrs},
    )


# -- driver ------------------------------------------------------------------------------------
def _check_finite_rows(parts: DensityParts, n_cases: int, where: str,
                       hint: str | None = None) -> None:
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


def _start(simulator: ModelSimulator, density: CaseDensity, chains: int,
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
    _check_finite_rows(parts, density.layout.n_cases, where)
    return rows, parts


def sample_heldout_likelihood(
    params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray] | None = None,
    n_steps: int | None = 1000,
    chains: int = 16,
    *,
    model: pm.Model | None = None,
    simulate: bool = False,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int = 3,
    transitions_per_step: int = 2,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    plan: AnnealingPlan | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
) -> xr.DataTree:
    """Estimate the held-out log-likelihood of each data case by AIS, with the globals fixed.

    For a latent-variable model with global parameters ``theta`` and per-case latents ``z_i``
    (leading case dimension) generating per-case data ``y_i``, estimates
    ``log p(y_i | theta) = log integral p(z_i | theta) p(y_i | z_i, theta) dz_i`` for every case
    by annealed importance sampling, batched over cases and chains. With ``simulate=True``, the
    cases are simulated from the model with ``theta`` fixed and reverse AIS from the simulated
    ``z_i*`` gives per-case stochastic upper bounds too (bidirectional Monte Carlo): the gap
    says how accurate the estimator is on cases like the model's own.

    Parameters
    ----------
    params : mapping
        Fixed values (constrained, e.g. a positive ``sigma``) of the model's global free
        variables, by name. Every free variable not given must be a per-case latent whose first
        dimension runs over the cases.
    data : mapping, optional
        Held-out data for every observed variable, cases along the first axis. The number of
        cases may differ from the model's when the cases are a named dimension (``dims=``) of
        the latents and the observed variables. Default: the model's own observed data.
    n_steps : int, default 1000
        Annealing steps. Ignored if ``schedule`` is an array, whose length then sets it.
    chains : int, default 16
        AIS chains per case and direction; all (chain, case) pairs run in one batched call.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted. It is never modified.
    simulate : bool, default False
        Draw the latents and the data of every case from the model with ``params`` fixed
        (as many cases as the model has), and run reverse AIS from the simulated latents:
        per-case ``upper`` bounds and ``gap``. Cannot be combined with ``data``.
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures, shared by all cases. ``"adaptive"`` places them at equal
        thermodynamic length of the summed per-case weight variance, measured by the pilot.
    n_leapfrog : int, default 3
        Leapfrog steps per HMC transition.
    transitions_per_step : int, default 2
        HMC transitions at each temperature.
    target_accept : float, default 0.9
        Mean acceptance rate the pilot tunes the step sizes for.
    step_size_jitter : float, default 0.5
        Relative jitter of the step size, drawn per (chain, case) independently of the state.
    pilot_chains : int, optional
        Pilot particles per case (default 16).
    confidence : float, default 0.95
        Level of the Markov-inequality bounds on the totals.
    plan : AnnealingPlan, optional
        A frozen plan to run instead of tuning one, e.g. ``AnnealingPlan.from_result(check)``
        of a ``simulate=True`` run whose gap certified it: the test cases then get exactly the
        kernels and schedule the gap was measured with. Its schedule and kernels replace
        ``n_steps``, ``schedule`` and the kernel settings.
    random_seed : int, array_like of int, SeedSequence or Generator, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
        Show a progress bar (never in CI, where the ``CI`` environment variable is set).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`, e.g. ``{"mode": "FAST_RUN"}``.

    Returns
    -------
    xarray.DataTree
        Groups:

        * ``heldout``: per case (the model's case dim name, else ``case``) ``lower``,
          ``upper`` (NaN without ``simulate``), ``gap``, their bootstrap standard errors, weight
          ESS, failed-chain counts; per chain and case ``log_weight_forward/reverse`` (dims
          ``ais_chain, case``); totals over cases ``total_lower``, ``total_upper``,
          ``total_gap``, ``total_lower_se``, ``total_upper_se``, ``total_lower_markov``,
          ``total_upper_markov``. Attributes record ``n_steps``, ``chains``, ``random_seed``,
          ``n_cases`` and the run settings.
        * ``posterior``: each case's final forward states resampled by its own weights
          (chain=1, draw=``chains``); ``sample_stats``: their per-case ``log_weight``,
          ``source_chain``, ``log_prior`` and ``log_likelihood``.
        * ``observed_data``: the cases the bounds refer to (simulated with ``simulate``);
          ``generating_values``: the simulated latents (``simulate`` only);
          ``fixed_parameters``: ``params``.
        * ``annealing``: the frozen schedule and kernels, per-step acceptance and divergences
          (pooled over cases).

    Raises
    ------
    BDMCInputError
        Before any sampling, for parameters that are unknown, missing, of the wrong shape or
        outside their prior's support; data with the wrong shape or non-finite values; free
        variables left that are not per-case latents; cases that are not independent given the
        parameters; discrete latents; Potentials.

    Notes
    -----
    Each (chain, case) pair is an independent AIS chain with its own Metropolis accept/reject,
    so each case's weights are AIS weights for that case alone: ``lower_i`` is a stochastic
    lower bound on ``log p(y_i | theta)`` and ``upper_i`` (on simulated cases) a stochastic
    upper bound (Grosse, Ghahramani & Adams 2015). Cases are independent, so the totals are
    stochastic bounds on ``log p(y_1..y_n | theta)`` with the same guarantee: the total lower
    bound exceeds the truth by more than ``b`` nats with probability below ``exp(-b)``.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model(coords={"case": range(4)}) as model:
    ...     w = pm.Normal("w", 0, 1)
    ...     z = pm.Normal("z", 0, 1, dims="case")
    ...     _ = pm.Normal("y", w * z, 0.5, observed=np.zeros(4), dims="case")
    ...     res = pmb.sample_heldout_likelihood({"w": 1.0}, n_steps=50, chains=4,
    ...                                         random_seed=1, progressbar=False)
    >>> res["heldout"]["lower"].sizes["case"]
    4
    """
    model = modelcontext(model)
    if pilot_chains is None:
        pilot_chains = DEFAULT_PILOT_CHAINS
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter, pilot_chains, confidence)
    if not isinstance(simulate, bool | np.bool_):
        raise BDMCInputError(f"`simulate` must be True or False, got {simulate!r}.")
    if plan is not None and not isinstance(plan, AnnealingPlan):
        raise BDMCInputError(f"`plan` must be an AnnealingPlan, got {type(plan).__name__}.")
    start = time.perf_counter()
    cond = condition_on_parameters(model, params, data, simulate=bool(simulate))
    if plan is not None and plan.n_dim != cond.case_size:
        raise BDMCInputError(
            f"The plan's kernels act on {plan.n_dim} latent coordinates per case, but this "
            f"model has {cond.case_size}: a plan only transfers between runs of the same model."
        )
    retain_freed_memory()  # as compile_model does for the other entry points
    density = CaseDensity(cond, compile_kwargs=compile_kwargs)
    simulator = ModelSimulator(cond.model, density.density.layout, compile_kwargs=compile_kwargs)
    compile_time = time.perf_counter() - start
    streams = make_streams(random_seed)
    truth = None
    if simulate:
        try:
            truth = simulator.draw_joint(streams["simulate"])
        except NotImplementedError as err:
            raise BDMCInputError(
                f"Cannot simulate the cases exactly ({err}); give the latent and observed "
                "variables distributions with a random method."
            ) from err
        density.density.set_observed(truth.observed)
        _check_finite_rows(density.parts(density.layout.to_rows(truth.x[None, :])),
                           cond.n_cases, "simulated latents", hint=_SIMULATED_START_HINT)
    attrs = {
        "random_seed": random_seed if isinstance(random_seed, int | np.integer) else None,
        "compile_time": compile_time,
        "n_cases": cond.n_cases,
        "case_dim": cond.case_dim,
        "fixed_parameters": sorted(cond.params),
        "simulate": bool(simulate),
    }
    return _run(cond, density, simulator, settings, streams, truth, progressbar, attrs, plan)


def _tune(progress, s: Settings, rng, x_pilot, parts_pilot, parts_fn, n_cases: int):
    """Run the per-case pilot (with its progress row) and freeze its tuning into a plan."""
    with pilot_phase(progress) as report:
        pilot = run_case_pilot(rng, x_pilot, parts_pilot, parts_fn, n_cases,
                               n_leapfrog=s.n_leapfrog, target_accept=s.target_accept,
                               jitter=s.step_size_jitter, on_step=report)
    betas = (thermodynamic_schedule(pilot.betas, pilot.sd_log_likelihood, s.n_steps)
             if s.adaptive else s.betas)
    plan = plan_from_pilot(pilot, betas, s.n_leapfrog, s.step_size_jitter,
                           s.transitions_per_step)
    logger.info("Pilot: %d temperatures, %d per-case resamplings, pilot total log likelihood "
                "%.3f; plan frozen.", pilot.n_steps, pilot.n_resampled, pilot.log_z)
    return plan, pilot


def _run(cond: ConditionedModel, density: CaseDensity, simulator: ModelSimulator,
         s: Settings, streams: dict, truth: JointDraw | None, progressbar: bool,
         attrs: dict, plan: AnnealingPlan | None) -> xr.DataTree:
    n_cases = cond.n_cases
    parts_fn = density.parts
    x_pilot = parts_pilot = None
    if plan is None:
        x_pilot, parts_pilot = _start(simulator, density, s.pilot_chains,
                                      streams["pilot_init"], "pilot's prior draws")
    x0, parts0 = _start(simulator, density, s.chains, streams["forward_init"], "prior draws")
    start = time.perf_counter()
    done = StepCounter()
    progress = create_simple_progress(progress_enabled(progressbar))
    n_steps = s.n_steps if plan is None else plan.n_steps
    with progress, no_bound_if_interrupted(done, n_steps):
        pilot = None
        if plan is None:
            plan, pilot = _tune(progress, s, streams["pilot"], x_pilot, parts_pilot, parts_fn,
                                n_cases)
        else:
            logger.info("Using the given frozen plan (%d steps); no pilot run.", plan.n_steps)

        def forward_run(on_step, on_group):
            return ais_forward(streams["forward"], x0, parts0, plan.betas,
                               plan.transition(parts_fn), on_step=on_step)

        start_rows = (None if truth is None
                      else np.tile(density.layout.to_rows(truth.x[None, :]), (s.chains, 1)))

        def reverse_run(on_step, on_group):
            return ais_reverse(streams["reverse"], start_rows, len(start_rows), plan.betas,
                               plan.transition(parts_fn), parts_fn, on_step=on_step,
                               spread_transitions=s.reverse_spread)

        forward, reverse, interrupted = forward_and_reverse(
            progress, done, plan.n_steps, forward_run, None if truth is None else reverse_run)
    sampling_time = time.perf_counter() - start

    summary = _summaries(
        streams["summary"], forward.log_weight.reshape(s.chains, n_cases),
        None if reverse is None else reverse.log_weight.reshape(s.chains, n_cases),
        s.confidence,
    )
    log_heldout_diagnostics(forward, reverse, summary, s.chains)
    attrs = {
        **attrs,
        "algorithm": "heldout_bdmc" if truth is not None else "heldout_ais",
        "kernel": "hmc",
        "n_steps": plan.n_steps,
        "chains": s.chains,
        "pilot_chains": s.pilot_chains,
        "pilot_log_z": np.nan if pilot is None else pilot.log_z,
        "pilot_steps": 0 if pilot is None else pilot.n_steps,
        "schedule": "given plan" if pilot is None else "adaptive" if s.adaptive else "fixed",
        "target_accept": s.target_accept,
        "confidence": s.confidence,
        "sampling_time": sampling_time,
        "model_evaluations": density.n_evaluations,
        "batching": density.batching,
        "interrupted": interrupted,
    }
    attrs = {k: v for k, v in attrs.items() if v is not None}
    dt = _posterior_groups(streams["summary"], density, forward, s.chains,
                           density.density.observed_data(), attrs)
    coords, dims = coords_and_dims_for_inferencedata(cond.model)
    coords = {**coords, cond.case_dim: cond.case_coords}
    if truth is not None:
        generating = {k: v[0] for k, v in density.density.constrain(truth.x[None, :]).items()}
        dt["generating_values"] = named_dataset(generating, dims, coords)
    dt["fixed_parameters"] = named_dataset(cond.params, dims, coords)
    dt["heldout"] = _heldout_dataset(summary, forward, reverse, cond, s.chains, attrs)
    dt["annealing"] = annealing_dataset(plan, forward, reverse, density.layout.labels)
    return dt
