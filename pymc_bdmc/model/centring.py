"""Sample non-centred local-scale models in their centred form: the evidence does not change.

A horseshoe written the way PyMC's docs recommend, ``beta = z * tau * lam`` with ``z ~
Normal(0, 1)`` and a local scale ``lam_j`` per coefficient, is a hard target for annealing once
the data pin each ``beta_j``: the posterior of ``(z_j, log lam_j)`` lies near the curve ``z_j
lam_j tau = beta_j``, one curved ridge per coefficient, which HMC with a fixed metric does not
follow (reverse chains stay near ``theta*``; gaps of 100-1000 nats, docs/performance.md). The
centred form, ``beta ~ Normal(0, tau * lam)``, is Gaussian in the pinned ``beta``, and its
scale moves (:mod:`pymc_bdmc.model.location_scale`) carry ``beta`` with ``tau`` and ``lam``.

``p(y)`` is the same under any bijective change of the latent variables, so the samplers may
run on the centred form. :func:`centred_model` finds every standard-normal free variable ``z``
whose only use is an elementwise affine chain ``x = a + b z`` (``+``, ``-``, ``*``, ``/``,
unary minus, each keeping ``z``'s shape) where ``a`` and ``b`` do not depend on ``z`` and ``b``
depends on a *local scale*: a free variable with as many elements as ``z`` (more than one).
It returns a new model in which ``x`` is a free variable ``x ~ Normal(a, |b|)`` named
``f"{z}_centred"`` and ``z = (x - a) / b`` is a Deterministic under its own name. The map
``z -> x`` has Jacobian ``|b|`` per element given the other variables, so the two joint
densities agree: ``p'(x, ...) = p(z = (x - a) / b, ...) / |b|``, and so do the evidence and
the prior predictive distribution of the data.

Models with global scales only (eight schools, HSGP coefficients scaled by a power spectrum of
two scalars) are left as written: their non-centred forms certify, and centring them was
measured to cost more than it gave (the HSGP's seed 1 went from a gap of 0.01 at 1000 steps
to 0.76 at 6000, docs/performance.md).

The user's model is not touched. Shared data (``pm.Data``, symbolic dimension lengths) of the
new model are the user's own, so ``pm.set_data`` on the user's model reaches the compiled
densities of the centred one.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model.fgraph import (
    ModelFreeRV,
    fgraph_from_model,
    model_deterministic,
    model_free_rv,
    model_from_fgraph,
)
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.traversal import ancestors
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import NormalRV

__all__ = ["CENTRED_SUFFIX", "Centring", "centred_model"]

logger = logging.getLogger("pymc_bdmc")

#: Suffix of the name of the free variable that replaces a non-centred one.
CENTRED_SUFFIX = "_centred"


@dataclass(frozen=True)
class Centring:
    """The model the samplers run on, and which of the user's variables it centres.

    Attributes
    ----------
    model : pm.Model
        The user's model itself when nothing is centred.
    centred : tuple of str
        Names of the user's standard-normal variables now Deterministics of
        ``f"{name}{CENTRED_SUFFIX}"``.
    """

    model: pm.Model
    centred: tuple[str, ...] = ()


def centred_model(model: pm.Model) -> Centring:
    """``model`` with its non-centred local-scale variables centred (see the module docstring).

    Parameters
    ----------
    model : pm.Model

    Returns
    -------
    Centring
        ``Centring(model)`` when no variable qualifies, or when PyMC cannot copy the model's
        graph (initial values, nested models).
    """
    try:
        with warnings.catch_warnings():  # PyMC warns about GP objects reused on a copy
            warnings.simplefilter("ignore", UserWarning)
            fgraph, memo = fgraph_from_model(model, inlined_views=True)
    except (NotImplementedError, ValueError):
        return Centring(model)
    taken = set(model.named_vars)
    centred = []
    for node in list(fgraph.toposort()):
        if not _standard_normal(node):
            continue
        z = node.outputs[0]
        x, loc, scale = _affine_chain(fgraph, z)
        if x is z or not _has_local_scale(fgraph, scale, z):
            continue
        name = _free_name(node.op.name + CENTRED_SUFFIX, taken)
        rv = node.inputs[0]
        new_rv = pm.Normal.dist(mu=loc, sigma=pt.abs(scale), size=rv.shape)
        new_rv.name = name
        new_free = model_free_rv(new_rv, new_rv.type(name=name), None, name, *node.op.dims)
        fgraph.replace(x, new_free, import_missing=True)
        user_z = model_deterministic((new_free - loc) / scale, node.op.name, *node.op.dims)
        fgraph.replace(z, user_z, import_missing=True)
        centred.append(node.op.name)
    if not centred:
        return Centring(model)
    # PyMC copied the data and dimension lengths; the user's own keep pm.set_data working.
    user_shared = [v for v in [*model.named_vars.values(), *model.dim_lengths.values()]
                   if isinstance(v, SharedVariable)]
    for original in user_shared:
        copy = memo.get(original)
        if copy is not None and copy is not original and copy in fgraph.variables:
            fgraph.replace(copy, original, import_missing=True)
    fgraph._dim_lengths = dict(model.dim_lengths)
    new_model = model_from_fgraph(fgraph, mutate_fgraph=True)
    logger.info("Sampling %s in centred form (the evidence is unchanged; the posterior "
                "carries both): %s.", ", ".join(f"`{n}`" for n in centred),
                "; ".join(f"`{n}{CENTRED_SUFFIX} ~ Normal(loc, |scale|)`, `{n} = "
                          f"({n}{CENTRED_SUFFIX} - loc) / scale`" for n in centred))
    return Centring(new_model, tuple(centred))


def _standard_normal(node) -> bool:
    """A free ``Normal(0, 1)`` variable without a transform."""
    if not isinstance(node.op, ModelFreeRV) or node.op.transform is not None:
        return False
    rv = node.inputs[0]
    if rv.owner is None or not isinstance(rv.owner.op, NormalRV):
        return False
    loc, scale = rv.owner.op.dist_params(rv.owner)
    return _constant(loc) == 0.0 and _constant(scale) == 1.0


def _constant(variable) -> float | None:
    try:
        return float(pt.get_underlying_scalar_constant_value(variable))
    except Exception:  # noqa: BLE001 - any failure means "not a known constant"
        return None


def _affine_chain(fgraph, z):
    """The longest chain ``x = loc + scale * z`` of elementwise ops consuming only ``z``."""
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


def _has_local_scale(fgraph, scale, z) -> bool:
    """Whether ``scale`` depends on a free variable with as many elements (> 1) as ``z``."""
    size = _size(z.owner.inputs[0])
    if size is None or size < 2:
        return False
    free = {node.outputs[0]: node.inputs[0] for node in fgraph.apply_nodes
            if isinstance(node.op, ModelFreeRV)}
    return any(v in free and _size(free[v]) == size for v in ancestors([scale]))


def _size(rv) -> int | None:
    """Number of elements of a random variable (not its value: its shape needs no input)."""
    shape = rv.type.shape
    if all(s is not None for s in shape):
        return int(np.prod(shape, dtype=int))
    try:  # dims given by coords: shapes depend on shared lengths only
        return int(pytensor.function([], rv.size, on_unused_input="ignore")())
    except Exception:  # noqa: BLE001 - an unknown size never qualifies
        return None


def _free_name(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}{k}", k + 1
    taken.add(candidate)
    return candidate
