"""Assemble AIS/BDMC and SMC runs into an ``xarray.DataTree`` the way PyMC and ArviZ expect.

Groups of an AIS/BDMC result:

``posterior`` (chain=1, draw=chains)
    Final forward states resampled in proportion to their weights (systematic resampling), so
    ``az.summary`` can use them without weights; constrained variables and Deterministics, with
    the model's coords and dims.
``sample_stats`` (chain, draw)
    ``log_weight`` of the forward chain each draw came from, ``source_chain``, ``lp`` (joint log
    density) and ``log_likelihood`` at the draw.
``observed_data``
    The data the bounds refer to (the simulated ``y*`` for BDMC).
``generating_values`` (BDMC only)
    The exact joint draw ``theta*`` that generated ``y*``.
``evidence``
    The bounds ``lower`` and ``upper`` (NaN without a reverse run), ``gap``, their standard
    errors, looser and high-probability bounds, weight ESS, ``posterior_kl_bound`` (paper §4.5),
    divergence and failure totals, and per chain (dim ``ais_chain``) the log weights and the
    step where a chain failed.
``annealing`` (dim ``step``)
    The frozen plan and how it ran: ``beta``, ``step_size``, the diagonal ``inverse_mass``,
    acceptance rates, mean log weights, divergences and failures per direction.

SMC results (:func:`build_smc_datatree`) have the same ``posterior`` (with
``sample_stats.source_particle``), ``observed_data``, ``generating_values`` and ``evidence``
groups, the per-chain log weights being each independent population's log estimate (dim
``smc_chain``) and ``posterior_kl_bound`` NaN (it holds for single annealing chains, not for
resampled particles). Instead of ``annealing`` they have ``smc`` (dim ``stage``): the path
(``beta``, or ``n_observations`` and ``kernel_beta`` for data-point tempering), the kernels'
settings, and per direction the evidence increments, ESS, resampling events, acceptance,
divergences and failures.

Every variable is listed, with its meaning, in docs/explanation/results.md.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from pymc.backends.arviz import coords_and_dims_for_inferencedata

from pymc_bdmc.algorithms.ais import AISRun
from pymc_bdmc.algorithms.smc import DataPointPath, SMCRun, TemperingPath
from pymc_bdmc.estimators import EvidenceBounds
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.density import DensityParts, ModelDensity
from pymc_bdmc.resampling import systematic_resample
from pymc_bdmc.version import __version__

__all__ = ["bounds_dataset", "build_datatree", "build_smc_datatree", "evidence_tree",
           "run_attributes"]


def run_attributes(attrs: dict) -> dict:
    """Return ArviZ's standard attributes of a group of draws, made by pymc_bdmc.

    Not ``make_attrs(inference_library=...)``: that looks the library's version up among the
    installed distributions on every call (65 ms on this project's machine, for each attempt's
    result), and the version is ours anyway.
    """
    from arviz_base import make_attrs  # lazily: slow to import

    run_attrs = make_attrs()
    run_attrs.update(inference_library="pymc_bdmc", inference_library_version=__version__)
    run_attrs.update(attrs)
    return run_attrs


def named_dataset(values: dict[str, np.ndarray], dims: dict, coords: dict) -> xr.Dataset:
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


def _n_failed(run: AISRun) -> np.ndarray:
    return np.zeros_like(run.n_divergent) if run.n_failed is None else run.n_failed


def _failed_step(run: AISRun) -> np.ndarray:
    return np.full(len(run.log_weight), -1) if run.failed_step is None else run.failed_step


def annealing_dataset(plan: AnnealingPlan, forward: AISRun, reverse: AISRun | None,
                      labels: list[str]) -> xr.Dataset:
    step = np.arange(plan.n_steps + 1)
    data = {
        "beta": ("step", plan.betas),
        "step_size": ("step", plan.step_size),
        "inverse_mass": (("step", "parameter"), plan.inv_mass),
        "acceptance_rate_forward": ("step", forward.acceptance_rate),
        "mean_log_weight_forward": ("step", forward.mean_log_weight),
        "n_divergent_forward": ("step", forward.n_divergent),
        "n_failed_forward": ("step", _n_failed(forward)),
    }
    if reverse is not None:
        data |= {
            "acceptance_rate_reverse": ("step", reverse.acceptance_rate),
            "mean_log_weight_reverse": ("step", reverse.mean_log_weight),
            "n_divergent_reverse": ("step", reverse.n_divergent),
            "n_failed_reverse": ("step", _n_failed(reverse)),
        }
    data |= _dense_mass_variables(plan, "step")
    data |= _base_variables(plan)
    # Plans of other kernels (PyMC step methods) describe themselves.
    attrs = getattr(plan, "attrs", None)
    if attrs is None:
        attrs = {"n_leapfrog": plan.n_leapfrog, "step_size_jitter": plan.jitter,
                 "transitions_per_step": plan.transitions_per_step,
                 "scale_moves": int(getattr(plan, "scale_moves", False))}
    return xr.Dataset(data, coords=_parameter_coords(plan, labels, step=step), attrs=attrs)


def _dense_mass_variables(plan, dim: str) -> dict:
    """The plan's dense mass matrices (their factors) and which step uses which, if any."""
    if not getattr(plan, "is_dense", False):
        return {}
    # Principal scales (one vector per matrix, kernels/pilot_metrics.py) or dense factors.
    dims = ("mass_matrix", "parameter", "parameter_column")[:plan.mass_factors.ndim]
    return {"mass_factor": (dims, plan.mass_factors),
            "mass_index": (dim, plan.mass_index)}


