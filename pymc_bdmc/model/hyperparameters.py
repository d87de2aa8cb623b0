"""A model's scalar hyperparameters as inputs of its compiled densities, not constants in them.

A prior's scale or a likelihood's fixed noise (``pm.HalfNormal("tau", 2.0)``, ``pm.Normal("y",
f, 0.3, observed=y)``) is a constant of the model's graph. Compiled as one, every new value is
a new graph, and a new Numba compilation of the densities before the first transition. As
shared inputs, as the observed data are (:class:`~pymc_bdmc.model.density.ModelDensity`), a
model that differs only in them compiles to the same graph, so a prior-sensitivity loop loads
its densities from the disk caches. Only floating-point scalars that a random variable takes
are replaced: integers can set shapes and supports, and arrays (a fixed covariance) are better
folded into the compiled code.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.variable import TensorConstant

__all__ = ["hyperparameter_inputs"]


def hyperparameter_inputs(model: pm.Model) -> dict[TensorConstant, SharedVariable]:
    """Map each floating-point scalar constant a variable of ``model`` takes to a shared input.

    Scalars PyMC broadcast against array parameters (``pm.Normal("v", np.zeros(3), 1.5)``)
    count too. The shared inputs hold the constants' values (static shape ``()``, the same
    dtype); the map replaces them in the model's log-density graphs (``graph_replace``).
    """
    inputs = {}
    for rv in (*model.free_RVs, *model.observed_RVs):
        for param in rv.owner.inputs:
            # PyMC expands a scalar's dimensions to broadcast it against array parameters.
            while param.owner is not None and isinstance(param.owner.op, DimShuffle):
                param = param.owner.inputs[0]
            if (isinstance(param, TensorConstant) and param.type.ndim == 0
                    and param.type.dtype.startswith("float") and param not in inputs):
                inputs[param] = pytensor.shared(np.array(param.data, dtype=param.type.dtype),
                                                name=f"{rv.name}_bdmc_hyperparameter",
                                                shape=())
    return inputs
