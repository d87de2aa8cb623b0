"""Compiled log-densities of a PyMC model over a flat unconstrained vector.

This is the only module that builds PyTensor graphs from a ``pm.Model``. Everything downstream
(kernels, AIS, tuning) sees NumPy arrays of shape ``(chains, n_dim)``.

Design notes
------------
* One batched function returns the log prior, the log-likelihood and both of their gradients for
  ``K`` chains at once. The tempered density ``prior + beta * loglik`` and its gradient are formed
  from these parts in NumPy, so a single compilation serves every temperature, and a change of
  ``beta`` between annealing steps costs no model evaluation: AIS needs the log-likelihood of the
  same state for its weight anyway.
* The observed data are replaced, in the graph, by shared variables owned by this object. The
  user's model is never touched, and bidirectional Monte Carlo can swap in simulated data with
  ``set_observed`` without recompiling or cloning the model (clones reorder value variables).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.distributions.mixture import MixtureRV
from pymc.distributions.transforms import ChainedTransform, CircularTransform
from pymc.pytensorf import rewrite_pregrad
from pymc.util import get_default_varnames
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor import as_tensor
from pytensor.tensor.math import variadic_add
from pytensor.tensor.sort import ArgSortOp, SortOp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.batching import (  # noqa: F401  (re-exported: the model layer's interface)
    COMPILE_LOCK,
    FUSED_KERNELS,
    ONE_SHOT_MODE,
    REFERENCE_MODE,
    SCALE_MAP,
    BatchedParts,
    build_fused_hmc,
    cached_fused_gibbs,
    checks_to_switches,
    compile_batched,
    compile_per_row,
    compile_scale_map,
    finite_parts,
    join_value_inputs,
    register_fused_kernel,
)
from pymc_bdmc.model.compile_ahead import start as start_compile_ahead
from pymc_bdmc.model.first_compile import (
    BatchedRecipe,
    DensitiesRecipe,
    compile_densities,
    first_compilation,
    gradient_outputs,
    import_backend,
    scale_map_recipe,
)
from pymc_bdmc.model.hyperparameters import hyperparameter_inputs
from pymc_bdmc.model.layout import DensityParts, FlatLayout, ObservationParts
from pymc_bdmc.model.location_scale import LocationScaleStructure, find_location_scale
from pymc_bdmc.model.rewrite_cache import compile_function, note_compiled
from pymc_bdmc.model.threads import row_split

__all__ = ["COMPILE_LOCK", "DensityParts", "FlatLayout", "ModelDensity", "ObservationParts",
           "may_mirror_modes", "mixes_one_family", "periodic_variables", "prior_and_likelihood",
           "transformed_by"]

logger = logging.getLogger(__name__)


def observed_data_value(value) -> np.ndarray | None:
    """The numeric value behind an observed variable, or None where it is not data alone.

    An expression of data alone is evaluated: PyMC casts a float ``pm.Data`` observed by an
    integer likelihood (a Bernoulli's 0.0/1.0 outcomes), and ``2 * data`` is data too. Such a
    value is replaced in the densities' graphs like an array (the expression node itself).
    """
    if isinstance(value, Constant):
        return np.asarray(value.data)
    if isinstance(value, SharedVariable):
        return np.asarray(value.get_value())
    if value.owner is None:
        return None
    inputs = list(graph_inputs([value]))
    if not all(isinstance(v, Constant) or (isinstance(v, SharedVariable)
                                            and isinstance(v.type, pt.TensorType))
               for v in inputs):
        return None  # a random generator, a free variable or an input of ours
    with COMPILE_LOCK:
        evaluate = pytensor.function([], value, mode=REFERENCE_MODE)
    return np.asarray(evaluate())


def may_mirror_modes(model: pm.Model, densities: list) -> bool:
    """Whether the posterior may have a copy of each mode per order of some of its values.

    True where the ``densities`` sort values (sorted draws as ordered cutpoints or means: a
    copy per order of the draws), or where a mixture's components are of one family (a copy
    per order of their labels). A Gaussian at one mode covers one copy, so no path starts from
    a Laplace fit there (:func:`pymc_bdmc.methods.vectorized.laplace_start`).
    """
    return mixes_one_family(model) or any(
        isinstance(node.op, (SortOp, ArgSortOp))
        for node in applys_between(graph_inputs(densities), densities))


def periodic_variables(model: pm.Model) -> list[str]:
    """Free variables whose transform wraps the real line onto a circle (``pm.VonMises``).

    Their density repeats along the unconstrained line, so it has no finite integral there: a
    path that starts from a Gaussian over that line counts every period its particles reach
    (a lower bound measured nats above the evidence). Paths from the prior, periodic as the
    posterior is, count one.
    """
    return transformed_by(model, CircularTransform)


def transformed_by(model: pm.Model, kinds, skip=()) -> list[str]:
    """Names of free variables whose transform is (or chains) one of ``kinds``.

    Variables whose op is one of ``skip`` are left out.
    """
    names = []
    for rv in model.free_RVs:
        if isinstance(rv.owner.op, skip):
            continue
        transform = model.rvs_to_transforms.get(rv)
        parts = (transform.transform_list if isinstance(transform, ChainedTransform)
                 else [transform])
        if any(isinstance(part, kinds) for part in parts):
            names.append(rv.name)
    return names


def mixes_one_family(model: pm.Model) -> bool:
    """Whether a mixture of ``model`` has components of one family (their labels can swap)."""
    for rv in [*model.free_RVs, *model.observed_RVs]:
        if isinstance(rv.owner.op, MixtureRV):
            # A MixtureRV's inputs: its generator, the weights, then the components.
            families = {type(c.owner.op) if c.owner is not None else None
                        for c in rv.owner.inputs[2:]}
            if len(families) == 1:
                return True
    return False


def prior_and_likelihood(model: pm.Model):
    """``model.varlogp`` and ``model.observedlogp``, from one pass of PyMC's logp rewriting.

    Each of the two properties runs PyMC's logprob rewriting over the whole model graph on its
    own; one ``model.logp(sum=False)`` call runs it once, and the sums are PyMC's.
    """
    n_free = len(model.free_RVs)
    factors = model.logp(vars=[*model.free_RVs, *model.observed_RVs], sum=False)

    def summed(terms):  # as PyMC sums them
        return variadic_add(*(as_tensor(t, allow_xtensor_conversion=True).sum() for t in terms))

    return summed(factors[:n_free]), summed(factors[n_free:])


class ModelDensity:
    """Compiled, batched log-densities of a PyMC model in its unconstrained space.

    Parameters
    ----------
    model : pm.Model
        The model. It is read, never modified.
    potentials_in_likelihood : bool, default False
        Add ``pm.Potential`` terms to the log-likelihood (they are then tempered with it).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile` (e.g. ``{"mode": "NUMBA"}``).
    gradients : bool, default True
        Compile the gradients too. Gradient-free callers (PyMC step methods, which evaluate
        their own densities per chain) pass False: the batched function then has no gradient
        graph, is compiled only on the first call of :meth:`parts`, and returns zero gradients.
    reparameterized : dict, optional
        The user's variables that ``model`` swaps between centred and non-centred, each with
        the free variable behind it (:func:`pymc_bdmc.model.reparameterize.other_form`).
    reparameterized_walks : frozenset, optional
        The names among ``reparameterized`` that are random walks (non-centred increments).
    reparameterized_vector_walks : frozenset, optional
        The names among those that are multivariate walks (whitened increments).
    reparameterized_autoregressions : frozenset, optional
        The names among ``reparameterized`` that are autoregressions (standardised
        innovations).
    compile_ahead : bool, default False
        Where the model's scale moves' map was never compiled on this machine, let a helper
        interpreter compile it meanwhile (:mod:`pymc_bdmc.model.compile_ahead`); else one
        compiles it where first needed. Densities new to this machine are compiled by a helper
        either way (:mod:`pymc_bdmc.model.first_compile`).

    Notes
    -----
    The log prior is ``model.varlogp``: the density of the free variables in the transformed
    space, including the log-Jacobian of every default transform. Its normalising constant is 1,
    which is what makes the AIS weight an estimate of ``p(y)`` itself.
    """

    def __init__(self, model: pm.Model, *, potentials_in_likelihood: bool = False,
                 compile_kwargs: dict | None = None, gradients: bool = True,
                 reparameterized: Mapping[str, str] | None = None,
                 reparameterized_walks: frozenset[str] = frozenset(),
                 reparameterized_vector_walks: frozenset[str] = frozenset(),
                 reparameterized_autoregressions: frozenset[str] = frozenset(),
                 compile_ahead: bool = False):
        self.model = model
        self.reparameterized = dict(reparameterized or {})
        self.reparameterized_walks = frozenset(reparameterized_walks)
        self.reparameterized_vector_walks = frozenset(reparameterized_vector_walks)
        self.reparameterized_autoregressions = frozenset(reparameterized_autoregressions)
        self.compile_kwargs = dict(compile_kwargs or {})
        self.n_compilations = 0
        self.n_evaluations = 0  # batched calls of the hot function (cost accounting)
        initial_point = model.initial_point()
        self.value_vars = list(model.value_vars)
        self.layout = FlatLayout.of_model(model, initial_point)
        self._initial_point = initial_point

        # Observed data become shared variables owned here (replaced in every graph we build).
        self.observed_names: list[str] = []
        self._data_shared: dict[str, SharedVariable] = {}
        self._data_replace: dict = {}
        for rv in model.observed_RVs:
            value = model.rvs_to_values[rv]
            data = observed_data_value(value)
            self.observed_names.append(rv.name)
            if data is None:
                continue
            # A static shape lets the rewrites drop the model's shape checks on the data (each
            # costs a Numba compile); set_observed keeps the shape.
            data = np.array(data, copy=True)
            shared = pytensor.shared(data, name=f"{rv.name}_bdmc_data", shape=data.shape)
            self._data_shared[rv.name] = shared
            self._data_replace[value] = shared
        self._data_replace.update(hyperparameter_inputs(model))  # and scalar hyperparameters

        log_prior, log_lik = prior_and_likelihood(model)
        if potentials_in_likelihood and model.potentials:
            log_lik = log_lik + model.potentiallogp
        (prior_x, lik_x), x = join_value_inputs(
            point=initial_point, outputs=[log_prior, log_lik], inputs=self.value_vars
        )
        prior_x, lik_x = self._replace_data([prior_x, lik_x])
        #: Whether the posterior may repeat its modes (:func:`may_mirror_modes`).
        self.mirrored_modes = may_mirror_modes(model, [prior_x, lik_x])
        #: Free variables on a circle (:func:`periodic_variables`): no Gaussian base fits them.
        self.periodic = periodic_variables(model)
        self.gradients = bool(gradients)
        self.location_scale = self._find_location_scale()
        self._scale_map_graph = None
        self._scale_map_fn = None
        # Where compiling the scale moves' map is recorded, keyed before anything compiles; a
        # helper compiles the map meanwhile, where it is new to this machine.
        self._scale_map_marker, self._map_recipe = scale_map_recipe(self, x)
        self._ahead = None  # the helper compiling the map, where one was started
        if compile_ahead and self._map_recipe is not None:
            self._ahead = start_compile_ahead(self._map_recipe, "the scale moves' map")
            self._map_recipe = None
        outputs = [prior_x, lik_x]
        self._densities, self._gradient_graph = (x, outputs), None
        if self.gradients:
            self._compile_densities(x, outputs)
            # Where rows cannot depend on the batch, two threads may share a large call.
            self._split_parts = row_split(self._parts_fn, self.batching,
                                          self.validation_points())
        else:
            self._parts_fn, self.batching, self._split_parts = None, "lazy", None
        self._fused = self._terms_graph = self._terms_fn = self._split_terms = None
        self._terms_batching = self._constrain_fn = self._weighted_fn = None
        self._n_observations = None
        self._fused_gibbs = {}
        self.n_term_evaluations = 0  # batched calls of the elementwise terms (Gibbs kernels)
        self._potentials_in_likelihood = bool(potentials_in_likelihood and model.potentials)

    # -- compilation -------------------------------------------------------------------------
    @property
    def hot_graph(self) -> tuple:
        """The graph of :meth:`parts` for one flat vector ``x``, built on first need.

        ``(x, [log_prior, log_likelihood, grad_log_prior, grad_log_likelihood])``.
        """
        if self._gradient_graph is None:
            x, densities = self._densities
            self._gradient_graph = (x, gradient_outputs(x, densities))
        return self._gradient_graph

    def _compile_densities(self, x, densities) -> None:
        """Compile the batched densities and gradients, by a helper where new to this machine.

        Keyed by the densities: a choice recorded before is loaded without their gradients'
        graph, which is built where needed (:attr:`hot_graph`).
        """
        first = None if self.compile_kwargs else first_compilation(x, densities)

        def by_a_helper() -> bool:
            recipe = DensitiesRecipe(x, densities, self.validation_points(), self.continuous,
                                     self.model.check_bounds, then=self._map_recipe)
            if not self._by_a_helper(recipe, "the densities"):
                return False
            self._map_recipe = None  # compiled after the densities
            return True

        with self.model:
            self._parts_fn, self.batching = compile_densities(
                self._compile, x, densities, self.validation_points(), self.continuous,
                build=lambda: self.hot_graph[1], remember=not self.compile_kwargs,
                before_choosing=by_a_helper)
        note_compiled(first)

    @staticmethod
    def _by_a_helper(recipe, label: str) -> bool:
        """Return whether a helper compiled ``recipe`` into the caches (:mod:`.first_compile`)."""
        helper = start_compile_ahead(recipe, label)
        import_backend()  # meanwhile
        return helper is not None and helper.wait()

    def _replace_data(self, outputs):
        if not self._data_replace:
            return list(outputs)
        return list(graph_replace(list(outputs), self._data_replace, strict=False))

    @property
    def continuous(self) -> np.ndarray:
        """Flat indices of the continuous coordinates."""
        discrete = np.zeros(self.n_dim, dtype=bool)
        for name, slc in zip(self.layout.names, self.layout.slices, strict=True):
            discrete[slc] = self.layout.is_discrete(name)
        return np.flatnonzero(~discrete)

    def validation_points(self) -> np.ndarray:
        """Three distinct points near the initial point, where compiled functions are checked.

        Made without any random generator; discrete coordinates keep their initial values.
        """
        x0 = self.layout.ravel(self._initial_point)
        continuous = self.continuous
        wiggle, reverse = np.zeros(self.n_dim), np.zeros(self.n_dim)
        wiggle[continuous] = np.sin(np.arange(1, continuous.size + 1) * 1.7)
        reverse[continuous] = wiggle[continuous][::-1]
        return np.stack([x0, x0 + 0.1 * wiggle, x0 - 0.2 * reverse])

    def batched_function(self, x, outputs, extra_inputs=(), extra_values=(), **kwargs):
        """Compile ``outputs(x)`` over a batch of rows (:func:`compile_batched`), in the model.

        The model's context keys a recorded choice by ``check_bounds``, as its function is. A
        function new to this machine is compiled by a helper (:mod:`.first_compile`).
        """
        def by_a_helper() -> bool:
            return self._by_a_helper(BatchedRecipe(
                x, list(outputs), self.validation_points(), self.continuous,
                self.model.check_bounds, tuple(extra_inputs), tuple(extra_values)),
                "a batched function")

        with self.model:
            return compile_batched(self._compile, x, outputs, self.validation_points(),
                                   extra_inputs=extra_inputs, extra_values=extra_values,
                                   movable=self.continuous, remember=not self.compile_kwargs,
                                   before_choosing=by_a_helper, **kwargs)

    def _compile(self, inputs, outputs, **kwargs):
        self.n_compilations += 1
        with COMPILE_LOCK, self.model:
            fn = compile_function(inputs, outputs, **{**self.compile_kwargs, **kwargs})
        fn.trust_input = True
        return fn

    # -- evaluation --------------------------------------------------------------------------
    @property
    def n_dim(self) -> int:
        """Number of unconstrained coordinates."""
        return self.layout.size

    def parts(self, x: np.ndarray) -> DensityParts:
        """Evaluate prior, likelihood and gradients for a batch ``x`` of shape (chains, n_dim)."""
        x = np.ascontiguousarray(x, dtype=float)
        self.n_evaluations += 1
        if self.gradients:
            prior, lik, grad_prior, grad_lik = (self._split_parts or self._parts_fn)(x)
        else:
            if self._parts_fn is None:
                self._parts_fn, self.batching = self.batched_function(*self._densities)
            (prior, lik), grad_prior = self._parts_fn(x), np.zeros(x.shape)
            grad_lik = grad_prior
        return finite_parts(prior, lik, grad_prior, grad_lik)

    def fused_hmc(self):
        """The HMC transition compiled into one function, or None where it cannot be.

        A :class:`~pymc_bdmc.kernels.fused_hmc.FusedHMC` (its forms compiled on first use):
        :func:`~pymc_bdmc.kernels.hmc.hmc_step` with far less Python per transition. None
        unless the densities have gradients and a vectorized graph (:attr:`can_fuse_hmc`).
        """
        if self._fused is None and self.can_fuse_hmc:
            self._fused = build_fused_hmc(*self.hot_graph, self._compile, self)
        return self._fused

    @property
    def can_fuse_hmc(self) -> bool:
        """Whether :meth:`fused_hmc` can be built (gradients and a vectorized graph)."""
        return self.gradients and self.batching == "vectorized"

    def has_fused_hmc(self, *, dense: bool = False, base: bool = False,
                      principal: bool = False) -> bool:
        """Whether this form of :meth:`fused_hmc` has been compiled in this process."""
        return self._fused is not None and self._fused.is_compiled(dense=dense, base=base,
                                                                   principal=principal)

    # -- scale groups (moves that carry a hyper-parameter's Gaussian children) ----------------
    def _find_location_scale(self) -> LocationScaleStructure:
        if not self.gradients:
            return LocationScaleStructure((), ())
        try:
            return find_location_scale(self.model, self.layout)
        except Exception as err:  # noqa: BLE001 - an unusual graph just gets no scale moves
            logger.debug("No location-scale structure found (%s).", err)
            return LocationScaleStructure((), ())

    @property
    def location_scale_groups(self) -> tuple:
        """The model's scale groups (:class:`~pymc_bdmc.model.location_scale.ScaleGroup`)."""
        return self.location_scale.groups

    def _scale_map(self):
        if self._scale_map_graph is None and self.location_scale:
            graph = self.location_scale.map_graph(self.model, self.layout)
            self._scale_map_graph = (self.location_scale.groups, graph)
        return self._scale_map_graph

    def location_scale_map(self, z: np.ndarray):
        """The map of every scale group's move, batched over rows of ``z``.

        ``z`` has shape (chains, 2 n): each row is a point followed by the same point with one
        group's hyper-parameter changed. Returns the moved points, shape (chains, groups, n),
        and the maps' log-Jacobians, shape (chains, groups); only the proposed group's entries
        are meaningful. Compiled on first use.
        """
        if self._scale_map_fn is None:
            if not self.location_scale:
                raise ValueError("This model has no scale groups.")
            if self._ahead is None and self._map_recipe is not None:
                self._ahead = start_compile_ahead(self._map_recipe, "the scale moves' map")
                self._map_recipe = None
            if self._ahead is not None:
                self._ahead.wait()  # its compilation is then loaded from the caches
                self._ahead = None
            self._scale_map_fn = compile_scale_map(self._compile, self._scale_map()[1],
                                                   self.validation_points(), self.continuous,
                                                   self._scale_map_marker,
                                                   remember=not self.compile_kwargs)
        return self._scale_map_fn(np.ascontiguousarray(z, dtype=float))

    def batched_parts(self) -> BatchedParts:
        """The hot path alone, as a picklable :class:`BatchedParts` (for worker processes)."""
        if not self.gradients:
            raise ValueError("Only a density compiled with gradients has a batched hot path.")
        x, outputs = self.hot_graph
        return BatchedParts(x, outputs, self._data_shared, self.validation_points(),
                            self.compile_kwargs, terms_graph=self._terms_graph,
                            movable=self.continuous, scale_map=self._scale_map(),
                            scale_map_marker=self._scale_map_marker)

    # -- elementwise terms (Gibbs updates of discrete variables) ----------------------------
    def _build_terms_graph(self):
        model = self.model
        prior_terms = model.logp(vars=model.free_RVs, sum=False, jacobian=True)
        lik_vars = list(model.observed_RVs)
        if self._potentials_in_likelihood:
            lik_vars += model.potentials  # through logp, which puts values in place of RVs
        lik_terms = model.logp(vars=lik_vars, sum=False)
        outs, x = join_value_inputs(self._initial_point, list(prior_terms) + list(lik_terms),
                                    self.value_vars)
        outs = [pt.cast(pt.flatten(t), "float64") for t in self._replace_data(outs)]
        prior = pt.concatenate(outs[: len(prior_terms)])
        lik = pt.concatenate(outs[len(prior_terms):])
        return x, [prior, lik]

    def terms(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elementwise log-density terms of a batch ``x`` of shape (chains, n_dim).

        Returns ``(prior_terms, likelihood_terms)``, of shapes (chains, P) and (chains, L):
        every element of every variable's log-density (log-Jacobians included), flattened.
        They add up to ``log_prior`` and ``log_likelihood`` of :meth:`parts`. A Gibbs update
        of one discrete coordinate needs only the elements that depend on it. Compiled on
        first use; no gradients.
        """
        self.n_term_evaluations += 1
        self._compile_terms()
        return tuple((self._split_terms or self._terms_fn)(np.ascontiguousarray(x, dtype=float)))

    def _compile_terms(self):
        if self._terms_fn is None:
            if self._terms_graph is None:
                self._terms_graph = self._build_terms_graph()
            self._terms_fn, self._terms_batching = self.batched_function(*self._terms_graph)
            # A Gibbs update evaluates every chain at each value: large calls, split if exact.
            self._split_terms = row_split(self._terms_fn, self._terms_batching,
                                          self.validation_points())
        return self._terms_fn

    @property
    def can_fuse_gibbs(self) -> bool:
        """Whether :meth:`fused_gibbs` can be built (a vectorized graph of the terms)."""
        self._compile_terms()
        return self._terms_batching == "vectorized"

    def fused_gibbs(self, n_values: int):
        """The Gibbs update of one color compiled into one function, or None where it cannot be.

        A :class:`~pymc_bdmc.kernels.fused_gibbs.FusedColorUpdate` for supports of at most
        ``n_values`` values, compiled on first use and kept: the same update as
        :meth:`~pymc_bdmc.kernels.gibbs.ChromaticGibbs.sweep` makes per color, with less
        Python. None unless the elementwise terms have a validated vectorized graph.
        """
        self._compile_terms()
        return cached_fused_gibbs(self._fused_gibbs, self._terms_batching, self._terms_graph,
                                  n_values, self._compile, self)

    # -- observation-weighted likelihood (data-point tempering) ---------------------------
    def _build_weighted(self) -> None:
        """Compile, once, the prior and the observation-weighted likelihood with gradients.

        The weights are an input of the compiled function (never a recompilation): one vector
        along the leading data dimension, shared by all chains and broadcast over every
        observed variable's trailing dimensions.
        """
        if self._potentials_in_likelihood:
            raise ValueError(
                "The likelihood includes pm.Potential terms, which cannot be split into "
                "per-observation terms; data-point tempering needs a likelihood that factorizes "
                "over observations. Use tempering instead."
            )
        model = self.model
        pointwise = model.logp(vars=model.observed_RVs, sum=False)
        terms, x = join_value_inputs(self._initial_point, [model.varlogp, *pointwise],
                                     self.value_vars)
        prior_x, *terms = self._replace_data(terms)
        shape_fn = self._compile([x], [t.shape for t in terms], mode=ONE_SHOT_MODE,
                                 on_unused_input="ignore")
        shapes = [tuple(int(d) for d in shape)
                  for shape in shape_fn(self.validation_points()[0])]
        leading = {name: shape[0] if shape else None
                   for name, shape in zip(self.observed_names, shapes, strict=True)}
        if any(size is None for size in leading.values()) or len(set(leading.values())) != 1:
            described = ", ".join(
                f"{name}: {'scalar' if shape == () else shape}"
                for name, shape in zip(self.observed_names, shapes, strict=True)
            )
            raise ValueError(
                "Data-point tempering needs every observed variable's elementwise "
                "log-likelihood to share one leading data dimension (observations indexed "
                f"along axis 0), but their shapes are {{{described}}}. Use tempering, or "
                "reshape the data so that observations run along the first axis."
            )
        n_obs = next(iter(leading.values()))
        per_obs = sum(t.sum(axis=tuple(range(1, t.ndim))) if t.ndim > 1 else t for t in terms)
        weights = pt.vector("observation_weights", dtype=per_obs.dtype)
        weighted = pt.sum(weights * per_obs)
        grad_prior = pytensor.grad(rewrite_pregrad(prior_x), x, disconnected_inputs="ignore")
        grad_lik = pytensor.grad(rewrite_pregrad(weighted), x, disconnected_inputs="ignore")
        check_weights = np.linspace(0.1, 1.0, n_obs)
        self._weighted_fn, _ = self.batched_function(
            x, [prior_x, per_obs, grad_prior, grad_lik], extra_inputs=[weights],
            extra_values=[check_weights],
        )
        self._n_observations = int(n_obs)
        # The per-observation terms must add up to the model's own log-likelihood.
        points = self.validation_points()
        total = self._weighted_fn(points, np.ones(n_obs))[1].sum(axis=1)
        if not np.allclose(total, self.parts(points).log_likelihood, rtol=1e-8, atol=1e-8,
                           equal_nan=True):
            self._weighted_fn = None
            raise ValueError(
                "The per-observation log-likelihood terms do not add up to the model's "
                "log-likelihood, so the observations cannot be weighted one by one."
            )

    @property
    def n_observations(self) -> int:
        """Length of the leading data dimension shared by all observed variables.

        Compiles the observation-weighted density on first use.

        Raises
        ------
        ValueError
            If the observed variables do not share a leading data dimension.
        """
        if self._weighted_fn is None:
            self._build_weighted()
        return self._n_observations

    def weighted_parts(self, x: np.ndarray, observation_weights: np.ndarray) -> ObservationParts:
        """Densities of ``p(x) prod_i p(y_i | x)^(m_i)``, batched over chains.

        Parameters
        ----------
        x : ndarray, shape (chains, n_dim)
        observation_weights : ndarray, shape (n_observations,)
            The weights ``m_i`` (``1`` includes observation ``i``, ``0`` leaves it out), shared
            by all chains. Changing them never recompiles anything.

        Returns
        -------
        ObservationParts
        """
        if self._weighted_fn is None:
            self._build_weighted()
        weights = np.ascontiguousarray(observation_weights, dtype=float)
        if weights.shape != (self._n_observations,):
            raise ValueError(f"Observation weights have shape {weights.shape}, expected "
                             f"({self._n_observations},).")
        self.n_evaluations += 1
        prior, per_obs, grad_prior, grad_lik = self._weighted_fn(
            np.ascontiguousarray(x, dtype=float), weights
        )
        per_obs = np.where(np.isnan(per_obs), -np.inf, per_obs)
        prior = np.where(np.isnan(prior), -np.inf, prior)
        # Weighted sum with 0 * -inf = 0: a left-out observation never vetoes a state.
        with np.errstate(invalid="ignore"):
            lik = np.where(weights > 0, per_obs * weights, 0.0).sum(axis=1)
        return ObservationParts(prior, lik, grad_prior, grad_lik, per_obs)

    def constrain(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Constrained free variables and Deterministics for a batch of flat vectors."""
        if self._constrain_fn is None:
            outs = list(get_default_varnames(self.model.unobserved_value_vars,
                                             include_transformed=False))
            new_outs, x_in = join_value_inputs(self._initial_point, outs, self.value_vars)
            graph = self._replace_data(new_outs)
            fn = compile_per_row(
                self._compile, x_in, graph, on_unused_input="ignore",
                batched=lambda: self.batched_function(x_in, graph, mode=ONE_SHOT_MODE,
                                                      on_unused_input="ignore")[0])
            self._constrain_fn = ([o.name for o in outs], fn)
        names, fn = self._constrain_fn
        values = fn(np.ascontiguousarray(np.atleast_2d(x), dtype=float))
        return dict(zip(names, values, strict=True))

    # -- data --------------------------------------------------------------------------------
    def observed_data(self) -> dict[str, np.ndarray]:
        """The data the compiled densities currently condition on (copies)."""
        return {name: np.array(s.get_value()) for name, s in self._data_shared.items()}

    def set_observed(self, data: Mapping[str, np.ndarray]) -> None:
        """Condition the compiled densities on new observed values (no recompilation).

        Every value is checked before any is set, so a refused call changes nothing.

        Raises
        ------
        BDMCInputError
            For an unknown name, an observed variable whose data are a symbolic expression, a
            shape other than the model's, non-finite values, or fractional values given to
            integer data.
        """
        converted = {}
        for name, value in data.items():
            if name not in self._data_shared:
                if name in self.observed_names:
                    raise BDMCInputError(
                        f"Observed variable {name!r} has symbolic data (an expression, not an "
                        "array or pm.Data), which cannot be replaced. Pass its observations as "
                        "an array or a pm.Data container."
                    )
                raise BDMCInputError(
                    f"{name!r} is not an observed variable of the model; observed variables: "
                    f"{self.observed_names}."
                )
            old = self._data_shared[name].get_value()
            raw = np.asarray(value)
            if raw.shape != old.shape:
                raise BDMCInputError(
                    f"New data for {name!r} have shape {raw.shape}, but the model's data have "
                    f"shape {old.shape}. The compiled densities keep the model's shapes: pass "
                    "data of the same shape (rebuild the model to change it)."
                )
            if np.issubdtype(raw.dtype, np.number) and not np.all(np.isfinite(raw)):
                raise BDMCInputError(
                    f"New data for {name!r} contain non-finite values (NaN or inf); the "
                    "evidence of such data is not defined. Remove or fix them."
                )
            converted[name] = raw.astype(old.dtype)
            if np.issubdtype(old.dtype, np.integer) and not np.array_equal(converted[name], raw):
                raise BDMCInputError(
                    f"New data for {name!r} are not integers, but the model's data have "
                    f"dtype {old.dtype}; converting would change them."
                )
        for name, value in converted.items():
            self._data_shared[name].set_value(value.copy())
