"""The held-out likelihood's pilot: one population per case, kernels shared by all cases.

Every (chain, case) pair of a held-out run is its own AIS chain, but the schedule, step sizes and
mass matrices are shared by the cases. The pilot (:func:`run_case_pilot`) tunes them on its own
chains and random stream, with per-case populations resampled within their case, and
:func:`pymc_bdmc.kernels.tuning.plan_from_pilot` freezes them before any measured chain starts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.hmc import HMCParams, PartsFn, hmc_step
from pymc_bdmc.kernels.tuning import MAX_PILOT_STEPS, MIN_VARIANCE, PilotResult, next_pilot_beta
from pymc_bdmc.model.density import DensityParts

__all__ = ["column_weights", "resample_within_cases", "run_case_pilot"]


def resample_within_cases(rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """Systematic resampling of every column of ``weights`` on its own.

    Parameters
    ----------
    rng : numpy.random.Generator
    weights : ndarray, shape (particles, cases)
        Normalized weights of each case's population (columns sum to one).

    Returns
    -------
    ndarray of int, shape (particles, cases)
        For each case, indices into its own population.
    """
    n, cases = weights.shape
    cumulative = np.cumsum(weights, axis=0)
    cumulative[-1] = 1.0
    offset = np.arange(cases)
    # Case c's cumulative weights, shifted to [c, c + 1], searched with points in (c, c + 1).
    points = (rng.uniform(size=cases)[None, :] + np.arange(n)[:, None]) / n + offset
    found = np.searchsorted((cumulative + offset).T.ravel(), points.T.ravel(), side="right")
    return (found.reshape(cases, n).T - offset * n).clip(0, n - 1)


def column_weights(log_w: np.ndarray) -> np.ndarray:
    """Normalised weights of each column (case) of ``log_w``; uniform where all are zero."""
    finite = np.isfinite(log_w)
    top = np.max(np.where(finite, log_w, -np.inf), axis=0)
    w = np.where(finite, np.exp(log_w - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = w.sum(axis=0)
    uniform = np.full_like(w, 1.0 / len(w))
    return np.where(total > 0, w / np.where(total > 0, total, 1.0), uniform)


def _pooled_moments(values: np.ndarray, weights: np.ndarray):
    """Within-case weighted variance of ``values`` (particles, cases, ...), averaged over cases."""
    w = weights.reshape(weights.shape + (1,) * (values.ndim - 2))
    mean = np.sum(w * values, axis=0)
    return np.sum(w * (values - mean) ** 2, axis=0).mean(axis=0)


def _rms_sd(values: np.ndarray, weights: np.ndarray) -> float:
    """Root mean square over cases of the within-case weighted sd of ``values`` (n, cases)."""
    return float(np.sqrt(_pooled_moments(values[..., None], weights)[0]))


def run_case_pilot(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    parts_fn: PartsFn,
    n_cases: int,
    *,
    n_leapfrog: int,
    target_accept: float,
    jitter: float,
    step_length: float = 0.5,
    adapt_per_step: int = 3,
    initial_step_size: float = 0.5,
    on_step: Callable[[float], None] | None = None,
) -> PilotResult:
    """Adaptive-tempering SMC pilot with one population per case and shared kernels.

    Like :func:`pymc_bdmc.kernels.tuning.run_pilot`, but the rows of ``x0`` (row
    ``p * n_cases + i``: particle ``p`` of case ``i``) form ``n_cases`` independent
    populations: weights and resampling are per case. What is shared, and recorded for the
    frozen plan, is

    * the inverse temperature, advanced so that the root-mean-square over cases of the
      incremental log weight's standard deviation is ``step_length`` nats (for the adaptive
      schedule, the thermodynamic length of the *sum* of the cases' weight variances);
    * the diagonal mass matrix: the within-case weighted variance, averaged over cases;
    * the step size, steered toward ``target_accept`` by the mean acceptance over all rows.

    Returns
    -------
    PilotResult
        ``log_z`` is the sum over cases of the pilot's per-case SMC estimates (a rough check);
        ``n_resampled`` counts per-case resampling events.
    """
    n = len(x0) // n_cases
    x, parts = x0, parts0
    log_w = np.zeros((n, n_cases))
    beta, n_resampled = 0.0, 0
    log_z = np.zeros(n_cases)
    log_eps = float(np.log(initial_step_size))
    weights = np.full((n, n_cases), 1.0 / n)
    variance = np.maximum(_pooled_moments(x.reshape(n, n_cases, -1), weights), MIN_VARIANCE)
    sd = _rms_sd(parts.log_likelihood.reshape(n, n_cases), weights)
    record = {"beta": [0.0], "sd": [sd], "eps": [np.exp(log_eps)], "var": [variance],
              "acc": [np.nan]}
    while beta < 1.0 and len(record["beta"]) <= MAX_PILOT_STEPS:
        new_beta = (1.0 if len(record["beta"]) == MAX_PILOT_STEPS
                    else next_pilot_beta(beta, sd, step_length))
        with np.errstate(invalid="ignore"):
            log_w = log_w + (new_beta - beta) * parts.log_likelihood.reshape(n, n_cases)
        beta = new_beta
        weights = column_weights(log_w)
        low = 1.0 / np.sum(weights**2, axis=0) < 0.5 * n
        if low.any():
            log_z[low] += log_mean_exp(log_w[:, low], axis=0)
            source = np.tile(np.arange(n)[:, None], (1, n_cases))
            source[:, low] = resample_within_cases(rng, weights[:, low])
            rows = (source * n_cases + np.arange(n_cases)).ravel()
            x, parts = x[rows], parts.select(rows)
            log_w[:, low] = 0.0
            weights[:, low] = 1.0 / n
            n_resampled += int(np.count_nonzero(low))
        variance = np.maximum(_pooled_moments(x.reshape(n, n_cases, -1), weights), MIN_VARIANCE)
        rates = []
        for _ in range(adapt_per_step):
            params = HMCParams(float(np.exp(log_eps)), variance, n_leapfrog, jitter)
            x, parts, info = hmc_step(rng, x, parts, beta, params, parts_fn)
            rate = float(np.mean(info.acceptance_rate))
            rates.append(rate)
            log_eps += 2.0 * (rate - target_accept)  # Robbins-Monro on log(eps), pilot only
        sd = _rms_sd(parts.log_likelihood.reshape(n, n_cases), weights)
        record["beta"].append(beta)
        record["sd"].append(sd)
        record["eps"].append(float(np.exp(log_eps)))
        record["var"].append(variance)
        record["acc"].append(float(np.mean(rates)))
        if on_step is not None:
            on_step(beta)
    log_z += log_mean_exp(log_w, axis=0)
    return PilotResult.from_record(float(np.sum(log_z)), record, n_resampled)

