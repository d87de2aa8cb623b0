"""Time to a certified answer at the defaults, against ``pm.sample_smc``, and where it goes.

Run from the repository root::

    python3 benchmarks/time_to_certificate.py                      # closed-form + suite models
    python3 benchmarks/time_to_certificate.py --only "random walk"
    python3 benchmarks/time_to_certificate.py --large               # 500+ coordinates, 10^5 obs
    python3 benchmarks/time_to_certificate.py --huge --no-exact --no-smc --max-time 900
    python3 benchmarks/time_to_certificate.py --million --no-exact --no-smc --max-time 900
    python3 benchmarks/time_to_certificate.py --gallery --no-exact  # models as users write them
    python3 benchmarks/time_to_certificate.py --wide --no-exact     # 420-452 coordinates
    python3 benchmarks/time_to_certificate.py --paper --no-exact --no-smc  # the BDMC paper's
    python3 benchmarks/time_to_certificate.py --ais-alone          # sample_ais with no certificate

For each model, in one process and in this order, at the defaults: ``pmb.sample_bdmc()`` (the
certificate on simulated data), ``pmb.sample_ais()`` (the estimate on the model's data; it reuses
the certified length), and ``pm.sample_smc(draws=2000, chains=2, cores=1)``; with ``--ais-alone``,
``pmb.sample_ais()`` only (an estimate whose length it measures itself, as when a user calls it
first). Printed per model:

* the BDMC gap and its attempts; the AIS error against the exact ``log p(y)`` (where known) and
  each SMC chain's error;
* seconds of each call, and the ratio of both pymc_bdmc calls together to ``pm.sample_smc``;
* where the pymc_bdmc calls' time went, summed over both (``time_<stage>`` of their results:
  compile, simulate, pilot, its fitted paths and equilibrations, timing the kernels, forward
  and reverse runs), and each call's distance to the limit: its wall time over its final runs'
  batched model evaluations times the seconds of one.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import numpy as np
import pymc as pm
import xarray as xr
from _common import quiet, smc_log_ml
from gallery import GALLERY
from geometry import COAL_DISASTERS, PAPER, SUITE, WIDE

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence

CLOSED_FORM = {
    "regression, 5 coefficients, N=50": lambda: known_evidence.linear_regression(50, 5, seed=1),
    "Normal-Inverse-Gamma regression": lambda: known_evidence.normal_inverse_gamma_regression(
        30, 3, seed=1),
    "Gamma-Poisson": lambda: known_evidence.gamma_poisson(seed=4),
    "regression, 20 coefficients, N=500": lambda: known_evidence.linear_regression(
        500, 20, seed=2),
    "switchpoint, coal-mining disasters": lambda: known_evidence.switchpoint_poisson(
        counts=COAL_DISASTERS),
}


def big_regression(n_obs: int = 100_000, n_coef: int = 20) -> known_evidence.AnalyticModel:
    """The issue's 100k x 20 regression: closed-form evidence."""
    return known_evidence.linear_regression(n_obs, n_coef, seed=3)


def hierarchy_500() -> known_evidence.AnalyticModel:
    """500 centred group intercepts x 20 observations, exact by quadrature.

    The data are ``geometry.wide_hierarchy(500, 20)``'s: standard normals, with no spread
    between groups, so the group scale's posterior sits near zero (a funnel's neck).
    """
    return known_evidence.group_intercepts(
        500, 20, observed=np.random.default_rng(0).normal(size=500 * 20))


LARGE = {
    "random walk, T=500": lambda: known_evidence.gaussian_random_walk(500),
    "centred hierarchy, 500 groups x 20": hierarchy_500,
    "regression, 20 coefficients, N=100000": big_regression,
}

STAGES = ("compile", "simulate", "pilot", "pilot_prior_path", "pilot_fitted_paths",
          "pilot_frozen_estimates", "pilot_equilibration", "kernel_timing", "forward", "reverse")


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


#: 5,000 coordinates (``--huge``; the issue's target is a certificate with a raised max_time).
HUGE = {
    "centred hierarchy, 5000 groups x 20 (data from the model)":
        lambda: known_evidence.group_intercepts(5000, 20, seed=0),
}

#: 10^6 observations (``--million``).
MILLION = {"regression, 20 coefficients, N=1000000": lambda: big_regression(1_000_000)}


