"""Marginal-likelihood estimators behind one interface, for the testbed.

Every estimator is a function ``estimator(problem, budget, seed) -> EstimateResult``, where
``problem`` is a :class:`~pymc_bdmc.testbed.models.Problem` (or a bare ``pm.Model``, or a
:class:`~pymc_bdmc.known_evidence.AnalyticModel`), ``budget`` a positive integer setting the
estimator's main cost (its meaning is listed in :data:`ESTIMATORS`), and ``seed`` an integer.

Each estimator states its *bias direction*, following Grosse, Ghahramani & Adams (2015, §3-5):

* ``"lower"``: a stochastic lower bound on ``log p(y)``: ``E[estimate] <= log p(y)`` and
  ``P(estimate > log p(y) + b) < exp(-b)`` (an unbiased estimator of ``p(y)``, or an ELBO);
* ``"upper"``: a stochastic upper bound (an unbiased estimator of ``1 / p(y)``), valid when the
  chains start from *exact* posterior samples (simulated data, ``theta*`` known);
* ``"neither"``: no guaranteed direction (BIC, Laplace, PyMC's adaptive SMC, the harmonic mean
  from approximate posterior draws, which is an upper bound only in the limit of exact draws,
  nested sampling with MCMC replacements, Bayesian Monte Carlo, the symmetry-corrected ELBO).

The Chib-Murray-Salakhutdinov estimator (:mod:`.chib`), nested sampling (:mod:`.nested`) and
Bayesian Monte Carlo (:mod:`.quadrature`) live in modules of their own and are registered here;
the shared interface is in :mod:`.base`.

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

import numpy as np
import pymc as pm
from scipy import optimize
from scipy.special import gammaln, logsumexp

from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.algorithms.smc import TemperingPath, smc_forward, smc_reverse
from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.testbed.base import (  # noqa: F401  (re-exported: the estimator interface)
    AIS_CHAINS,
    COMPILE_KWARGS,
    Bias,
    EstimateResult,
    EstimatorSpec,
    as_problem,
    check_budget,
    compiled_problem,
    estimator_rng,
    log_likelihood_batched,
    pilot_plan,
)
from pymc_bdmc.testbed.chib import chib_murray_salakhutdinov
from pymc_bdmc.testbed.models import Problem
from pymc_bdmc.testbed.nested import nested_sampling_estimator
from pymc_bdmc.testbed.quadrature import bayesian_monte_carlo

__all__ = [
    "COMPILE_KWARGS",
    "ESTIMATORS",
    "EstimateResult",
    "EstimatorSpec",
    "ais",
    "as_problem",
    "bayesian_monte_carlo",
    "bic",
    "chib_murray_salakhutdinov",
    "forward_smc",
    "harmonic_mean",
    "harmonic_mean_exact",
    "laplace",
    "likelihood_weighting",
    "nested_sampling_estimator",
    "reverse_ais",
    "sequential_harmonic_mean",
    "smc",
    "variational_bayes",
    "variational_bayes_symmetric",
]

logger = logging.getLogger(__name__)


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
    problem, budget = as_problem(problem), check_budget(budget)
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    x = simulator.draw_prior(budget, estimator_rng(seed))
    log_lik = log_likelihood_batched(density, x)
    estimate = float(log_mean_exp(log_lik))
    ess = float(np.exp(2 * logsumexp(log_lik) - logsumexp(2 * log_lik)))
    return EstimateResult(estimate, time.perf_counter() - start,
                          {"compile_seconds": compile_seconds, "ess": ess})


# -- annealing ----------------------------------------------------------------------------------

#: HMC transitions at beta = 1 that spread reverse chains out from theta* (as in sample_bdmc).
REVERSE_SPREAD = 10


def annealing_run(problem: Problem, n_steps: int, seed: int, direction: str, *,
                  schedule: str = "sigmoid", chains: int = AIS_CHAINS, pilot_chains: int = 32,
                  plan=None) -> EstimateResult:
    """Forward or reverse AIS on the cached density; a frozen ``plan`` skips the pilot."""
    density, simulator, compile_seconds = compiled_problem(problem)
    x_star = problem.generating_vector(density.layout) if direction == "reverse" else None
    start = time.perf_counter()
    pilot_rng, run_rng = estimator_rng(seed).spawn(2)
    if plan is None:
        plan, _ = pilot_plan(density, simulator, pilot_rng, n_steps, pilot_chains=pilot_chains,
                             schedule=schedule)
    transition = plan.transition(density.parts)
    if direction == "forward":
        x0 = simulator.draw_prior(chains, run_rng)
        run = ais_forward(run_rng, x0, density.parts(x0), plan.betas, transition)
        estimate = float(log_mean_exp(run.log_weight))
    else:
        run = ais_reverse(run_rng, x_star, chains, plan.betas, transition, density.parts,
                          spread_transitions=REVERSE_SPREAD)
        estimate = -float(log_mean_exp(run.log_weight))
    return EstimateResult(estimate, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "chains": chains,
        "mean_log_weight": float(np.mean(run.log_weight)),
        "acceptance_rate": float(np.nanmean(run.acceptance_rate)),
        "n_failed": run.n_failed_total,
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
    return annealing_run(as_problem(problem), check_budget(budget), seed, "forward")


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
    return annealing_run(as_problem(problem), check_budget(budget), seed, "reverse")


# -- this package's SMC and its reverse (SHME) --------------------------------------------------

#: Populations and particles of the testbed's SMC rows, and HMC transitions per stage (as in
#: :func:`pymc_bdmc.sample_smc_evidence`).
SMC_CHAINS, SMC_PARTICLES, SMC_TRANSITIONS = 4, 32, 5


def _smc_run(problem: Problem, n_steps: int, seed: int, direction: str) -> EstimateResult:
    density, simulator, compile_seconds = compiled_problem(problem)
    x_star = problem.generating_vector(density.layout) if direction == "reverse" else None
    start = time.perf_counter()
    pilot_rng, run_rng = estimator_rng(seed).spawn(2)
    plan, _ = pilot_plan(density, simulator, pilot_rng, n_steps, pilot_chains=64,
                         schedule="adaptive", transitions_per_step=SMC_TRANSITIONS)
    path, transition = TemperingPath(plan.betas), plan.transition(density.parts)
    if direction == "forward":
        x0 = simulator.draw_prior(SMC_CHAINS * SMC_PARTICLES, run_rng)
        run = smc_forward(run_rng, x0, density.parts(x0), path, transition, chains=SMC_CHAINS)
        estimate = float(log_mean_exp(run.log_weight))
    else:
        run = smc_reverse(run_rng, x_star, SMC_PARTICLES, path, transition, density.parts,
                          chains=SMC_CHAINS, spread_transitions=REVERSE_SPREAD)
        estimate = -float(log_mean_exp(run.log_weight))
    return EstimateResult(estimate, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "chains": SMC_CHAINS, "particles": SMC_PARTICLES,
        "per_population": run.log_weight.tolist(),
        "resampling_events": int(run.resampled.sum()), "n_failed": run.n_failed_total,
    })


def forward_smc(problem, budget: int, seed: int) -> EstimateResult:
    """Run this package's SMC from exact prior draws (paper §3.4): a stochastic **lower** bound.

    The algorithm of :func:`pymc_bdmc.sample_smc_evidence` on the cached density: a pilot
    (64 particles) tunes HMC kernels and places ``budget`` stages at equal thermodynamic length;
    then 4 populations of 32 particles reweight, resample systematically when their ESS drops
    below half, and move (5 frozen HMC transitions per stage). Each population's estimate is
    unbiased for ``p(y)``; they are averaged on the natural scale. (``"smc"`` is PyMC's own
    adaptive ``pm.sample_smc``, which has no guaranteed direction.)

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of SMC stages (tempering steps).
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _smc_run(as_problem(problem), check_budget(budget), seed, "forward")


