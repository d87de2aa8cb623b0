"""PyMC step methods as AIS transition operators.

A user's step methods (or PyMC's automatic assignment) are turned into frozen Markov kernels on
the tempered density ``log p(x) + beta log p(y | x)``:

1. **Specification.** Each step method the user passed (compound steps are flattened into their
   leaves) is recorded as a :class:`StepSpec`: its class, the *names* of its value variables and
   the constructor arguments PyMC kept for it. Variables without a step method get PyMC's
   automatic assignment (:func:`pymc.sampling.mcmc.assign_step_methods`). Everything is checked
   here, before any sampling.
2. **Retargeting.** Each spec is rebuilt on a :class:`~pymc_bdmc.model.tempered.TemperedClone`
   of the model, whose ``beta`` is a shared variable: one compilation serves every temperature,
   and the user's model and step objects are never used for sampling (nor modified).
3. **Freezing.** Tuning happens in a pilot run only (:mod:`pymc_bdmc.kernels.pymc_step_pilot`),
   which stores each step's ``sampling_state`` at a few anchor temperatures with tuning switched
   off (``stop_tuning``: frozen NUTS step size and mass matrix, Metropolis scaling, slice
   widths). A measured transition loads the state of its anchor and then reseeds the step's
   random generators from the chain's own stream: the kernel at each temperature is a fixed
   function of the plan, never of the chain's history.
4. **Reversal.** A sweep applies the leaves in order. Its reverse operator (Murray &
   Salakhutdinov 2009, §2.3), used by reverse AIS, applies the *reverse* operators of the leaves
   in *reverse* order. Leaves that are reversible with respect to their target are their own
   reverse (Metropolis-Hastings, HMC and NUTS with frozen parameters, Gibbs-type updates in a
   freshly shuffled random order: the mixture over orders is symmetric under reversal). Leaves
   that sweep sites in a fixed order are reversed by reversing that order: Binary/Categorical
   Gibbs with ``order=[...]`` and multi-coordinate ``Slice``, whose coordinates are visited
   ``0..n-1`` (its reverse visits them ``n-1..0``).

Refused: ``DEMetropolisZ`` (its proposals use the chain's own history, so it is not a fixed
kernel), ``DEMetropolis`` (it needs a population of coupled chains), step methods given a
``logp_dlogp_func`` (it would target the untempered density), and
``CategoricalGibbsMetropolis(proposal="proportional")``, whose PyMC implementation fails with
"Probabilities do not sum to 1" on the extreme conditionals common near ``beta = 1``.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods.arraystep import PopulationArrayStepShared
from pymc.step_methods.compound import BlockedStep, CompoundStep, flatten_steps
from pymc.step_methods.hmc.base_hmc import BaseHMC
from pymc.step_methods.metropolis import (
    BinaryGibbsMetropolis,
    BinaryMetropolis,
    CategoricalGibbsMetropolis,
    DEMetropolisZ,
    Metropolis,
)
from pymc.step_methods.slicer import Slice
from pymc.vartypes import discrete_types

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.density import DensityParts, FlatLayout
from pymc_bdmc.model.tempered import TemperedClone

__all__ = [
    "StepInfo",
    "StepPlan",
    "StepSpec",
    "StepSweep",
    "StepTransition",
    "has_discrete_free_variables",
    "resolve_step_methods",
]

logger = logging.getLogger(__name__)

Reversal = Literal["reversible", "reverse_order", "reverse_coordinates", "assumed_reversible"]

#: How each kind of reverse operator is described in logs and results.
REVERSAL_DESCRIPTION = {
    "reversible": "reversible (its own reverse)",
    "reverse_order": "fixed site order, reversed in reverse runs",
    "reverse_coordinates": "coordinates visited in reverse order in reverse runs",
    "assumed_reversible": "unknown step type, assumed reversible",
}

# Constructor arguments PyMC records that we set ourselves on the clone.
_REBUILT_KWARGS = ("model", "rng", "initial_point", "vars")


@dataclass(frozen=True)
class StepSpec:
    """How to rebuild one (non-compound) PyMC step method on a tempered clone.

    Attributes
    ----------
    cls : type
        The step method's class (user subclasses included).
    var_names : tuple of str
        Names of the value variables it updates (mapped by name onto the clone).
    args : tuple
        Positional constructor arguments after ``vars``.
    kwargs : dict
        Keyword constructor arguments, without ``model``, ``rng``, ``initial_point``.
    source : {"user", "automatic"}
        Whether the user passed it or PyMC's automatic assignment chose it.
    """

    cls: type
    var_names: tuple[str, ...]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    source: Literal["user", "automatic"] = "user"

    @property
    def name(self) -> str:
        """The class name, e.g. ``"NUTS"``."""
        return self.cls.__name__

    def label(self) -> str:
        """``"NUTS[mu, sigma_log__]"``."""
        return f"{self.name}[{', '.join(self.var_names)}]"

    def build(self, clone: TemperedClone, compile_kwargs: dict | None = None,
              initial_point: dict | None = None) -> BlockedStep:
        """Instantiate the step method on the tempered clone."""
        by_name = {v.name: v for v in clone.model.value_vars}
        variables = [by_name[name] for name in self.var_names]
        try:
            kwargs = copy.deepcopy(self.kwargs)
        except Exception:  # noqa: BLE001 - un-copyable user objects are passed as they are
            kwargs = dict(self.kwargs)
        if compile_kwargs and "compile_kwargs" not in kwargs:
            kwargs["compile_kwargs"] = dict(compile_kwargs)
        if initial_point is not None and _accepts(self.cls, "initial_point"):
            kwargs["initial_point"] = initial_point  # saves one compilation per step
        step = self.cls(variables, *self.args, model=clone.model, **kwargs)
        if isinstance(step, CompoundStep):  # a blocked=False step over one variable stays one
            raise BDMCInputError(f"Rebuilding {self.label()} gave a compound step.")
        return step


def _accepts(cls: type, name: str) -> bool:
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def has_discrete_free_variables(model: pm.Model) -> bool:
    """Whether any free variable of ``model`` is discrete."""
    return any(v.dtype in discrete_types for v in model.value_vars)


def _leaves(step) -> list:
    if isinstance(step, CompoundStep | BlockedStep):
        return flatten_steps(step)
    if isinstance(step, type) and issubclass(step, BlockedStep | CompoundStep):
        raise BDMCInputError(
            f"`step` got the class {step.__name__}, not an instance. Create it inside the model "
            f"context, e.g. `{step.__name__}([var])`."
        )
    raise BDMCInputError(f"`step` must be PyMC step method instances, got {step!r}.")


def _check_leaf(leaf: BlockedStep, model: pm.Model) -> tuple[tuple, dict]:
    name = type(leaf).__name__
    unknown = [v for v in leaf.vars if not any(v is w for w in model.value_vars)]
    if unknown:
        raise BDMCInputError(
            f"Step method {name} updates {[getattr(v, 'name', v) for v in unknown]}, which are "
            f"not value variables of this model (value variables: "
            f"{[v.name for v in model.value_vars]}). Create the step method inside the model's "
            "context, or with `model=`."
        )
    if isinstance(leaf, DEMetropolisZ):
        raise BDMCInputError(
            "DEMetropolisZ proposes jumps from the chain's own history, so it is not a fixed "
            "Markov kernel: AIS weights and the reverse (upper-bound) chain would be invalid. "
            "Use Metropolis, Slice or NUTS."
        )
    if isinstance(leaf, PopulationArrayStepShared):
        raise BDMCInputError(
            f"{name} couples a population of chains; AIS chains must be independent. Use "
            "Metropolis, Slice or NUTS."
        )
    newargs = getattr(leaf, "_BlockedStep__newargs", None)
    if newargs is None:
        raise BDMCInputError(
            f"Step method {name} did not record its constructor arguments (PyMC does this in "
            "BlockedStep.__new__), so it cannot be rebuilt on the tempered model."
        )
    args, kwargs = newargs
    kwargs = {k: v for k, v in kwargs.items() if k not in _REBUILT_KWARGS}
    if kwargs.get("logp_dlogp_func") is not None:
        raise BDMCInputError(
            f"Step method {name} was given `logp_dlogp_func`, which fixes its target density; "
            "pymc_bdmc must retarget it to the tempered density. Drop that argument."
        )
    if isinstance(leaf, CategoricalGibbsMetropolis) and kwargs.get("proposal") == "proportional":
        raise BDMCInputError(
            "CategoricalGibbsMetropolis(proposal='proportional') fails in PyMC with "
            "'Probabilities do not sum to 1' when a conditional is nearly deterministic, which "
            "is common near the posterior. Use proposal='uniform' (the default)."
        )
    return tuple(args[1:]), kwargs


def resolve_step_methods(model: pm.Model, step=None) -> list[StepSpec] | None:
    """Check the user's step methods and complete them with PyMC's automatic assignment.

    Parameters
    ----------
    model : pm.Model
    step : step method, or sequence of them, optional
        As for :func:`pymc.sample`: instances of PyMC step methods (compound steps and user
        subclasses included), each over some of the model's value variables.

    Returns
    -------
    list of StepSpec or None
        The sweep, in order: the user's steps (compound steps flattened), then automatically
        assigned ones. ``None`` when ``step`` is None and every free variable is continuous:
        the vectorized HMC kernel is then used.

    Raises
    ------
    BDMCInputError
        For step methods over variables that are not in the model, variables given two step
        methods, and step methods that cannot be valid AIS kernels (see the module docstring).
    """
    if step is None and not has_discrete_free_variables(model):
        return None
    provided = [] if step is None else (
        list(step) if isinstance(step, Sequence) and not isinstance(step, str) else [step]
    )
    leaves = [leaf for s in provided for leaf in _leaves(s)]
    specs, seen = [], {}
    for leaf in leaves:
        args, kwargs = _check_leaf(leaf, model)
        for v in leaf.vars:
            if v.name in seen:
                raise BDMCInputError(
                    f"Variable {v.name!r} is updated by two step methods ({seen[v.name]} and "
                    f"{type(leaf).__name__}). Give each variable one step method."
                )
            seen[v.name] = type(leaf).__name__
        specs.append(StepSpec(type(leaf), tuple(v.name for v in leaf.vars), args, kwargs,
                              "user"))
    _, selected = assign_step_methods(model, leaves or None)
    for cls, variables in selected.items():
        if variables:
            specs.append(StepSpec(cls, tuple(v.name for v in variables), (), {}, "automatic"))
    if not specs:
        raise BDMCInputError("The model has no free variables to sample.")
    return specs


def reversal_of(step: BlockedStep, n_coords: int) -> Reversal:
    """How the reverse operator of ``step`` (over ``n_coords`` coordinates) is formed."""
    if isinstance(step, BinaryGibbsMetropolis | CategoricalGibbsMetropolis):
        return "reversible" if step.shuffle_dims else "reverse_order"
    if isinstance(step, Slice):
        return "reverse_coordinates" if n_coords > 1 else "reversible"
    if isinstance(step, BaseHMC | Metropolis | BinaryMetropolis):
        return "reversible"
    return "assumed_reversible"


def is_tunable(step: BlockedStep) -> bool:
    """Whether the pilot may tune ``step`` (known PyMC classes whose tuning state it stores)."""
    return isinstance(step, BaseHMC | Metropolis | BinaryMetropolis | Slice) and bool(
        getattr(step, "tune", False)
    )


@contextmanager
def _reversed(step: BlockedStep, kind: Reversal):
    """Temporarily turn ``step`` into its reverse operator."""
    if kind == "reverse_order":
        attr = "order" if isinstance(step, BinaryGibbsMetropolis) else "dimcats"
        forward = getattr(step, attr)
        setattr(step, attr, list(reversed(forward)))
        try:
            yield
        finally:
            setattr(step, attr, forward)
        return
    if kind == "reverse_coordinates":
        forward_logp, forward_w = step.logp, step.w
        forward_astep = type(step).astep.__get__(step)

        def reversed_logp(q):
            return forward_logp(np.ascontiguousarray(q[::-1]))

        def reversed_astep(apoint):
            flipped = RaveledVars(np.ascontiguousarray(apoint.data[::-1]), apoint.point_map_info)
            new, stats = forward_astep(flipped)
            return RaveledVars(np.ascontiguousarray(new.data[::-1]), apoint.point_map_info), stats

        step.logp = reversed_logp
        step.w = np.ascontiguousarray(np.resize(forward_w, step._bdmc_n_coords)[::-1])
        step.astep = reversed_astep
        try:
            yield
        finally:
            del step.astep
            step.logp, step.w = forward_logp, forward_w
        return
    yield


@dataclass(frozen=True, slots=True)
class StepInfo:
    """Per-chain diagnostics of one sweep (the :class:`~pymc_bdmc.kernels.base.KernelInfo`).

    ``acceptance_rate`` averages the acceptance statistics the steps report (NUTS'
    ``mean_tree_accept``, HMC's and Metropolis' ``accept``, capped at 1); NaN when no step
    reports one (Gibbs-type and slice steps).
    """

    acceptance_rate: np.ndarray
    divergent: np.ndarray


def _summarize_stats(stats: list[dict]) -> tuple[float, bool]:
    accept, divergent = [], False
    for s in stats:
        for key in ("mean_tree_accept", "accept"):
            if key in s and s[key] is not None and np.isfinite(s[key]):
                accept.append(min(float(s[key]), 1.0))
                break
        divergent |= bool(s.get("diverging", False))
    return (float(np.mean(accept)) if accept else np.nan), divergent


class StepSweep:
    """The leaves of a sweep, built on a tempered clone, applied forward or in reverse.

    Parameters
    ----------
    specs : list of StepSpec
    clone : TemperedClone
    compile_kwargs : dict, optional
    """

    def __init__(self, specs: Sequence[StepSpec], clone: TemperedClone,
                 compile_kwargs: dict | None = None):
        self.specs = list(specs)
        self.clone = clone
        self.leaves: list[BlockedStep] = []
        initial_point = clone.model.initial_point()
        for spec in self.specs:
            leaf = spec.build(clone, compile_kwargs, initial_point)
            layout = clone.layout
            leaf._bdmc_n_coords = sum(
                layout.slices[layout.names.index(v.name)].stop
                - layout.slices[layout.names.index(v.name)].start for v in leaf.vars
            )
            if isinstance(leaf, BaseHMC):
                # PyMC marks only the wrapper as trusted; every leapfrog step would re-validate
                # its float64 input vector otherwise (~15% of a NUTS step on small models).
                leaf._logp_dlogp_func._pytensor_function.trust_input = True
            if not is_tunable(leaf):
                # Unknown step types keep their constructed settings: the pilot cannot store
                # their tuning, so every process must use them untuned.
                leaf.stop_tuning()
            self.leaves.append(leaf)
        self.reversals: list[Reversal] = [
            reversal_of(leaf, leaf._bdmc_n_coords) for leaf in self.leaves
        ]

    def snapshot(self) -> list:
        """Each leaf's ``sampling_state`` with tuning switched off (a frozen kernel)."""
        states = []
        for leaf in self.leaves:
            tuning = bool(getattr(leaf, "tune", False))
            leaf.stop_tuning()
            states.append(leaf.sampling_state)
            if tuning:
                leaf.tune = True
        return states

    def load(self, states: Sequence, rng: np.random.Generator) -> None:
        """Load frozen states and give every leaf a fresh generator spawned from ``rng``."""
        for leaf, state, leaf_rng in zip(self.leaves, states, rng.spawn(len(self.leaves)),
                                         strict=True):
            leaf.sampling_state = state
            leaf.stop_tuning()
            leaf.setup_chain(leaf_rng, 0, 1)

    def sweep(self, point: dict, direction: Literal["forward", "reverse"] = "forward"):
        """One sweep at the clone's current ``beta``: ``(new point, acceptance, divergent)``."""
        stats: list[dict] = []
        if direction == "forward":
            for leaf in self.leaves:
                point, leaf_stats = leaf.step(point)
                stats.extend(leaf_stats)
        else:
            for leaf, kind in zip(reversed(self.leaves), reversed(self.reversals), strict=True):
                with _reversed(leaf, kind):
                    point, leaf_stats = leaf.step(point)
                stats.extend(leaf_stats)
        return point, *_summarize_stats(stats)

    def describe(self) -> list[dict]:
        """One record per leaf, in forward-sweep order, for logs and results."""
        return [
            {"method": spec.name, "variables": list(spec.var_names), "assigned_by": spec.source,
             "reversal": kind}
            for spec, kind in zip(self.specs, self.reversals, strict=True)
        ]


