"""Location-scale structure of a model: which latent variables a scale parameter stretches.

Centered hierarchies and random walks (``theta ~ Normal(mu, tau)``, ``pm.GaussianRandomWalk``)
are funnels: where a scale ``tau`` is small its children are pinned to within ``tau`` of their
location, and a gradient kernel tuned on the bulk cannot move there. The non-centred view of
the same model, the standardised residuals ``(theta - mu) / tau``, does not pinch.

This module finds that structure in the model graph and builds the *interweaving map* of a
hyper-parameter move: given the current point and a proposed value of the hyper-parameters,
every child is moved so that its standardised residuals stay the same,

    theta' = mu' + (tau' / tau) (theta - mu),

children in topological order (a child's location may depend on a child moved before it). The
map is its own inverse when the hyper-parameters move back, and its log-Jacobian is
``sum log(tau' / tau)`` over the children's elements, so a Metropolis-Hastings move built on it
(:mod:`pymc_bdmc.kernels.scale_moves`) is exact for any target. It is the non-centred update of
the hyper-parameters (ASIS, Yu & Meng 2011) written in the centred coordinates the kernels use.

Children are free variables without a transform from a location-scale family on the real line
(:data:`LOCATION_SCALE_FAMILIES`: ``Normal``, ``StudentT``, ``Laplace``, ``Cauchy``,
``Logistic``, ``Gumbel``, ``SkewNormal``), random walks (``pm.GaussianRandomWalk``,
``pm.RandomWalk``) whose initial and innovation distributions are such families (the residuals
of a walk are those of its first value and of its increments), and single ``MvNormal``
vectors, whose whitened residuals ``L^-1 (x - mu)`` stay put under ``x' = mu' + L' L^-1 (x -
mu)`` (``L`` the Cholesky factor of the covariance; log-Jacobian ``log |L'| - log |L|``): a
centred latent GP moves with its amplitude and lengthscale. The family only decides which
parameters are the location and the scale: the map and its Jacobian are the same for all, and
the Metropolis-Hastings ratio uses the model's own density, so a heavy-tailed child (a robust,
Student-t hierarchy) gets exact moves too; its other parameters (``nu``, a skewness) stay as
they are. (Batches of ``MvNormal`` vectors sharing a covariance, such as LKJ-correlated random
effects, were measured to cost more than the moves gave, docs/performance.md.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import (
    CauchyRV,
    GumbelRV,
    LaplaceRV,
    LogisticRV,
    MvNormalRV,
    NormalRV,
    StudentTRV,
)

from pymc_bdmc.model.layout import FlatLayout

__all__ = ["LOCATION_SCALE_FAMILIES", "LocationScaleStructure", "ScaleGroup",
           "find_location_scale"]

try:  # PyMC's random walks are symbolic random variables over an init and innovations
    from pymc.distributions.timeseries import RandomWalkRV
except ImportError:  # pragma: no cover - an older or newer PyMC without it
    RandomWalkRV = None

#: Random-variable ops of location-scale families on the real line, with the positions of their
#: location and scale among the distribution's parameters.
LOCATION_SCALE_FAMILIES: dict[type, tuple[int, int]] = {
    NormalRV: (0, 1), StudentTRV: (1, 2), LaplaceRV: (0, 1), CauchyRV: (0, 1),
    LogisticRV: (0, 1), GumbelRV: (0, 1), pm.distributions.continuous.SkewNormalRV: (0, 1),
}


@dataclass(frozen=True)
class ScaleGroup:
    """One hyper-parameter and the children its move stretches.

    Attributes
    ----------
    hyper : str
        Name of the hyper-parameter's value variable (moved in its unconstrained space).
    coordinates : ndarray of int
        Its coordinates in the flat vector.
    children : tuple of str
        Value variables of the children the map moves with it, in topological order.
    """

    hyper: str
    coordinates: np.ndarray
    children: tuple[str, ...]


@dataclass(frozen=True)
class _Child:
    rv: object  # the free random variable
    pieces: tuple  # ((loc, scale), ...): one piece, or a random walk's (init, innovations)
    parents: frozenset  # free random variables its pieces' parameters depend on
    covariance: bool = False  # an MvNormal: the scale is its covariance matrix


def _location_scale_params(node) -> tuple | None:
    where = LOCATION_SCALE_FAMILIES.get(type(node.op))
    if where is None:
        return None
    params = node.op.dist_params(node)
    return params[where[0]], params[where[1]]


def _child(rv, transform) -> _Child | None:
    node = rv.owner
    if transform is not None:
        return None
    piece = _location_scale_params(node)
    if piece is not None:
        return _Child(rv, (piece,), frozenset())
    if isinstance(node.op, MvNormalRV):
        mu, cov = node.op.dist_params(node)
        # One vector with one covariance matrix (no batch of them).
        if rv.ndim != 1 or cov.ndim != 2:
            return None
        return _Child(rv, ((mu, cov),), frozenset(), covariance=True)
    if RandomWalkRV is not None and isinstance(node.op, RandomWalkRV):
        init, innovations = node.op.dist_params(node)[:2]
        pieces = (_location_scale_params(init.owner) if init.owner else None,
                  _location_scale_params(innovations.owner) if innovations.owner else None)
        # Only the time-first layout this module knows (init (1, *batch), innovations
        # (steps, *batch)); another PyMC's layout gets no scale moves rather than wrong ones.
        if None in pieces or init.ndim != rv.ndim or innovations.ndim != rv.ndim:
            return None
        return _Child(rv, pieces, frozenset())
    return None


def _free_parents(expressions, free_rvs) -> frozenset:
    blockers = list(free_rvs)
    found = ancestors(list(expressions), blockers=blockers)
    free = set(free_rvs)
    return frozenset(v for v in found if v in free)


@dataclass(frozen=True)
class LocationScaleStructure:
    """The scale groups of a model and the symbolic map of their moves."""

    groups: tuple[ScaleGroup, ...]
    _children: tuple[_Child, ...]

    def __bool__(self) -> bool:
        return bool(self.groups)

    def map_graph(self, model: pm.Model, layout: FlatLayout):
        """The batched-ready graph of every group's map.

        Returns ``(z, outputs)``: ``z`` is one float64 vector ``[x, x_proposed]`` of length
        ``2 n``, and ``outputs`` are, for every group in turn, the point moved by that group's
        map (shape ``(groups, n)``) and the map's log-Jacobian (shape ``(groups,)``). Only the
        row of the group whose hyper-parameter was proposed is meaningful.
        """
        n = layout.size
        z = pt.vector("location_scale_z", dtype="float64", shape=(2 * n,))
        old_flat, new_flat = z[:n], z[n:]
        value_of = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
        by_name = {v.name: v for v in model.value_vars}

        def unflatten(flat):
            return {by_name[name]: pt.cast(flat[slc].reshape(shape), by_name[name].dtype)
                    for name, shape, slc in zip(layout.names, layout.shapes, layout.slices,
                                                strict=True)}

        old = unflatten(old_flat)
        children_by_name = {value_of[c.rv].name: c for c in self._children}
        outputs_x, outputs_jac = [], []
        for group in self.groups:
            new = unflatten(new_flat)
            log_jac = pt.constant(0.0, dtype="float64")
            for name in group.children:
                child = children_by_name[name]
                value = by_name[name]
                moved, jac = _move_child(model, child, value, old, new)
                new[value] = moved
                log_jac = log_jac + jac
            moved_flat = pt.concatenate([pt.cast(pt.flatten(new[by_name[name]]), "float64")
                                         for name in layout.names])
            outputs_x.append(moved_flat)
            outputs_jac.append(log_jac)
        return z, [pt.stack(outputs_x), pt.stack(outputs_jac)]


def _move_child(model, child: _Child, value, old: dict, new: dict):
    """Move one child so its standardised residuals stay the same; return it and log |J|."""
    params = [p for piece in child.pieces for p in piece]
    in_values = model.replace_rvs_by_values(params)
    at_old = graph_replace(in_values, old, strict=False)
    at_new = graph_replace(in_values, new, strict=False)
    x = old[value]
    if child.covariance:
        # Whitened residuals L^-1 (x - mu) stay put: x' = mu' + L' L^-1 (x - mu). A covariance
        # that is not positive definite gives NaN, and the move is rejected.
        (mu_o, cov_o), (mu_n, cov_n) = at_old, at_new
        chol_o = pt.linalg.cholesky(cov_o, lower=True, on_error="nan")
        chol_n = pt.linalg.cholesky(cov_n, lower=True, on_error="nan")
        white = pt.linalg.solve_triangular(chol_o, x - mu_o, lower=True, b_ndim=1)
        moved = mu_n + chol_n @ white
        log_jac = (pt.sum(pt.log(pt.diagonal(chol_n))) - pt.sum(pt.log(pt.diagonal(chol_o))))
        return moved, pt.cast(log_jac, "float64")
    if len(child.pieces) == 1:
        mu_o, sigma_o = at_old
        mu_n, sigma_n = at_new
        ratio = sigma_n / sigma_o
        moved = mu_n + ratio * (x - mu_o)
        return moved, pt.sum(pt.log(ratio) * pt.ones_like(x, dtype="float64"))
    # A random walk: residuals of the first value and of the increments. PyMC draws its init
    # and innovations time-first, (1, *batch) and (steps, *batch), so their parameters
    # broadcast against the walk with its time axis moved to the front.
    (mi_o, si_o, mn_o, sn_o), (mi_n, si_n, mn_n, sn_n) = at_old, at_new
    walk = pt.moveaxis(x, -1, 0)
    first, steps = walk[:1], pt.diff(walk, axis=0)
    ratio_i, ratio_n = si_n / si_o, sn_n / sn_o
    first_new = pt.broadcast_to(mi_n + ratio_i * (first - mi_o), first.shape)
    steps_new = pt.broadcast_to(mn_n + ratio_n * (steps - mn_o), steps.shape)
    moved = pt.moveaxis(pt.cumsum(pt.concatenate([first_new, steps_new], axis=0), axis=0), 0, -1)
    log_jac = (pt.sum(pt.log(ratio_i) * pt.ones_like(first, dtype="float64"))
               + pt.sum(pt.log(ratio_n) * pt.ones_like(steps, dtype="float64")))
    return moved, log_jac


def find_location_scale(model: pm.Model, layout: FlatLayout) -> LocationScaleStructure:
    """Find the scale groups of ``model``.

    A group is a continuous hyper-parameter that sets the scale of location-scale children (see
    the module docstring), with the children (and their own such descendants) its move
    carries. A hyper-parameter is any continuous free variable that a child's scale depends on
    directly (it may be a child itself, of a hyper-parameter higher up). Its group holds every
    child whose location or scale depends on it, or on a child already in the group.
    """
    free = list(model.free_RVs)
    transforms = model.rvs_to_transforms
    children = []
    for rv in free:
        child = _child(rv, transforms.get(rv))
        if child is None:
            continue
        parents = _free_parents([p for piece in child.pieces for p in piece], free)
        children.append(_Child(child.rv, child.pieces, parents, child.covariance))
    scale_parents = []
    for c in children:
        sigmas = [piece[1] for piece in c.pieces]
        for p in _free_parents(sigmas, free):
            if p not in scale_parents:
                scale_parents.append(p)
    groups = []
    for hyper in sorted(scale_parents, key=free.index):
        value = model.rvs_to_values[hyper]
        if layout.is_discrete(value.name):
            continue
        moved = []
        for c in children:
            if hyper in c.parents or any(m.rv in c.parents for m in moved):
                moved.append(c)
        if not moved:
            continue
        slc = layout.slices[layout.names.index(value.name)]
        groups.append(ScaleGroup(value.name, np.arange(slc.start, slc.stop),
                                 tuple(model.rvs_to_values[c.rv].name for c in moved)))
    return LocationScaleStructure(tuple(groups), tuple(children))
