"""Shared helpers for the benchmark scripts (run them from the repository root)."""

import logging
import time

import numpy as np

import pymc_bdmc as pmb


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
