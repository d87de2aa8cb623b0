"""Marginal-likelihood estimators behind one interface, for the testbed.

Every estimator is a function ``estimator(problem, budget, seed) -> EstimateResult``, where
``problem`` is a :class:`~pymc_bdmc.testbed.models.Problem` (or a bare ``pm.Model``, or a
:class:`~pymc_bdmc.testing.AnalyticModel`), ``budget`` a positive integer setting the
estimator's main cost (its meaning is listed in :data:`ESTIMATORS`), and ``seed`` an integer.

Each estimator states its *bias direction*, following Grosse, Ghahramani & Adams (2015, §3-5):

* ``"lower"``: a stochastic lower bound on ``log p(y)``: ``E[estimate] <= log p(y)`` and
  ``P(estimate > log p(y) + b) < exp(-b)`` (an unbiased estimator of ``p(y)``, or an ELBO);
* ``"upper"``: a stochastic upper bound (an unbiased estimator of ``1 / p(y)``), valid when the
  chains start from *exact* posterior samples (simulated data, ``theta*`` known);
* ``"neither"``: no guaranteed direction (BIC, Laplace, PyMC's adaptive SMC, the harmonic mean
  from approximate posterior draws, which is an upper bound only in the limit of exact draws).

The compiled model densities are cached per model, so a sweep over budgets and trials compiles
each model once; compile time is reported in ``info["compile_seconds"]`` and is *not* included in
``seconds`` (PyMC's own samplers, wrapped for SMC and ADVI, compile inside their call and do
include it). The testbed compiles with PyTensor's ``FAST_RUN`` mode by default (see
:data:`COMPILE_KWARGS`): on the small benchmark models it compiles in seconds, where a cold
Numba compilation can take minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pymc as pm
from scipy import optimize
from scipy.special import logsumexp

from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.tuning import tune_plan
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.schedules import make_schedule
from pymc_bdmc.testbed.models import Problem
from pymc_bdmc.testing import AnalyticModel

__all__ = [
    "COMPILE_KWARGS",
    "ESTIMATORS",
    "EstimateResult",
    "EstimatorSpec",
    "ais",
    "as_problem",
    "bic",
    "harmonic_mean",
    "harmonic_mean_exact",
    "laplace",
    "likelihood_weighting",
    "reverse_ais",
    "smc",
    "variational_bayes",
]

logger = logging.getLogger(__name__)

Bias = Literal["lower", "upper", "neither"]

#: Compilation settings of every density the testbed compiles (and of PyMC's samplers it wraps).
COMPILE_KWARGS: dict = {"mode": "FAST_RUN"}

#: Chains of the annealing estimators (forward and reverse AIS, harmonic-mean chains).
AIS_CHAINS = 16


@dataclass(frozen=True)
class EstimateResult:
    """One evidence estimate.

    Attributes
    ----------
    log_evidence : float
        The estimate of ``log p(y)`` (NaN if the estimator failed; see ``info["error"]``).
    seconds : float
        Wall time of the estimate, compilation excluded for the testbed's own densities.
    info : dict
        Estimator-specific diagnostics (budget meaning, ESS, compile time, ...).
    """

    log_evidence: float
    seconds: float
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EstimatorSpec:
    """An estimator with its bias direction and the meaning of its budget.

    Attributes
    ----------
    fn : callable
        ``fn(problem, budget, seed) -> EstimateResult``.
    bias : {"lower", "upper", "neither"}
    budget_unit : str
        What one unit of budget buys.
    base_budget : int
        Budget at level 1 of :func:`pymc_bdmc.testbed.runner.compare_estimators`.
    needs_generating_point : bool
        Whether it needs ``theta*`` (simulated data).
    """

    fn: Callable[..., EstimateResult]
    bias: Bias
    budget_unit: str
    base_budget: int
    needs_generating_point: bool = False


def as_problem(obj) -> Problem:
    """Wrap a ``pm.Model`` or :class:`~pymc_bdmc.testing.AnalyticModel` as a Problem."""
    if isinstance(obj, Problem):
        return obj
    if isinstance(obj, AnalyticModel):
        return Problem("analytic", obj.model, None, obj.log_evidence())
    if isinstance(obj, pm.Model):
        return Problem("model", obj)
    raise TypeError(f"Expected a Problem, pm.Model or AnalyticModel, got {type(obj).__name__}.")


_CACHE: dict[int, tuple[pm.Model, ModelDensity, ModelSimulator, float]] = {}


def _compiled(problem: Problem) -> tuple[ModelDensity, ModelSimulator, float]:
    key = id(problem.model)
    if key not in _CACHE:
        start = time.perf_counter()
        density = ModelDensity(problem.model, compile_kwargs=COMPILE_KWARGS)
        simulator = ModelSimulator(problem.model, density.layout)
        _CACHE[key] = (problem.model, density, simulator, time.perf_counter() - start)
    _, density, simulator, seconds = _CACHE[key]
    return density, simulator, seconds


def _rng(seed: int) -> np.random.Generator:
    # Estimator streams are keyed apart from the data simulation: a problem simulated with
    # seed s must not share its draws with an estimator run with seed s.
    return np.random.default_rng([int(seed), _ESTIMATOR_STREAM])


_ESTIMATOR_STREAM = 0xE57


def _check_budget(budget) -> int:
    budget = int(budget)
    if budget < 1:
        raise ValueError(f"`budget` must be a positive integer, got {budget}.")
    return budget


def _log_likelihood_batched(density: ModelDensity, x: np.ndarray, batch: int = 512) -> np.ndarray:
    return np.concatenate([density.parts(x[i:i + batch]).log_likelihood
                           for i in range(0, len(x), batch)])


# -- simple Monte Carlo ----------------------------------------------------------------------------

def likelihood_weighting(problem, budget: int, seed: int) -> EstimateResult:
    """Likelihood weighting: importance sampling from the prior (paper §3.1).

    ``log mean_k p(y | theta_k)`` over ``budget`` exact prior draws: an unbiased estimate of
    ``p(y)``, hence a stochastic **lower** bound on ``log p(y)``; hopeless in high dimension.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of prior draws.
    seed : int

    Returns
    -------
    EstimateResult
    """
    problem, budget = as_problem(problem), _check_budget(budget)
    density, simulator, compile_seconds = _compiled(problem)
    start = time.perf_counter()
    x = simulator.draw_prior(budget, _rng(seed))
    log_lik = _log_likelihood_batched(density, x)
    estimate = float(log_mean_exp(log_lik))
    ess = float(np.exp(2 * logsumexp(log_lik) - logsumexp(2 * log_lik)))
    return EstimateResult(estimate, time.perf_counter() - start,
                          {"compile_seconds": compile_seconds, "ess": ess})


# -- annealing ----------------------------------------------------------------------------------

def _plan(density, simulator, rng, n_steps, pilot_chains=32):
    x_pilot = simulator.draw_prior(pilot_chains, rng)
    plan, pilot = tune_plan(rng, x_pilot, density.parts(x_pilot), density.parts,
                            schedule=make_schedule("sigmoid", n_steps), n_steps=n_steps,
                            n_leapfrog=3, target_accept=0.9, jitter=0.5,
                            transitions_per_step=2)
    return plan, pilot


def _annealing(problem: Problem, n_steps: int, seed: int, direction: str) -> EstimateResult:
    density, simulator, compile_seconds = _compiled(problem)
    x_star = problem.generating_vector(density.layout) if direction == "reverse" else None
    start = time.perf_counter()
    pilot_rng, run_rng = _rng(seed).spawn(2)
    plan, _ = _plan(density, simulator, pilot_rng, n_steps)
    transition = plan.transition(density.parts)
    if direction == "forward":
        x0 = simulator.draw_prior(AIS_CHAINS, run_rng)
        run = ais_forward(run_rng, x0, density.parts(x0), plan.betas, transition)
        estimate = float(log_mean_exp(run.log_weight))
    else:
        run = ais_reverse(run_rng, x_star, AIS_CHAINS, plan.betas, transition, density.parts,
                          spread_transitions=10)
        estimate = -float(log_mean_exp(run.log_weight))
    return EstimateResult(estimate, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "chains": AIS_CHAINS,
        "mean_log_weight": float(np.mean(run.log_weight)),
        "acceptance_rate": float(np.nanmean(run.acceptance_rate)),
    })


def ais(problem, budget: int, seed: int) -> EstimateResult:
    """Annealed importance sampling from the prior (paper §3.3): a stochastic **lower** bound.

    The same algorithm as :func:`pymc_bdmc.sample_ais` (pilot-tuned, frozen HMC kernels,
    :data:`AIS_CHAINS` chains), on a sigmoid schedule (paper §6.2) and the cached density.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of annealing steps (intermediate distributions).
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _annealing(as_problem(problem), _check_budget(budget), seed, "forward")


