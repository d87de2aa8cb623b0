"""Discrete variables on the vectorized path: who runs them, and their chromatic Gibbs kernel."""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.gibbs import ChromaticGibbs, shifted_values
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.pymc_steps import has_discrete_free_variables
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.discrete import UnsupportedDiscrete, discrete_coordinates

__all__ = ["check_plan_pins", "differing_conditionals", "gibbs_kernel", "vectorized_discrete"]

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
    # Each of these takes its conditional from every term (exact), in a color of its own.
    shared_open = shared_open_windows(gibbs)
    if shared_open.size:
        gibbs = ChromaticGibbs.build(coordinates, density.terms, probe, touch_all=shared_open)
    checks = _check_states(density, x_prior)
    differing = differing_conditionals(gibbs, density, checks)
    if differing.size:
        # A term a coordinate moves only at values of another discrete variable that neither
        # probe held (two nested switchpoints): its conditional then comes from every term,
        # which is exact (terms it does not move cancel), in a color of its own.
        labels = density.layout.coordinate_labels()
        logger.debug("Gibbs conditionals of %s from every term: their terms depend on other "
                     "discrete values.", [labels[i] for i in differing])
        gibbs = ChromaticGibbs.build(
            coordinates, density.terms, probe,
            touch_all=np.union1d(with_color_windows(gibbs, differing), shared_open))
        differing = differing_conditionals(gibbs, density, checks)
    if differing.size:
        name = density.layout.coordinate_labels()[int(differing[0])]
        raise BDMCInputError(
            f"The vectorized Gibbs kernel's conditional of the discrete variable {name!r} "
            "differs from the model's: its update would sample another distribution. Pass "
            "PyMC step methods for the discrete variables with `step=` (e.g. "
            "`step=pm.Metropolis([...])`), and please report the model.")
    logger.debug("Discrete variables %s: %d coordinates in %d colors (%d batched evaluations "
                "per Gibbs sweep).", list(coordinates.names), gibbs.n_coordinates,
                len(gibbs.colors), gibbs.evaluations_per_sweep)
    return gibbs


def _check_states(density: ModelDensity, x_prior: np.ndarray) -> np.ndarray:
    """Six prior draws after the probes, where possible ones at which the data are possible.

    At a state where other coordinates make the data impossible the model's density is -inf at
    every value of a coordinate, and says nothing about its conditional.
    """
    rest = x_prior[2:]
    if len(rest) == 0:
        return x_prior[:2]
    possible = np.isfinite(density.parts(rest).log_likelihood)
    if possible[:6].all():
        return rest[:6]
    return np.concatenate([rest[possible], rest[~possible]])[:6]


def shared_open_windows(gibbs: ChromaticGibbs) -> np.ndarray:
    """Window coordinates of unknown least value that share a color with other coordinates.

    Where a window reaches below a support the kernel does not know, a value out of it can make
    other coordinates' terms -inf (a negative count as a Binomial's trials fails PyMC's
    parameter check for every element; :meth:`ChromaticGibbs.conditional_logits`), and the
    check sees it only at states whose values lie far apart.
    """
    shared = [color.coords[color.window & np.isneginf(color.lower)]
              for color in gibbs.colors if len(color.coords) > 1]
    return np.concatenate(shared) if shared else np.zeros(0, dtype=np.int64)


def with_color_windows(gibbs: ChromaticGibbs, coords: np.ndarray) -> np.ndarray:
    """``coords`` and every window coordinate of the colors they are in.

    A window's value inside its support can still fail another term's parameter check for
    every element (a count above 20 as ``p = N / 20``), so a flagged coordinate may be the
    victim of another's value; the check sees it only where values lie far enough apart.
    """
    flagged = [np.asarray(coords, dtype=np.int64)]
    for color in gibbs.colors:
        if np.isin(color.coords, coords).any():
            flagged.append(color.coords[color.window])
    return np.unique(np.concatenate(flagged))


def differing_conditionals(gibbs: ChromaticGibbs, density: ModelDensity,
                           x: np.ndarray) -> np.ndarray:
    """Return the coordinates whose Gibbs conditionals are not the model's at the states ``x``.

    Each color's conditional log-densities, summed from the terms its coordinates touch, must
    differ between values as the model's own prior and tempered densities do, one coordinate
    moved at a time. A term missed by :meth:`ChromaticGibbs.build` would make the kernel
    sample another distribution, and the bounds wrong, without any other sign.

    Parameters
    ----------
    gibbs : ChromaticGibbs
    density : ModelDensity
    x : numpy.ndarray
        Valid states (prior draws other than those the kernel was built on).

    Returns
    -------
    numpy.ndarray
        Flat indices of the coordinates whose conditionals differ (empty where none do).
    """
    x = np.atleast_2d(np.asarray(x, dtype=float))
    differing = []
    for color, lower in _placements(gibbs, x):
        # Prior (beta 0) and tempered (beta 1) conditionals: shape (2, m, chains, c).
        from_terms = np.stack([gibbs.conditional_logits(color, x, beta, density.terms, lower)
                               for beta in (0.0, 1.0)])
        model = np.full(from_terms.shape, -np.inf)
        c = len(color.coords)
        current = x[:, color.coords].T  # (c, chains)
        for r in range(color.max_size):
            rows = np.repeat(x[None], c, axis=0)  # (c, chains, n_dim): coordinate j moved in j
            rows[np.arange(c), :, color.coords] = shifted_values(
                current, lower.T, color.size[:, None], r)
            parts = density.parts(rows.reshape(-1, x.shape[1]))
            prior = parts.log_prior.reshape(c, len(x)).T
            model[0, r] = prior
            model[1, r] = prior + parts.log_likelihood.reshape(c, len(x)).T
        beyond = np.arange(color.max_size)[:, None, None] >= color.size  # past a support
        model = np.where(beyond[None], -np.inf, model)
        # Up to a constant per chain: each against its largest value. Where the model's density
        # is -inf at every value, other coordinates make the data impossible and the chain
        # says nothing about this one (the terms it does not move cancel in its conditional).
        with np.errstate(invalid="ignore"):
            a = from_terms - from_terms.max(axis=1, keepdims=True)
            b = model - model.max(axis=1, keepdims=True)
        says = np.isfinite(model).any(axis=1, keepdims=True) & (np.isfinite(a) | np.isfinite(b))
        same = np.where(says, np.isclose(a, b, rtol=1e-6, atol=1e-6), True)
        differing.extend(color.coords[~same.all(axis=(0, 1, 2))])
    return np.unique(np.asarray(differing, dtype=np.int64))


def _placements(gibbs: ChromaticGibbs, x: np.ndarray):
    """Each color with each chain's lowest value: a window both from and up to ``x`` itself.

    A window reaching below the values ``x`` holds is where a value out of the support could
    change terms the color's other coordinates own.
    """
    for color in gibbs.colors:
        current = x[:, color.coords]
        yield color, color.lower_at(current)
        if color.window.any():
            yield color, color.lower_at(current, np.broadcast_to(color.size - 1, current.shape))


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
