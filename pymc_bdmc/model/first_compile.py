"""A model's densities, new to this machine, compiled by a helper interpreter.

Numba's machine code for a function it compiles in this process and the same function's code
loaded from its disk cache by a later process can round differently in the last bits (under
PyTensor's fast-math flags; PyMC's own ``model.compile_logp()`` does so too). A model's first
run on a machine would then give other numbers than every later run with the same seed, and a
choice made on them (a path, a length, whether a gap certifies) could differ. So where the
densities were never compiled on this machine, a helper interpreter
(:mod:`~pymc_bdmc.model.compile_ahead`) compiles them, and their batching choice, into the disk
caches, and this process loads them as every later process will: the numbers of a first run
are those of every run. Where no helper can run, this process compiles them itself as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
from pymc.pytensorf import rewrite_pregrad
from pytensor.link.numba.linker import NumbaLinker  # does not import Numba

from pymc_bdmc.model.batching import (
    COMPILE_LOCK,
    SCALE_MAP,
    BatchedParts,
    compile_batched,
    without_stack_traces,
)
from pymc_bdmc.model.rewrite_cache import (
    compile_function,
    compiled_before,
    compiled_marker,
    hot_mode,
)

__all__ = ["DENSITIES_KEY", "BatchedRecipe", "DensitiesRecipe", "compile_densities",
           "compile_here", "first_compilation", "gradient_outputs", "import_backend",
           "scale_map_recipe"]

logger = logging.getLogger("pymc_bdmc.model.density")

#: What the batched densities' choice is keyed by besides their graph (:func:`compile_batched`).
DENSITIES_KEY = "with gradients"


def gradient_outputs(x, densities: list) -> list:
    """``[log_prior, log_likelihood, grad_log_prior, grad_log_likelihood]`` of one vector ``x``.

    One rewrite pass for both densities (a large share of compile time on small models). A
    likelihood free of the parameters is legitimate: its gradient is zero.
    """
    pre_prior, pre_lik = rewrite_pregrad(list(densities))
    grads = [pytensor.grad(pre, x, disconnected_inputs="ignore") for pre in (pre_prior, pre_lik)]
    return [*densities, *grads]


def first_compilation(x, densities: list) -> Path | None:
    """Say so where the densities were never compiled on this machine; return the record.

    A model's first run compiles them with Numba, which can take a minute (later runs load
    them from the caches): the bar only says "Compiling", so the log says why it lasts.
    Returns the record to note once compiled (:func:`~.rewrite_cache.compiled_marker`), or
    None where it exists or nothing is recorded (the cache is off).
    """
    marker = compiled_marker([x], densities, "densities")
    if compiled_before(marker) is not False:
        return None
    logger.info("Compiling this model's densities with Numba: its first run on this machine "
                "can take a minute; later runs load them from the cache.")
    return marker


def import_backend() -> None:
    """Import PyTensor's Numba backend (0.4 s), which loading the densities needs.

    Called while a helper compiles them: the import is then off the call's critical path.
    """
    if isinstance(hot_mode().linker, NumbaLinker):
        import pytensor.link.numba.dispatch  # noqa: F401


def compile_densities(compile_fn, x, densities: list, points: np.ndarray, movable, build=None,
                      remember: bool = True, before_choosing=None):
    """Compile the batched densities and gradients: ``(function, batching)``.

    :func:`compile_batched`, keyed by the densities (:data:`DENSITIES_KEY`), so that a choice
    recorded before loads without building their gradients; ``build`` builds the outputs of
    :func:`gradient_outputs` where they are needed (by default, here); ``before_choosing`` is
    :func:`compile_batched`'s. Call in the model's context: its ``check_bounds`` keys the record.
    """
    if build is None:
        def build():
            return gradient_outputs(x, densities)
    return compile_batched(compile_fn, x, build, points, movable=movable, remember=remember,
                           keyed_by=(densities, DENSITIES_KEY), before_choosing=before_choosing)


def compile_here(inputs, outputs, **kwargs):
    """Compile in this (the helper's) process, in the hot mode, with the disk caches."""
    with COMPILE_LOCK:
        fn = compile_function(inputs, outputs, **kwargs)
    fn.trust_input = True
    return fn


@dataclass
class DensitiesRecipe:
    """What a helper compiles: a model's batched densities, then optionally another recipe.

    The densities' graph of one vector ``x`` (log prior and log-likelihood, data as shared
    variables), the points and coordinates their batching is checked at, and the model's
    ``check_bounds``: the helper compiles them under a model context with the same flag, so
    that its records are found at the keys this process looks them up by.
    """

    x: object
    densities: list
    points: np.ndarray
    movable: np.ndarray
    check_bounds: bool
    then: object = None

    def compile_ahead(self) -> None:
        """Compile the densities into the disk caches (the helper's work), then ``then``'s."""
        with pm.Model(check_bounds=self.check_bounds), without_stack_traces():
            compile_densities(compile_here, self.x, self.densities, self.points, self.movable)
        if self.then is not None:
            self.then.compile_ahead()


@dataclass
class BatchedRecipe:
    """What a helper compiles: any batched function of a density (:func:`compile_batched`).

    Its elementwise terms (Gibbs updates), its densities without gradients, its weighted
    likelihood: the arguments a :class:`~pymc_bdmc.model.density.ModelDensity` compiles them
    with, so that the choice is recorded where that density looks it up.
    """

    x: object
    outputs: list
    points: np.ndarray
    movable: np.ndarray
    check_bounds: bool
    extra_inputs: tuple = ()
    extra_values: tuple = ()

    def compile_ahead(self) -> None:
        """Compile the function and record its choice in the disk caches (the helper's work)."""
        with pm.Model(check_bounds=self.check_bounds), without_stack_traces():
            compile_batched(compile_here, self.x, self.outputs, self.points,
                            extra_inputs=self.extra_inputs, extra_values=self.extra_values,
                            movable=self.movable, remember=True)


def scale_map_recipe(density, x):
    """Return a density's scale moves' map's record of compilation, and a helper's recipe for it.

    ``(marker, recipe)``: the record's place (:func:`~.rewrite_cache.compiled_marker`, None
    without scale groups) and a :class:`BatchedParts` compiling the map, only where it was
    never compiled on this machine (else None). The map's graph built here is not kept (it is
    built again where the map is used): graphs kept by every model compiled in a process made
    its garbage collections slower.
    """
    if not density.location_scale:
        return None, None
    try:
        z, outputs = density.location_scale.map_graph(density.model, density.layout)
    except Exception as err:  # the map is then built, and fails, where used
        logger.debug("No scale map to compile ahead (%s).", err)
        return None, None
    marker = compiled_marker([z], outputs, SCALE_MAP)
    if compiled_before(marker) is not False:
        return marker, None
    return marker, BatchedParts(x, [], {}, density.validation_points(), density.compile_kwargs,
                                movable=density.continuous,
                                scale_map=(density.location_scale.groups, (z, outputs)),
                                scale_map_marker=marker)
