"""Bayesian Monte Carlo (Rasmussen & Ghahramani 2003): Gaussian-process quadrature of the evidence.

To estimate ``Z = integral f(x) g(x) dx`` for a Gaussian ``g = N(b, B)``, put a zero-mean GP prior
with squared-exponential kernel ``k(x, x') = w0 exp(-1/2 (x - x')' A^-1 (x - x'))``,
``A = diag(lengthscales^2)``, on ``f``, condition on ``f`` at design points ``x_1..x_n``, and
integrate the posterior: ``Z`` is Gaussian with

``E[Z] = z' K^-1 f``,  ``Var[Z] = w0 |2 A^-1 B + I|^-1/2 - z' K^-1 z``,

where ``K_lm = k(x_l, x_m)`` and the kernel means are closed form (Bayes-Hermite quadrature):

``z_l = integral k(x, x_l) g(x) dx``
``= w0 |A^-1 B + I|^-1/2 exp(-1/2 (x_l - b)' (A + B)^-1 (x_l - b))``.

The estimate is *exact* whenever ``f`` lies in the span of the kernels centred at the design
points (the posterior mean interpolates it exactly): e.g. a Gaussian bump ``f(x) = c k(x, x_j)``
with the kernel's lengthscales, centred at a design point (tested to round-off).

For the evidence ``f`` is the likelihood and ``g`` the prior in PyMC's unconstrained space. When
that prior is exactly Gaussian (checked numerically: its log density equals a Gaussian's, fitted
at its mode, at prior draws) the GP models ``L(x)`` itself. Otherwise, by default, a Gaussian
reference ``g`` with the prior draws' mean and covariance stands in, and the GP models the
importance-corrected integrand ``f = L(x) pi(x) / g(x)`` (the paper's eq. 11);
``non_gaussian_prior="raise"`` refuses such models instead. The GP runs on ``f / max f``, and
the log of the estimate is reported; a non-positive posterior mean (possible: the GP mean can
undershoot zero) gives NaN with ``info["error"]``. BMC has **no** guaranteed bias direction.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize

from pymc_bdmc.testbed.base import (
    EstimateResult,
    as_problem,
    check_budget,
    compiled_problem,
    estimator_rng,
    pilot_plan,
)

__all__ = ["BMCEstimate", "bayesian_monte_carlo", "bmc_integral", "fit_lengthscales",
           "gaussian_prior", "kernel_means"]

logger = logging.getLogger(__name__)

#: Diagonal added to the unit-amplitude kernel matrix, for numerical conditioning.
JITTER = 1e-8


def _kernel(a: np.ndarray, b: np.ndarray, lengthscales: np.ndarray) -> np.ndarray:
    d = (a[:, None, :] - b[None, :, :]) / lengthscales
    return np.exp(-0.5 * np.sum(d**2, axis=-1))


def kernel_means(points: np.ndarray, lengthscales: np.ndarray, mean: np.ndarray,
                 cov: np.ndarray) -> np.ndarray:
    """``z_l = integral k(x, x_l) N(x | mean, cov) dx`` for a unit-amplitude SE kernel.

    Parameters
    ----------
    points : ndarray, shape (n, d)
    lengthscales : ndarray, shape (d,)
    mean : ndarray, shape (d,)
    cov : ndarray, shape (d, d)

    Returns
    -------
    ndarray, shape (n,)
    """
    a = np.diag(lengthscales**2)
    _, logdet = np.linalg.slogdet(np.eye(len(mean)) + cov / lengthscales[:, None] ** 2)
    diff = points - mean
    chol = linalg.cho_factor(a + cov)
    quad = np.sum(diff * linalg.cho_solve(chol, diff.T).T, axis=1)
    return np.exp(-0.5 * logdet - 0.5 * quad)


def _kernel_double_mean(lengthscales: np.ndarray, cov: np.ndarray) -> float:
    # integral integral k(x, x') g(x) g(x') dx dx' = |2 A^-1 B + I|^-1/2 (unit amplitude)
    _, logdet = np.linalg.slogdet(np.eye(len(cov)) + 2 * cov / lengthscales[:, None] ** 2)
    return float(np.exp(-0.5 * logdet))


@dataclass(frozen=True)
class BMCEstimate:
    """GP-quadrature estimate of ``log integral f(x) N(x | b, B) dx``.

    Attributes
    ----------
    log_integral : float
        Log of the posterior mean of the integral (NaN if that mean is not positive).
    relative_sd : float
        Posterior standard deviation of the integral over its mean.
    mean_scaled : float
        Posterior mean of the integral of ``f / max f``.
    amplitude : float
        Maximum-likelihood ``w0`` of the GP on ``f / max f``.
    """

    log_integral: float
    relative_sd: float
    mean_scaled: float
    amplitude: float


def bmc_integral(points: np.ndarray, log_f: np.ndarray, mean: np.ndarray, cov: np.ndarray,
                 lengthscales: np.ndarray, jitter: float = JITTER) -> BMCEstimate:
    """Bayesian Monte Carlo estimate of ``integral f(x) N(x | mean, cov) dx``.

    Parameters
    ----------
    points : ndarray, shape (n, d)
        Design points (distinct).
    log_f : ndarray, shape (n,)
        ``log f`` at the points (the GP models ``f / max f``).
    mean, cov : ndarray
        The Gaussian measure.
    lengthscales : ndarray, shape (d,)
        Of the squared-exponential kernel.
    jitter : float, default 1e-8
        Added to the diagonal of the unit-amplitude kernel matrix.

    Returns
    -------
    BMCEstimate
    """
    points, log_f = np.atleast_2d(points), np.asarray(log_f, dtype=float)
    lengthscales = np.asarray(lengthscales, dtype=float)
    top = float(np.max(log_f))
    f = np.exp(log_f - top)
    k = _kernel(points, points, lengthscales) + jitter * np.eye(len(points))
    chol = linalg.cho_factor(k)
    alpha = linalg.cho_solve(chol, f)
    z = kernel_means(points, lengthscales, np.asarray(mean, float), np.asarray(cov, float))
    mean_scaled = float(z @ alpha)
    amplitude = float(f @ alpha) / len(f)
    var = amplitude * (_kernel_double_mean(lengthscales, cov) - z @ linalg.cho_solve(chol, z))
    log_integral = float(np.log(mean_scaled) + top) if mean_scaled > 0 else np.nan
    rel_sd = float(np.sqrt(max(var, 0.0)) / mean_scaled) if mean_scaled > 0 else np.nan
    return BMCEstimate(log_integral, rel_sd, mean_scaled, amplitude)


def _neg_profile_log_ml(log_ell, points, f, jitter):
    """Minus the GP log marginal likelihood of ``f``, amplitude profiled out, and its gradient.

    ``value = n/2 log(f' K^-1 f / n) + 1/2 log|K|`` for the unit-amplitude kernel matrix ``K``.
    With ``dK/dlog(ell_d) = K o S_d``, ``S_d[i, j] = (x_id - x_jd)^2 / ell_d^2``, the gradient is
    ``sum_ij C_ij S_d[i, j]`` for ``C = (K^-1 - n alpha alpha' / f'alpha) o K / 2``; it is formed
    from matrix products, never an ``(n, n, d)`` array.
    """
    ell = np.exp(log_ell)
    n = len(f)
    scaled = points / ell
    sq_norms = np.sum(scaled**2, axis=1)
    dist2 = np.maximum(sq_norms[:, None] + sq_norms[None, :] - 2 * scaled @ scaled.T, 0.0)
    kernel = np.exp(-0.5 * dist2)
    try:
        chol = linalg.cho_factor(kernel + jitter * np.eye(n))
    except linalg.LinAlgError:
        return 1e300, np.zeros_like(log_ell)
    alpha = linalg.cho_solve(chol, f)
    fka = float(f @ alpha)
    logdet = 2 * np.sum(np.log(np.diag(chol[0])))
    value = 0.5 * n * np.log(fka / n) + 0.5 * logdet
    k_inv = linalg.cho_solve(chol, np.eye(n))
    c = 0.5 * (k_inv - n * np.outer(alpha, alpha) / fka) * kernel
    # sum_ij C_ij (s_i - s_j)^2 = 2 sum_i s_i^2 (C 1)_i - 2 s' C s, per scaled coordinate s
    grad = 2 * (c.sum(axis=1) @ scaled**2) - 2 * np.sum(scaled * (c @ scaled), axis=0)
    return value, grad


def fit_lengthscales(points: np.ndarray, log_f: np.ndarray, initial: np.ndarray,
                     bounds: tuple[np.ndarray, np.ndarray], jitter: float = JITTER) -> np.ndarray:
    """Lengthscales maximizing the GP marginal likelihood of ``f / max f`` (amplitude profiled).

    Parameters
    ----------
    points : ndarray, shape (n, d)
    log_f : ndarray, shape (n,)
    initial : ndarray, shape (d,)
    bounds : (lower, upper) arrays of shape (d,)
    jitter : float, default 1e-8

    Returns
    -------
    ndarray, shape (d,)
    """
    f = np.exp(log_f - np.max(log_f))
    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    x0 = np.clip(np.log(initial), lo, hi)
    res = optimize.minimize(_neg_profile_log_ml, x0, args=(points, f, jitter), jac=True,
                            method="L-BFGS-B", bounds=list(zip(lo, hi, strict=True)))
    return np.exp(res.x)


def gaussian_prior(density, simulator, rng: np.random.Generator, n_check: int = 16,
                   tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray] | None:
    """``(mean, cov)`` if the prior is exactly Gaussian in the unconstrained space, else None.

    Fits the Gaussian at the prior's mode (Newton step from a prior draw: exact for a quadratic
    log density, with the Hessian from central differences of the exact gradient) and accepts it
    if the log prior equals that Gaussian's log density at ``n_check`` prior draws within
    ``tol`` (absolute, plus ``tol`` relative).
    """
    x = simulator.draw_prior(n_check, rng)
    d = x.shape[1]
    x0 = x[0]
    eps = 1e-4
    steps = np.concatenate([x0 + eps * np.eye(d), x0 - eps * np.eye(d), x0[None]])
    p = density.parts(steps)
    hess = (p.grad_log_prior[:d] - p.grad_log_prior[d:2 * d]) / (2 * eps)
    hess = 0.5 * (hess + hess.T)
    precision = -hess
    try:
        chol = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return None
    mean = x0 + np.linalg.solve(precision, p.grad_log_prior[-1])
    diff = (x - mean) @ chol
    log_gauss = (-0.5 * np.sum(diff**2, axis=1) + np.sum(np.log(np.diag(chol)))
                 - 0.5 * d * np.log(2 * np.pi))
    log_prior = density.parts(x).log_prior
    if np.all(np.abs(log_prior - log_gauss) <= tol * (1 + np.abs(log_prior))):
        return mean, np.linalg.inv(precision)
    return None


def _design_points(density, simulator, rng, n_points: int, chains: int):
    """States of ``chains`` tempered HMC chains from prior draws to the posterior.

    A pilot-tuned adaptive (equal thermodynamic length) path of ``ceil(n_points / chains) - 1``
    steps; every state is kept, so the points cover the prior, the posterior and the shell
    between them, as in the paper's use of annealing samples.
    """
    plan_rng, run_rng = rng.spawn(2)
    n_steps = max(1, -(-n_points // chains) - 1)
    plan, _ = pilot_plan(density, simulator, plan_rng, n_steps, schedule="adaptive")
    transition = plan.transition(density.parts)
    x = simulator.draw_prior(chains, run_rng)
    parts = density.parts(x)
    xs, lls, lps = [x], [parts.log_likelihood], [parts.log_prior]
    for t in range(1, n_steps + 1):
        x, parts, _ = transition(run_rng, x, parts, t)
        xs.append(x)
        lls.append(parts.log_likelihood)
        lps.append(parts.log_prior)
    x, ll, lp = np.concatenate(xs)[:n_points], np.concatenate(lls)[:n_points], \
        np.concatenate(lps)[:n_points]
    # HMC rejections repeat states; a repeated point makes the kernel matrix singular.
    _, keep = np.unique(x, axis=0, return_index=True)
    keep = np.sort(keep)
    return x[keep], ll[keep], lp[keep]


def bayesian_monte_carlo(problem, budget: int, seed: int, chains: int = 8,
                         non_gaussian_prior: str = "reweight",
                         reference_draws: int = 4000) -> EstimateResult:
    """Bayesian Monte Carlo: GP quadrature of the likelihood against the prior; **no** direction.

    Design points are the states of ``chains`` HMC chains annealed from prior draws to the
    posterior (pilot-tuned adaptive path); the SE kernel's lengthscales maximize the GP marginal
    likelihood of the scaled integrand. See the module notes for the Gaussian reference.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
    budget : int
        Number of design points (likelihood evaluations the GP conditions on; the GP costs
        ``O(budget^3)``). Repeated states are dropped.
    seed : int
    chains : int, default 8
    non_gaussian_prior : {"reweight", "raise"}, default "reweight"
        What to do when the unconstrained prior is not exactly Gaussian: importance-correct
        against a moment-matched Gaussian reference, or raise ``ValueError``.
    reference_draws : int, default 4000
        Prior draws for the moment-matched reference.

    Returns
    -------
    EstimateResult
        ``info``: ``prior`` ("gaussian" or "reweighted"), ``lengthscales``, ``relative_sd``
        (the GP's posterior sd of ``Z`` over its mean), ``n_points``.
    """
    problem, budget = as_problem(problem), check_budget(budget)
    if non_gaussian_prior not in ("reweight", "raise"):
        raise ValueError("`non_gaussian_prior` must be 'reweight' or 'raise', got "
                         f"{non_gaussian_prior!r}.")
    if budget < 2:
        raise ValueError(f"Bayesian Monte Carlo needs at least 2 design points, got {budget}.")
    density, simulator, compile_seconds = compiled_problem(problem)
    start = time.perf_counter()
    check_rng, ref_rng, design_rng = estimator_rng(seed).spawn(3)
    gaussian = gaussian_prior(density, simulator, check_rng)
    if gaussian is None and non_gaussian_prior == "raise":
        raise ValueError(
            f"The prior of {problem.name!r} is not Gaussian in PyMC's unconstrained space, "
            "so Bayesian Monte Carlo's closed-form kernel means do not apply; pass "
            "non_gaussian_prior='reweight' to integrate L(x) p(x) / g(x) against a Gaussian g.")
    x, log_lik, log_prior = _design_points(density, simulator, design_rng, budget, chains)
    if gaussian is not None:
        mean, cov = gaussian
        log_f, kind = log_lik, "gaussian"
    else:
        draws = simulator.draw_prior(reference_draws, ref_rng)
        mean = draws.mean(axis=0)
        cov = np.atleast_2d(np.cov(draws, rowvar=False))
        chol = np.linalg.cholesky(cov)
        diff = linalg.solve_triangular(chol, (x - mean).T, lower=True)
        log_g = (-0.5 * np.sum(diff**2, axis=0) - np.sum(np.log(np.diag(chol)))
                 - 0.5 * x.shape[1] * np.log(2 * np.pi))
        log_f, kind = log_lik + log_prior - log_g, "reweighted"
    finite = np.isfinite(log_f)
    x, log_f = x[finite], log_f[finite]
    sd = np.sqrt(np.diag(cov))
    w = np.exp(log_f - log_f.max())
    spread = np.sqrt(np.maximum((w / w.sum()) @ (x - (w / w.sum()) @ x) ** 2, 1e-12))
    lengthscales = fit_lengthscales(x, log_f, initial=np.maximum(spread, 1e-3 * sd),
                                    bounds=(1e-4 * sd, 10 * sd))
    est = bmc_integral(x, log_f, mean, cov, lengthscales)
    info = {"compile_seconds": compile_seconds, "prior": kind, "n_points": len(x),
            "lengthscales": lengthscales.tolist(), "relative_sd": est.relative_sd}
    if not np.isfinite(est.log_integral):
        info["error"] = "the GP posterior mean of the integral is not positive"
    return EstimateResult(est.log_integral, time.perf_counter() - start, info)