def _base_variables(plan) -> dict:
    """The fitted base distribution the path starts from, if any (not the prior)."""
    base = getattr(plan, "base", None)
    if base is None:
        return {}
    return {"base_mean": ("parameter", base.mean), "base_scale": ("parameter", base.scale),
            "base_basis": (("parameter", "base_component"), base.basis),
            "base_eigenvalue": ("base_component", base.eigenvalues)}


def _parameter_coords(plan, labels: list[str], **coords) -> dict:
    coords["parameter"] = labels
    if getattr(plan, "is_dense", False):
        coords["parameter_column"] = labels
    return coords


def bounds_dataset(bounds: EvidenceBounds, log_w_forward: np.ndarray,
                   log_w_reverse: np.ndarray | None = None, attrs: dict | None = None,
                   chain_dim: str = "ais_chain") -> xr.Dataset:
    """The ``evidence`` group every result shares: the bounds and the per-chain log weights.

    Parameters
    ----------
    bounds : EvidenceBounds
    log_w_forward : numpy.ndarray, shape (chains,)
    log_w_reverse : numpy.ndarray, optional
    attrs : dict, optional
        The run's attributes.
    chain_dim : str, default "ais_chain"

    Returns
    -------
    xarray.Dataset
    """
    scalars = {
        "lower": bounds.lower,
        "upper": bounds.upper,
        "gap": bounds.gap,
        "gap_se": bounds.gap_se,
        "lower_se": bounds.lower_se,
        "upper_se": bounds.upper_se,
        "lower_mean_log_weight": bounds.lower_mean_log_weight,
        "upper_mean_log_weight": bounds.upper_mean_log_weight,
        "lower_markov": bounds.lower_markov,
        "upper_markov": bounds.upper_markov,
        "posterior_kl_bound": bounds.posterior_kl_bound,
        "ess_forward": bounds.ess_forward,
        "ess_reverse": bounds.ess_reverse,
    }
    data = {name: ((), np.float64(value)) for name, value in scalars.items()}
    data["log_weight_forward"] = (chain_dim, np.asarray(log_w_forward, dtype=float))
    if log_w_reverse is not None:
        data["log_weight_reverse"] = (chain_dim, np.asarray(log_w_reverse, dtype=float))
    ds = xr.Dataset(data, coords={chain_dim: np.arange(len(log_w_forward))})
    ds.attrs = {"confidence": bounds.confidence, **(attrs or {})}
    return ds


def evidence_tree(bounds: EvidenceBounds, log_w_forward: np.ndarray,
                  log_w_reverse: np.ndarray | None = None, **attrs) -> xr.DataTree:
    """A result holding only the ``evidence`` group (a method without posterior draws).

    Parameters
    ----------
    bounds : EvidenceBounds
    log_w_forward, log_w_reverse : numpy.ndarray
    **attrs
        The run's attributes (e.g. ``algorithm``).

    Returns
    -------
    xarray.DataTree
    """
    return xr.DataTree.from_dict({"evidence": bounds_dataset(bounds, log_w_forward,
                                                             log_w_reverse, attrs)})


def _evidence_dataset(bounds: EvidenceBounds, forward: AISRun | SMCRun,
                      reverse: AISRun | SMCRun | None, attrs: dict,
                      chain_dim: str = "ais_chain") -> xr.Dataset:
    ds = bounds_dataset(bounds, forward.log_weight,
                        None if reverse is None else reverse.log_weight, attrs, chain_dim)
    ds["n_divergent_forward"] = ((), int(forward.n_divergent.sum()))
    ds["n_failed_forward"] = ((), forward.n_failed_total)
    if isinstance(forward, AISRun):
        ds["failed_step_forward"] = (chain_dim, _failed_step(forward))
    if reverse is not None:
        ds["n_divergent_reverse"] = ((), int(reverse.n_divergent.sum()))
        ds["n_failed_reverse"] = ((), reverse.n_failed_total)
        if isinstance(reverse, AISRun):
            ds["failed_step_reverse"] = (chain_dim, _failed_step(reverse))
    return ds


