"""A model conditioned on its global parameters, and its per-case compiled densities.

Held-out likelihood (:func:`pymc_bdmc.sample_heldout_likelihood`) fixes the global parameters
``theta`` of a latent-variable model and integrates out, for every data case ``y_i``, its own
latent variables ``z_i``:

    p(y_i | theta) = integral p(z_i | theta) p(y_i | z_i, theta) dz_i.

Given ``theta`` the cases are independent, so each needs its own estimate. This module

* builds the conditioned model with ``pm.do`` (a clone: the user's model is never touched),
  swaps in held-out data (resizing the case dimension when it is a named, resizable dim), and
  refuses, with an actionable :class:`~pymc_bdmc.errors.BDMCInputError`, anything that is not
  "per-case latents with a leading case dimension" before any sampling;
* compiles one batched function giving, for every chain, the *per-case* log prior
  ``log p(z_i | theta)`` (transformed space, with Jacobians) and log-likelihood
  ``log p(y_i | z_i, theta)``, each a vector over cases, and the gradients of their sums (which,
  cases being independent, hold each case's own gradient in that case's coordinates);
* re-arranges the flat unconstrained vector into *rows*, one per (chain, case) pair, each holding
  one case's latent coordinates. Downstream, every row is an independent annealing chain: the HMC
  kernel, its Metropolis accept/reject and the AIS weights are per (chain, case).

Independence across cases is not assumed silently: it is checked numerically (perturbing one
case's latents must leave every other case's densities and gradients unchanged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
from pymc.initial_point import make_initial_point_fn
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import rewrite_pregrad
from pytensor.compile.sharedvalue import SharedVariable

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.checks import check_model
from pymc_bdmc.model.density import (
    ONE_SHOT_MODE,
    DensityParts,
    ModelDensity,
    join_value_inputs,
    observed_data_value,
)

__all__ = ["CaseDensity", "CaseLayout", "ConditionedModel", "condition_on_parameters"]

logger = logging.getLogger(__name__)

#: Cases whose latents are perturbed by the independence check (spread over all cases).
INDEPENDENCE_CHECK_CASES = 8


@dataclass(frozen=True)
class ConditionedModel:
    """A clone of the user's model with the global parameters fixed.

    Attributes
    ----------
    model : pm.Model
        The clone (``pm.do`` of the user's model), conditioned on the held-out data if given.
    n_cases : int
        Number of data cases (the shared leading dimension of latents and observations).
    case_dim : str
        Name of that dimension: the model's dim name if it has one, else ``"case"``.
    case_coords : ndarray
        Coordinate values along it.
    params : dict
        The fixed global parameters (constrained values, as given).
    case_size : int
        Unconstrained latent coordinates per case.
    """

    model: pm.Model
    n_cases: int
    case_dim: str
    case_coords: np.ndarray
    params: dict[str, np.ndarray]
    case_size: int


def _without_initvals(model: pm.Model) -> pm.Model:
    """Return a shallow stand-in of ``model`` with default initvals (PyMC cloning refuses them)."""
    if not any(v is not None for v in model.rvs_to_initial_values.values()):
        return model
    stand_in = object.__new__(type(model))
    stand_in.__dict__.update(model.__dict__)
    stand_in.rvs_to_initial_values = {rv: None for rv in model.rvs_to_initial_values}
    return stand_in


def _as_numeric(name: str, value, what: str) -> np.ndarray:
    try:
        array = np.array(value)
    except Exception as err:  # anything unconvertible is bad input
        raise BDMCInputError(f"{what} {name!r} is not an array ({err}).") from err
    if not (np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.bool_)):
        raise BDMCInputError(f"{what} {name!r} is not numeric (dtype {array.dtype}).")
    if not np.all(np.isfinite(array)):
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        raise BDMCInputError(
            f"{what} {name!r} contains {bad} non-finite value(s) (NaN or inf). Remove or fix them "
            "(held-out cases with missing values are not supported: drop those cases)."
        )
    return array


def _check_params(model: pm.Model, params) -> dict[str, np.ndarray]:
    if not isinstance(params, Mapping) or not params:
        raise BDMCInputError(
            "`params` must be a non-empty mapping from the names of the model's global free "
            f"variables to their fixed values; free variables: {[v.name for v in model.free_RVs]}."
        )
    free = {rv.name: rv for rv in model.free_RVs}
    unknown = [name for name in params if name not in free]
    if unknown:
        raise BDMCInputError(
            f"`params` names {unknown}, which are not free variables of the model. Give values of "
            f"free variables (by name, constrained values): {sorted(free)}."
        )
    shapes = model.eval_rv_shapes()
    values = {}
    for name, value in params.items():
        array = _as_numeric(name, value, "Parameter")
        expected = tuple(int(s) for s in shapes[name])
        if array.shape != expected:
            raise BDMCInputError(
                f"Parameter {name!r} has shape {array.shape}, but the model's {name!r} has shape "
                f"{expected}."
            )
        dtype = free[name].dtype
        converted = array.astype(dtype)
        if not np.array_equal(converted, array):
            raise BDMCInputError(
                f"Parameter {name!r} is discrete ({dtype}) but its value is not integer."
            )
        values[name] = converted
    _check_support(model, values)
    return values


def _check_support(model: pm.Model, values: dict[str, np.ndarray]) -> None:
    """Refuse parameter values the model's own prior gives zero density."""
    rvs = [model[name] for name in values]
    point = make_initial_point_fn(model=_without_initvals(model), overrides=values,
                                  return_transformed=True)(0)
    terms = model.logp(vars=rvs, jacobian=False, sum=False)
    with model:
        fn = compile_pytensor(list(model.value_vars), terms, mode=ONE_SHOT_MODE,
                              on_unused_input="ignore")
    logps = fn(*[point[v.name] for v in model.value_vars])
    outside = [rv.name for rv, logp in zip(rvs, logps, strict=True)
               if not np.all(np.isfinite(logp))]
    if outside:
        raise BDMCInputError(
            f"Parameter values of {outside} lie outside the support of their priors (the model "
            "gives them zero density, e.g. a negative scale or a probability above 1). Pass "
            "values the model allows."
        )


def _observed_values(model: pm.Model) -> dict[str, np.ndarray | None]:
    return {rv.name: observed_data_value(model.rvs_to_values[rv]) for rv in model.observed_RVs}


def _check_data(model: pm.Model, data) -> dict[str, np.ndarray]:
    if not isinstance(data, Mapping) or not data:
        raise BDMCInputError(
            "`data` must be a non-empty mapping from observed-variable names to held-out data "
            "(or None to use the model's own observed data)."
        )
    observed = _observed_values(model)
    unknown = [name for name in data if name not in observed]
    if unknown:
        raise BDMCInputError(
            f"`data` names {unknown}, which are not observed variables of the model; observed "
            f"variables: {sorted(observed)}."
        )
    missing = [name for name in observed if name not in data]
    if missing:
        raise BDMCInputError(
            f"`data` has no values for observed variables {missing}: give held-out data for "
            f"every observed variable ({sorted(observed)})."
        )
    values = {name: _as_numeric(name, value, "Held-out data") for name, value in data.items()}
    scalar = [name for name, value in values.items() if value.ndim == 0]
    if scalar:
        raise BDMCInputError(
            f"Held-out data of {scalar} are scalars; data need a leading case dimension "
            "(one row per case)."
        )
    return values


def _case_dim_name(model: pm.Model, names) -> str | None:
    dims = {model.named_vars_to_dims.get(name, (None,))[0] for name in names}
    dims.discard(None)
    return dims.pop() if len(dims) == 1 else None


def _resize(clone: pm.Model, data: dict[str, np.ndarray], n_cases: int,
            old_cases: int) -> None:
    """Set the clone's case dimension to ``n_cases`` (it must be a named, resizable dim)."""
    dim = _case_dim_name(clone, data)
    length = clone.dim_lengths.get(dim) if dim is not None else None
    if not isinstance(length, SharedVariable):
        raise BDMCInputError(
            f"The held-out data have {n_cases} cases but the model was built for {old_cases}, "
            "and its case dimension cannot be resized (it is not a named `dims=` dimension of "
            "the observed variables). Declare the cases as a named dimension (e.g. "
            "`pm.Model(coords={'case': ...})` and `dims=('case', ...)` on the latents and the "
            "likelihood), or build the model on the held-out data and omit `data`."
        )
    coords = clone.coords.get(dim)
    clone.set_dim(dim, n_cases, coord_values=None if coords is None else np.arange(n_cases))


def _leading(shape) -> int | None:
    return int(shape[0]) if len(shape) else None


def condition_on_parameters(model: pm.Model, params, data=None, *,
                            simulate: bool = False) -> ConditionedModel:
    """Fix the global parameters of ``model`` and check it is a per-case latent-variable model.

    Parameters
    ----------
    model : pm.Model
        The user's model (never modified).
    params : mapping
        Global free variables (by name) and their fixed constrained values.
    data : mapping, optional
        Held-out data for every observed variable; their shared leading dimension indexes the
        cases and may differ from the model's when that dimension is a named, resizable dim.
    simulate : bool, default False
        Whether data will be simulated from the conditioned model (BDMC validation).

    Returns
    -------
    ConditionedModel

    Raises
    ------
    BDMCInputError
        For unknown or missing parameters, parameters outside their prior's support, data of
        the wrong shape or with non-finite values, free variables left over that are not
        per-case latents, discrete latents, Potentials, or a model without observations.
    """
    if not model.observed_RVs:
        raise BDMCInputError(
            "The model has no observed variables, so there is no held-out likelihood to "
            "estimate. Pass data with `observed=` to the likelihood."
        )
    if model.potentials:
        raise BDMCInputError(
            f"The model has Potentials {[p.name for p in model.potentials]}, which cannot be "
            "split into per-case terms (nor simulated from). Express them as distributions."
        )
    values = _check_params(model, params)
    held_out = None if data is None else _check_data(model, data)
    if held_out is not None and simulate:
        raise BDMCInputError(
            "`simulate=True` draws its own cases from the model; do not also pass `data`. To "
            "simulate a different number of cases, build the model with that many (or set its "
            "case dimension with `pm.set_data(..., coords=...)`)."
        )

    try:
        clone = pm.do(_without_initvals(model), values)
    except (ValueError, TypeError) as err:
        raise BDMCInputError(f"Cannot fix the parameters {sorted(values)}: {err}") from err

    if held_out is not None:
        leading = {name: value.shape[0] for name, value in held_out.items()}
        if len(set(leading.values())) != 1:
            raise BDMCInputError(
                f"The held-out data disagree on the number of cases (leading dimensions "
                f"{leading}); every observed variable needs one row per case."
            )
        n_cases = next(iter(leading.values()))
        model_data = _observed_values(clone)
        symbolic = [name for name, value in model_data.items() if value is None]
        if symbolic:
            raise BDMCInputError(
                f"Observed variables {symbolic} have symbolic data (an expression), which "
                "cannot be replaced. Pass their observations as arrays or pm.Data."
            )
        current = {name: _leading(value.shape) for name, value in model_data.items()}
        if any(value is None for value in current.values()):
            raise BDMCInputError(
                f"Every observed variable needs the cases along its first axis; the model's "
                f"observations have leading dimensions {current} (None: scalar)."
            )
        old = max(current.values())
        if any(value != n_cases for value in current.values()):
            _resize(clone, held_out, n_cases, old)
        try:
            clone = pm.observe(clone, held_out)
        except (ValueError, TypeError) as err:
            shapes = {name: value.shape for name, value in held_out.items()}
            raise BDMCInputError(
                f"The held-out data (shapes {shapes}) do not fit the model's observed "
                f"variables: {err}. Apart from the number of cases, data must have the shape "
                "of the model's observations."
            ) from err

    check_model(clone, needs_simulation=simulate, gradient_kernel=True, allow_missing=False,
                needs_free_variables=False)
    return _check_cases(clone, values)


def _check_cases(clone: pm.Model, values: dict[str, np.ndarray]) -> ConditionedModel:
    observed = _observed_values(clone)
    leading = {name: (None if value is None else _leading(value.shape))
               for name, value in observed.items()}
    if any(value is None for value in leading.values()) or len(set(leading.values())) != 1:
        raise BDMCInputError(
            f"Every observed variable needs the cases along its first axis, with the same "
            f"number of cases; leading dimensions: {leading} (None: scalar or symbolic data)."
        )
    n_cases = next(iter(leading.values()))
    # Dims-based shapes are symbolic, so PyMC accepts data of any shape: compare with the
    # variables' actual shapes (which do not depend on random values).
    with clone:
        shape_fn = compile_pytensor([], [rv.shape for rv in clone.observed_RVs],
                                    mode=ONE_SHOT_MODE)
    wrong = {rv.name: (observed[rv.name].shape, tuple(int(s) for s in shape))
             for rv, shape in zip(clone.observed_RVs, shape_fn(), strict=True)
             if observed[rv.name].shape != tuple(int(s) for s in shape)}
    if wrong:
        raise BDMCInputError(
            f"The data do not fit the observed variables (name: (data shape, variable shape)) "
            f"{wrong}. Apart from the number of cases, held-out data must have the shape of the "
            "model's observations."
        )
    if not clone.free_RVs:
        raise BDMCInputError(
            "`params` fixes every free variable, so there are no latent variables to integrate "
            "out; the held-out likelihood is then the model's log-likelihood itself."
        )
    shapes = clone.eval_rv_shapes()
    not_per_case, case_size = {}, 0
    for rv in clone.free_RVs:
        value_name = clone.rvs_to_values[rv].name
        shape = tuple(int(s) for s in shapes[value_name])
        if _leading(shape) != n_cases:
            not_per_case[rv.name] = shape
        case_size += int(np.prod(shape[1:], dtype=int))
    if not_per_case:
        raise BDMCInputError(
            f"After fixing {sorted(values)}, free variables {not_per_case} (name: shape) are "
            f"left that are not per-case latents with a leading dimension of {n_cases} cases "
            "(the data's first axis). Pass the values of global parameters in `params`, and "
            "give every latent variable the cases as its first dimension (when the held-out "
            "data have a different number of cases, use the same named `dims=` for the latents "
            "and the data)."
        )
    dim = _case_dim_name(clone, [*observed, *(rv.name for rv in clone.free_RVs)]) or "case"
    coords = clone.coords.get(dim)
    case_coords = (np.asarray(coords) if coords is not None and len(coords) == n_cases
                   else np.arange(n_cases))
    return ConditionedModel(clone, int(n_cases), dim, case_coords, values, case_size)


@dataclass(frozen=True)
class CaseLayout:
    """Where each case's latent coordinates live in the flat unconstrained vector.

    Attributes
    ----------
    index : ndarray of int, shape (n_cases, case_size)
        ``index[i]`` are the flat coordinates of case ``i``'s latents.
    labels : list of str
        One label per per-case coordinate, e.g. ``z[case, 1]``.
    n_dim : int
        Length of the flat vector.
    """

    index: np.ndarray
    labels: list[str]
    n_dim: int

    @property
    def n_cases(self) -> int:
        """Number of cases."""
        return self.index.shape[0]

    @property
    def case_size(self) -> int:
        """Latent coordinates per case."""
        return self.index.shape[1]

    def to_rows(self, x: np.ndarray) -> np.ndarray:
        """Flat vectors ``(chains, n_dim)`` to rows ``(chains * n_cases, case_size)``.

        Row ``k * n_cases + i`` holds case ``i`` of chain ``k``.
        """
        x = np.asarray(x, dtype=float)
        return x[:, self.index].reshape(-1, self.case_size)

    def to_flat(self, rows: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_rows`."""
        rows = np.asarray(rows, dtype=float)
        chains = len(rows) // self.n_cases
        x = np.empty((chains, self.n_dim))
        x[:, self.index] = rows.reshape(chains, self.n_cases, self.case_size)
        return x

    def per_case(self, values: np.ndarray) -> np.ndarray:
        """Per-row values ``(chains * n_cases, ...)`` as ``(chains, n_cases, ...)``."""
        values = np.asarray(values)
        return values.reshape(-1, self.n_cases, *values.shape[1:])


class CaseDensity:
    """Per-case log prior and log-likelihood of a conditioned model, batched over chains.

    Parameters
    ----------
    conditioned : ConditionedModel
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`.

    Attributes
    ----------
    density : ModelDensity
        The model's density object: flat layout, data shared variables (``set_observed``),
        ``constrain``. Its own summed density is never compiled.
    layout : CaseLayout
    batching : str
        How the batched function loops over chains ("vectorized" or "blockwise").
    """

    def __init__(self, conditioned: ConditionedModel, compile_kwargs: dict | None = None):
        model = conditioned.model
        self.conditioned = conditioned
        self.density = ModelDensity(model, compile_kwargs=compile_kwargs, gradients=False)
        self.n_evaluations = 0
        n_cases = conditioned.n_cases
        flat = self.density.layout
        blocks, labels = [], []
        for name, shape, slc in zip(flat.names, flat.shapes, flat.slices, strict=True):
            size = int(np.prod(shape[1:], dtype=int))
            blocks.append(np.arange(slc.start, slc.stop).reshape(n_cases, size))
            labels.extend(
                f"{name}[{', '.join([conditioned.case_dim, *map(str, idx)])}]"
                for idx in np.ndindex(*shape[1:])
            )
        self.layout = CaseLayout(np.concatenate(blocks, axis=1), labels, flat.size)

        prior_terms = model.logp(vars=list(model.free_RVs), sum=False)
        lik_terms = model.logp(vars=list(model.observed_RVs), sum=False)
        names = [rv.name for rv in (*model.free_RVs, *model.observed_RVs)]
        terms, x = join_value_inputs(model.initial_point(), [*prior_terms, *lik_terms],
                                     self.density.value_vars)
        terms = self.density._replace_data(terms)
        self._check_term_shapes(x, terms, names, n_cases)
        per_case = [t.sum(axis=tuple(range(1, t.ndim))) if t.ndim > 1 else t for t in terms]
        n_prior = len(prior_terms)
        prior_case = sum(per_case[:n_prior])
        lik_case = sum(per_case[n_prior:])
        pre_prior, pre_lik = rewrite_pregrad([prior_case.sum(), lik_case.sum()])
        outputs = [
            prior_case, lik_case,
            pytensor.grad(pre_prior, x, disconnected_inputs="ignore"),
            pytensor.grad(pre_lik, x, disconnected_inputs="ignore"),
        ]
        self._fn, self.batching = self.density.batched_function(x, outputs)
        self._check_independent_cases()

    def _check_term_shapes(self, x, terms, names, n_cases) -> None:
        shape_fn = self.density._compile([x], [t.shape for t in terms], mode=ONE_SHOT_MODE,
                                         on_unused_input="ignore")
        point = self.density.validation_points()[0]
        shapes = [tuple(int(d) for d in s) for s in shape_fn(point)]
        bad = {name: shape for name, shape in zip(names, shapes, strict=True)
               if _leading(shape) != n_cases}
        if bad:
            raise BDMCInputError(
                f"The log-densities of {bad} (name: shape of its elementwise log-density) do "
                f"not run over the {n_cases} cases along their first axis, so they cannot be "
                "split into per-case terms. Put the cases on the first axis of every latent and "
                "observed variable."
            )

    def _raw(self, x: np.ndarray):
        self.n_evaluations += 1
        prior, lik, grad_prior, grad_lik = self._fn(np.ascontiguousarray(x, dtype=float))
        return (np.where(np.isnan(prior), -np.inf, prior), np.where(np.isnan(lik), -np.inf, lik),
                grad_prior, grad_lik)

    def parts(self, rows: np.ndarray) -> DensityParts:
        """Per-row densities of rows ``(chains * n_cases, case_size)`` (see :class:`CaseLayout`).

        Row ``r`` gets case ``r % n_cases``'s log prior ``log p(z_i | theta)`` and
        log-likelihood ``log p(y_i | z_i, theta)``, and their gradients in that case's
        coordinates: a :class:`~pymc_bdmc.model.density.DensityParts` over rows, so every
        kernel and annealing routine of the package runs one independent chain per row.
        """
        layout = self.layout
        prior, lik, grad_prior, grad_lik = self._raw(layout.to_flat(rows))
        size = layout.case_size
        return DensityParts(prior.ravel(), lik.ravel(),
                            grad_prior[:, layout.index].reshape(-1, size),
                            grad_lik[:, layout.index].reshape(-1, size))

    def _check_independent_cases(self) -> None:
        """Refuse models whose cases are coupled once ``theta`` is fixed.

        Perturbs the latents of a few cases (one per batch row) and requires every other case's
        log prior, log-likelihood and gradients to stay exactly as they were.
        """
        layout = self.layout
        n_cases = layout.n_cases
        if n_cases < 2:
            return
        base = self.density.validation_points()[1]
        cases = np.unique(np.linspace(0, n_cases - 1, min(n_cases, INDEPENDENCE_CHECK_CASES))
                          .round().astype(int))
        x = np.tile(base, (len(cases) + 1, 1))
        wiggle = 0.3 + 0.2 * np.sin(np.arange(1, layout.case_size + 1) * 2.3)
        for row, case in enumerate(cases, start=1):
            x[row, layout.index[case]] += wiggle
        prior, lik, grad_prior, grad_lik = self._raw(x)
        for row, case in enumerate(cases, start=1):
            others = np.arange(n_cases) != case
            coords = layout.index[others].ravel()
            pairs = ((prior[row, others], prior[0, others]), (lik[row, others], lik[0, others]),
                     (grad_prior[row, coords], grad_prior[0, coords]),
                     (grad_lik[row, coords], grad_lik[0, coords]))
            if not all(np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True)
                       for a, b in pairs):
                raise BDMCInputError(
                    f"Changing the latent variables of case {case} changes the densities of "
                    "other cases, so the cases are not independent given the fixed parameters "
                    "(e.g. a global variable left out of `params`, or latents that interact "
                    "across cases such as a random walk). Held-out likelihood integrates each "
                    "case on its own: fix every global variable in `params`."
                )
