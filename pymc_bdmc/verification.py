"""Check compiled densities and transition kernels the way the BDMC paper recommends.

Grosse, Ghahramani & Adams (2015, App. B) test an evidence estimator in layers: first the
densities, exactly, against the joint distribution; then the Markov kernels, statistically, with
Geweke's (2004) joint-distribution test; then the estimates, on models with a known answer
(:mod:`pymc_bdmc.testing`). This module provides the first two layers for any PyMC model and any
kernel, so users can check their own kernels before trusting bounds built on them.

Checks
------
:meth:`Verifier.check_density`
    The compiled log prior, log-likelihood, tempered density ``log p(x) + beta log p(y|x)`` and
    their gradients agree with PyMC's own (separately compiled) functions at random points, to
    round-off (default tolerance ``1e-9`` relative), and still do after simulated data are
    swapped in. This is deterministic: a failure is a bug, never bad luck.
:meth:`Verifier.geweke`
    The successive-conditional simulator of Geweke (2004) at ``beta = 1``: alternate the kernel
    (which should leave ``p(theta | y)`` invariant) with redrawing ``y ~ p(y | theta)``. Both
    steps leave the joint ``p(theta, y)`` invariant, so, started from exact joint draws, every
    iterate is an exact joint draw. Statistics of the iterates are compared with forward
    simulations. Redrawing the data amplifies a kernel's bias: a kernel that inflates the noise
    regenerates noisier data, which inflates it further.
:meth:`Verifier.invariance`
    At any ``beta`` where exact draws of ``f_beta = p(theta) p(y|theta)^beta / Z_beta`` exist
    (the prior at ``beta = 0``; conjugate models, see
    :meth:`pymc_bdmc.testing.AnalyticModel.sample_tempered`), start many independent chains
    from exact draws, apply the kernel, and compare the end points with fresh exact draws.
:meth:`Verifier.reversibility`
    From exact draws ``x ~ f_beta`` and one transition ``x' ~ T(x, .)``, a kernel in detailed
    balance makes ``(x, x')`` exchangeable, so ``E[a(x) b(x') - a(x') b(x)] = 0`` for any
    functions ``a, b``. The :class:`~pymc_bdmc.kernels.base.Transition` contract asks for this
    (a compound kernel ``A then B`` must be run as ``B then A`` in reverse).

What each property is needed for: every bound's validity needs only *invariance* of each kernel
(reverse AIS is AIS run from the posterior to the prior, and AIS needs nothing more); the
Geweke and invariance tests check it. *Reversibility* makes the reverse run the exact time
reversal of the forward run (paper eq. 27), which is what lets one frozen plan serve both
directions as a matched pair and underlies reading the gap as a divergence between the two runs
(§4.5). An unreversed compound kernel leaves both bounds valid, but breaks that pairing.

Why the Geweke test runs at ``beta = 1`` only
---------------------------------------------
At ``beta < 1`` the kernel leaves ``p(theta) p(y|theta)^beta`` invariant in ``theta``, but there
is in general *no* joint distribution of ``(theta, y)`` whose two conditionals are that tempered
posterior and ``p(y | theta)``: that would need ``p(y|theta)^(1 - beta)`` to factor into a
function of ``y`` times a function of ``theta``. The alternating chain would still converge, but
to an unknown distribution, so no forward simulation could serve as its reference. (Redrawing
``y`` from the normalised ``p(y|theta)^beta`` instead fixes the conditional, but the matching
marginal of ``theta``, ``p(theta) integral p(y|theta)^beta dy``, is then model-specific.)
Intermediate temperatures are therefore tested directly for invariance, from exact tempered
draws, where a model provides them. The kernels at every temperature run the same code with a
different ``beta``, so ``beta = 1`` (Geweke, any model) plus a conjugate model at a few
``beta < 1`` (exact starts) exercises every path.

Statistics and false alarms
---------------------------
Each test compares statistics of the kernel's draws with independent exact draws. The default
statistics are each unconstrained coordinate, the log prior and the log-likelihood, and for the
Geweke test the mean and mean square of each observed variable. They are compared as a P-P plot
is read (App. B): at fixed probability levels (by default the quartiles), the fraction of draws
below the level's exact quantile, fixed beforehand from a separate set of exact draws. Such
indicator statistics are bounded, so the normal approximation behind each test holds even for
heavy-tailed quantities (a Student-t marginal, whose square has no fourth moment, made raw
moment comparisons reject a correct kernel far too often). Each fraction gets a two-sided Welch
t-test; :meth:`~Verifier.invariance` adds a two-sample Kolmogorov-Smirnov test per statistic.
A test fails if any p-value is below ``alpha / m`` for ``m`` comparisons (Bonferroni), so its
false-alarm rate is at most ``alpha`` up to the normal approximations.

The iterates of one Geweke chain are autocorrelated. Rather than estimate an autocorrelation
time, the test runs many *independent* chains, each started from an exact joint draw, and uses
one number per chain and statistic: the chain's fraction over its iterations. These are
independent and identically distributed across chains, with exactly the forward-simulation
expectation if the kernel is right, so their spread across chains carries the autocorrelation
in full. The effective sample size reported is ``q (1 - q)`` (one draw's variance) over the
variance of a chain's fraction, times the number of chains.

Kernels
-------
A kernel is given as a *factory* ``kernel(parts_fn) -> transition``: given a batched density
function ``parts_fn(x) -> DensityParts``, it returns a ``Transition``
``transition(rng, x, parts, t) -> (x, parts, info)``. An :class:`AnnealingPlan` is one:
``plan.transition``. The tests call ``transition`` at the index ``t`` you give (whose target
must be the posterior for the Geweke test, and ``f_beta`` for the others). In the Geweke test
each chain has its own data set, and the ``parts_fn`` handed to the factory evaluates each row
of ``x`` under its chain's current data: kernels must call it on all chains at once, in order.
Kernels that cannot work through ``parts_fn`` (e.g. ones that evaluate their own copy of the
model) can instead be given ready-made with ``set_data=``, a function the test calls with each
chain's data before applying the kernel to that chain alone.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from itertools import combinations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.logprob.utils import replace_rvs_by_values
from pymc.model import modelcontext
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, reseed_rngs, rewrite_pregrad
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.blockwise import Blockwise
from scipy import stats

from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.kernels.tuning import AnnealingPlan, tune_plan
from pymc_bdmc.model.density import (
    ONE_SHOT_MODE,
    DensityParts,
    FlatLayout,
    ModelDensity,
    observed_data_value,
)
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.schedules import ADAPTIVE, make_schedule

__all__ = [
    "DensityCheckResult",
    "KernelFactory",
    "KernelTestResult",
    "VerificationError",
    "Verifier",
    "check_density_consistency",
    "geweke_test",
    "invariance_test",
    "reversibility_test",
]

logger = logging.getLogger(__name__)

PartsFn = Callable[[np.ndarray], DensityParts]
#: ``kernel(parts_fn) -> Transition``: builds a kernel on a given batched density function.
KernelFactory = Callable[[PartsFn], Transition]
#: ``exact_sampler(n, rng)``: ``n`` exact draws of the kernel's target, as flat unconstrained
#: vectors ``(n, n_dim)`` or a mapping from value-variable name to ``(n, *shape)`` arrays.
ExactSampler = Callable[[int, np.random.Generator], np.ndarray | Mapping[str, np.ndarray]]
#: ``statistics(x, data, parts) -> {name: values of shape (chains,)}``.
Statistics = Callable[[np.ndarray, Mapping[str, np.ndarray], DensityParts],
                      Mapping[str, np.ndarray]]

#: Probability levels of the P-P comparisons in the statistical tests.
QUANTILES = (0.25, 0.5, 0.75)
#: Default tolerance of the exact density checks: relative to ``max(1, |value|)``.
EXACT_TOLERANCE = 1e-9
#: Agreement required between a batched-data function and the per-chain reference.
_BATCH_RTOL, _BATCH_ATOL = 1e-8, 1e-10


class VerificationError(AssertionError):
    """A verification check failed (or could not be run on this model)."""


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelTestResult:
    """Outcome of one statistical kernel test (a family of tests with a Bonferroni correction).

    Attributes
    ----------
    test : str
        ``"geweke"``, ``"invariance"`` or ``"reversibility"``.
    passed : bool
        No p-value fell below ``alpha / len(names)``.
    alpha : float
        Family-wise false-alarm rate.
    p_value : float
        Bonferroni-adjusted smallest p-value, ``min(1, m * min(p_values))``; the test fails
        when it is below ``alpha``.
    names : tuple of str
        One name per individual test (``"t: w[0]"``, ``"KS: log_likelihood"``, ...).
    statistic : ndarray
        Welch t statistics (Kolmogorov-Smirnov D for KS tests).
    p_values : ndarray
        Unadjusted two-sided p-values.
    kernel_value, reference_value : ndarray
        Mean of the statistic under the kernel and under exact sampling (for reversibility
        tests: the antisymmetric mean, and 0).
    ess : ndarray
        Effective sample size of the kernel side of each test (NaN where not defined).
    n_kernel, n_reference : int
        Independent kernel-side units (chains) and reference draws.
    acceptance_rate : float
        Mean acceptance rate the kernel reported, if it did (else NaN).
    """

    test: str
    passed: bool
    alpha: float
    p_value: float
    names: tuple[str, ...]
    statistic: np.ndarray = field(repr=False)
    p_values: np.ndarray = field(repr=False)
    kernel_value: np.ndarray = field(repr=False)
    reference_value: np.ndarray = field(repr=False)
    ess: np.ndarray = field(repr=False)
    n_kernel: int = 0
    n_reference: int = 0
    acceptance_rate: float = np.nan

    def worst(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` individual tests with the smallest p-values, as ``(name, p)``."""
        order = np.argsort(self.p_values)[:k]
        return [(self.names[i], float(self.p_values[i])) for i in order]

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [
            f"{self.test} test {verdict}: adjusted p = {self.p_value:.3g} (alpha {self.alpha}, "
            f"{len(self.names)} tests, {self.n_kernel} kernel chains, {self.n_reference} "
            f"reference draws, acceptance {self.acceptance_rate:.2f})",
            f"  {'statistic':<32}{'kernel':>12}{'reference':>12}{'stat':>9}{'p':>10}{'ess':>9}",
        ]
        for i in np.argsort(self.p_values)[:8]:
            lines.append(
                f"  {self.names[i]:<32}{self.kernel_value[i]:12.4g}"
                f"{self.reference_value[i]:12.4g}{self.statistic[i]:9.2f}"
                f"{self.p_values[i]:10.2g}{self.ess[i]:9.0f}"
            )
        return "\n".join(lines)

    def raise_if_failed(self) -> KernelTestResult:
        """Raise :class:`VerificationError` (with the report) if the test failed."""
        if not self.passed:
            raise VerificationError(str(self))
        return self