def reverse_ais(problem, budget: int, seed: int) -> EstimateResult:
    """Reverse AIS from the generating parameters (paper §4.2): a stochastic **upper** bound.

    Valid on simulated data only: the chains start from ``theta*``, an exact posterior sample,
    and run the frozen forward kernels backwards, as in :func:`pymc_bdmc.sample_bdmc`.

    Parameters
    ----------
    problem : Problem
        With ``generating_point``.
    budget : int
        Number of annealing steps.
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _annealing(as_problem(problem), _check_budget(budget), seed, "reverse")


# -- harmonic mean ------------------------------------------------------------------------------

def _harmonic(problem: Problem, budget: int, seed: int, exact: bool) -> EstimateResult:
    density, simulator, compile_seconds = _compiled(problem)
    start = time.perf_counter()
    pilot_rng, run_rng = _rng(seed).spawn(2)
    # The pilot's last kernel is an HMC kernel tuned for the posterior (beta = 1).
    plan, _ = _plan(density, simulator, pilot_rng, 50)
    transition = plan.transition(density.parts)
    n_chains = 4
    n_draws = max(1, budget // n_chains)
    if exact:
        x = np.tile(problem.generating_vector(density.layout), (n_chains, 1))
        burn_in = 0
    else:
        x = simulator.draw_prior(n_chains, run_rng)
        burn_in = n_draws
    parts = density.parts(x)
    log_lik = []
    for i in range(burn_in + n_draws):
        x, parts, _ = transition(run_rng, x, parts, plan.n_steps)
        if i >= burn_in:
            log_lik.append(parts.log_likelihood)
    log_lik = np.concatenate(log_lik)
    estimate = -float(log_mean_exp(-log_lik))
    return EstimateResult(estimate, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "draws": len(log_lik), "burn_in": burn_in})


def harmonic_mean(problem, budget: int, seed: int) -> EstimateResult:
    """Harmonic mean of the likelihood over MCMC posterior draws (Newton & Raftery 1994).

    ``-log mean_k 1 / p(y | theta_k)``. With exact posterior draws it is an unbiased estimate
    of ``1 / p(y)`` (an upper bound); with MCMC draws from a random start it has **no**
    guaranteed direction, though in practice it overestimates, often by a lot (paper §3.2).
    Draws come from 4 HMC chains (step sizes from a pilot run), started at prior draws, with
    as many burn-in transitions as kept draws.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of kept posterior draws (over 4 chains).
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _harmonic(as_problem(problem), _check_budget(budget), seed, exact=False)


