"""A model's scalar hyperparameters as inputs of its compiled densities, not constants in them.

A prior's scale or a likelihood's fixed noise (``pm.HalfNormal("tau", 2.0)``, ``pm.Normal("y",
f, 0.3, observed=y)``) is a constant of the model's graph. Compiled as one, every new value is
a new graph, and a new Numba compilation of the densities before the first transition. As
shared inputs, as the observed data are (:class:`~pymc_bdmc.model.density.ModelDensity`), a
model that differs only in them compiles to the same graph, so a prior-sensitivity loop loads
its densities from the disk caches. Only scalars a random variable takes are replaced, and
integers only where they cannot set a shape or a support; arrays (a fixed covariance) are
better folded into the compiled code.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.variable import TensorConstant

__all__ = ["hyperparameter_inputs"]


def hyperparameter_inputs(model: pm.Model) -> dict[TensorConstant, SharedVariable]:
    """Map each scalar constant a variable of ``model`` takes as a parameter to a shared input.

    Floating-point scalars of every variable; integers too (``pm.Normal("mu", 0, 10)``, PyMC's
    ``int8`` constants) where the variable is a continuous univariate one, whose parameters
    set neither a shape nor a support. Scalars PyMC broadcast or computed a parameter from
    count too (:func:`_scalar_constants`). The shared inputs hold the constants' values (static
    shape ``()``, the same dtype, so the same arithmetic); the map replaces them in the model's
    log-density graphs (``graph_replace``).
    """
    inputs = {}
    for rv in (*model.free_RVs, *model.observed_RVs):
        op = rv.owner.op
        univariate = (isinstance(op, RandomVariable) and op.ndim_supp == 0
                      and rv.type.dtype.startswith("float"))
        kinds = ("float", "int", "uint") if univariate else ("float",)
        for constant in _scalar_constants(rv.owner.inputs):
            if constant.type.dtype.startswith(kinds) and constant not in inputs:
                inputs[constant] = pytensor.shared(
                    np.array(constant.data, dtype=constant.type.dtype),
                    name=f"{rv.name}_bdmc_hyperparameter", shape=())
    return inputs


def _scalar_constants(params) -> list[TensorConstant]:
    """Return the scalar constants ``params`` are, or are computed from by scalar arithmetic.

    PyMC broadcasts a scalar against array parameters (``DimShuffle``) and turns some into
    others (a Gamma's rate into a scale): the constants beneath count.
    """
    found, pending = [], list(params)
    while pending:
        variable = pending.pop()
        if isinstance(variable, TensorConstant):
            if variable.type.ndim == 0:
                found.append(variable)
        elif variable.owner is not None and (
                isinstance(variable.owner.op, DimShuffle)
                or (isinstance(variable.owner.op, Elemwise) and variable.type.ndim == 0)):
            pending.extend(variable.owner.inputs)
    return found