@dataclass(frozen=True)
class DensityCheckResult:
    """Outcome of :meth:`Verifier.check_density`.

    Attributes
    ----------
    passed : bool
    max_error : dict
        Largest error of each check, relative to ``max(1, |value|)``.
    tolerance : float
    n_points : int
    skipped : dict
        Checks that could not run on this model, with the reason.
    """

    passed: bool
    max_error: dict[str, float]
    tolerance: float
    n_points: int
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [f"density consistency {verdict} ({self.n_points} points, tolerance "
                 f"{self.tolerance:g})"]
        for name, err in self.max_error.items():
            flag = "" if err <= self.tolerance else "   <-- exceeds tolerance"
            lines.append(f"  {name:<40}{err:10.2e}{flag}")
        for name, reason in self.skipped.items():
            lines.append(f"  {name:<40}skipped: {reason}")
        return "\n".join(lines)

    def raise_if_failed(self) -> DensityCheckResult:
        """Raise :class:`VerificationError` (with the report) if a check failed."""
        if not self.passed:
            raise VerificationError(str(self))
        return self


# -- two-sample statistics -----------------------------------------------------------------------


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Welch t-tests of equal means, column by column: ``a`` (n_a, m), ``b`` (n_b, m)."""
    n_a, n_b = len(a), len(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        va, vb = np.var(a, axis=0, ddof=1) / n_a, np.var(b, axis=0, ddof=1) / n_b
        diff = np.mean(a, axis=0) - np.mean(b, axis=0)
        t = diff / np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
        p = 2 * stats.t.sf(np.abs(t), df)
    constant = (va + vb) == 0  # a constant statistic: equal means pass, different ones fail
    p = np.where(constant, np.where(diff == 0, 1.0, 0.0), p)
    t = np.where(constant, np.where(diff == 0, 0.0, np.inf), t)
    return t, np.where(np.isnan(p), 0.0, p)  # NaN statistics (non-finite states) fail


def _one_sample(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided one-sample t-tests of zero mean, column by column."""
    n = len(d)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean, se = np.mean(d, axis=0), np.std(d, axis=0, ddof=1) / np.sqrt(n)
        t = mean / se
        p = 2 * stats.t.sf(np.abs(t), n - 1)
    p = np.where(se == 0, np.where(mean == 0, 1.0, 0.0), p)
    return np.where(se == 0, 0.0, t), np.where(np.isnan(p), 0.0, p)


