"""Discrete variables on the vectorized path: who runs them, and their chromatic Gibbs kernel."""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.pymc_steps import has_discrete_free_variables
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.discrete import UnsupportedDiscrete, discrete_coordinates

__all__ = ["check_plan_pins", "gibbs_kernel", "vectorized_discrete"]

logger = logging.getLogger("pymc_bdmc")


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
        logger.debug("Discrete variables go to PyMC's step methods: %s.", reason)
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
    logger.debug("Discrete variables %s: %d coordinates in %d colors (%d batched evaluations "
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