def harmonic_mean_exact(problem, budget: int, seed: int) -> EstimateResult:
    """Harmonic mean from a chain started at the exact sample ``theta*``: an **upper** bound.

    Every state of an invariant Markov chain started at an exact posterior sample is itself an
    exact posterior sample, so the estimate of ``1 / p(y)`` is unbiased (paper §4.2). Only for
    simulated data.

    Parameters
    ----------
    problem : Problem
        With ``generating_point``.
    budget : int
        Number of posterior draws (over 4 chains).
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _harmonic(as_problem(problem), _check_budget(budget), seed, exact=True)


# -- optimization-based --------------------------------------------------------------------------

def _map(density, simulator, rng, restarts: int):
    def objective(x):
        p = density.parts(x[None])
        value = -(p.log_prior[0] + p.log_likelihood[0])
        grad = -(p.grad_log_prior[0] + p.grad_log_likelihood[0])
        if not np.isfinite(value):
            return 1e300, np.zeros_like(x)
        return value, grad

    best = None
    for x0 in simulator.draw_prior(restarts, rng):
        res = optimize.minimize(objective, x0, jac=True, method="L-BFGS-B",
                                options={"maxiter": 5000})
        if best is None or res.fun < best.fun:
            best = res
    return best


def _hessian(density, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    # Central differences of the analytic gradient, all 2d points in one batched call.
    d = len(x)
    steps = np.concatenate([x + eps * np.eye(d), x - eps * np.eye(d)])
    p = density.parts(steps)
    grad = p.grad_log_prior + p.grad_log_likelihood
    hess = (grad[:d] - grad[d:]) / (2 * eps)
    return 0.5 * (hess + hess.T)


def laplace(problem, budget: int, seed: int) -> EstimateResult:
    """Laplace approximation at the MAP in PyMC's unconstrained space: **no** fixed direction.

    ``log p(y) ~= log p(x^, y) + d/2 log(2 pi) - 1/2 log det H``, with ``x^`` the mode of the
    joint density in the unconstrained space (log-Jacobians included) and ``H`` the negative
    Hessian there (central differences of the exact gradient). Exact for Gaussian posteriors.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of L-BFGS restarts from prior draws (the best mode is kept).
    seed : int

    Returns
    -------
    EstimateResult
    """
    problem, budget = as_problem(problem), _check_budget(budget)
    density, simulator, compile_seconds = _compiled(problem)
    start = time.perf_counter()
    best = _map(density, simulator, _rng(seed), budget)
    neg_hess = -_hessian(density, best.x)
    sign, logdet = np.linalg.slogdet(neg_hess)
    d = len(best.x)
    estimate = (-best.fun + 0.5 * d * np.log(2 * np.pi) - 0.5 * logdet) if sign > 0 else np.nan
    return EstimateResult(float(estimate), time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "log_joint_at_mode": float(-best.fun),
        "positive_definite": bool(sign > 0)})


def bic(problem, budget: int, seed: int) -> EstimateResult:
    """Bayesian information criterion ``log p(y | theta^) - d/2 log N``: **no** fixed direction.

    ``theta^`` is the MAP in the unconstrained space (a stand-in for the maximum-likelihood
    estimate, which may not exist for latent-variable models), ``d`` the number of free
    coordinates and ``N`` the number of data points (rows of the observed data).

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of L-BFGS restarts from prior draws.
    seed : int

    Returns
    -------
    EstimateResult
    """
    problem, budget = as_problem(problem), _check_budget(budget)
    density, simulator, compile_seconds = _compiled(problem)
    start = time.perf_counter()
    best = _map(density, simulator, _rng(seed), budget)
    log_lik = float(density.parts(best.x[None]).log_likelihood[0])
    estimate = log_lik - 0.5 * len(best.x) * np.log(problem.n_data)
    return EstimateResult(float(estimate), time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "n_data": problem.n_data})


def variational_bayes(problem, budget: int, seed: int, elbo_draws: int = 2000,
                      learning_rate: float = 0.05) -> EstimateResult:
    """Mean-field ADVI (``pm.fit``) evidence lower bound: a stochastic **lower** bound.

    After ``budget`` ADVI iterations, the ELBO of the fitted Gaussian ``q`` over PyMC's
    unconstrained space is estimated with ``elbo_draws`` fresh draws from ``q``:
    ``E_q[log p(x, y)] + H[q]``, whose expectation is at most ``log p(y)``. No symmetry
    correction for label switching is applied (paper §5.2).

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        ADVI iterations.
    seed : int
    elbo_draws : int, default 2000
    learning_rate : float, default 0.05
        Of the Adam optimizer (PyMC's default Adagrad step is too small to converge in a few
        thousand iterations on the benchmark models).

    Returns
    -------
    EstimateResult
    """
    problem, budget = as_problem(problem), _check_budget(budget)
    density, _, compile_seconds = _compiled(problem)
    start = time.perf_counter()
    rng_fit, rng_elbo = _rng(seed).spawn(2)
    with problem.model:
        approx = pm.fit(n=budget, method="advi", random_seed=int(rng_fit.integers(2**31)),
                        obj_optimizer=pm.adam(learning_rate=learning_rate), progressbar=False,
                        compile_kwargs=dict(COMPILE_KWARGS))
    group = approx.groups[0]
    mean = np.asarray(group.mean.eval())
    std = np.asarray(group.std.eval())
    mu = np.empty(density.n_dim)
    sd = np.empty(density.n_dim)
    for name, slc, *_ in group.ordering.values():
        mu[density.layout.slices[density.layout.names.index(name)]] = mean[slc]
        sd[density.layout.slices[density.layout.names.index(name)]] = std[slc]
    x = mu + sd * rng_elbo.standard_normal((elbo_draws, density.n_dim))
    log_joint = np.concatenate([
        (lambda p: p.log_prior + p.log_likelihood)(density.parts(x[i:i + 512]))
        for i in range(0, elbo_draws, 512)
    ])
    entropy = np.sum(np.log(sd)) + 0.5 * density.n_dim * (1 + np.log(2 * np.pi))
    estimate = float(np.mean(log_joint) + entropy)
    return EstimateResult(estimate, time.perf_counter() - start, {
        "compile_seconds": compile_seconds,
        "elbo_se": float(np.std(log_joint) / np.sqrt(elbo_draws))})


# -- PyMC's SMC as an outside peer -----------------------------------------------------------------

def smc(problem, budget: int, seed: int, chains: int = 2) -> EstimateResult:
    """PyMC's ``pm.sample_smc`` (adaptive tempering, IMH kernel) as an outside peer.

    The per-chain log marginal likelihood is the last non-NaN entry of
    ``sample_stats.log_marginal_likelihood`` (ragged object arrays in PyMC 6); chains are
    combined by log-mean-exp. SMC with a fixed schedule is unbiased for ``p(y)`` (a lower
    bound), but PyMC adapts its schedule and kernels to the particles, so **no** direction is
    guaranteed (and on larger models it overestimates; see ``docs/testbed.md``).

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Particles per chain (``draws``).
    seed : int
    chains : int, default 2

    Returns
    -------
    EstimateResult
        Compilation is included in ``seconds`` (PyMC compiles inside the call).
    """
    problem, budget = as_problem(problem), _check_budget(budget)
    start = time.perf_counter()
    with problem.model:
        idata = pm.sample_smc(draws=budget, chains=chains, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False,
                              compile_kwargs=dict(COMPILE_KWARGS))
    per_chain = smc_log_marginal_likelihood(idata)
    return EstimateResult(float(log_mean_exp(per_chain)), time.perf_counter() - start,
                          {"per_chain": per_chain.tolist()})


def smc_log_marginal_likelihood(idata) -> np.ndarray:
    """Per-chain log marginal likelihood from a ``pm.sample_smc`` result.

    Parameters
    ----------
    idata : DataTree or InferenceData
        With ``sample_stats.log_marginal_likelihood``, per chain either a ragged object array of
        per-stage values or a float array padded with NaN.

    Returns
    -------
    ndarray, shape (chains,)
        The last finite value of each chain.
    """
    values = np.asarray(idata["sample_stats"]["log_marginal_likelihood"].values)
    out = []
    for chain in values.reshape(values.shape[0], -1) if values.dtype != object else values:
        flat = np.concatenate([np.atleast_1d(np.asarray(v, dtype=float)).ravel()
                               for v in np.atleast_1d(chain)])
        finite = flat[np.isfinite(flat)]
        out.append(finite[-1] if finite.size else np.nan)
    return np.asarray(out, dtype=float)


ESTIMATORS: dict[str, EstimatorSpec] = {
    "likelihood_weighting": EstimatorSpec(likelihood_weighting, "lower", "prior draws", 1000),
    "harmonic_mean": EstimatorSpec(harmonic_mean, "neither", "posterior draws", 200),
    "harmonic_mean_exact": EstimatorSpec(harmonic_mean_exact, "upper", "posterior draws", 200,
                                         needs_generating_point=True),
    "bic": EstimatorSpec(bic, "neither", "optimizer restarts", 1),
    "laplace": EstimatorSpec(laplace, "neither", "optimizer restarts", 1),
    "variational_bayes": EstimatorSpec(variational_bayes, "lower", "ADVI iterations", 2000),
    "ais": EstimatorSpec(ais, "lower", "annealing steps", 100),
    "reverse_ais": EstimatorSpec(reverse_ais, "upper", "annealing steps", 100,
                                 needs_generating_point=True),
    "smc": EstimatorSpec(smc, "neither", "particles per chain", 500),
}
"""The registered estimators by name, with bias direction and budget meaning."""
