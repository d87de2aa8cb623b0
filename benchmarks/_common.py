"""Shared helpers for the benchmark scripts (run them from the repository root)."""

import logging
import time
import warnings

import arviz_base
import numba
import numpy as np
import pymc as pm

# Numba's import (about 0.7 s) is paid once per process by whichever call compiles a function
# first: imported here, it is in neither side's timing (else the first model's first call).
import pytensor.link.numba.dispatch  # noqa: F401

import pymc_bdmc as pmb

# Likewise ArviZ's import and its first conversion (about 0.7 s): pymc_bdmc and pm.sample_smc
# both import it on first use, so whichever returns a result first would pay for it.
arviz_base.from_dict({"posterior": {"x": np.zeros((1, 2))}}, sample_dims=["chain", "draw"])


# Likewise Numba's first compilation in a process (its typing and lowering registries, and
# LLVM's object mode, which PyTensor's LAPACK and BLAS calls use: about 0.5 s).
@numba.njit
def _first_compilation(x):
    with numba.objmode(y="float64"):
        y = x + 1.0
    return y


_first_compilation(1.0)


def seconds_per_call(fn, *args, repeat: int = 300) -> float:
    """Mean wall seconds of ``fn(*args)`` over ``repeat`` calls, after one warm-up call."""
    fn(*args)
    start = time.perf_counter()
    for _ in range(repeat):
        fn(*args)
    return (time.perf_counter() - start) / repeat


def quiet():
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)


def bdmc_errors(analytic, seeds, **kwargs):
    """Run sample_bdmc once per seed; return rows (lower-truth, upper-truth, gap, seconds)."""
    rows = []
    for seed in seeds:
        start = time.perf_counter()
        with analytic.model:
            result = pmb.sample_bdmc(random_seed=seed, progressbar=False, **kwargs)
        seconds = time.perf_counter() - start
        ev = result["evidence"]
        truth = analytic.log_evidence_of(result)
        rows.append((float(ev.lower) - truth, float(ev.upper) - truth, float(ev.gap), seconds))
    return np.array(rows)


def summarize(label, rows):
    lower, upper, gap, seconds = rows.T
    return (f"{label:<34} lower-truth {lower.mean():+.3f} [{lower.min():+.2f}, {lower.max():+.2f}]"
            f"  upper-truth {upper.mean():+.3f} [{upper.min():+.2f}, {upper.max():+.2f}]"
            f"  gap {gap.mean():.3f} (max {gap.max():.2f})  {seconds.mean():.1f} s")


def smc_log_ml(idata):
    """Last non-NaN log marginal likelihood per chain of a ``pm.sample_smc`` result.

    PyMC 6 stores it per stage, NaN until beta = 1, as ragged object arrays over chains.
    """
    values = idata.sample_stats["log_marginal_likelihood"].values
    rows = [values] if values.dtype != object else list(values)
    out = []
    for row in rows:
        row = np.asarray(row, dtype=float).ravel()
        out.append(row[~np.isnan(row)][-1])
    return np.array(out)


def pymc_smc_evidence(model, seed, draws=2000, chains=2):
    """``pm.sample_smc`` at the peer's defaults (``cores=1``): (log evidence per chain, seconds)."""
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(draws=draws, chains=chains, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    return smc_log_ml(idata), time.perf_counter() - start


def run_pymc_smc(analytic, draws, seed):
    """One ``pm.sample_smc`` run (1 chain, 1 core): (log evidence, wall seconds)."""
    start = time.perf_counter()
    with analytic.model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(draws=draws, chains=1, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    return float(smc_log_ml(idata)[0]), time.perf_counter() - start