def sequential_harmonic_mean(problem, budget: int, seed: int) -> EstimateResult:
    """Reverse SMC from ``theta*``, the sequential harmonic mean estimator: an **upper** bound.

    Every particle starts at the generating parameters (spread by 10 transitions at
    ``beta = 1``), and the path of :func:`forward_smc` is run backwards, resampling in
    proportion to ``1 / w`` (paper §4.2.2, Algorithm 3); each population's estimate of
    ``1 / p(y)`` is unbiased. Simulated data only.

    Parameters
    ----------
    problem : Problem
        With ``generating_point``.
    budget : int
        Number of SMC stages.
    seed : int

    Returns
    -------
    EstimateResult
    """
    return _smc_run(as_problem(problem), check_budget(budget), seed, "reverse")


# -- harmonic mean ------------------------------------------------------------------------------

def _harmonic(problem: Problem, budget: int, seed: int, exact: bool) -> EstimateResult:
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    pilot_rng, run_rng = estimator_rng(seed).spawn(2)
    # The pilot's last kernel is an HMC kernel tuned for the posterior (beta = 1).
    plan, _ = pilot_plan(density, simulator, pilot_rng, 50)
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
    return _harmonic(as_problem(problem), check_budget(budget), seed, exact=False)


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
    return _harmonic(as_problem(problem), check_budget(budget), seed, exact=True)


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
    problem, budget = as_problem(problem), check_budget(budget)
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    best = _map(density, simulator, estimator_rng(seed), budget)
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
    problem, budget = as_problem(problem), check_budget(budget)
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    best = _map(density, simulator, estimator_rng(seed), budget)
    log_lik = float(density.parts(best.x[None]).log_likelihood[0])
    estimate = log_lik - 0.5 * len(best.x) * np.log(problem.n_data)
    return EstimateResult(float(estimate), time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "n_data": problem.n_data})


