"""The compile stage: a model's batched densities and simulator, compiled once per structure.

Every method compiles through :func:`compile_model` (or :func:`timed_build` for what is not a
model's own density, such as the held-out per-case densities): each also lets this process's
``malloc`` keep freed memory while chains run (:mod:`pymc_bdmc.parallel.allocator`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.checks import check_compile_kwargs
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.reparameterize import draw_in_other_form, other_form
from pymc_bdmc.model.simulate import JointDraw
from pymc_bdmc.parallel.allocator import retain_freed_memory
from pymc_bdmc.parallel.executors import local_cores
from pymc_bdmc.pipeline.settings import Parallel
from pymc_bdmc.pipeline.timing import timed

__all__ = ["compile_model", "has_other_form", "helpers_allowed", "other_parameterization",
           "timed_build"]

T = TypeVar("T")


def timed_build(build: Callable[[], T]) -> tuple[T, float]:
    """Return ``build()`` and the seconds it took, after the process-wide memory setting.

    Parameters
    ----------
    build : callable
        Compiles something (densities, simulators) and returns it.

    Returns
    -------
    tuple
        ``(what build returned, seconds)``.
    """
    retain_freed_memory()  # the first stage of every entry point; once per process
    start = time.perf_counter()
    with timed("compile"):
        built = build()
    return built, time.perf_counter() - start


def compile_model(model, potentials_in_likelihood, compile_kwargs, other: bool = False,
                  gradients: bool = True, compile_ahead: bool = False):
    """The model's density, simulator and compile time, compiled once per model structure.

    Also lets this process's ``malloc`` keep freed memory while chains run
    (:func:`~pymc_bdmc.parallel.allocator.retain_freed_memory`).

    Parameters
    ----------
    model : pm.Model
    potentials_in_likelihood : bool
    compile_kwargs : dict or None
    other : bool, default False
        Compile the model's other parameterisation (:mod:`pymc_bdmc.model.reparameterize`);
        refused where it has none.
    gradients : bool, default True
        Compile the gradients too (PyMC step methods need none).
    compile_ahead : bool, default False
        Let a helper interpreter compile what it can meanwhile (:func:`helpers_allowed`).

    Returns
    -------
    tuple
        ``(ModelDensity, ModelSimulator, compile seconds)``; see :mod:`pymc_bdmc.model.cache`.
    """
    retain_freed_memory()  # the first stage of every entry point; once per process
    check_compile_kwargs(compile_kwargs)
    if other and not has_other_form(model):
        raise BDMCInputError(
            "`reparameterize=True` (or a plan frozen on a reparameterized model) needs a "
            "Gaussian hierarchy to swap: a free `Normal` whose scale depends on a free "
            "variable, a standard normal scaled so (e.g. `beta = z * tau * lam`), a "
            "`GaussianRandomWalk` whose innovation scale is a free variable, or a `pm.AR` "
            "whose coefficients or scale are. This model has none; leave `reparameterize` "
            "False.")
    with timed("compile"):
        compiled = compiled_model(model, potentials_in_likelihood=potentials_in_likelihood,
                                  compile_kwargs=compile_kwargs, other=other,
                                  gradients=gradients, compile_ahead=compile_ahead)
    return compiled.density, compiled.simulator, compiled.compile_time


def helpers_allowed(parallel: Parallel) -> bool:
    """Whether a call may start a helper interpreter to compile ahead (:class:`ModelDensity`).

    Where its chains may use more than one local core: ``cores`` above 1 (or None, all of a
    machine's several) and no ``executor`` (a cluster's workers do not share this machine's
    compile caches).
    """
    if parallel.executor is not None:
        return False
    return local_cores(parallel.cores) > 1


def has_other_form(model) -> bool:
    """Tell whether ``model`` has a variable to swap (:mod:`pymc_bdmc.model.reparameterize`).

    A copy of the model's graph: a few ms (53 ms on a 450-group hierarchy).
    """
    return bool(other_form(model).swapped)


def other_parameterization(model, density: ModelDensity, truth: JointDraw, compile_kwargs,
                           compile_ahead: bool = False):
    """``model``'s other form, conditioned on ``truth``'s data, and ``theta*`` in its coordinates.

    Parameters
    ----------
    model : pm.Model
    density : ModelDensity
        The model as written, which simulated ``truth``.
    truth : JointDraw or None
        None on the model's own data (a lower bound only): the other form keeps them.
    compile_kwargs : dict or None
    compile_ahead : bool, default False
        As for :func:`compile_model`.

    Returns
    -------
    tuple or None
        ``(ModelDensity, ModelSimulator, JointDraw, compile seconds)``, or None where the model
        has nothing to swap (:mod:`pymc_bdmc.model.reparameterize`). Callers ask
        :func:`has_other_form` first: that copy of the graph is not made again here.
    """
    with timed("compile"):
        compiled = compiled_model(model, compile_kwargs=compile_kwargs, other=True,
                                  compile_ahead=compile_ahead)
    other = compiled.density
    if not other.reparameterized:
        return None
    if truth is None:
        return other, compiled.simulator, None, compiled.compile_time
    other.set_observed(truth.observed)
    return (other, compiled.simulator, draw_in_other_form(truth, density.layout, other),
            compiled.compile_time)