def _result(test, names, statistic, p_values, kernel_value, reference_value, ess, alpha,
            n_kernel, n_reference, acceptance) -> KernelTestResult:
    p_values = np.asarray(p_values, dtype=float)
    adjusted = float(min(1.0, len(p_values) * p_values.min())) if len(p_values) else 1.0
    result = KernelTestResult(
        test=test, passed=adjusted >= alpha, alpha=alpha, p_value=adjusted, names=tuple(names),
        statistic=np.asarray(statistic, dtype=float), p_values=p_values,
        kernel_value=np.asarray(kernel_value, dtype=float),
        reference_value=np.asarray(reference_value, dtype=float),
        ess=np.asarray(ess, dtype=float), n_kernel=n_kernel, n_reference=n_reference,
        acceptance_rate=acceptance,
    )
    (logger.info if result.passed else logger.warning)("%s", result)
    return result


def _stack(values: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    names = list(values)
    return names, np.column_stack([np.asarray(values[k], dtype=float) for k in names])


def _mean_acceptance(infos: Sequence) -> float:
    rates = [np.mean(i.acceptance_rate) for i in infos if hasattr(i, "acceptance_rate")]
    return float(np.mean(rates)) if rates else np.nan


def _check_alpha(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"`alpha` must be in (0, 1), got {alpha}.")
    return float(alpha)


# -- densities and simulation with one data set per chain ----------------------------------------


def _data_inputs(model: pm.Model):
    """Symbolic stand-ins for the observed data: ``(names, {data variable: input}, inputs)``."""
    names, replace, inputs = [], {}, []
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        if observed_data_value(value) is None:
            raise VerificationError(
                f"The data of {rv.name!r} are a symbolic expression; the Geweke test needs to "
                "replace them. Pass the observations as an array or a pm.Data container."
            )
        stand_in = value.type(name=f"{rv.name}_geweke_data")
        names.append(rv.name)
        replace[value] = stand_in
        inputs.append(stand_in)
    return names, replace, inputs


class _PerChainDensity:
    """``(x, data) -> DensityParts`` with row ``k`` of ``x`` evaluated under data set ``k``.

    Compiles the model's log prior, log-likelihood and gradients with the observed data as
    batched inputs: ``vectorize_graph`` if it reproduces the reference exactly, otherwise a
    ``Blockwise(OpFromGraph)`` loop inside the compiled function, otherwise (e.g. if compilation
    fails) a Python loop over chains through ``density.set_observed``. Each candidate is checked
    against that loop before use.
    """

    def __init__(self, density: ModelDensity, check_x: np.ndarray,
                 check_data: Mapping[str, np.ndarray]):
        self.density = density
        self.names = [n for n in density.observed_names]
        self._fn = None
        self.mode = "loop"
        model = density.model
        try:
            names, replace, data_in = _data_inputs(model)
            (prior_x, lik_x), x = join_nonshared_inputs(
                point=model.initial_point(), outputs=[model.varlogp, model.observedlogp],
                inputs=list(model.value_vars),
            )
            prior_x, lik_x = graph_replace([prior_x, lik_x], replace, strict=False)
            outputs = [prior_x, lik_x,
                       pytensor.grad(rewrite_pregrad(prior_x), x, disconnected_inputs="ignore"),
                       pytensor.grad(rewrite_pregrad(lik_x), x, disconnected_inputs="ignore")]
        except VerificationError:
            raise
        except Exception as err:  # noqa: BLE001 - any failure: the loop is always correct
            logger.debug("Per-chain-data graph unavailable (%s); looping over chains.", err)
            return
        self.names, self._dtypes = names, [d.dtype for d in data_in]
        batch_x = pt.matrix("x_batch", dtype=x.dtype)
        batch_data = [pt.tensor(dtype=d.dtype, shape=(None, *d.type.shape), name=d.name + "_b")
                      for d in data_in]
        reference = self._loop(check_x, check_data)
        for mode, build in (("vectorized", self._vectorized), ("blockwise", self._blockwise)):
            try:
                fn = build(x, data_in, outputs, batch_x, batch_data)
                self._fn, self.mode = fn, mode
                if self._agrees(self(check_x, check_data), reference):
                    return
                logger.debug("Per-chain-data %s graph disagrees with the reference.", mode)
            except Exception as err:  # noqa: BLE001
                logger.debug("Per-chain-data %s graph failed (%s).", mode, err)
        self._fn, self.mode = None, "loop"

    def _compile(self, inputs, outputs):
        with self.density.model:
            fn = compile_pytensor(inputs, outputs, **self.density.compile_kwargs)
        fn.trust_input = True
        return fn

    def _vectorized(self, x, data_in, outputs, batch_x, batch_data):
        replace = {x: batch_x, **dict(zip(data_in, batch_data, strict=True))}
        return self._compile([batch_x, *batch_data], vectorize_graph(outputs, replace=replace))

    def _blockwise(self, x, data_in, outputs, batch_x, batch_data):
        shared = [v for v in graph_inputs(outputs) if isinstance(v, SharedVariable)]
        core = OpFromGraph([x, *data_in, *shared], list(outputs), inline=False)

        def dims(prefix, variables):
            return ["(" + ",".join(f"{prefix}{i}_{d}" for d in range(v.ndim)) + ")"
                    for i, v in enumerate(variables)]

        signature = (",".join(["(n)", *dims("y", data_in), *dims("s", shared)])
                     + "->(),(),(n),(n)")
        result = Blockwise(core, signature=signature)(batch_x, *batch_data, *shared)
        return self._compile([batch_x, *batch_data], result)

    @staticmethod
    def _agrees(a: DensityParts, b: DensityParts) -> bool:
        return all(
            np.allclose(u, v, rtol=_BATCH_RTOL, atol=_BATCH_ATOL, equal_nan=True)
            for u, v in zip((a.log_prior, a.log_likelihood, a.grad_log_prior,
                             a.grad_log_likelihood),
                            (b.log_prior, b.log_likelihood, b.grad_log_prior,
                             b.grad_log_likelihood), strict=True)
        )

    def _loop(self, x: np.ndarray, data: Mapping[str, np.ndarray]) -> DensityParts:
        density = self.density
        original = density.observed_data()
        rows = []
        try:
            for k in range(len(x)):
                density.set_observed({name: data[name][k] for name in self.names})
                rows.append(density.parts(x[k:k + 1]))
        finally:
            density.set_observed(original)
        return DensityParts(**{f.name: np.concatenate([getattr(r, f.name) for r in rows])
                               for f in fields(DensityParts)})

    def __call__(self, x: np.ndarray, data: Mapping[str, np.ndarray]) -> DensityParts:
        x = np.ascontiguousarray(x, dtype=float)
        for name in self.names:
            if len(data[name]) != len(x):
                raise VerificationError(
                    f"The kernel evaluated {len(x)} rows, but there are {len(data[name])} "
                    "chains: in the Geweke test `parts_fn` must be called on all chains at "
                    "once, in order (each row is evaluated under its own chain's data)."
                )
        if self._fn is None:
            return self._loop(x, data)
        prior, lik, grad_prior, grad_lik = self._fn(
            x, *(np.ascontiguousarray(data[name], dtype=dtype)
                 for name, dtype in zip(self.names, self._dtypes, strict=True)))
        prior = np.where(np.isnan(prior), -np.inf, prior)
        lik = np.where(np.isnan(lik), -np.inf, lik)
        return DensityParts(prior, lik, grad_prior, grad_lik)


class _ConditionalSimulator:
    """Draws ``y ~ p(y | theta)`` for a batch of flat unconstrained ``theta`` (one per row).

    The observed variables' random graph is conditioned on the free variables' values and
    vectorized over rows. Before use, the vectorized draw is replayed against a row-by-row draw
    from the same random generators: they must agree to round-off, or the row-by-row function
    (which takes each value variable in its own dtype, so discrete ones work too) is used.
    """

    def __init__(self, density: ModelDensity, check_x: np.ndarray):
        model = density.model
        self.layout = density.layout
        self._initial = model.initial_point()
        self.names = [rv.name for rv in model.observed_RVs]
        data = density.observed_data()
        self._dtypes = {name: data[name].dtype if name in data else None for name in self.names}
        rvs_to_values = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
        ys = replace_rvs_by_values(list(model.observed_RVs), rvs_to_values=rvs_to_values,
                                   rvs_to_transforms=model.rvs_to_transforms)
        self._value_names = [v.name for v in model.value_vars]
        kwargs = {"mode": ONE_SHOT_MODE, "random_seed": 0, "on_unused_input": "ignore"}
        with model:
            self._single = compile_pytensor(list(model.value_vars), ys, **kwargs)
        self._rngs = self._generators(self._single)
        self._batched = None
        try:
            ys_x, x = join_nonshared_inputs(point=self._initial, outputs=ys,
                                            inputs=list(model.value_vars))
            batch_x = pt.matrix("x_batch", dtype=x.dtype)
            with model:
                batched = compile_pytensor([batch_x], vectorize_graph(ys_x, replace={x: batch_x}),
                                           **kwargs)
            if self._replays(batched, check_x):
                self._batched = batched
        except Exception as err:  # noqa: BLE001 - the row-by-row function is always correct
            logger.debug("Vectorized conditional simulation unavailable (%s).", err)
        self.mode = "vectorized" if self._batched is not None else "loop"

    @staticmethod
    def _generators(fn) -> list:
        return [v for v in fn.get_shared()
                if isinstance(v.get_value(borrow=True), np.random.Generator)]

    def _rows(self, x: np.ndarray) -> list[np.ndarray]:
        draws = []
        for row in x:
            point = _typed_point(self.layout, self._initial, row)
            draws.append(self._single(*(point[name] for name in self._value_names)))
        return [np.stack([d[j] for d in draws]) for j in range(len(self.names))]

    def _replays(self, batched, x: np.ndarray) -> bool:
        rngs = self._generators(batched)
        if {id(r) for r in rngs} != {id(r) for r in self._rngs}:
            return False
        states = [copy.deepcopy(r.get_value()) for r in rngs]
        together = batched(x)
        for r, s in zip(rngs, states, strict=True):
            r.set_value(copy.deepcopy(s))
        # Batched and single linear algebra may differ in the last bits of the parameters.
        return all(np.allclose(a, b, rtol=_BATCH_RTOL, atol=_BATCH_ATOL)
                   for a, b in zip(together, self._rows(x), strict=True))

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """One data set per row of ``x``: ``{name: (rows, *shape)}``."""
        reseed_rngs(self._rngs, int(rng.integers(2**63)))
        x = np.asarray(x, dtype=float)
        values = self._batched(x) if self._batched is not None else self._rows(x)
        return {name: np.ascontiguousarray(v, dtype=self._dtypes[name])
                for name, v in zip(self.names, values, strict=True)}


def _typed_point(layout: FlatLayout, initial: Mapping[str, np.ndarray],
                 row: np.ndarray) -> dict[str, np.ndarray]:
    """One flat vector as a point with each value variable in its own dtype (ints rounded)."""
    point = {}
    for name, value in layout.unravel(row).items():
        dtype = np.asarray(initial[name]).dtype
        point[name] = (np.rint(value) if np.issubdtype(dtype, np.integer) else value
                       ).astype(dtype)
    return point


# -- the verifier --------------------------------------------------------------------------------


class Verifier:
    """Density and kernel checks for one model, compiling what they need once.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the ``with`` context when omitted (and ``density`` is not given).
    density : ModelDensity, optional
        A compiled density of the model to check (and to reuse); built when omitted.
    potentials_in_likelihood : bool, default False
        Whether the density counts ``pm.Potential`` terms as likelihood (as in
        ``sample_ais(potentials_in_likelihood=True)``).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`.

    Examples
    --------
    >>> import pymc as pm
    >>> from pymc_bdmc.verification import Verifier
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    >>> verifier = Verifier(model)
    >>> verifier.check_density(random_seed=0).passed
    True
    >>> plan = verifier.hmc_plan(n_steps=10, random_seed=0)
    >>> verifier.geweke(plan.transition, t=plan.n_steps, n_chains=50, n_iterations=20,
    ...                 random_seed=0).passed
    True
    """

    def __init__(self, model: pm.Model | None = None, *, density: ModelDensity | None = None,
                 potentials_in_likelihood: bool = False, compile_kwargs: dict | None = None):
        if density is None:
            model = modelcontext(model)
            density = ModelDensity(model, potentials_in_likelihood=potentials_in_likelihood,
                                   compile_kwargs=compile_kwargs)
        self.model = density.model
        self.density = density
        self.potentials_in_likelihood = potentials_in_likelihood
        self._simulator: ModelSimulator | None = None
        self._per_chain: _PerChainDensity | None = None
        self._conditional: _ConditionalSimulator | None = None
        self._references: dict[str, Callable] = {}

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def layout(self) -> FlatLayout:
        """Layout of the flat unconstrained vector."""
        return self.density.layout

    @property
    def simulator(self) -> ModelSimulator:
        """Exact prior and joint sampler of the model (compiled on first use)."""
        if self._simulator is None:
            self._simulator = ModelSimulator(self.model, self.layout,
                                             compile_kwargs=self.density.compile_kwargs)
        return self._simulator

    def prior_draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` exact prior draws, shape (n, n_dim)."""
        return self.simulator.draw_prior(n, rng)

    def flatten(self, draws: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        """Flat ``(n, n_dim)`` vectors from draws keyed by value-variable name (or as given)."""
        if not isinstance(draws, Mapping):
            return np.asarray(draws, dtype=float)
        missing = set(self.layout.names) - set(draws)
        if missing:
            raise VerificationError(f"Exact draws lack value variables {sorted(missing)}; "
                                    f"expected {list(self.layout.names)}.")
        n = len(next(iter(draws.values())))
        return np.concatenate(
            [np.asarray(draws[name], dtype=float).reshape(n, -1) for name in self.layout.names],
            axis=1,
        )

    def _sampler(self, beta: float, exact_sampler: ExactSampler | None) -> ExactSampler:
        if exact_sampler is not None:
            return exact_sampler
        if beta == 0:
            return self.prior_draws
        raise VerificationError(
            f"No exact sampler for beta = {beta}: pass `exact_sampler` (exact draws of "
            "p(x) p(y|x)^beta, e.g. AnalyticModel.sample_tempered for the models in "
            "pymc_bdmc.testing). Only the prior (beta = 0) can be sampled for any model; use "
            "the Geweke test at beta = 1."
        )

    def _draw(self, sampler: ExactSampler, n: int, rng: np.random.Generator) -> np.ndarray:
        x = self.flatten(sampler(n, rng))
        if x.shape != (n, self.layout.size):
            raise VerificationError(f"The exact sampler returned shape {x.shape}, expected "
                                    f"{(n, self.layout.size)}.")
        return x

    def hmc_plan(self, n_steps: int = 20, *, schedule="linear", pilot_chains: int = 64,
                 n_leapfrog: int = 3, transitions_per_step: int = 2, target_accept: float = 0.9,
                 step_size_jitter: float = 0.5, random_seed=None) -> AnnealingPlan:
        """A frozen HMC plan tuned on the model's data, as ``sample_ais`` would build it.

        Parameters
        ----------
        n_steps : int, default 20
        schedule : str or array_like, default "linear"
            As for :func:`pymc_bdmc.sample_ais` (``"adaptive"`` included).
        pilot_chains : int, default 64
        n_leapfrog, transitions_per_step, target_accept, step_size_jitter
            As for :func:`pymc_bdmc.sample_ais`.
        random_seed : optional

        Returns
        -------
        AnnealingPlan
            Its ``transition`` is a kernel factory for the tests; its kernel at
            ``t = plan.n_steps`` targets the posterior.
        """
        rng = np.random.default_rng(random_seed)
        betas = make_schedule(schedule, n_steps)
        x = self.prior_draws(pilot_chains, rng)
        plan, _ = tune_plan(
            rng, x, self.density.parts(x), self.density.parts,
            schedule=ADAPTIVE if isinstance(schedule, str) and schedule == ADAPTIVE else betas,
            n_steps=len(betas) - 1, n_leapfrog=n_leapfrog, target_accept=target_accept,
            jitter=step_size_jitter, transitions_per_step=transitions_per_step,
        )
        return plan

    # -- exact checks ----------------------------------------------------------------------------
    def check_density(self, *, n_points: int = 8, betas: Sequence[float] = (0.0, 0.37, 1.0),
                      tolerance: float = EXACT_TOLERANCE, data_swap: bool = True,
                      random_seed=None) -> DensityCheckResult:
        """Compare the compiled densities with PyMC's own functions at random points.

        Checked at ``n_points`` points (half exact prior draws, half prior draws moved by
        N(0, 0.5^2) noise in the unconstrained space): the log prior against
        ``model.compile_logp(vars=free_RVs)``, the log-likelihood against the observed
        variables' ``compile_logp``, their sum against the joint ``model.compile_logp()``, and
        the tempered density and its gradient at each ``beta`` against
        ``model.logp_dlogp_function(tempered=True)``. With ``data_swap``, data simulated from the
        model are swapped in with ``set_observed`` and the log-likelihood is compared with a
        PyMC model conditioned on them by ``pm.observe``.

        Parameters
        ----------
        n_points : int, default 8
        betas : sequence of float, default (0, 0.37, 1)
        tolerance : float, default 1e-9
            Largest error allowed, relative to ``max(1, |value|)``: round-off only.
        data_swap : bool, default True
        random_seed : optional

        Returns
        -------
        DensityCheckResult
        """
        rng = np.random.default_rng(random_seed)
        model, density, layout = self.model, self.density, self.layout
        half = max(1, n_points // 2)
        x = self.prior_draws(n_points, rng)
        x[half:] += rng.normal(scale=0.5, size=x[half:].shape)
        parts = density.parts(x)
        points = [self._point(row) for row in x]
        errors, skipped = {}, {}

        def compare(name, ours, theirs):
            errors[name] = max(errors.get(name, 0.0), _scaled_error(ours, theirs))

        lik_terms = list(model.observed_RVs)
        if self.potentials_in_likelihood:
            lik_terms += list(model.potentials)
        prior_fn = self._reference("prior", lambda: model.compile_logp(
            vars=list(model.free_RVs), mode=ONE_SHOT_MODE))
        lik_fn = self._reference("likelihood", lambda: model.compile_logp(
            vars=lik_terms, mode=ONE_SHOT_MODE))
        compare("log prior vs model.varlogp", parts.log_prior, [prior_fn(p) for p in points])
        compare("log-likelihood vs observed logp", parts.log_likelihood,
                [lik_fn(p) for p in points])
        if model.potentials and not self.potentials_in_likelihood:
            skipped["prior + likelihood vs joint logp"] = (
                "the model has Potentials, which the density leaves out")
        else:
            joint_fn = self._reference("joint", lambda: model.compile_logp(mode=ONE_SHOT_MODE))
            compare("prior + likelihood vs joint logp", parts.log_prior + parts.log_likelihood,
                    [joint_fn(p) for p in points])
        self._check_tempered(x, parts, points, betas, compare, skipped)
        if data_swap:
            self._check_data_swap(x, points, rng, compare, skipped)
        passed = all(err <= tolerance for err in errors.values())
        result = DensityCheckResult(passed, errors, tolerance, n_points, skipped)
        (logger.info if passed else logger.warning)("%s", result)
        return result

    def _reference(self, name: str, build: Callable[[], Callable]) -> Callable:
        # PyMC's own functions, compiled once per verifier.
        if name not in self._references:
            self._references[name] = build()
        return self._references[name]

    def _point(self, row: np.ndarray) -> dict[str, np.ndarray]:
        return _typed_point(self.layout, self.density._initial_point, row)

    def _check_tempered(self, x, parts, points, betas, compare, skipped):
        model = self.model
        continuous = list(model.continuous_value_vars)
        if model.potentials and not self.potentials_in_likelihood:
            skipped["tempered density vs PyMC"] = "PyMC tempers Potentials with the likelihood"
            return
        if not continuous:
            skipped["tempered density vs PyMC"] = "no continuous variables"
            return
        fn = self._reference("tempered", lambda: model.logp_dlogp_function(
            tempered=True, ravel_inputs=True, mode=ONE_SHOT_MODE))
        sub = FlatLayout.from_point([v.name for v in continuous], self.density._initial_point)
        columns = np.concatenate([np.arange(self.layout.size)[self.layout.slices[
            self.layout.names.index(name)]] for name in sub.names])
        for beta in betas:
            fn.set_weights(np.array([beta], dtype=float))
            values, grads = [], []
            for point in points:
                fn.set_extra_values(point)
                value, grad = fn(sub.ravel(point))
                values.append(value)
                grads.append(grad)
            compare(f"tempered logp vs PyMC (beta={beta:g})", parts.tempered_logp(beta), values)
            finite = np.isfinite(parts.tempered_logp(beta))
            compare(f"tempered gradient vs PyMC (beta={beta:g})",
                    parts.tempered_grad(beta)[finite][:, columns], np.array(grads)[finite])

    def _check_data_swap(self, x, points, rng, compare, skipped):
        density, model = self.density, self.model
        name = "log-likelihood after set_observed vs pm.observe"
        try:
            observed = self.simulator.draw_joint(rng).observed
            conditioned = pm.observe(model, observed)
        except Exception as err:  # noqa: BLE001 - report, don't fail: a PyMC limitation
            skipped[name] = f"could not condition the model on simulated data ({err})"
            return
        lik_terms = list(conditioned.observed_RVs)
        if self.potentials_in_likelihood:
            lik_terms += list(conditioned.potentials)
        lik_fn = conditioned.compile_logp(vars=lik_terms, mode=ONE_SHOT_MODE)
        original = density.observed_data()
        try:
            density.set_observed(observed)
            ours = density.parts(x).log_likelihood
        finally:
            density.set_observed(original)
        # The conditioned clone may order its value variables differently: map by name.
        compare(name, ours, [lik_fn({v.name: p[v.name] for v in conditioned.value_vars})
                             for p in points])

    # -- statistical kernel tests ----------------------------------------------------------------
    def _default_statistics(self, max_coordinates: int, with_data: bool) -> Statistics:
        labels = self.layout.coordinate_labels()[:max_coordinates]

        def statistics(x, data, parts):
            out = {label: x[:, d] for d, label in enumerate(labels)}
            out["log_prior"] = parts.log_prior
            out["log_likelihood"] = parts.log_likelihood
            if with_data:
                for name, values in data.items():
                    flat = np.asarray(values, dtype=float).reshape(len(x), -1)
                    out[f"mean({name})"] = flat.mean(axis=1)
                    out[f"mean({name}^2)"] = (flat**2).mean(axis=1)
            return out

        return statistics

    def _geweke_machinery(self):
        if self._conditional is None or self._per_chain is None:
            if self.model.potentials:
                raise VerificationError(
                    "The model has Potentials, which are not part of its generative process: "
                    "the Geweke test cannot simulate data from it.")
            # Check points from a fixed stream of their own: building the machinery on the first
            # call must not shift the random streams of the test itself.
            rng = np.random.default_rng(0)
            check_x = self.prior_draws(3, rng)
            self._conditional = _ConditionalSimulator(self.density, check_x)
            self._per_chain = _PerChainDensity(self.density, check_x,
                                               self._conditional(check_x, rng))
            logger.debug("Geweke machinery: simulation %s, densities %s.",
                         self._conditional.mode, self._per_chain.mode)
        return self._conditional, self._per_chain

    def geweke(self, kernel: KernelFactory | Transition, *, t: int, n_chains: int = 100,
               n_iterations: int = 200, burn_in: int | None = None, n_reference: int = 4000,
               statistics: Statistics | None = None, quantiles: Sequence[float] = QUANTILES,
               max_coordinates: int = 20, alpha: float = 0.01,
               set_data: Callable[[dict], None] | None = None,
               random_seed=None) -> KernelTestResult:
        """Geweke's joint-distribution test of a kernel that targets the posterior.

        ``n_chains`` independent successive-conditional chains start from exact joint draws
        ``(theta, y) ~ p(theta) p(y|theta)``; each iteration applies the kernel (at index
        ``t``, whose target must be ``p(theta | y)``, i.e. ``beta = 1``) and then redraws
        ``y ~ p(y | theta)``. For each statistic and each level in ``quantiles``, the fraction
        of iterations ``burn_in..n_iterations`` at which the statistic lies below the level's
        quantile under forward simulation is computed per chain, and the chains' fractions are
        compared with the fraction among ``n_reference`` forward simulations by Welch t-tests,
        Bonferroni-corrected (see the module notes).

        Parameters
        ----------
        kernel : callable
            A kernel factory ``kernel(parts_fn) -> Transition`` (e.g. ``plan.transition``), or,
            with ``set_data``, a ready-made ``Transition``.
        t : int
            Index at which the transition is called; its target must be the posterior.
        n_chains : int, default 100
            Independent Geweke chains (the units of the test; at least 20).
        n_iterations : int, default 200
            Kernel steps (each followed by redrawing the data) per chain.
        burn_in : int, optional
            Iterations left out of the chain means (default ``n_iterations // 2``). Every
            iterate is exact under a correct kernel, so this costs no validity; it gives a
            biased kernel's drift time to build up.
        n_reference : int, default 4000
            Forward simulations (plus ``n_reference // 4`` more that fix the quantiles).
        statistics : callable, optional
            ``statistics(x, data, parts) -> {name: (chains,)}``; default: every coordinate
            (up to ``max_coordinates``), the log prior, the log-likelihood, and the mean and
            mean square of each observed variable.
        quantiles : sequence of float, default (0.25, 0.5, 0.75)
            Probability levels of the P-P comparison.
        max_coordinates : int, default 20
        alpha : float, default 0.01
            Family-wise false-alarm rate.
        set_data : callable, optional
            For kernels that cannot use ``parts_fn``: called with ``{name: data}`` of one chain
            before ``kernel`` (then a ``Transition``) is applied to that chain alone. It is
            left holding the last chain's data: restore your own data afterwards.
        random_seed : optional

        Returns
        -------
        KernelTestResult
        """
        alpha = _check_alpha(alpha)
        if n_chains < 20:
            raise ValueError(f"`n_chains` must be at least 20 (the test's units), got {n_chains}.")
        burn_in = n_iterations // 2 if burn_in is None else burn_in
        if not 0 <= burn_in < n_iterations:
            raise ValueError(f"`burn_in` must be in [0, n_iterations), got {burn_in}.")
        rng = np.random.default_rng(random_seed)
        simulate, per_chain = self._geweke_machinery()
        statistics = statistics or self._default_statistics(max_coordinates, with_data=True)

        def forward(n):
            x_f = self.prior_draws(n, rng)
            data_f = simulate(x_f, rng)
            return _stack(statistics(x_f, data_f, per_chain(x_f, data_f)))

        base_names, g_thr = forward(max(n_reference // 4, 100))
        pp = _PPStatistics(base_names, g_thr, quantiles)
        g_ref = pp(forward(n_reference)[1])

        x = self.prior_draws(n_chains, rng)
        current = {"data": simulate(x, rng)}

        def parts_fn(q):
            return per_chain(q, current["data"])

        step = (self._per_chain_step(kernel, set_data, per_chain, current, t)
                if set_data is not None else _batched_step(kernel(parts_fn), t))
        parts = parts_fn(x)
        n_used = n_iterations - burn_in
        sums = np.zeros((n_chains, len(pp.names)))
        infos = []
        for i in range(n_iterations):
            x, _, info = step(rng, x, parts)
            infos.append(info)
            current["data"] = simulate(x, rng)
            parts = parts_fn(x)
            if i >= burn_in:
                sums += pp(_stack(statistics(x, current["data"], parts))[1])
        chain_means = sums / n_used
        t_stat, p = _welch(chain_means, g_ref)
        grand = chain_means.mean(axis=0)
        # Indicators: one draw's variance is q (1 - q); a chain mean's variance shows how many
        # of its n_used draws were effectively independent.
        with np.errstate(invalid="ignore", divide="ignore"):
            ess = np.minimum(n_chains * grand * (1 - grand) / np.var(chain_means, axis=0, ddof=1),
                             n_chains * n_used)
        return _result("geweke", pp.names, t_stat, p, grand, g_ref.mean(axis=0), ess, alpha,
                       n_chains, n_reference, _mean_acceptance(infos))

    @staticmethod
    def _per_chain_step(transition, set_data, per_chain, current, t):
        def step(rng, x, parts):
            new_x, infos = np.empty_like(x), []
            for k in range(len(x)):
                data_k = {name: values[k] for name, values in current["data"].items()}
                set_data(data_k)
                one = {name: values[k:k + 1] for name, values in current["data"].items()}
                xk, _, info = transition(rng, x[k:k + 1], per_chain(x[k:k + 1], one), t)
                new_x[k] = xk[0]
                infos.append(info)
            return new_x, None, _MeanInfo(_mean_acceptance(infos))

        return step

    def invariance(self, kernel: KernelFactory, *, t: int, beta: float,
                   exact_sampler: ExactSampler | None = None, n_chains: int = 2000,
                   n_transitions: int = 10, n_reference: int | None = None,
                   statistics: Statistics | None = None, quantiles: Sequence[float] = QUANTILES,
                   max_coordinates: int = 20, alpha: float = 0.01,
                   random_seed=None) -> KernelTestResult:
        """Test that the kernel leaves ``f_beta = p(x) p(y|x)^beta`` invariant, from exact starts.

        ``n_chains`` independent chains start from exact draws of ``f_beta``, take
        ``n_transitions`` kernel steps (index ``t``) on the model's current data, and their end
        points are compared with ``n_reference`` fresh exact draws: for each statistic, the
        fractions below its exact quantiles at ``quantiles`` (Welch t-tests) and the whole
        distribution (two-sample Kolmogorov-Smirnov test), Bonferroni-corrected. All draws on
        both sides are independent.

        Parameters
        ----------
        kernel : callable
            Kernel factory ``kernel(parts_fn) -> Transition``.
        t : int
            Index at which the transition is called; its target must be ``f_beta``.
        beta : float
            Inverse temperature of that target.
        exact_sampler : callable, optional
            ``exact_sampler(n, rng)``: exact draws of ``f_beta`` (flat or keyed by
            value-variable name). Default: prior draws, for ``beta = 0`` only.
        n_chains : int, default 2000
        n_transitions : int, default 10
        n_reference : int, optional
            Default ``n_chains`` (plus ``n_reference // 4`` draws that fix the quantiles).
        statistics : callable, optional
            As for :meth:`geweke` (``data`` is the model's current data); default: every
            coordinate (up to ``max_coordinates``), the log prior and the log-likelihood.
        quantiles : sequence of float, default (0.25, 0.5, 0.75)
        max_coordinates : int, default 20
        alpha : float, default 0.01
        random_seed : optional

        Returns
        -------
        KernelTestResult
        """
        alpha = _check_alpha(alpha)
        rng = np.random.default_rng(random_seed)
        sampler = self._sampler(beta, exact_sampler)
        n_reference = n_chains if n_reference is None else n_reference
        statistics = statistics or self._default_statistics(max_coordinates, with_data=False)
        data = self.density.observed_data()
        transition = kernel(self.density.parts)

        def exact(n):
            x_e = self._draw(sampler, n, rng)
            return _stack(statistics(x_e, data, self.density.parts(x_e)))

        x = self._draw(sampler, n_chains, rng)
        parts = self.density.parts(x)
        infos = []
        for _ in range(n_transitions):
            x, parts, info = transition(rng, x, parts, t)
            infos.append(info)
        base_names, g_thr = exact(max(n_reference // 4, 100))
        g_ref = exact(n_reference)[1]
        g = _stack(statistics(x, data, parts))[1]
        pp = _PPStatistics(base_names, g_thr, quantiles)
        t_stat, p = _welch(pp(g), pp(g_ref))
        names, statistic, p_values = list(pp.names), list(t_stat), list(p)
        kernel_value, reference_value = list(pp(g).mean(axis=0)), list(pp(g_ref).mean(axis=0))
        for j, label in enumerate(base_names):
            a, b = g[:, j], g_ref[:, j]
            if np.any(np.isnan(a)) or np.any(np.isnan(b)):
                res_stat, res_p = np.inf, 0.0
            else:
                res = stats.ks_2samp(a, b)
                res_stat, res_p = res.statistic, res.pvalue
            names.append(f"KS: {label}")
            statistic.append(res_stat)
            p_values.append(res_p)
            kernel_value.append(np.median(a))
            reference_value.append(np.median(b))
        ess = np.full(len(names), float(n_chains))
        return _result("invariance", names, statistic, p_values, kernel_value, reference_value,
                       ess, alpha, n_chains, n_reference, _mean_acceptance(infos))

    def reversibility(self, kernel: KernelFactory, *, t: int, beta: float,
                      exact_sampler: ExactSampler | None = None, n_chains: int = 4000,
                      max_coordinates: int = 8, alpha: float = 0.01,
                      random_seed=None) -> KernelTestResult:
        """Test detailed balance: ``(x, x')`` exchangeable for ``x ~ f_beta``, ``x' ~ T(x, .)``.

        Features ``phi`` are bounded transforms of the coordinates (up to ``max_coordinates``)
        and of the log-likelihood: ``tanh(u)`` and ``tanh(u)^2``, with ``u`` the value centred
        and scaled by the median and interquartile range of an independent exact sample. For
        every pair ``(a, b)`` of features, ``a(x) b(x') - a(x') b(x)`` has mean zero under
        reversibility; one-sample t-tests over the ``n_chains`` independent pairs,
        Bonferroni-corrected.

        Parameters
        ----------
        kernel : callable
            Kernel factory ``kernel(parts_fn) -> Transition``.
        t : int
        beta : float
        exact_sampler : callable, optional
            As for :meth:`invariance`.
        n_chains : int, default 4000
        max_coordinates : int, default 8
        alpha : float, default 0.01
        random_seed : optional

        Returns
        -------
        KernelTestResult
        """
        alpha = _check_alpha(alpha)
        rng = np.random.default_rng(random_seed)
        sampler = self._sampler(beta, exact_sampler)
        transition = kernel(self.density.parts)
        labels = [*self.layout.coordinate_labels()[:max_coordinates], "log_likelihood"]
        d = len(labels) - 1

        def values(x, parts):
            return np.column_stack([x[:, :d], parts.log_likelihood])

        x_std = self._draw(sampler, max(n_chains // 4, 100), rng)
        v_std = values(x_std, self.density.parts(x_std))
        center = np.median(v_std, axis=0)
        q25, q75 = np.quantile(v_std, [0.25, 0.75], axis=0)
        scale = np.where(q75 > q25, (q75 - q25) / 1.349, 1.0)  # the sd, for a normal

        def features(v):
            u = np.tanh((v - center) / scale)
            return np.column_stack([u, u**2])

        x0 = self._draw(sampler, n_chains, rng)
        parts0 = self.density.parts(x0)
        x1, parts1, info = transition(rng, x0, parts0, t)
        f0, f1 = features(values(x0, parts0)), features(values(x1, parts1))
        feature_names = [*labels, *(f"{lab}^2" for lab in labels)]
        pairs = list(combinations(range(f0.shape[1]), 2))
        diffs = np.column_stack([f0[:, a] * f1[:, b] - f1[:, a] * f0[:, b] for a, b in pairs])
        t_stat, p = _one_sample(diffs)
        names = [f"{feature_names[a]} -> {feature_names[b]}" for a, b in pairs]
        return _result("reversibility", names, t_stat, p, diffs.mean(axis=0),
                       np.zeros(len(pairs)), np.full(len(pairs), float(n_chains)), alpha,
                       n_chains, n_chains, _mean_acceptance([info]))


class _PPStatistics:
    """Indicators ``g <= q`` at fixed quantiles ``q`` of reference statistics: a P-P comparison.

    Bounded statistics keep the normal approximation of every test accurate, even for
    heavy-tailed quantities (e.g. a Student-t marginal, whose square has no fourth moment).
    """

    def __init__(self, base_names: Sequence[str], reference: np.ndarray,
                 quantiles: Sequence[float]):
        levels = np.asarray(quantiles, dtype=float)
        if levels.ndim != 1 or not levels.size or np.any((levels <= 0) | (levels >= 1)):
            raise ValueError(f"`quantiles` must be levels in (0, 1), got {quantiles!r}.")
        self.thresholds = np.quantile(reference, levels, axis=0)  # (levels, statistics)
        self.names = [f"P({name} <= q{100 * level:g})" for name in base_names for level in levels]

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """``(n, statistics)`` values to ``(n, statistics * levels)`` indicators (NaN stays)."""
        below = (values[:, :, None] <= self.thresholds.T[None]).astype(float)
        below[np.isnan(values)] = np.nan
        return below.reshape(len(values), -1)


@dataclass(frozen=True)
class _MeanInfo:
    acceptance_rate: float


def _batched_step(transition: Transition, t: int):
    def step(rng, x, parts):
        return transition(rng, x, parts, t)

    return step


def _scaled_error(ours, theirs) -> float:
    ours = np.asarray(ours, dtype=float)
    theirs = np.asarray(theirs, dtype=float)
    theirs = np.where(np.isnan(theirs), -np.inf, theirs)  # NaN densities count as -inf here too
    if ours.shape != theirs.shape:
        return np.inf
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    with np.errstate(invalid="ignore"):
        err = np.abs(ours - theirs) / np.maximum(1.0, np.maximum(np.abs(ours), np.abs(theirs)))
    err = np.where(same, 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    return float(np.max(err)) if err.size else 0.0


# -- function interface --------------------------------------------------------------------------


def check_density_consistency(model: pm.Model | None = None, **kwargs) -> DensityCheckResult:
    """Exact checks of a model's compiled densities; see :meth:`Verifier.check_density`.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.check_density`.

    Returns
    -------
    DensityCheckResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.check_density(**kwargs)


def geweke_test(kernel, *, t: int, model: pm.Model | None = None, **kwargs) -> KernelTestResult:
    """Geweke joint-distribution test of a kernel; see :meth:`Verifier.geweke`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition`` (with ``set_data``, a
        ``Transition``).
    t : int
        Index at which the transition is called; its target must be the posterior.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.geweke`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.geweke(kernel, t=t, **kwargs)


def invariance_test(kernel, *, t: int, beta: float, model: pm.Model | None = None,
                    **kwargs) -> KernelTestResult:
    """Invariance test of a kernel from exact starts; see :meth:`Verifier.invariance`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
        Index at which the transition is called.
    beta : float
        Inverse temperature of the transition's target ``p(x) p(y|x)^beta``.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.invariance`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.invariance(kernel, t=t, beta=beta, **kwargs)


def reversibility_test(kernel, *, t: int, beta: float, model: pm.Model | None = None,
                       **kwargs) -> KernelTestResult:
    """Detailed-balance test of a kernel; see :meth:`Verifier.reversibility`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
        Index at which the transition is called.
    beta : float
        Inverse temperature of the transition's target ``p(x) p(y|x)^beta``.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.reversibility`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.reversibility(kernel, t=t, beta=beta, **kwargs)


def _verifier(model, kwargs):
    own = {k: kwargs.pop(k) for k in ("density", "potentials_in_likelihood", "compile_kwargs")
           if k in kwargs}
    if "density" not in own:
        model = modelcontext(model)
    return Verifier(model, **own), kwargs
