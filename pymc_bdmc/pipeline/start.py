"""Compilation (cached per model), exact starting draws and the discrete-variable kernel."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import pymc as pm

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.pymc_steps import has_discrete_free_variables
from pymc_bdmc.model.cache import compiled_model, observed_values
from pymc_bdmc.model.checks import check_finite_start, unsampleable_prior_message
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.discrete import UnsupportedDiscrete, discrete_coordinates
from pymc_bdmc.model.reparameterize import draw_in_other_form, other_form
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.allocator import retain_freed_memory
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.pipeline.matching import guarded_draw, matched_draw, n_candidates

__all__ = [
    "check_plan_pins",
    "compile_model",
    "draw_prior",
    "generating_values",
    "gibbs_kernel",
    "other_parameterization",
    "prior_start",
    "prior_start_blocks",
    "simulate_truth",
    "vectorized_discrete",
]

logger = logging.getLogger("pymc_bdmc")


def compile_model(model, potentials_in_likelihood, compile_kwargs, other: bool = False):
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

    Returns
    -------
    tuple
        ``(ModelDensity, ModelSimulator, compile seconds)``; see :mod:`pymc_bdmc.model.cache`.
    """
    retain_freed_memory()  # the first stage of every entry point; once per process
    if other and not has_other_form(model):
        raise BDMCInputError(
            "`reparameterize=True` (or a plan frozen on a reparameterized model) needs a "
            "Gaussian hierarchy to swap: a free `Normal` whose scale depends on a free "
            "variable, a standard normal scaled so (e.g. `beta = z * tau * lam`), a "
            "`GaussianRandomWalk` whose innovation scale is a free variable, or a `pm.AR` "
            "whose coefficients or scale are. This model has none; leave `reparameterize` "
            "False.")
    compiled = compiled_model(model, potentials_in_likelihood=potentials_in_likelihood,
                              compile_kwargs=compile_kwargs, other=other)
    return compiled.density, compiled.simulator, compiled.compile_time


def has_other_form(model) -> bool:
    """Tell whether ``model`` has a variable to swap (:mod:`pymc_bdmc.model.reparameterize`).

    A copy of the model's graph: a few ms (53 ms on a 450-group hierarchy).
    """
    return bool(other_form(model).swapped)


def other_parameterization(model, density: ModelDensity, truth: JointDraw, compile_kwargs):
    """``model``'s other form, conditioned on ``truth``'s data, and ``theta*`` in its coordinates.

    Parameters
    ----------
    model : pm.Model
    density : ModelDensity
        The model as written, which simulated ``truth``.
    truth : JointDraw
    compile_kwargs : dict or None

    Returns
    -------
    tuple or None
        ``(ModelDensity, ModelSimulator, JointDraw, compile seconds)``, or None where the model
        has nothing to swap (:mod:`pymc_bdmc.model.reparameterize`). Callers ask
        :func:`has_other_form` first: that copy of the graph is not made again here.
    """
    compiled = compiled_model(model, compile_kwargs=compile_kwargs, other=True)
    other = compiled.density
    if not other.reparameterized:
        return None
    other.set_observed(truth.observed)
    return (other, compiled.simulator, draw_in_other_form(truth, density, other),
            compiled.compile_time)


def simulate_truth(simulator: ModelSimulator, model: pm.Model,
                   streams: Mapping[str, np.random.Generator],
                   match_data: bool | int | None) -> tuple[JointDraw, dict]:
    """``(theta*, y*)`` from the prior predictive, chosen as ``match_data`` says.

    Parameters
    ----------
    simulator : ModelSimulator
    model : pm.Model
        Holds the real data that matching and the guard compare with.
    streams : mapping
        The run's streams (:func:`~pymc_bdmc.pipeline.seeding.streams`): ``"simulate"`` for
        the draw, or the matched candidates, and ``"candidates"`` for the guard's.
    match_data : bool, int or None
        ``False``: one draw. ``None``: one draw, guarded against data far from the real data
        (:func:`~pymc_bdmc.pipeline.matching.guarded_draw`). ``True`` or a number: the nearest
        of that many (:func:`~pymc_bdmc.pipeline.matching.matched_draw`).

    Returns
    -------
    tuple
        ``(JointDraw, attrs)``, the attrs saying how the data were chosen (empty for one
        unguarded draw).
    """
    n = n_candidates(match_data)
    try:
        if n:
            chosen = matched_draw(simulator, observed_values(model), n, streams["simulate"])
        elif match_data is None:
            chosen = guarded_draw(simulator, observed_values(model), streams["simulate"],
                                  streams["candidates"])
        else:
            return simulator.draw_joint(streams["simulate"]), {}
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err
    return chosen.truth, chosen.attrs()