def variational_bayes(problem, budget: int, seed: int, elbo_draws: int = 2000,
                      learning_rate: float = 0.05,
                      symmetry_correction: bool = False) -> EstimateResult:
    """Mean-field ADVI (``pm.fit``) evidence lower bound: a stochastic **lower** bound.

    After ``budget`` ADVI iterations, the ELBO of the fitted Gaussian ``q`` over PyMC's
    unconstrained space is estimated with ``elbo_draws`` fresh draws from ``q``:
    ``E_q[log p(x, y)] + H[q]``, whose expectation is at most ``log p(y)``.

    With ``symmetry_correction``, ``log K!`` is added for a problem with
    ``K = problem.n_exchangeable_components`` interchangeable components (paper §6: the bound
    "multiplied by the number of equivalent relabelings"). A unimodal ``q`` covers at most one of
    the posterior's ``K!`` symmetric modes; if those modes are well separated and ``q`` captures
    one well, the mixture of its ``K!`` relabelings is still a valid ``q`` and gains ``log K!``.
    When the modes overlap (or ``q`` sits between them) the corrected value can exceed
    ``log p(y)``, so it is no longer a guaranteed lower bound: :data:`ESTIMATORS` lists it as
    ``"neither"``.

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
    symmetry_correction : bool, default False
        Add ``log K!`` (``info["symmetry_correction"]``).

    Returns
    -------
    EstimateResult
    """
    problem, budget = as_problem(problem), check_budget(budget)
    k = int(problem.n_exchangeable_components)
    if k < 1:
        raise ValueError(f"`n_exchangeable_components` must be at least 1, got {k}.")
    correction = float(gammaln(k + 1)) if symmetry_correction else 0.0
    density, _, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    rng_fit, rng_elbo = estimator_rng(seed).spawn(2)
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
    elbo = float(np.mean(log_joint) + entropy)
    return EstimateResult(elbo + correction, time.perf_counter() - start, {
        "compile_seconds": compile_seconds, "elbo": elbo, "symmetry_correction": correction,
        "elbo_se": float(np.std(log_joint) / np.sqrt(elbo_draws))})


def variational_bayes_symmetric(problem, budget: int, seed: int) -> EstimateResult:
    """:func:`variational_bayes` plus ``log K!`` for ``K`` exchangeable components: **neither**.

    ``K`` is ``problem.n_exchangeable_components`` (clusters, attributes or factors of the
    benchmark models; 1, i.e. no correction, elsewhere). See :func:`variational_bayes`.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        ADVI iterations.
    seed : int

    Returns
    -------
    EstimateResult
    """
    return variational_bayes(problem, budget, seed, symmetry_correction=True)


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
    problem, budget = as_problem(problem), check_budget(budget)
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
    "variational_bayes_sym": EstimatorSpec(variational_bayes_symmetric, "neither",
                                           "ADVI iterations", 2000),
    "ais": EstimatorSpec(ais, "lower", "annealing steps", 100),
    "reverse_ais": EstimatorSpec(reverse_ais, "upper", "annealing steps", 100,
                                 needs_generating_point=True),
    "forward_smc": EstimatorSpec(forward_smc, "lower", "SMC stages", 25),
    "shme": EstimatorSpec(sequential_harmonic_mean, "upper", "SMC stages", 25,
                          needs_generating_point=True),
    "cms": EstimatorSpec(chib_murray_salakhutdinov, "lower", "Gibbs sweeps per chain", 50,
                         needs_gibbs_model=True),
    "nested_sampling": EstimatorSpec(nested_sampling_estimator, "neither", "live points", 50),
    "bayesian_monte_carlo": EstimatorSpec(bayesian_monte_carlo, "neither", "design points",
                                          100),
    "smc": EstimatorSpec(smc, "neither", "particles per chain", 500),
}
"""The registered estimators by name, with bias direction and budget meaning."""