@dataclass(frozen=True)
class StepPlan:
    """Frozen schedule and step-method kernels: everything the measured runs do.

    Attributes
    ----------
    betas : ndarray, shape (n_steps + 1,)
        Inverse temperatures.
    anchor_betas : ndarray, shape (n_anchors,)
        Temperatures at which the pilot tuned the steps, from 0 to 1.
    anchor_states : list
        For each anchor, the ``sampling_state`` of every leaf, tuning off.
    anchor_index : ndarray of int, shape (n_steps + 1,)
        The anchor whose kernel is used at each temperature: the last anchor at or below it.
    step_size, inv_mass : ndarray
        Frozen HMC/NUTS step size, shape (n_steps + 1,), and diagonal inverse mass, shape
        (n_steps + 1, n_dim), of the first gradient step in the sweep (NaN where none).
    """

    betas: np.ndarray
    anchor_betas: np.ndarray
    anchor_states: list
    anchor_index: np.ndarray
    step_size: np.ndarray
    inv_mass: np.ndarray
    attrs: dict = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        """Number of annealing steps."""
        return len(self.betas) - 1


def anchor_index_for(betas: np.ndarray, anchor_betas: np.ndarray) -> np.ndarray:
    """For each ``beta``, the index of the last anchor at or below it."""
    idx = np.searchsorted(anchor_betas, betas, side="right") - 1
    return np.clip(idx, 0, len(anchor_betas) - 1)


