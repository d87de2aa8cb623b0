"""The results of the un-normalised estimators, in the layout every pymc_bdmc result has.

The ``evidence`` group starts with ``lower``, ``upper``, ``gap`` and their standard errors (NaN
where nothing bounds ``log p(y)`` from above, as in a forward-only AIS result) and then holds
each estimator's own variables; ``observed_data`` holds the field or graph the evidence refers
to; ``posterior`` the pilot's (or the final particles') draws; ``auxiliary`` what the estimator
used (``θ̂``, ``log Z(θ̂)`` and its bounds, numbers of draws).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import xarray as xr
from pymc.backends.arviz import coords_and_dims_for_inferencedata

from pymc_bdmc.results.datatree import named_dataset
from pymc_bdmc.unnormalized.pilot import CompiledPrior, observed_field

__all__ = ["evidence_dataset", "posterior_dataset", "result_tree"]


def evidence_dataset(variables: dict, lower_se: float, attrs: dict) -> xr.Dataset:
    """Build the ``evidence`` group: the layout of every pymc_bdmc result, then extras.

    ``lower`` is ``log p̂``; ``lower_se`` its standard error (to first order the relative
    standard error of ``p̂``). Nothing here bounds ``log p(y)`` from above, so ``upper``,
    ``gap`` and their standard errors are NaN, as in a forward-only AIS result.
    """
    nan = float("nan")
    core = {"lower": variables.pop("lower"), "upper": nan, "gap": nan, "gap_se": nan,
            "lower_se": float(lower_se), "upper_se": nan}
    return xr.Dataset(core | variables, attrs=attrs)


def posterior_dataset(model: pm.Model, compiled: CompiledPrior, theta: np.ndarray,
                      attrs: dict) -> xr.Dataset:
    """The constrained free variables and Deterministics at each row of ``theta`` (one chain)."""
    rows = [compiled.constrained(t) for t in theta]
    data = {}
    for i, name in enumerate(compiled.names):
        values = np.stack([r[i] for r in rows])[None]
        dims = list(model.named_vars_to_dims.get(name, ()))
        dims += [f"{name}_dim_{j}" for j in range(len(dims), values.ndim - 2)]
        data[name] = (["chain", "draw", *dims], values)
    coords = {k: v for k, v in model.coords.items() if v is not None}
    used = {d for _, (dims, _) in data.items() for d in dims}
    coords = {k: list(v) for k, v in coords.items() if k in used}
    ds = xr.Dataset(data, coords={"chain": [0], "draw": np.arange(len(theta)), **coords})
    ds.attrs.update(attrs)
    return ds


def result_tree(model: pm.Model, name: str, posterior: xr.Dataset, evidence: xr.Dataset,
                auxiliary: xr.Dataset) -> xr.DataTree:
    """The result: ``posterior``, ``observed_data``, ``evidence`` and ``auxiliary``."""
    coords, dims = coords_and_dims_for_inferencedata(model)
    observed = named_dataset({name: observed_field(model, name)}, dims, coords)
    return xr.DataTree.from_dict({"posterior": posterior, "observed_data": observed,
                                  "evidence": evidence, "auxiliary": auxiliary})
