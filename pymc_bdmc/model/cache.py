"""Compile each model once per process and reuse it across calls.

Compiling the batched densities and the simulator is most of the cost of a short run, and users
call the samplers repeatedly on one model (``calibrate`` alone makes several calls). The last
:data:`CACHE_SIZE` compiled pairs are kept, keyed by the model object, and reused only while the
model's structure is unchanged: the key includes the identity of every variable, Potential and
Deterministic and the shapes of the observed data. (A compiled density refers to its model, so
a weak-keyed cache would never let a model go; a small bounded cache does.) A model's other
parameterisation (:mod:`pymc_bdmc.model.reparameterize`) is cached beside it, under its key.
A reused density is re-conditioned on the model's *current* observed data (``pm.set_data``
between calls is honoured; a previous BDMC run's simulated data are not), and its evaluation
counter restarts.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

import pymc as pm

from pymc_bdmc.model.batching import without_stack_traces
from pymc_bdmc.model.density import ModelDensity, observed_data_value
from pymc_bdmc.model.layout import FlatLayout
from pymc_bdmc.model.reparameterize import OtherForm, other_form
from pymc_bdmc.model.simulate import ModelSimulator

__all__ = ["CACHE_SIZE", "CompiledModel", "clear_cache", "compiled_model", "model_key",
           "observed_values", "written_simulator"]

logger = logging.getLogger(__name__)

#: Compiled models kept per process (least recently used dropped first).
CACHE_SIZE = 8

# key -> (model, density, simulator); the model is kept so that its id cannot be reused.
_CACHE: OrderedDict[tuple, tuple] = OrderedDict()


@dataclass(frozen=True)
class CompiledModel:
    """A model's compiled densities and simulator, and what getting them cost.

    Attributes
    ----------
    density : ModelDensity
    simulator : ModelSimulator
    compile_time : float
        Seconds spent compiling in this call (0 when reused).
    reused : bool
        Whether the compiled functions came from the cache.
    """

    density: ModelDensity
    simulator: ModelSimulator
    compile_time: float
    reused: bool


def observed_values(model: pm.Model) -> dict:
    """Return the model's observed data by observed variable (those without data left out)."""
    values = {}
    for rv in model.observed_RVs:
        data = observed_data_value(model.rvs_to_values[rv])
        if data is not None:
            values[rv.name] = data
    return values


def _fingerprint(model: pm.Model, potentials_in_likelihood: bool, compile_kwargs) -> tuple:
    structure = tuple(
        tuple(id(v) for v in group)
        for group in (model.free_RVs, model.observed_RVs, model.potentials,
                      model.deterministics, model.value_vars)
    )
    transforms = tuple(id(model.rvs_to_transforms.get(rv)) for rv in model.free_RVs)
    shapes = tuple((name, v.shape, str(v.dtype))
                   for name, v in sorted(observed_values(model).items()))
    return (id(model), structure, transforms, shapes, bool(potentials_in_likelihood),
            repr(sorted((compile_kwargs or {}).items())))


def _cache_key(model: pm.Model, potentials_in_likelihood: bool, compile_kwargs, other: bool,
               gradients: bool) -> tuple:
    return (*_fingerprint(model, potentials_in_likelihood, compile_kwargs), bool(other),
            bool(gradients))


def _cached(key: tuple, model: pm.Model) -> tuple | None:
    """``(model, density, simulator)`` stored under ``key`` for this very model, or None."""
    entry = _CACHE.get(key)
    return entry if entry is not None and entry[0] is model else None


def model_key(model: pm.Model) -> tuple:
    """A key of ``model``'s structure: the same while its variables and data shapes are."""
    return _fingerprint(model, False, None)


def compiled_model(model: pm.Model, *, potentials_in_likelihood: bool = False,
                   compile_kwargs: dict | None = None, cache: bool = True,
                   other: bool = False, gradients: bool = True,
                   compile_ahead: bool = False) -> CompiledModel:
    """The compiled densities and simulator of ``model``, compiled at most once per structure.

    Parameters
    ----------
    model : pm.Model
    potentials_in_likelihood : bool, default False
    compile_kwargs : dict, optional
    cache : bool, default True
        Reuse (and store) compiled functions. ``False`` always compiles afresh.
    other : bool, default False
        Compile the model's other parameterisation
        (:func:`pymc_bdmc.model.reparameterize.other_form`; ``density.reparameterized`` names
        what it swaps, empty where nothing qualifies).
    gradients : bool, default True
        Compile the densities' gradients too (cached apart from the gradient-free form).
    compile_ahead : bool, default False
        Let a helper interpreter compile what it can meanwhile (:class:`ModelDensity`).
    """
    key = _cache_key(model, potentials_in_likelihood, compile_kwargs, other, gradients)
    entry = _cached(key, model) if cache else None
    if entry is not None:
        _CACHE.move_to_end(key)
        _, density, simulator = entry
        density.set_observed(observed_values(model))
        density.n_evaluations = 0
        logger.debug("Reusing the compiled densities of this model.")
        return CompiledModel(density, simulator, 0.0, True)
    start = time.perf_counter()
    with without_stack_traces():
        # The same evidence; the user's model is not touched.
        form = other_form(model) if other else OtherForm(model)
        density = ModelDensity(form.model, potentials_in_likelihood=potentials_in_likelihood,
                               compile_kwargs=compile_kwargs, gradients=gradients,
                               reparameterized=form.swapped,
                               reparameterized_walks=form.walks,
                               reparameterized_vector_walks=form.vector_walks,
                               reparameterized_autoregressions=form.autoregressions,
                               compile_ahead=compile_ahead)
        simulator = ModelSimulator(form.model, density.layout, compile_kwargs=compile_kwargs)
    if cache:
        _CACHE[key] = (model, density, simulator)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return CompiledModel(density, simulator, time.perf_counter() - start, False)


def written_simulator(model: pm.Model, compile_kwargs: dict | None = None) -> ModelSimulator:
    """Return the simulator of ``model`` as written, without compiling its densities anew.

    For a call in the other form, which simulates its data as written
    (:func:`pymc_bdmc.pipeline.problem.model_problem`): the as-written model's compiled
    simulator where this process has one, else one on the same layout as its densities'.
    """
    for gradients in (True, False):
        entry = _cached(_cache_key(model, False, compile_kwargs, False, gradients), model)
        if entry is not None:
            return entry[2]
    with without_stack_traces():
        return ModelSimulator(model, FlatLayout.of_model(model, model.initial_point()),
                              compile_kwargs=compile_kwargs)


def clear_cache() -> None:
    """Forget every compiled model of this process."""
    _CACHE.clear()
