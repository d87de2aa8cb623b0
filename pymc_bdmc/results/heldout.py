"""The held-out likelihood's result: per-case bounds, their totals, and the posterior groups."""

from __future__ import annotations

import numpy as np
import xarray as xr
from pymc.backends.arviz import coords_and_dims_for_inferencedata

from pymc_bdmc.algorithms.ais import AISRun
from pymc_bdmc.estimators import bootstrap_se, importance_ess, log_mean_exp
from pymc_bdmc.kernels.case_pilot import column_weights, resample_within_cases
from pymc_bdmc.model.cases import CaseDensity, ConditionedModel
from pymc_bdmc.results.datatree import run_attributes

__all__ = ["heldout_dataset", "heldout_posterior_groups", "heldout_summaries"]


def heldout_summaries(rng: np.random.Generator, forward: np.ndarray,
                      reverse: np.ndarray | None, confidence: float) -> dict:
    """Per-case bounds and their totals from log weights of shape (chains, cases)."""
    cases = forward.shape[1]
    nan = np.full(cases, np.nan)
    lower = log_mean_exp(forward, axis=0)
    lower_se = bootstrap_se(rng, forward)
    if reverse is None:
        upper, upper_se, ess_reverse = nan, nan, nan
    else:
        upper = -log_mean_exp(reverse, axis=0)
        upper_se = bootstrap_se(rng, reverse)
        ess_reverse = importance_ess(reverse)
    slack = float(-np.log1p(-confidence))
    total_lower, total_upper = float(np.sum(lower)), float(np.sum(upper))
    return {
        "lower": lower, "upper": upper, "gap": upper - lower,
        "lower_se": lower_se, "upper_se": upper_se,
        "ess_forward": importance_ess(forward), "ess_reverse": ess_reverse,
        "total_lower": total_lower, "total_upper": total_upper,
        "total_gap": total_upper - total_lower,
        # Independent cases: the variances of the per-case estimates add up.
        "total_lower_se": float(np.sqrt(np.sum(lower_se**2))),
        "total_upper_se": float(np.sqrt(np.sum(upper_se**2))),
        "total_lower_markov": total_lower - slack,
        "total_upper_markov": total_upper + slack,
    }


def _failed_per_case(run: AISRun | None, chains: int, cases: int) -> np.ndarray:
    if run is None or run.failed_step is None:
        return np.zeros(cases, dtype=int)
    return np.count_nonzero(run.failed_step.reshape(chains, cases) >= 0, axis=0)


def heldout_dataset(summary: dict, forward: AISRun, reverse: AISRun | None,
                    cond: ConditionedModel, chains: int, attrs: dict) -> xr.Dataset:
    """The ``heldout`` group: per-case bounds, weights and failures, and their totals."""
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


def heldout_posterior_groups(rng: np.random.Generator, density: CaseDensity,
                             forward: AISRun, chains: int, observed: dict,
                             attrs: dict) -> xr.DataTree:
    """Build ``posterior``, ``sample_stats`` and ``observed_data``.

    The posterior holds the final forward states resampled by weight *within each case*.
    """
    cond = density.conditioned
    cases = cond.n_cases
    log_w = forward.log_weight.reshape(chains, cases)
    source = resample_within_cases(rng, column_weights(log_w))
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
    from arviz_base import from_dict  # lazily: slow to import

    run_attrs = run_attributes(attrs)
    return from_dict(
        {"posterior": {k: v[None] for k, v in constrained.items()},
         "sample_stats": sample_stats, "observed_data": observed},
        coords=coords, dims={**dims, **stats_dims}, sample_dims=["chain", "draw"],
        attrs={"posterior": run_attrs, "sample_stats": run_attrs},
    )