def hmc_parameters(sweep: StepSweep, layout: FlatLayout) -> tuple[float, np.ndarray]:
    """Current step size and diagonal inverse mass (flat layout) of the first HMC/NUTS leaf."""
    inv_mass = np.full(layout.size, np.nan)
    for leaf in sweep.leaves:
        if not isinstance(leaf, BaseHMC):
            continue
        eps = float(leaf.step_adapt.current(False))
        var = getattr(leaf.potential, "_var", None)
        if var is not None:
            start = 0
            for v in leaf.vars:
                slc = layout.slices[layout.names.index(v.name)]
                size = slc.stop - slc.start
                inv_mass[slc] = np.asarray(var)[start:start + size]
                start += size
        return eps, inv_mass
    return np.nan, inv_mass


class StepTransition:
    """One chain's frozen kernels as a :class:`~pymc_bdmc.kernels.base.Transition`.

    ``transition(rng, x, parts, t)`` runs one sweep of the step methods at ``betas[t]`` on the
    single chain ``x`` (shape (1, n_dim)); ``direction="reverse"`` applies the reverse operator
    (leaves in reverse order, each reversed). The anchor's frozen state is loaded whenever the
    anchor changes, with generators spawned from ``rng`` (the chain's own stream).
    """

    def __init__(self, sweep: StepSweep, plan: StepPlan, layout: FlatLayout,
                 direction: Literal["forward", "reverse"]):
        self.sweep = sweep
        self.plan = plan
        self.layout = layout
        self.direction = direction
        self._anchor: int | None = None

    def __call__(self, rng, x, parts, t):
        if not (np.isfinite(parts.log_likelihood[0]) and np.isfinite(parts.log_prior[0])):
            # Impossible data here (a Binomial's N below a count): the chain's weight is zero
            # from its first step on, and PyMC's steps refuse to start from such a state.
            return x, parts, StepInfo(np.array([np.nan]), np.array([False]))
        anchor = int(self.plan.anchor_index[t])
        if anchor != self._anchor:
            self.sweep.load(self.plan.anchor_states[anchor], rng)
            self._anchor = anchor
        self.sweep.clone.set_beta(self.plan.betas[t])
        point = self.layout.to_point(x[0])
        point, accept, divergent = self.sweep.sweep(point, self.direction)
        x_new = self.layout.ravel(point)[None, :]
        return x_new, point_parts(self.sweep.clone, [point]), StepInfo(
            np.array([accept]), np.array([divergent])
        )


def point_parts(clone: TemperedClone, points: Sequence[dict]) -> DensityParts:
    """:class:`DensityParts` (zero gradients) of a few points, one compiled call each."""
    values = np.array([clone.log_prior_and_likelihood(p) for p in points], dtype=float)
    zeros = np.zeros((len(points), clone.layout.size))
    return DensityParts(values[:, 0], values[:, 1], zeros, zeros)
