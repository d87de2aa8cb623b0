"""Exact draws from the prior and from the joint distribution of a PyMC model.

AIS starts from exact prior draws (so that the initial normalising constant is 1), and BDMC's
upper bound needs one exact joint draw ``(theta*, y*)``: ``theta*`` is then an exact sample from
the posterior given ``y*``. Both come from one compiled forward-sampling function, whose random
generators are reseeded from the caller's NumPy generator on every use (so results depend only on
``random_seed``, never on global state).

A ``Beta``, ``Gamma`` or ``InverseGamma`` variable under its default transform (log-odds, log)
is drawn in that space (:func:`unconstrained_draws`): PyMC's draws of ``Beta(a, b)`` or
``Gamma(a, b)`` with a small ``a`` round to exactly 0 (an ``InverseGamma``'s to infinity),
whose transform is infinite, where the exact value is a finite number (below -744). BDA's
hierarchical binomial ("rats", ``Beta(mu * kappa, (1 - mu) * kappa)``) and BUGS-style vague
precisions (``Gamma(0.001, 0.001)``) were refused for that. The draws are exact either way;
only which exact draws a seed gives changes. Shapes that are constants of at least
:data:`SMALL_SHAPE` keep PyMC's own draws, which are cheaper (4.5 against 14.7 ms for 256
draws of a Gamma-Poisson model's rate) and round to 0 with a probability below 1e-15.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.distributions.transforms import LogOddsTransform, LogTransform
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import reseed_rngs
from pytensor.graph.basic import Constant
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import graph_inputs, io_toposort
from pytensor.scan.op import Scan
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.basic import BetaRV, CategoricalRV, GammaRV, InvGammaRV, MultinomialRV

from pymc_bdmc.errors import BDMCInputError, SimulatedDataOverflow
from pymc_bdmc.model.checks import DIAGNOSED_POINTS, never_finite_message, never_finite_terms
from pymc_bdmc.model.density import ONE_SHOT_MODE, FlatLayout, observed_data_value

__all__ = ["PYTHON_LOOPS", "SMALL_SHAPE", "JointDraw", "ModelSimulator", "beta_log_odds",
           "hot_from", "log_gamma_draws", "unconstrained_draws"]

#: Operations whose fast-compiling implementation loops in Python, and from how many observed
#: values a joint sampler holding one compiles in the default (Numba) backend instead. There a
#: categorical draw (a mixture's components, an ordinal outcome) costs about 3 us per element,
#: a ``Scan`` step (``pm.AR``'s simulation) about 50 us, for each of the 101 data sets BDMC's
#: guard draws; Numba's compilation costs about a second once its cache holds the operations.
#: Both backends draw the same values from the same seed.
PYTHON_LOOPS = {CategoricalRV: 10_000, MultinomialRV: 10_000, Scan: 200}


def hot_from(outputs) -> float:
    """Return the fewest observed values from which drawing ``outputs`` compiles in Numba.

    The smallest :data:`PYTHON_LOOPS` threshold of an operation in the graph (inner graphs of
    PyMC's symbolic variables, such as a mixture's, included); infinite where there is none.
    """
    fewest = np.inf
    for node in io_toposort([], list(outputs)):
        for op_type, threshold in PYTHON_LOOPS.items():
            if isinstance(node.op, op_type):
                fewest = min(fewest, threshold)
        inner = getattr(node.op, "inner_outputs", None)
        if inner is not None:
            fewest = min(fewest, hot_from(inner))
    return fewest


#: Shape parameters below this (or not constant) are drawn in the transform's space: a Gamma
#: draw of shape 0.05 is below 1e-308 with probability about 1e-15.
SMALL_SHAPE = 0.05


def _may_be_small(*shapes) -> bool:
    for shape in shapes:
        if not all(isinstance(v, Constant) for v in graph_inputs([shape])):
            return True
        if np.min(_constant_value(shape)) < SMALL_SHAPE:
            return True
    return False


def _constant_value(variable) -> np.ndarray:
    # Folding a scalar through PyMC's casts and dimshuffles costs microseconds; eval() compiles
    # a function (about 6 ms), left for constant arrays built by operations.
    if isinstance(variable, Constant):
        return np.asarray(variable.data)
    try:
        return np.asarray(pt.get_underlying_scalar_constant_value(variable))
    except NotScalarConstantError:
        return np.asarray(variable.eval())


def log_gamma_draws(shape, size):
    """Exact draws of ``log G``, ``G ~ Gamma(shape, 1)``, finite for any ``shape > 0``.

    ``G = G' U^(1 / shape)`` with ``G' ~ Gamma(shape + 1, 1)`` and ``U ~ Uniform(0, 1)``
    independent (Marsaglia & Tsang 2000, section 4), so ``log G = log G' + log U / shape``:
    for a small ``shape``, ``G`` itself underflows to 0, its logarithm does not.
    """
    # Each on its own generator: PyMC's compile advances them on every call, and the
    # simulator reseeds them with the model's.
    _, gamma = pt.random.gamma(shape + 1.0, scale=1.0, size=size, return_next_rng=True,
                               rng=pytensor.shared(np.random.default_rng()))
    _, uniform = pt.random.uniform(size=size, return_next_rng=True,
                                   rng=pytensor.shared(np.random.default_rng()))
    return pt.log(gamma) + pt.log(uniform) / shape


def beta_log_odds(rv):
    """Exact draws of ``log(x / (1 - x))`` for the ``Beta`` variable ``rv``.

    ``x = G_a / (G_a + G_b)`` for independent ``G_a ~ Gamma(a, 1)``, ``G_b ~ Gamma(b, 1)``, so
    its log-odds are ``log G_a - log G_b``.
    """
    a, b = rv.owner.op.dist_params(rv.owner)
    return log_gamma_draws(a, rv.shape) - log_gamma_draws(b, rv.shape)


def unconstrained_draws(rv, transform):
    """``(z, x)``: exact draws of ``rv`` in its transform's space, and ``rv`` from them.

    For a ``Beta`` under log-odds, and a ``Gamma`` (``x = scale G``) or ``InverseGamma`` (``x =
    b / G``) under log, whose shapes may be small (:data:`SMALL_SHAPE`); None otherwise.
    """
    op = rv.owner.op
    if (isinstance(op, BetaRV) and isinstance(transform, LogOddsTransform)
            and _may_be_small(*op.dist_params(rv.owner))):
        z = beta_log_odds(rv)
        return z, pt.sigmoid(z)
    if (isinstance(op, GammaRV | InvGammaRV) and isinstance(transform, LogTransform)
            and _may_be_small(op.dist_params(rv.owner)[0])):
        shape, scale = op.dist_params(rv.owner)
        log_g = log_gamma_draws(shape, rv.shape)
        z = log_g + pt.log(scale) if isinstance(op, GammaRV) else pt.log(scale) - log_g
        return z, pt.exp(z)
    return None


@dataclass(frozen=True)
class JointDraw:
    """One exact draw from the joint distribution ``p(theta, y)``.

    Attributes
    ----------
    x : ndarray, shape (n_dim,)
        ``theta`` in the flat unconstrained space.
    free : dict
        ``theta`` as named constrained values of the free variables.
    observed : dict
        The simulated data ``y``, one array per observed variable.
    """

    x: np.ndarray
    free: dict[str, np.ndarray]
    observed: dict[str, np.ndarray]


class ModelSimulator:
    """Compiled exact sampler for the prior and the joint distribution of a model.

    Parameters
    ----------
    model : pm.Model
    layout : FlatLayout
        Layout of the flat unconstrained vector (from :class:`ModelDensity`).
    compile_kwargs : dict, optional
    """

    def __init__(self, model: pm.Model, layout: FlatLayout, compile_kwargs: dict | None = None):
        self.model = model
        self.layout = layout
        free, observed = list(model.free_RVs), list(model.observed_RVs)
        # Transform the very RV nodes that the observations depend on, so that one call gives a
        # consistent (theta*, y*). (make_initial_point_expression would draw separate copies.)
        transformed, drawn = [], {}
        for rv in free:
            transform = model.rvs_to_transforms.get(rv)
            pair = unconstrained_draws(rv, transform)
            if pair is not None:
                drawn[rv] = pair
                transformed.append(pair[0])
                continue
            transformed.append(rv if transform is None else transform.forward(rv, *rv.owner.inputs))
        self._value_names = [model.rvs_to_values[rv].name for rv in free]
        self._free_names = [rv.name for rv in free]
        self._observed_names = [rv.name for rv in observed]
        self._n_free = len(free)
        self._compile_kwargs = compile_kwargs
        data = [observed_data_value(model.rvs_to_values[rv]) for rv in observed]
        self._n_observed = sum(np.size(d) for d in data if d is not None)
        # Prior draws need only the free variables: a likelihood without a random method
        # (e.g. a CustomDist given only a logp) does not stop AIS on real data. The joint
        # sampler, for BDMC, is compiled on first use.
        joint = [*transformed, *free, *observed]
        if drawn:  # everything downstream of such a variable uses the same draw ...
            joint = graph_replace(joint, {rv: x for rv, (_, x) in drawn.items()}, strict=False)
            # ... the very same node: a copy would draw with the same generator again.
            joint[:len(free)] = [drawn[rv][0] if rv in drawn else out
                                 for rv, out in zip(free, joint, strict=False)]
        self._prior_fn, self._prior_rngs = self._compile(joint[:len(free)])
        self._joint = joint
        self._joint_fn = None

    def _compile(self, outputs, hot: bool = False):
        # Called a few hundred times at most: unless it draws much data (``hot``), a
        # fast-compiling backend costs less overall than a cold Numba compilation of the graph.
        kwargs = dict(self._compile_kwargs or {})
        if not hot:
            kwargs["mode"] = ONE_SHOT_MODE
        with self.model:
            fn = compile_pytensor([], outputs, random_seed=0, **kwargs)
        rngs = [v for v in fn.get_shared()
                if isinstance(v.get_value(borrow=True), np.random.Generator)]
        return fn, rngs

    @staticmethod
    def _reseed(rngs, rng: np.random.Generator) -> None:
        reseed_rngs(rngs, int(rng.integers(2**63)))

    def draw_prior(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent exact prior draws as flat unconstrained vectors, shape (n, n_dim)."""
        self._reseed(self._prior_rngs, rng)
        names = self._value_names
        try:
            draws = [self._prior_fn() for _ in range(n)]
        except NotImplementedError:  # no random method: the caller explains
            raise
        except Exception as err:  # e.g. NumPy's "scale < 0" for invalid prior parameters
            raise BDMCInputError(self._prior_failure(err)) from err
        return np.stack([self.layout.ravel(dict(zip(names, d, strict=True))) for d in draws])

    def draw_joint(self, rng: np.random.Generator) -> JointDraw:
        """One exact joint draw ``(theta*, y*)`` from the prior predictive."""
        if self._joint_fn is None:
            self._joint_fn = self._compile(self._joint,
                                           hot=self._n_observed >= hot_from(self._joint))
        fn, rngs = self._joint_fn
        self._reseed(rngs, rng)
        try:
            values = fn()
        except NotImplementedError:
            raise
        except Exception as err:
            raise BDMCInputError(self._simulation_failure(err)) from err
        n = self._n_free
        x = self.layout.ravel(dict(zip(self._value_names, values[:n], strict=True)))
        free = dict(zip(self._free_names, values[n:2 * n], strict=True))
        observed = dict(zip(self._observed_names, values[2 * n:], strict=True))
        overflowed = [k for k, v in observed.items()
                      if np.issubdtype(np.asarray(v).dtype, np.floating)
                      and not np.all(np.isfinite(v))]
        if overflowed:
            raise SimulatedDataOverflow(
                f"The data {overflowed} simulated from the model are not finite: the prior drew "
                "parameters at which the data overflow floating point (e.g. a scale "
                "1 / sqrt(tau) with tau ~ Gamma(0.001, 0.001), whose draws reach 1e-300). BDMC "
                "needs finite simulated data: choose a prior that keeps such parameters in "
                "range, or another `random_seed`. `sample_ais` on the real data simulates "
                "nothing.")
        return JointDraw(x=x, free={k: np.array(v) for k, v in free.items()},
                         observed={k: np.array(v) for k, v in observed.items()})

    # -- explaining failed draws (only ever on the failure path) ---------------------------
    def _prior_failure(self, err: Exception) -> str:
        failing = []
        for rv in self.model.free_RVs:
            with self.model:
                draw = compile_pytensor([], rv, random_seed=0, mode=ONE_SHOT_MODE)
            try:
                draw()
            except Exception:
                failing.append(rv.name)
        return (
            f"Drawing from the prior failed ({type(err).__name__}: {err})"
            + (f" at the variables {failing}" if failing else "")
            + ". AIS starts from exact prior draws: check that every prior's parameters are "
            "valid (e.g. positive scales) for all values of the variables they depend on."
        )

    def _simulation_failure(self, err: Exception) -> str:
        reason = f"{type(err).__name__}: {err}"
        try:
            x = self.draw_prior(DIAGNOSED_POINTS, np.random.default_rng(0))
        except BDMCInputError as prior_err:
            return str(prior_err)
        dead = never_finite_terms(self.model, [self.layout.unravel(row) for row in x])
        if dead:
            return (never_finite_message(dead, len(x), "prior draws")
                    + f" Simulating data from the model failed with {reason}.")
        return (
            f"Simulating data from the model failed ({reason}). Bidirectional Monte Carlo "
            "simulates (theta*, y*) from the prior predictive: check that every observed "
            "variable's parameters are valid wherever the prior puts mass."
        )
