"""The path from fitted Gaussians: the pilots' fits in turn, and the margin that chooses the path.

Run from the repository root::

    python3 benchmarks/fitted_base.py

1. ``sample_bdmc()`` at the defaults on the 201-step random walk of ``benchmarks/geometry.py``
   (``known_evidence.gaussian_random_walk(200, seed=1)``, ``random_seed=1``): the exact
   ``log p(y*)``, the prior path's pilot estimate, each fitted Gaussian's pilot estimate in
   turn (from the ``pymc_bdmc`` logger's debug messages), the path that ran and the bounds.
2. ``sample_ais()`` at the defaults on the 60-step walk's own data, seeds 1, 3 and 4, with the
   margin for taking the fitted path on the pilots' estimates
   (``pmb.Tuning(base_log_z_gain=...)``) at its old value 2 and its default 0.5: the
   path chosen and the error against the exact evidence.
"""

from __future__ import annotations

import logging
import re

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence


class _FitLog(logging.Handler):
    """Collects the estimates of the fitted paths' pilots from the debug log."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.estimates = []

    def emit(self, record):
        found = re.match(r"Pilot from a fitted Gaussian: log Z (\S+)", record.getMessage())
        if found:
            self.estimates.append(float(found.group(1)))


def fits_in_turn() -> None:
    walk = known_evidence.gaussian_random_walk(200, seed=1)
    logger = logging.getLogger("pymc_bdmc")
    handler, level = _FitLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with walk.model:
            result = pmb.sample_bdmc(random_seed=1, progressbar=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    ev = result["evidence"]
    truth = walk.log_evidence({"y": result["observed_data"]["y"].values})
    fits = ", ".join(f"{z:.2f}" for z in handler.estimates)
    print(f"random walk T=200, random_seed=1: exact log p(y*) {truth:.2f}; prior pilot "
          f"{ev.attrs['pilot_log_z_prior']:.2f}; fitted pilots in turn {fits}; path "
          f"{ev.attrs['path_start']}; lower {float(ev.lower) - truth:+.2f}, upper "
          f"{float(ev.upper) - truth:+.2f}, gap {float(ev.gap):.2f} at {ev.attrs['n_steps']} "
          "steps")


def margins() -> None:
    walk = known_evidence.gaussian_random_walk(60)
    truth = walk.log_evidence()
    default = pmb.Tuning().base_log_z_gain
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    for gain in (2.0, default):
        for seed in (1, 3, 4):
            with walk.model:
                result = pmb.sample_ais(random_seed=seed, progressbar=False,
                                        tuning=pmb.Tuning(base_log_z_gain=gain))
            attrs = result["evidence"].attrs
            print(f"random walk T=60, margin {gain}, seed {seed}: pilots prior "
                  f"{attrs['pilot_log_z_prior']:.2f}, fitted {attrs['pilot_log_z_fitted']:.2f};"
                  f" path {attrs['path_start']}; AIS error "
                  f"{float(result['evidence']['lower']) - truth:+.2f}", flush=True)


if __name__ == "__main__":
    fits_in_turn()
    margins()