def run_model(name: str, build, seed: int, smc: bool, tuning: pmb.Tuning | None = None,
              max_time: float = 60.0, ais_alone: bool = False) -> dict:
    built = build()
    analytic = built if isinstance(built, known_evidence.AnalyticModel) else None
    model = built.model if analytic is not None else built
    row = {"model": name, "seed": seed, "bdmc_s": 0.0}
    with model:
        if not ais_alone:
            bd, row["bdmc_s"] = _timed(lambda: pmb.sample_bdmc(
                random_seed=seed, progressbar=False, tuning=tuning, max_time=max_time))
        ais, row["ais_s"] = _timed(lambda: pmb.sample_ais(random_seed=seed + 100,
                                                          progressbar=False, tuning=tuning,
                                                          max_time=max_time))
    ea = ais["evidence"]
    ev = bd["evidence"] if not ais_alone else xr.Dataset({"gap": np.nan, "lower": np.nan,
                                                           "upper": np.nan})
    row.update(gap=float(ev["gap"]), certified=int(ev.attrs.get("certified", 0)),
               attempts=list(map(int, np.atleast_1d(ev.attrs.get("auto_n_steps", [])))),
               ais_attempts=list(map(int, np.atleast_1d(ea.attrs.get("auto_n_steps", [])))),
               stages={s: ev.attrs.get(f"time_{s}", 0.0) + ea.attrs.get(f"time_{s}", 0.0)
                       for s in STAGES},
               distance=(ev.attrs.get("distance_to_limit", np.nan),
                         ea.attrs.get("distance_to_limit", np.nan)),
               peak_mb=(ea.attrs.get("peak_memory_mb", np.nan),
                        ea.attrs.get("peak_worker_memory_mb", np.nan)))
    if analytic is not None:
        truth = analytic.log_evidence()
        row["ais_error"] = float(ea["lower"]) - truth
        if not ais_alone:
            sim = analytic.log_evidence_of(bd)
            row["bdmc_errors"] = (float(ev["lower"]) - sim, float(ev["upper"]) - sim)
    if smc:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata, row["smc_s"] = _timed(lambda: pm.sample_smc(
                draws=2000, chains=2, cores=1, random_seed=seed, progressbar=False,
                compute_convergence_checks=False))
        log_ml = smc_log_ml(idata)
        row["smc"] = log_ml - truth if analytic is not None else log_ml
    return row


def format_row(row: dict) -> str:
    text = f"{row['model']:<40}"
    if row["attempts"]:
        text += (f" gap {row['gap']:+.3f} ({'certified' if row['certified'] else 'NOT certified'}"
                 f", steps {row['attempts']})")
    if "ais_error" in row:
        text += f" | AIS error {row['ais_error']:+.3f} (steps {row['ais_attempts']})"
    text += (f" | bdmc {row['bdmc_s']:.1f} s + ais {row['ais_s']:.1f} s" if row["attempts"]
             else f" | ais {row['ais_s']:.1f} s")
    if "smc_s" in row:
        label = "errors" if "ais_error" in row else "log p(y)"
        values = ", ".join(f"{v:+.2f}" for v in row["smc"])
        ratio = (row["bdmc_s"] + row["ais_s"]) / row["smc_s"]
        text += f" | pm.sample_smc {label} {values} {row['smc_s']:.1f} s | ratio {ratio:.2f}"
    stages = ", ".join(f"{s} {v:.1f}" for s, v in row["stages"].items() if v >= 0.05)
    text += f"\n    time: {stages}; distance to the limit: bdmc {row['distance'][0]:.1f}, "
    text += f"ais {row['distance'][1]:.1f}; peak memory {row['peak_mb'][0]:.0f} MB "
    text += f"(workers {row['peak_mb'][1]:.0f} MB)"
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="substrings of model names to run")
    parser.add_argument("--no-smc", action="store_true", help="skip pm.sample_smc")
    parser.add_argument("--no-exact", action="store_true",
                        help="skip the closed-form and quadrature models")
    parser.add_argument("--huge", action="store_true",
                        help="also a 5000-group hierarchy (5002 coordinates)")
    parser.add_argument("--million", action="store_true",
                        help="also a regression on 10^6 observations")
    parser.add_argument("--max-time", type=float, default=60.0,
                        help="max_time of both pymc_bdmc calls (default: theirs, 60 s)")
    parser.add_argument("--large", action="store_true",
                        help="also the 500-step walk, a 500-group hierarchy, a 100k regression")
    parser.add_argument("--wide", action="store_true",
                        help="also geometry.py's 450-group hierarchy and 420-coefficient logistic "
                             "regression (gap only)")
    parser.add_argument("--gallery", action="store_true",
                        help="also benchmarks/gallery.py (no exact evidence: gap only)")
    parser.add_argument("--paper", action="store_true",
                        help="also the BDMC paper's low-rank and clustering models (gap only)")
    parser.add_argument("--ais-alone", action="store_true",
                        help="sample_ais only, with no certificate before it")
    parser.add_argument("--tuning", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="pmb.Tuning fields for both calls, e.g. steps_per_squared_length=10")
    args = parser.parse_args(argv)
    tuning = pmb.Tuning(**{k: float(v) if "." in v else int(v)
                           for k, v in (item.split("=") for item in args.tuning)})
    quiet()
    logging.getLogger("pymc").setLevel(logging.ERROR)
    models = {} if args.no_exact else {**CLOSED_FORM, **SUITE}
    models |= LARGE if args.large else {}
    models |= HUGE if args.huge else {}
    models |= MILLION if args.million else {}
    models |= WIDE if args.wide else {}
    models |= GALLERY if args.gallery else {}
    models |= PAPER if args.paper else {}
    print(f"# {time.strftime('%Y-%m-%d')}, pymc_bdmc {pmb.__version__}, {tuning}", flush=True)
    for seed in range(args.seeds):
        for name, build in models.items():
            if not args.only or any(s.lower() in name.lower() for s in args.only):
                row = run_model(name, build, seed, not args.no_smc, tuning, args.max_time,
                                args.ais_alone)
                print(format_row(row), flush=True)


if __name__ == "__main__":
    main()
