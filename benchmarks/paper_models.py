"""The BDMC paper's three models through pymc_bdmc and pm.sample_smc, side by side.

Run from the repository root::

    python3 benchmarks/paper_models.py                      # paper sizes, several minutes
    python3 benchmarks/paper_models.py --models low_rank --n-steps 1000 3000

For each model (Grosse et al. 2015, §6.1; 50 x 25 data by default) ``pmb.sample_bdmc`` simulates
``(theta*, y*)`` and sandwiches ``log p(y*)``; ``pm.sample_smc`` (2 chains on 2 cores, PyMC's
defaults) then runs on the same ``y*``. Printed: the bounds, the gap (our accuracy certificate),
each SMC chain's estimate and their spread (SMC's only internal check), wall times including
compilation and the pilot, and the time ratio of the two tools in the same run.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import numpy as np
import pymc as pm
from _common import smc_log_ml

import pymc_bdmc as pmb
from pymc_bdmc.model.cache import clear_cache
from pymc_bdmc.testbed import binary_attributes, clustering, low_rank
from pymc_bdmc.testbed.models import with_observed


def models(n_obs: int, n_dim: int, n_attributes: int) -> dict:
    return {
        "low_rank": lambda: low_rank(n_obs, n_dim, rank=5),
        "clustering": lambda: clustering(n_obs, n_dim, n_clusters=10),
        "binary_attributes": lambda: binary_attributes(n_obs, n_dim, n_attributes=n_attributes),
    }


def run_bdmc(model, n_steps: int, chains: int, seed: int, cores):
    clear_cache()  # compilation included, as for pm.sample_smc
    start = time.perf_counter()
    result = pmb.sample_bdmc(n_steps=n_steps, chains=chains, random_seed=seed, model=model,
                             progressbar=False, cores=cores)
    return result, time.perf_counter() - start


def run_smc(model, y_star: dict, seed: int, draws: int):
    conditioned = with_observed(model, y_star)
    start = time.perf_counter()
    with conditioned, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(draws=draws, chains=2, cores=2, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    return smc_log_ml(idata), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["low_rank", "clustering",
                                                         "binary_attributes"])
    parser.add_argument("--n-obs", type=int, default=50)
    parser.add_argument("--n-dim", type=int, default=25)
    parser.add_argument("--n-attributes", type=int, default=10,
                        help="binary attributes (the paper's 10 means 1024 patterns per row)")
    parser.add_argument("--n-steps", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--smc-draws", type=int, default=2000)
    parser.add_argument("--no-smc", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    logging.getLogger("pymc").setLevel(logging.ERROR)

    factories = models(args.n_obs, args.n_dim, args.n_attributes)
    for name in args.models:
        model = factories[name]().model
        n_free = sum(int(np.prod(v.shape.eval())) for v in model.free_RVs)
        print(f"\n## {name}: {args.n_obs} x {args.n_dim} data, {n_free} parameters", flush=True)
        last = None
        for n_steps in args.n_steps:
            result, seconds = run_bdmc(model, n_steps, args.chains, args.seed, args.cores)
            ev = result["evidence"]
            print(f"pymc_bdmc  n_steps={n_steps:5d}  lower {float(ev.lower):10.2f}  "
                  f"upper {float(ev.upper):10.2f}  gap {float(ev.gap):6.2f} nats  "
                  f"{seconds:6.1f} s (compile {ev.attrs['compile_time']:.1f} s; "
                  f"{ev.attrs['workers']})", flush=True)
            last = (result, seconds)
        if args.no_smc:
            continue
        result, seconds = last
        y_star = {k: result["observed_data"][k].values for k in result["observed_data"]}
        estimates, smc_seconds = run_smc(model, y_star, args.seed, args.smc_draws)
        print(f"pm.sample_smc draws={args.smc_draws}  chains {np.round(estimates, 2)}  "
              f"spread {np.ptp(estimates):.2f} nats  {smc_seconds:6.1f} s; "
              f"inside the BDMC sandwich: "
              f"{[bool(float(result['evidence'].lower) - 1 <= e <= float(result['evidence'].upper) + 1) for e in estimates]} (+-1 nat)",
              flush=True)
        print(f"time ratio pymc_bdmc (n_steps={args.n_steps[-1]}) / pm.sample_smc: "
              f"{seconds / smc_seconds:.2f}", flush=True)


if __name__ == "__main__":
    main()
