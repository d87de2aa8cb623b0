"""The other parameterisation of a model's Gaussian hierarchies: the evidence does not change.

Whether a hierarchy is easier centred (``theta ~ Normal(mu, tau)``) or non-centred (``theta =
mu + tau * z``, ``z ~ Normal(0, 1)``) depends on how strongly the data pin ``theta``. Where they
pin it, the non-centred posterior is a curved ridge that HMC with a fixed metric does not follow
(a horseshoe written ``beta = z * tau * lam``, as PyMC's docs write it), while the centred one is
Gaussian in the pinned variable, with scale moves (:mod:`pymc_bdmc.model.location_scale`); where
the data are weak, the non-centred form is the easier one. Neither is right for every data set,
so ``sample_bdmc``'s search runs the model as written, tries :func:`other_form` where an attempt
does not certify, and goes on in the form whose gap per step is smaller
(:mod:`pymc_bdmc.pipeline.auto_steps` says when).

``p(y)`` is the same under any bijective change of the latent variables, so either form serves.
:func:`other_form` swaps every qualifying free variable, in a copy of the model's graph:

* **non-centred to centred**: a free ``z ~ Normal(0, 1)`` whose only use is an elementwise
  affine chain ``x = a + b z`` (each step keeping ``z``'s shape), ``a`` and ``b`` free of ``z``
  and ``b`` depending on a free variable, becomes a free ``f"{z}_centred" ~ Normal(a, |b|)``
  standing for ``x``, and ``z = (x - a) / b`` a Deterministic under its own name;
* **centred to non-centred**: a free ``x ~ Normal(a, b)`` without a transform whose scale ``b``
  depends on a free variable becomes a Deterministic ``x = a + b z`` of a free
  ``z = f"{x}_noncentred" ~ Normal(0, 1)``;
* **random walks, non-centred**: a free ``pm.GaussianRandomWalk`` (``pm.MvGaussianRandomWalk``)
  with a ``Normal`` (``MvNormal``) start whose innovation scale (covariance) depends on a free
  variable becomes the cumulative sum of its standardised (whitened) first value and increments,
  ``x_t = x_{t-1} + m + s z_t`` (``+ L z_t``), of a free ``z = f"{x}_noncentred"``;
* **autoregressions, non-centred**: a free ``pm.AR`` of order ``p`` with a ``Normal`` start whose
  coefficients or innovation scale depend on a free variable becomes
  ``x_t = c + rho_1 x_{t-1} + ... + rho_p x_{t-p} + s z_t`` of its standardised innovations. A
  prior that allows explosive coefficients puts the series as written many orders of magnitude
  apart, each pinning its coefficients; in the innovations they move freely. The recursion is
  evaluated by doubling (``log2(time)`` batched products with powers of the companion matrix).

Given the other variables each map is affine (a walk's triangular), so the joint densities
differ by its log-Jacobian and the evidence and the prior predictive distribution of the data
agree. The posterior carries the user's variables under their own names (as Deterministics)
beside the new ones. The user's model is not touched; shared data (``pm.Data``, symbolic
dimension lengths) of the new model are the user's own, so ``pm.set_data`` on the user's model
reaches the compiled densities of the other form.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.model.fgraph import (
    ModelFreeRV,
    fgraph_from_model,
    model_deterministic,
    model_free_rv,
    model_from_fgraph,
)
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import ancestors
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.linalg import cholesky
from pytensor.tensor.random.basic import MvNormalRV, NormalRV

from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.layout import FlatLayout
from pymc_bdmc.model.simulate import JointDraw

try:  # PyMC's random walks are symbolic random variables over an init and innovations
    from pymc.distributions.timeseries import AutoRegressiveRV, RandomWalkRV
except ImportError:  # another PyMC layout: no walk is swapped
    AutoRegressiveRV = RandomWalkRV = None

__all__ = ["CENTRED_SUFFIX", "NONCENTRED_SUFFIX", "OtherForm", "draw_in_other_form",
           "other_form"]

#: Suffix of the name of the free variable that stands for a non-centred one, centred.
CENTRED_SUFFIX = "_centred"
#: Suffix of the name of the standard-normal free variable behind a centred one.
NONCENTRED_SUFFIX = "_noncentred"


@dataclass(frozen=True)
class OtherForm:
    """A model in its other parameterisation, and which of the user's variables it swaps.

    Attributes
    ----------
    model : pm.Model
        The user's model itself when nothing is swapped.
    swapped : dict
        The user's swapped free variables, now Deterministics, by name, each with the name of
        the free variable behind it (``f"{name}{CENTRED_SUFFIX}"`` or
        ``f"{name}{NONCENTRED_SUFFIX}"``, unless taken).
    walks : frozenset
        The names among ``swapped`` that are random walks: their helpers are standardised
        increments along the last axis, not elementwise residuals.
    vector_walks : frozenset
        The names among ``walks`` that are multivariate (``pm.MvGaussianRandomWalk``, time
        first): their helpers are whitened increments, ``L^-1`` times each row's increment.
    autoregressions : frozenset
        The names among ``swapped`` that are autoregressions (``pm.AR``, time last): their
        helpers are standardised innovations.
    """

    model: pm.Model
    swapped: dict[str, str] = field(default_factory=dict)
    walks: frozenset[str] = frozenset()
    vector_walks: frozenset[str] = frozenset()
    autoregressions: frozenset[str] = frozenset()


def other_form(model: pm.Model) -> OtherForm:
    """``model`` with its Gaussian hierarchies swapped between centred and non-centred.

    See the module docstring for which variables qualify.

    Parameters
    ----------
    model : pm.Model

    Returns
    -------
    OtherForm
        ``OtherForm(model)`` when no variable qualifies, or when PyMC cannot copy the model's
        graph (initial values, nested models).
    """
    try:
        with warnings.catch_warnings():  # PyMC warns about GP objects reused on a copy
            warnings.simplefilter("ignore", UserWarning)
            fgraph, memo = fgraph_from_model(model, inlined_views=True)
    except (NotImplementedError, ValueError):
        return OtherForm(model)
    taken = set(model.named_vars)
    swapped, walks, vector_walks, autoregressions = {}, set(), set(), set()
    for node in list(fgraph.toposort()):
        autoregression = _autoregression(fgraph, node)
        if autoregression is not None:  # an AR: non-centre its innovations
            name = _free_name(node.op.name + NONCENTRED_SUFFIX, taken)
            new_free = _free(pm.Normal.dist(0.0, 1.0, size=node.inputs[0].shape), name,
                             node.op.dims)
            fgraph.replace(node.outputs[0], model_deterministic(
                _ar_from_standardised(new_free, *autoregression), node.op.name,
                *node.op.dims), import_missing=True)
            swapped[node.op.name] = name
            autoregressions.add(node.op.name)
            continue
        vector = _mv_gaussian_walk(fgraph, node)
        walk = vector or _gaussian_walk(fgraph, node)
        if walk is not None:  # a walk: non-centre it
            name = _free_name(node.op.name + NONCENTRED_SUFFIX, taken)
            new_free = _free(pm.Normal.dist(0.0, 1.0, size=node.inputs[0].shape), name,
                             node.op.dims)
            build = _mv_walk_from_standardised if vector else _walk_from_standardised
            fgraph.replace(node.outputs[0], model_deterministic(
                build(new_free, *walk), node.op.name, *node.op.dims), import_missing=True)
            swapped[node.op.name] = name
            walks.add(node.op.name)
            if vector:
                vector_walks.add(node.op.name)
            continue
        if not _untransformed_normal(node):
            continue
        rv, user = node.inputs[0], node.outputs[0]
        loc, scale = rv.owner.op.dist_params(rv.owner)
        if _constant(loc) == 0.0 and _constant(scale) == 1.0:  # non-centred: centre it
            x, loc, scale = _affine_chain(fgraph, user)
            if x is user or not _depends_on_free(fgraph, scale):
                continue
            name = _free_name(node.op.name + CENTRED_SUFFIX, taken)
            new_rv = pm.Normal.dist(mu=loc, sigma=pt.abs(scale), size=rv.shape)
            new_free = _free(new_rv, name, node.op.dims)
            fgraph.replace(x, new_free, import_missing=True)
            value = (new_free - loc) / scale
        elif _depends_on_free(fgraph, scale):  # centred: non-centre it
            name = _free_name(node.op.name + NONCENTRED_SUFFIX, taken)
            new_free = _free(pm.Normal.dist(0.0, 1.0, size=rv.shape), name, node.op.dims)
            value = loc + scale * new_free
        else:
            continue
        fgraph.replace(user, model_deterministic(value, node.op.name, *node.op.dims),
                       import_missing=True)
        swapped[node.op.name] = name
    if not swapped:
        return OtherForm(model)
    # PyMC copied the data and dimension lengths; the user's own keep pm.set_data working.
    user_shared = [v for v in [*model.named_vars.values(), *model.dim_lengths.values()]
                   if isinstance(v, SharedVariable)]
    for original in user_shared:
        copy = memo.get(original)
        if copy is not None and copy is not original and copy in fgraph.variables:
            fgraph.replace(copy, original, import_missing=True)
    fgraph._dim_lengths = dict(model.dim_lengths)
    return OtherForm(model_from_fgraph(fgraph, mutate_fgraph=True), swapped, frozenset(walks),
                     frozenset(vector_walks), frozenset(autoregressions))


def draw_in_other_form(truth: JointDraw, layout: FlatLayout, other: ModelDensity
                       ) -> JointDraw:
    """``truth`` (a draw in ``layout``'s coordinates) in the other form's coordinates.

    The same point of the joint distribution: every variable keeps its value. Each swapped
    variable ``u`` is affine in the free variable ``h`` behind it, given the others, so ``h =
    (u - u(h=0)) / (u(h=1) - u(h=0))``, both read off the other form's own Deterministic; for
    a random walk the same holds of its first value and increments along the last axis, and
    an autoregression is triangular along the last axis, solved column by column.

    Parameters
    ----------
    truth : JointDraw
    layout : FlatLayout
        The layout of the model as written, which simulated ``truth``.
    other : ModelDensity
        Its other form (``other.reparameterized`` non-empty).

    Returns
    -------
    JointDraw
    """
    point = layout.unravel(truth.x)
    helpers, walks = other.reparameterized, other.reparameterized_walks
    layout = other.layout
    probes = []
    for fill in (0.0, 1.0):
        values = dict(point)
        values.update({h: np.full(layout.shapes[layout.names.index(h)], fill)
                       for h in helpers.values()})
        probes.append(layout.ravel(values))
    at = other.constrain(np.stack(probes))
    for name, helper in helpers.items():
        u, u0, u1 = np.asarray(truth.free[name]), at[name][0], at[name][1]
        if name in other.reparameterized_vector_walks:
            point[helper] = _whitened_increments(u, u0, point, name, other)
            continue
        if name in other.reparameterized_autoregressions:
            point[helper] = _triangular_solve(u, u0, point, name, other)
            continue
        if name in walks:  # increments are elementwise affine in the helper
            u, u0, u1 = (np.concatenate([v[..., :1], np.diff(v, axis=-1)], axis=-1)
                         for v in (u, u0, u1))
        point[helper] = (u - u0) / (u1 - u0)
    x = layout.ravel(point)
    return JointDraw(x, {k: v[0] for k, v in other.constrain(x[None, :]).items()},
                     truth.observed)


def _at_unit_helpers(point, name: str, other: ModelDensity) -> np.ndarray:
    """``name``'s values with its helper at each unit vector ``e_j`` along the last axis.

    Every other helper is 0 and every other variable at ``point``; all series of a batch take
    ``e_j`` at once. Returns shape ``(n_units, *shape of name)``.
    """
    layout, helpers = other.layout, other.reparameterized
    helper = helpers[name]
    shape = layout.shapes[layout.names.index(helper)]
    probes = []
    for j in range(shape[-1]):
        values = dict(point)
        values.update({h: np.zeros(layout.shapes[layout.names.index(h)])
                       for h in helpers.values()})
        unit = np.zeros(shape)
        unit[..., j] = 1.0
        values[helper] = unit
        probes.append(layout.ravel(values))
    return other.constrain(np.stack(probes))[name]


def _whitened_increments(u, u0, point, name: str, other: ModelDensity) -> np.ndarray:
    """Return the helper of a multivariate walk ``u`` (time first).

    Each row's increment is ``a_t + B_t z_t``: ``a`` read at ``z = 0`` (``u0``), ``B``'s
    columns at unit vectors.
    """
    def increments(v):
        return np.concatenate([v[:1], np.diff(v, axis=0)], axis=0)

    offset = increments(u0)
    columns = np.stack([increments(v) - offset
                        for v in _at_unit_helpers(point, name, other)], axis=-1)  # (T, k, k)
    return np.linalg.solve(columns, (increments(u) - offset)[..., None])[..., 0]


def _triangular_solve(u, u0, point, name: str, other: ModelDensity) -> np.ndarray:
    """Return the helper ``z`` of ``u = u0 + A z``, ``A`` lower triangular along the last axis.

    Column ``j`` of ``A`` is read at the unit vector ``e_j`` (the series of a batch are
    independent, so all take it at once).
    """
    columns = _at_unit_helpers(point, name, other) - u0  # (time, *batch, time)
    matrix = np.moveaxis(columns, 0, -1)  # (*batch, time, time): row t, column j
    return np.linalg.solve(matrix, (u - u0)[..., None])[..., 0]


def _free_untransformed(node, op_type):
    """Return the random variable of a free, untransformed ``node`` made by ``op_type``."""
    if (op_type is None or not isinstance(node.op, ModelFreeRV)
            or node.op.transform is not None):
        return None
    rv = node.inputs[0]
    return rv if rv.owner is not None and isinstance(rv.owner.op, op_type) else None


def _autoregression(fgraph, node) -> tuple | None:
    """``(coefficients, scale, init loc, init scale, order, constant, steps)`` of an AR.

    A free ``pm.AR`` without a transform, of a static length, whose initial distribution is
    ``Normal`` and whose coefficients or innovation scale depend on a free variable.
    """
    rv = _free_untransformed(node, AutoRegressiveRV)
    if rv is None:
        return None
    rhos, sigma, init, steps = rv.owner.inputs[:4]
    # The doubling is unrolled: it needs the number of steps (PyMC's is a graph of the shape).
    length = _constant(rewrite_graph(steps, clone=True))
    if init.owner is None or not isinstance(init.owner.op, NormalRV) or length is None:
        return None
    if not (_depends_on_free(fgraph, rhos) or _depends_on_free(fgraph, sigma)):
        return None
    init_loc, init_scale = init.owner.op.dist_params(init.owner)
    op = rv.owner.op
    return rhos, sigma, init_loc, init_scale, op.ar_order, op.constant_term, int(length)


def _ar_from_standardised(z, rhos, sigma, init_loc, init_scale, order: int,
                          constant_term: bool, length: int):
    """Return the autoregression (time last) whose standardised innovations are ``z``.

    ``x_t = m_0 + s_0 z_t`` for ``t < p``, then ``x_t = c + sum_i rho_i x_{t-i} + s z_t``
    (PyMC's layout: ``rhos[..., 0]`` is the constant ``c`` when there is one, then the
    coefficient of lag 1). With ``s_t = (x_t, ..., x_{t-p+1}) = M s_{t-1} + e_1 (c + s z_t)``,
    ``M`` the companion matrix, the sums ``S_k = sum_j M^(k-j) u_j`` are accumulated by
    doubling: ``S_k += M^h S_(k-h)`` for ``h = 1, 2, 4, ...``, each a batched product.
    """
    first = init_loc + init_scale * z[..., :order]
    constant, coefficients = ((rhos[..., :1], rhos[..., 1:]) if constant_term
                              else (0.0, rhos))
    drive = constant + pt.as_tensor(sigma)[..., None] * z[..., order:]  # (*batch, length)
    batch = pt.broadcast_shape(tuple(first.shape)[:-1], tuple(drive.shape)[:-1],
                               tuple(coefficients.shape)[:-1], arrays_are_shapes=True)
    shift = pt.broadcast_to(np.eye(order - 1, order), (*batch, order - 1, order))
    companion = pt.concatenate([pt.broadcast_to(coefficients, (*batch, order))[..., None, :],
                                shift], axis=-2)
    start = pt.broadcast_to(first[..., ::-1], (*batch, order))[..., None, :]
    pushes = pt.concatenate([pt.broadcast_to(drive, (*batch, length))[..., None],
                             pt.zeros((*batch, length, order - 1))], axis=-1)
    sums = pt.concatenate([start, pushes], axis=-2)  # (*batch, length + 1, p): s_(p-1), ...
    h, power = 1, companion
    while h <= length:
        sums = pt.concatenate([sums[..., :h, :],
                               sums[..., h:, :] + sums[..., :-h, :] @ pt.swapaxes(power, -1, -2)],
                              axis=-2)
        h *= 2
        # Order 1: a power, not nested products, which PyTensor would flatten into one
        # product of 2^k factors (past 32 operands its Python backend fails).
        power = companion**h if order == 1 else power @ power
    return pt.concatenate([pt.broadcast_to(first, (*batch, order)), sums[..., 1:, 0]],
                          axis=-1)


def _free(rv, name: str, dims):
    rv.name = name
    return model_free_rv(rv, rv.type(name=name), None, name, *dims)


def _untransformed_normal(node) -> bool:
    """Tell whether ``node`` is a free ``Normal`` variable without a transform."""
    if not isinstance(node.op, ModelFreeRV) or node.op.transform is not None:
        return False
    rv = node.inputs[0]
    return rv.owner is not None and isinstance(rv.owner.op, NormalRV)


def _gaussian_walk(fgraph, node) -> tuple | None:
    """``(init loc, init scale, step loc, step scale)`` of a walk to non-centre, or None.

    A free ``pm.GaussianRandomWalk`` (a ``RandomWalk`` of ``Normal`` initial value and
    innovations) without a transform whose innovation scale depends on a free variable.
    """
    rv = _free_untransformed(node, RandomWalkRV)
    if rv is None:
        return None
    init, innovations = rv.owner.op.dist_params(rv.owner)[:2]
    pieces = []
    for piece in (init, innovations):
        # PyMC's time-first layout: init (1, *batch), innovations (steps, *batch).
        if (piece.owner is None or not isinstance(piece.owner.op, NormalRV)
                or piece.ndim != rv.ndim):
            return None
        pieces.extend(piece.owner.op.dist_params(piece.owner))
    return tuple(pieces) if _depends_on_free(fgraph, pieces[3]) else None


def _mv_gaussian_walk(fgraph, node) -> tuple | None:
    """``(init mean, init cov, step mean, step cov)`` of a multivariate walk to non-centre.

    A free ``pm.MvGaussianRandomWalk`` of shape ``(time, k)`` without a transform, whose
    initial value and innovations are ``MvNormal`` with one covariance each, the innovations'
    depending on a free variable; None otherwise (batches of walks are left as written).
    """
    rv = _free_untransformed(node, RandomWalkRV)
    if rv is None or rv.ndim != 2:
        return None
    init, innovations = rv.owner.op.dist_params(rv.owner)[:2]
    pieces = []
    for piece in (init, innovations):
        # PyMC's layout: init (1, k), innovations (steps, k); a covariance (1, k, k).
        if (piece.owner is None or not isinstance(piece.owner.op, MvNormalRV)
                or piece.ndim != 2):
            return None
        mean, cov = piece.owner.op.dist_params(piece.owner)
        if cov.ndim != 3 or cov.type.shape[0] != 1 or mean.ndim > 2:
            return None
        pieces.extend([mean, cov[0]])
    return tuple(pieces) if _depends_on_free(fgraph, pieces[3]) else None


def _mv_walk_from_standardised(z, init_mean, init_cov, step_mean, step_cov):
    """Return the multivariate walk (time first) whose whitened steps are ``z``.

    ``x_0 = m_0 + L_0 z_0`` and ``x_t = x_{t-1} + m + L z_t``, ``L`` the Cholesky factors.
    """
    first = init_mean + z[:1] @ cholesky(init_cov).T
    increments = step_mean + z[1:] @ cholesky(step_cov).T
    return pt.cumsum(pt.concatenate([first, increments], axis=0), axis=0)


def _walk_from_standardised(z, init_loc, init_scale, step_loc, step_scale):
    """Return the walk whose standardised first value and increments (time last) are ``z``."""
    time_first = pt.moveaxis(z, -1, 0)
    first = init_loc + init_scale * time_first[:1]
    increments = step_loc + step_scale * time_first[1:]
    return pt.moveaxis(pt.cumsum(pt.concatenate([first, increments], axis=0), axis=0), 0, -1)


def _constant(variable) -> float | None:
    try:
        return float(pt.get_underlying_scalar_constant_value(variable))
    except Exception:  # any failure means "not a known constant"
        return None


def _affine_chain(fgraph, z):
    """Follow the longest chain ``x = loc + scale * z`` of elementwise ops using only ``z``."""
    loc, scale, current = pt.as_tensor(0.0), pt.as_tensor(1.0), z
    while True:
        clients = [node for node, _ in fgraph.clients[current] if node.outputs]  # not outputs
        if len(clients) != 1 or len(fgraph.clients[current]) != len(clients) + (current is z):
            return current, loc, scale
        node = clients[0]
        if (not isinstance(node.op, Elemwise) or len(node.outputs) != 1
                or node.inputs.count(current) != 1
                or node.outputs[0].type.shape != z.type.shape):
            return current, loc, scale
        others = [i for i in node.inputs if i is not current]
        op = node.op.scalar_op
        if isinstance(op, ps.Mul):
            factor = _fold(others, pt.mul)
            loc, scale = loc * factor, scale * factor
        elif isinstance(op, ps.Add):
            loc = loc + _fold(others, pt.add)
        elif isinstance(op, ps.Sub):
            loc, scale = ((loc - others[0], scale) if node.inputs[0] is current
                          else (others[0] - loc, -scale))
        elif isinstance(op, ps.Neg):
            loc, scale = -loc, -scale
        elif isinstance(op, ps.TrueDiv) and node.inputs[0] is current:
            loc, scale = loc / others[0], scale / others[0]
        else:
            return current, loc, scale
        current = node.outputs[0]


def _fold(variables, op):
    result = variables[0]
    for variable in variables[1:]:
        result = op(result, variable)
    return result


def _depends_on_free(fgraph, variable) -> bool:
    """Tell whether ``variable`` depends on a free variable of the model."""
    free = {node.outputs[0] for node in fgraph.apply_nodes if isinstance(node.op, ModelFreeRV)}
    return any(v in free for v in ancestors([variable]))


def _free_name(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}{k}", k + 1
    taken.add(candidate)
    return candidate