def draw_prior(simulator: ModelSimulator, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` exact prior draws, or a :class:`BDMCInputError` if the prior cannot be sampled.

    Parameters
    ----------
    simulator : ModelSimulator
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray
        Shape (n, n_dim).
    """
    try:
        return simulator.draw_prior(n, rng)
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err


def prior_start(simulator: ModelSimulator, density: ModelDensity, n: int,
                rng: np.random.Generator):
    """``n`` exact prior draws and their densities (:func:`check_finite_start` says when refused).

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = draw_prior(simulator, n, rng)
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="allow")
    return x, parts


def prior_start_blocks(simulator: ModelSimulator, density: ModelDensity,
                       blocks: ChainBlocks):
    """Exact prior draws, each block of chains from its own stream (refused as above).

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    blocks : ChainBlocks

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = np.concatenate([draw_prior(simulator, n, g)
                        for n, g in zip(blocks.sizes, blocks.generators, strict=True)])
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="warn")
    return x, parts


def generating_values(density: ModelDensity, truth: JointDraw) -> dict[str, np.ndarray]:
    """Constrained free variables and Deterministics at ``theta*``, from the same constrain map.

    Parameters
    ----------
    density : ModelDensity
    truth : JointDraw

    Returns
    -------
    dict
    """
    return {k: v[0] for k, v in density.constrain(truth.x[None, :]).items()}


def vectorized_discrete(model: pm.Model, step) -> bool:
    """Whether the model's discrete variables go to the vectorized Gibbs kernel.

    True when ``step`` is None and every discrete free variable has a fixed, small support
    (:mod:`pymc_bdmc.model.discrete`); otherwise they go to PyMC's step methods.

    Parameters
    ----------
    model : pm.Model
    step : step methods or None
        The user's ``step`` argument.

    Returns
    -------
    bool
    """
    if step is not None or not has_discrete_free_variables(model):
        return False
    layout = FlatLayout.from_point([v.name for v in model.value_vars], model.initial_point())
    try:
        discrete_coordinates(model, layout)
    except UnsupportedDiscrete as reason:
        logger.info("Discrete variables go to PyMC's step methods: %s.", reason)
        return False
    return True


def gibbs_kernel(density: ModelDensity, x_prior: np.ndarray) -> ChromaticGibbs | None:
    """The chromatic Gibbs sweep over the discrete coordinates, or None if there are none.

    Parameters
    ----------
    density : ModelDensity
    x_prior : numpy.ndarray
        Prior draws; the first two probe the elementwise terms.

    Returns
    -------
    ChromaticGibbs or None
    """
    coordinates = discrete_coordinates(density.model, density.layout)
    if coordinates is None:
        return None
    probe = x_prior[:2]
    terms = density.terms(probe)
    parts = density.parts(probe)
    if not (np.allclose(terms[0].sum(axis=1), parts.log_prior, rtol=1e-8, atol=1e-8)
            and np.allclose(terms[1].sum(axis=1), parts.log_likelihood, rtol=1e-8, atol=1e-8)):
        raise BDMCInputError(
            "The model's elementwise log-density terms do not add up to its log-density, so "
            "its discrete variables cannot be updated by the vectorized Gibbs kernel. Pass "
            "PyMC step methods for them with `step=`."
        )
    gibbs = ChromaticGibbs.build(coordinates, density.terms, probe)
    logger.info("Discrete variables %s: %d coordinates in %d colors (%d batched evaluations "
                "per Gibbs sweep).", list(coordinates.names), gibbs.n_coordinates,
                len(gibbs.colors), gibbs.evaluations_per_sweep)
    return gibbs


def check_plan_pins(plan: AnnealingPlan, gibbs: ChromaticGibbs) -> None:
    """Refuse a given plan whose HMC kernels move the discrete coordinates.

    Parameters
    ----------
    plan : AnnealingPlan
    gibbs : ChromaticGibbs
    """
    if np.any(plan.inv_mass[1:, gibbs.pinned] != 0):
        raise BDMCInputError(
            "The given plan's HMC kernels move the model's discrete coordinates; a plan for a "
            "model with discrete variables must come from a run of the same model "
            "(AnnealingPlan.from_result)."
        )