def _sample_tree(rng: np.random.Generator, density: ModelDensity, log_w: np.ndarray,
                 x: np.ndarray, parts: DensityParts, observed: dict, attrs: dict,
                 source_name: str) -> tuple[xr.DataTree, dict, dict]:
    """Groups ``posterior``, ``sample_stats`` and ``observed_data`` from weighted final states."""
    model = density.model
    coords, dims = coords_and_dims_for_inferencedata(model)
    n = len(log_w)
    if np.any(np.isfinite(log_w)):
        normalized = np.exp(log_w - np.max(log_w))
        normalized /= normalized.sum()
    else:  # every chain died: keep the states, the evidence group says what happened
        normalized = np.full(n, 1.0 / n)
    source = systematic_resample(rng, normalized, n)
    constrained = density.constrain(x[source])
    posterior = {name: value[None, ...] for name, value in constrained.items()}
    parts = parts.select(source)
    sample_stats = {
        "log_weight": log_w[source][None, :],
        source_name: source[None, :],
        "lp": (parts.log_prior + parts.log_likelihood)[None, :],
        "log_likelihood": parts.log_likelihood[None, :],
    }
    from arviz_base import from_dict  # lazily: slow to import

    run_attrs = run_attributes(attrs)
    dt = from_dict(
        {"posterior": posterior, "sample_stats": sample_stats, "observed_data": observed},
        coords=coords,
        dims=dims,
        sample_dims=["chain", "draw"],
        attrs={"posterior": run_attrs, "sample_stats": run_attrs},
    )
    return dt, coords, dims


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
    attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
    dt, coords, dims = _sample_tree(rng, density, forward.log_weight, forward.x, forward.parts,
                                    observed, attrs, "source_chain")
    if generating_values is not None:
        dt["generating_values"] = named_dataset(generating_values, dims, coords)
    dt["evidence"] = _evidence_dataset(bounds, forward, reverse, attrs)
    dt["annealing"] = annealing_dataset(plan, forward, reverse,
                                        density.layout.coordinate_labels())
    # The coordinates the plan acts on: a plan transfers only to the same parameterisation.
    dt["annealing"].attrs["reparameterized"] = int(bool(density.reparameterized))
    return dt


def _smc_stage_dataset(plan: AnnealingPlan, path: TemperingPath | DataPointPath,
                       forward: SMCRun, reverse: SMCRun | None, labels: list[str],
                       ess_threshold: float) -> xr.Dataset:
    stage = np.arange(plan.n_steps + 1)
    data = {}
    if isinstance(path, DataPointPath):
        data["n_observations"] = ("stage", path.n_included)
        data["kernel_beta"] = ("stage", plan.betas)
    else:
        data["beta"] = ("stage", plan.betas)
    data |= {
        "step_size": ("stage", plan.step_size),
        "inverse_mass": (("stage", "parameter"), plan.inv_mass),
    }
    data |= _dense_mass_variables(plan, "stage")
    for name, run in (("forward", forward), ("reverse", reverse)):
        if run is None:
            continue
        data |= {
            f"log_evidence_increment_{name}": (("stage", "smc_chain"),
                                               run.log_evidence_increment),
            f"ess_{name}": (("stage", "smc_chain"), run.ess),
            f"resampled_{name}": (("stage", "smc_chain"), run.resampled),
            f"acceptance_rate_{name}": ("stage", run.acceptance_rate),
            f"n_divergent_{name}": ("stage", run.n_divergent),
            f"n_failed_{name}": ("stage", run.n_failed),
        }
    return xr.Dataset(
        data, coords=_parameter_coords(plan, labels, stage=stage, smc_chain=np.arange(forward.chains)),
        attrs={"n_leapfrog": plan.n_leapfrog, "step_size_jitter": plan.jitter,
               "transitions_per_step": plan.transitions_per_step,
               "scale_moves": int(getattr(plan, "scale_moves", False)),
               "ess_threshold": ess_threshold},
    )


def build_smc_datatree(
    *,
    rng: np.random.Generator,
    density: ModelDensity,
    plan: AnnealingPlan,
    path: TemperingPath | DataPointPath,
    forward: SMCRun,
    reverse: SMCRun | None,
    bounds: EvidenceBounds,
    ess_threshold: float,
    observed: dict[str, np.ndarray],
    generating_values: dict[str, np.ndarray] | None = None,
    attrs: dict | None = None,
) -> xr.DataTree:
    """Build the result tree of an SMC run (layout: see the module docstring)."""
    attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
    dt, coords, dims = _sample_tree(rng, density, forward.particle_log_weight.ravel(),
                                    forward.x, forward.parts, observed, attrs,
                                    "source_particle")
    if generating_values is not None:
        dt["generating_values"] = named_dataset(generating_values, dims, coords)
    evidence = _evidence_dataset(bounds, forward, reverse, attrs, chain_dim="smc_chain")
    # The KL certificate (paper §4.5) is derived for unweighted final states of single annealing
    # chains; resampled, interacting particles are not covered by it.
    evidence["posterior_kl_bound"] = ((), np.float64(np.nan))
    dt["evidence"] = evidence
    dt["smc"] = _smc_stage_dataset(plan, path, forward, reverse,
                                   density.layout.coordinate_labels(), ess_threshold)
    return dt
