"""Finite supports of a model's discrete free variables.

The vectorized Gibbs kernel (:mod:`pymc_bdmc.kernels.gibbs`) enumerates the values of every
discrete coordinate, so it needs each one's support as a fixed, small range of integers. That is
read here from the distribution itself (never from the current values), for the distributions
whose support is such a range: Bernoulli, Categorical, DiscreteUniform and Binomial with fixed
bounds. Anything else (a Poisson, bounds that depend on other variables, a support wider than
:data:`MAX_SUPPORT` values) is a *window* coordinate: each update draws it from a window of
:data:`WINDOW` values placed at random around its current value (the kernel's docstring says why
that is exact), with values outside the support at density zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.op import RandomVariable

from pymc_bdmc.model.density import ONE_SHOT_MODE, FlatLayout

__all__ = ["MAX_SUPPORT", "WINDOW", "DiscreteCoordinates", "UnsupportedDiscrete",
           "discrete_coordinates"]

#: Widest support enumerated: each value costs one batched model evaluation per color.
MAX_SUPPORT = 128
#: Values of the window a coordinate without such a support is drawn from in an update.
WINDOW = 16


class UnsupportedDiscrete(ValueError):
    """A discrete variable whose support is not a fixed, small range of integers."""


@dataclass(frozen=True)
class DiscreteCoordinates:
    """The discrete coordinates of the flat vector and their supports.

    Attributes
    ----------
    index : ndarray of int, shape (n,)
        Positions in the flat vector (see :class:`~pymc_bdmc.model.density.FlatLayout`).
    lower : ndarray of float, shape (n,)
        Smallest value of each coordinate.
    size : ndarray of int, shape (n,)
        Number of values: coordinate ``i`` takes ``lower[i], ..., lower[i] + size[i] - 1``;
        for a window coordinate, the window's width, and its ``lower`` the support's least
        value where the distribution fixes one (0 for a count), else ``-inf``.
    names : tuple of str
        The discrete variables, in layout order.
    window : ndarray of bool, shape (n,)
        Coordinates drawn from a random window of :data:`WINDOW` values (no fixed support).
    """

    index: np.ndarray
    lower: np.ndarray
    size: np.ndarray
    names: tuple[str, ...]
    window: np.ndarray | None = None

    def __post_init__(self):
        if self.window is None:
            object.__setattr__(self, "window", np.zeros(len(self.index), dtype=bool))

    def __len__(self) -> int:
        return len(self.index)

    @property
    def max_size(self) -> int:
        """Size of the widest support."""
        return int(self.size.max()) if len(self.size) else 0


def _evaluate(tensor) -> np.ndarray:
    # Evaluated once: no backend compilation (see ONE_SHOT_MODE).
    return np.asarray(pytensor.function([], tensor, mode=ONE_SHOT_MODE)())


def _depends_on_random(tensor) -> bool:
    return any(v.owner is not None and isinstance(v.owner.op, RandomVariable)
               for v in ancestors([tensor]))


def _fixed(name: str, what: str, tensor, shape) -> np.ndarray:
    if _depends_on_random(tensor):
        raise UnsupportedDiscrete(
            f"the {what} of {name!r} depends on other random variables, so its support is "
            "not fixed"
        )
    return np.broadcast_to(_evaluate(tensor).astype(float), shape)


#: The ops whose parameters :func:`_range_of` reads.
_READ_RANGES = ("CategoricalRV", "DiscreteUniformRV", "BinomialRV")


def _range_of(rv, shape) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` of ``rv``'s support, broadcast to ``shape``."""
    op = rv.owner.op
    kind = type(op).__name__
    # Only these ops are read; others (a pm.Truncated count) may not give their parameters.
    params = op.dist_params(rv.owner) if kind in _READ_RANGES else None
    if kind == "BernoulliRV":
        return np.zeros(shape), np.ones(shape)
    if kind == "CategoricalRV":
        p = pt.as_tensor(params[0])
        n_categories = p.type.shape[-1] or _evaluate(p.shape[-1])
        return np.zeros(shape), np.full(shape, float(n_categories) - 1)
    if kind == "DiscreteUniformRV":
        return (_fixed(rv.name, "lower bound", params[0], shape),
                _fixed(rv.name, "upper bound", params[1], shape))
    if kind == "BinomialRV":
        return np.zeros(shape), _fixed(rv.name, "number of trials", params[0], shape)
    raise UnsupportedDiscrete(
        f"{rv.name!r} ({kind.removesuffix('RV')}) has no finite support that could be "
        "enumerated"
    )


#: Discrete distributions whose support starts at a fixed value, whatever their parameters.
_LEAST_VALUE = {"PoissonRV": 0.0, "NegBinomialRV": 0.0, "BinomialRV": 0.0, "BetaBinomialRV": 0.0,
                "HyperGeometricRV": 0.0, "DiscreteWeibullRV": 0.0, "GeometricRV": 1.0}


def _least_value(rv, shape) -> np.ndarray:
    """Return the least value of ``rv``'s support where its distribution fixes one, else -inf.

    A window may reach below it; the kernel then evaluates the model at the current value
    instead, since a value out of the support can make other terms -inf too (a negative count
    as a Binomial's number of trials fails PyMC's parameter check for every element).
    """
    kind = type(rv.owner.op).__name__
    if kind in _LEAST_VALUE:
        return np.full(shape, _LEAST_VALUE[kind])
    if kind == "DiscreteUniformRV":
        try:
            return _fixed(rv.name, "lower bound", rv.owner.op.dist_params(rv.owner)[0], shape)
        except UnsupportedDiscrete:
            pass
    return np.full(shape, -np.inf)


def discrete_coordinates(model: pm.Model, layout: FlatLayout) -> DiscreteCoordinates | None:
    """The discrete coordinates of ``model`` with their supports, or None if there are none.

    Variables without a fixed support of at most :data:`MAX_SUPPORT` integers are window
    coordinates (module docstring).

    Raises
    ------
    UnsupportedDiscrete
        If a discrete variable's fixed support is empty.
    """
    index, lower, size, names, window = [], [], [], [], []
    for rv in model.free_RVs:
        value = model.rvs_to_values[rv]
        if not value.dtype.startswith(("int", "uint", "bool")):
            continue
        position = layout.names.index(value.name)
        shape, slc = layout.shapes[position], layout.slices[position]
        n = slc.stop - slc.start
        try:
            low, high = _range_of(rv, shape)
            width = (high - low + 1).ravel()
        except UnsupportedDiscrete:
            low, width = np.zeros(n), np.full(n, MAX_SUPPORT + 1)
        if np.any(width < 1):
            raise UnsupportedDiscrete(f"{rv.name!r} has an empty support")
        wide = bool(np.any(width > MAX_SUPPORT))
        index.append(np.arange(slc.start, slc.stop))
        lower.append(_least_value(rv, shape).ravel() if wide else low.ravel())
        size.append(np.full(n, WINDOW) if wide else width.astype(int))
        window.append(np.full(n, wide))
        names.append(value.name)
    if not names:
        return None
    return DiscreteCoordinates(np.concatenate(index), np.concatenate(lower),
                               np.concatenate(size), tuple(names), np.concatenate(window))
