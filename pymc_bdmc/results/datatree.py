"""Assemble AIS/BDMC runs into an ``xarray.DataTree`` the way PyMC and ArviZ expect.

Groups
------
``posterior`` (chain=1, draw=chains)
    Final forward states resampled in proportion to their weights (systematic resampling), so
    ``az.summary`` can use them without weights. Constrained variables and Deterministics, with
    the model's coords and dims.
``sample_stats`` (chain, draw)
    ``log_weight`` of the forward chain each draw came from, ``source_chain``, ``lp`` (joint log
    density) and ``log_likelihood`` at the draw.
``observed_data``
    The data the bounds refer to (the simulated ``y*`` for BDMC).
``generating_values`` (BDMC only)
    The exact joint draw ``theta*`` that generated ``y*``.
``evidence``
    Scalars ``lower``, ``upper`` (NaN without a reverse run), ``gap``, their standard errors,
    mean-log-weight bounds, Markov high-probability bounds, weight ESS; and per-chain
    ``log_weight_forward`` / ``log_weight_reverse`` over dim ``ais_chain``.
``annealing`` (dim ``step``)
    ``beta``, ``step_size``, ``acceptance_rate_forward/reverse``,
    ``mean_log_weight_forward/reverse``, ``n_divergent_forward/reverse`` and the diagonal
    ``inverse_mass`` (dims ``step, parameter``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr
from arviz_base import from_dict, make_attrs
from pymc.backends.arviz import coords_and_dims_for_inferencedata

import pymc_bdmc
from pymc_bdmc.algorithms.ais import AISRun
from pymc_bdmc.estimators import EvidenceBounds
from pymc_bdmc.kernels.tuning import AnnealingPlan
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.resampling import systematic_resample

__all__ = ["build_datatree"]


def _named_dataset(values: dict[str, np.ndarray], dims: dict, coords: dict) -> xr.Dataset:
    """A Dataset of un-batched named arrays, using model dims where they fit the shape."""
    data_vars = {}
    for name, value in values.items():
        value = np.asarray(value)
        var_dims = list(dims.get(name, []))
        if len(var_dims) != value.ndim:
            var_dims = [f"{name}_dim_{i}" for i in range(value.ndim)]
        data_vars[name] = (var_dims, value)
    ds = xr.Dataset(data_vars)
    usable = {k: v for k, v in coords.items() if k in ds.dims and len(v) == ds.sizes[k]}
    return ds.assign_coords(usable)


def _annealing_dataset(plan: AnnealingPlan, forward: AISRun, reverse: AISRun | None,
                       labels: list[str]) -> xr.Dataset:
    step = np.arange(plan.n_steps + 1)
    data = {
        "beta": ("step", plan.betas),
        "step_size": ("step", plan.step_size),
        "inverse_mass": (("step", "parameter"), plan.inv_mass),
        "acceptance_rate_forward": ("step", forward.acceptance_rate),
        "mean_log_weight_forward": ("step", forward.mean_log_weight),
        "n_divergent_forward": ("step", forward.n_divergent),
    }
    if reverse is not None:
        data |= {
            "acceptance_rate_reverse": ("step", reverse.acceptance_rate),
            "mean_log_weight_reverse": ("step", reverse.mean_log_weight),
            "n_divergent_reverse": ("step", reverse.n_divergent),
        }
    # Plans of other kernels (PyMC step methods) describe themselves.
    attrs = getattr(plan, "attrs", None)
    if attrs is None:
        attrs = {"n_leapfrog": plan.n_leapfrog, "step_size_jitter": plan.jitter}
    return xr.Dataset(data, coords={"step": step, "parameter": labels}, attrs=attrs)


def _evidence_dataset(bounds: EvidenceBounds, forward: AISRun, reverse: AISRun | None,
                      attrs: dict) -> xr.Dataset:
    scalars = {
        "lower": bounds.lower,
        "upper": bounds.upper,
        "gap": bounds.gap,
        "lower_se": bounds.lower_se,
        "upper_se": bounds.upper_se,
        "lower_mean_log_weight": bounds.lower_mean_log_weight,
        "upper_mean_log_weight": bounds.upper_mean_log_weight,
        "lower_markov": bounds.lower_markov,
        "upper_markov": bounds.upper_markov,
        "ess_forward": bounds.ess_forward,
        "ess_reverse": bounds.ess_reverse,
    }
    data = {name: ((), np.float64(value)) for name, value in scalars.items()}
    data["log_weight_forward"] = ("ais_chain", forward.log_weight)
    if reverse is not None:
        data["log_weight_reverse"] = ("ais_chain", reverse.log_weight)
    ds = xr.Dataset(data, coords={"ais_chain": np.arange(len(forward.log_weight))})
    ds.attrs = {"confidence": bounds.confidence, **attrs}
    return ds


def build_datatree(
    *,
    rng: np.random.Generator,
    density: ModelDensity,
    plan: AnnealingPlan,
    forward: AISRun,
    reverse: AISRun | None,
    bounds: EvidenceBounds,
    observed: dict[str, np.ndarray],
    generating_values: dict[str, np.ndarray] | None = None,
    attrs: dict | None = None,
) -> xr.DataTree:
    """Build the result tree (see the module docstring for its layout)."""
    model = density.model
    attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
    coords, dims = coords_and_dims_for_inferencedata(model)

    log_w = forward.log_weight
    n = len(log_w)
    if np.any(np.isfinite(log_w)):
        normalized = np.exp(log_w - np.max(log_w))
        normalized /= normalized.sum()
    else:  # every chain died: keep the states, the evidence group says what happened
        normalized = np.full(n, 1.0 / n)
    source = systematic_resample(rng, normalized, n)
    constrained = density.constrain(forward.x[source])
    posterior = {name: value[None, ...] for name, value in constrained.items()}
    parts = forward.parts.select(source)
    sample_stats = {
        "log_weight": log_w[source][None, :],
        "source_chain": source[None, :],
        "lp": (parts.log_prior + parts.log_likelihood)[None, :],
        "log_likelihood": parts.log_likelihood[None, :],
    }
    run_attrs = make_attrs(
        {**attrs, "inference_library_version": pymc_bdmc.__version__}, inference_library=pm
    )
    run_attrs["inference_library"] = "pymc_bdmc"
    dt = from_dict(
        {"posterior": posterior, "sample_stats": sample_stats, "observed_data": observed},
        coords=coords,
        dims=dims,
        sample_dims=["chain", "draw"],
        attrs={"posterior": run_attrs, "sample_stats": run_attrs},
    )
    if generating_values is not None:
        dt["generating_values"] = _named_dataset(generating_values, dims, coords)
    dt["evidence"] = _evidence_dataset(bounds, forward, reverse, attrs)
    dt["annealing"] = _annealing_dataset(plan, forward, reverse,
                                         density.layout.coordinate_labels())
    return dt
