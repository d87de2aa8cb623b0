"""A tempered clone of a PyMC model, for driving PyMC's own step methods.

Every PyMC step method takes its target from ``model.logp()``: Metropolis and Slice compile it
directly, the Gibbs-type steps through ``model.compile_logp()``, HMC and NUTS through
``model.logp_dlogp_function()``. A clone whose ``logp()`` is ``log p(x) + beta log p(y | x)``,
with ``beta`` a shared variable, therefore retargets all of them, and setting ``beta`` between
annealing steps costs no recompilation.

The clone is built from the user's model and never writes to it:

* Observed data are replaced, in every logp graph the clone builds, by shared variables owned
  here (the same device as :class:`~pymc_bdmc.model.density.ModelDensity`), so simulated data
  ``y*`` reach the compiled step methods with ``set_observed`` and no rebuild. This works
  whether the data were NumPy arrays (graph constants) or ``pm.Data`` (whose shared variables
  the clone would otherwise share with, or copy from, the user's model).
* ``initval=`` settings, which PyMC's model cloning refuses, are dropped on the clone (a shallow
  stand-in of the model is cloned): step methods only use the initial point for shapes, and AIS
  starts from exact prior draws.
* Cloning reorders value variables, so everything here maps points by *name*.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.model.fgraph import clone_model
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from pymc_bdmc.model.density import FlatLayout, observed_data_value, prior_and_likelihood

__all__ = ["TemperedClone", "TemperedModel"]

logger = logging.getLogger(__name__)

#: Name of the shared inverse temperature in the clone's graphs.
BETA_NAME = "bdmc_beta"


class TemperedModel(pm.Model):
    """A model whose joint log density is ``log prior + beta * (log-likelihood [+ Potentials])``.

    Only ``logp(vars=None)`` (what step methods use) is tempered; ``varlogp``,
    ``observedlogp`` and every other explicit-``vars`` request stay untempered. Instances are made
    by :class:`TemperedClone`, never directly.
    """

    _bdmc_beta: SharedVariable
    _bdmc_data_replace: dict
    _bdmc_potentials_in_likelihood: bool

    def _bdmc_replace_data(self, graph):
        if not self._bdmc_data_replace:
            return graph
        return graph_replace(graph, self._bdmc_data_replace, strict=False)

    def logp(self, vars=None, jacobian=True, sum=True):  # noqa: A002 - PyMC's signature
        """Joint log density, tempered when ``vars`` is None (see the class docstring)."""
        if vars is not None:
            return self._bdmc_replace_data(super().logp(vars=vars, jacobian=jacobian, sum=sum))
        prior = super().logp(vars=list(self.free_RVs), jacobian=jacobian, sum=sum)
        lik_vars = list(self.observed_RVs)
        if self._bdmc_potentials_in_likelihood:
            lik_vars += list(self.potentials)
        if not lik_vars:
            return prior
        lik = super().logp(vars=lik_vars, jacobian=jacobian, sum=sum)
        beta = self._bdmc_beta

        def tempered(term):
            # At beta = 0 exactly the prior, also where the data are impossible (0 * -inf).
            return pt.switch(pt.gt(beta, 0), beta * term, 0.0)

        if sum:
            return self._bdmc_replace_data(prior + tempered(lik))
        return self._bdmc_replace_data(list(prior) + [tempered(term) for term in lik])


def _clone_ignoring_initvals(model: pm.Model) -> pm.Model:
    if not any(v is not None for v in model.rvs_to_initial_values.values()):
        return clone_model(model)
    # A shallow stand-in whose initvals are all default: the user's model is not touched.
    stand_in = object.__new__(type(model))
    stand_in.__dict__.update(model.__dict__)
    stand_in.rvs_to_initial_values = {rv: None for rv in model.rvs_to_initial_values}
    return clone_model(stand_in)


class TemperedClone:
    """A tempered clone of ``model`` with a shared inverse temperature and owned data.

    Parameters
    ----------
    model : pm.Model
        The user's model (read, never modified).
    layout : FlatLayout
        Layout of the flat vector used by the rest of the package (computed on the user's model;
        mapping to the clone is by name).
    potentials_in_likelihood : bool, default False
        Temper ``pm.Potential`` terms with the likelihood (else they are left out of the clone's
        density; :func:`~pymc_bdmc.model.checks.check_model` refuses that case beforehand).
    observed : mapping, optional
        Data to condition on instead of the model's own (BDMC's simulated ``y*``).
    compile_kwargs : dict, optional
        Passed to the compiled log-density function.

    Attributes
    ----------
    model : TemperedModel
        The clone. Step methods are built on it.
    beta : SharedVariable
        Its inverse temperature.
    """

    def __init__(self, model: pm.Model, layout: FlatLayout, *,
                 potentials_in_likelihood: bool = False,
                 observed: Mapping[str, np.ndarray] | None = None,
                 compile_kwargs: dict | None = None):
        clone = _clone_ignoring_initvals(model)
        clone.__class__ = TemperedModel
        clone._bdmc_beta = pytensor.shared(np.float64(1.0), name=BETA_NAME)
        clone._bdmc_potentials_in_likelihood = bool(potentials_in_likelihood)
        self._data: dict[str, SharedVariable] = {}
        replace = {}
        model_graph = [*clone.free_RVs, *clone.observed_RVs, *clone.potentials,
                       *clone.deterministics]
        used_elsewhere = set(ancestors(model_graph))
        for rv in clone.observed_RVs:
            value = clone.rvs_to_values[rv]
            data = observed_data_value(value)
            if data is None:
                continue
            # A static shape spares the compiled step methods the model's shape checks;
            # set_observed keeps the shape.
            data = np.array(data, copy=True)
            shared = pytensor.shared(data, name=f"{rv.name}_bdmc_data", shape=data.shape)
            self._data[rv.name] = shared
            if value in used_elsewhere:
                # The data also enter the model as an input (e.g. lagged values): replace them
                # everywhere in each logp graph, as ModelDensity does.
                replace[value] = shared
            else:
                # Only the likelihood sees them: swap the observed value itself (cheaper than
                # rewriting every graph). The clone is ours, so this touches nothing of the user's.
                clone.rvs_to_values[rv] = shared
                clone.values_to_rvs.pop(value, None)
                clone.values_to_rvs[shared] = rv
        clone._bdmc_data_replace = replace
        self.model: TemperedModel = clone
        self.beta: SharedVariable = clone._bdmc_beta
        self.layout = layout
        names = {v.name for v in clone.value_vars}
        if names != set(layout.names):
            raise RuntimeError(f"Clone has value variables {sorted(names)}, expected "
                               f"{sorted(layout.names)}.")
        if observed:
            self.set_observed(observed)

        prior, lik = prior_and_likelihood(clone)
        if potentials_in_likelihood and clone.potentials:
            lik = lik + clone.potentiallogp
        self._parts_fn = clone.compile_fn(
            [clone._bdmc_replace_data(prior), clone._bdmc_replace_data(lik)],
            inputs=clone.value_vars, on_unused_input="ignore", **(compile_kwargs or {}),
        )

    def set_beta(self, beta: float) -> None:
        """Set the inverse temperature of every step method built on the clone."""
        self.beta.set_value(np.float64(beta))

    def set_observed(self, data: Mapping[str, np.ndarray]) -> None:
        """Condition the clone (and every step method compiled on it) on new data."""
        for name, value in data.items():
            if name not in self._data:
                raise ValueError(f"Observed variable {name!r} has no replaceable data.")
            shared = self._data[name]
            old = shared.get_value(borrow=True)
            value = np.asarray(value, dtype=old.dtype)
            if value.shape != old.shape:
                raise ValueError(f"New data for {name!r} has shape {value.shape}, "
                                 f"expected {old.shape}.")
            shared.set_value(value.copy())

    def log_prior_and_likelihood(self, point: Mapping[str, np.ndarray]) -> tuple[float, float]:
        """Untempered log prior (transformed space, with Jacobians) and log-likelihood."""
        prior, lik = self._parts_fn(point)
        prior, lik = float(prior), float(lik)
        return (-np.inf if np.isnan(prior) else prior), (-np.inf if np.isnan(lik) else lik)
