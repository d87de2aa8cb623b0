"""BDMC ground truth of a testbed problem under the sigmoid and adaptive schedules, several seeds.

Checks first that theta* is where the density expects it (the compiled log prior and
log-likelihood at ``generating_vector`` against an independent NumPy evaluation, low rank only),
then runs ``pymc_bdmc.testbed.ground_truth`` (forward and reverse AIS through one shared plan)
per schedule and seed, and prints lower, upper and gap.

Run from the repository root::

    python3 benchmarks/ground_truth_schedules.py --model low_rank --n-steps 1000 --seeds 3
"""

import argparse
import logging
import time

import numpy as np
from scipy import stats

import pymc_bdmc.testbed as tb
from pymc_bdmc.testbed.base import compiled_problem

MODELS = {"clustering": tb.clustering, "low_rank": tb.low_rank,
          "binary_attributes": tb.binary_attributes}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="low_rank", choices=list(MODELS))
    parser.add_argument("--n-obs", type=int, default=50)
    parser.add_argument("--n-dim", type=int, default=10)
    parser.add_argument("--n-steps", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--schedules", nargs="+", default=["sigmoid", "adaptive"])
    args = parser.parse_args()
    out = logging.getLogger("pymc_bdmc.ground_truth_schedules")
    out.setLevel(logging.INFO)
    problem = MODELS[args.model](n_obs=args.n_obs, n_dim=args.n_dim, seed=0)
    density, _, _ = compiled_problem(problem)
    if args.model == "low_rank":
        u, v = problem.generating_point["U"], problem.generating_point["V"]
        parts = density.parts(problem.generating_vector(density.layout)[None])
        sigma = problem.info["sigma_noise"]
        loglik = stats.norm(u @ v, sigma).logpdf(problem.observed["y"]).sum()
        logprior = (stats.norm(0, problem.info["sigma_u"]).logpdf(u).sum()
                    + stats.norm(0, problem.info["sigma_v"]).logpdf(v).sum())
        out.info("theta* check: layout %s, log-likelihood error %.1e, log-prior error %.1e",
                 list(zip(density.layout.names, density.layout.shapes, strict=True)),
                 parts.log_likelihood[0] - loglik, parts.log_prior[0] - logprior)
    for schedule in args.schedules:
        gaps = []
        for seed in range(args.seeds):
            start = time.perf_counter()
            truth = tb.ground_truth(problem, args.n_steps, seed=1000 * seed + 1,
                                    chains=args.chains, schedule=schedule)
            gaps.append(truth["gap"])
            out.info("%-8s seed %d: lower %.2f upper %.2f gap %+.2f (%.0f s)", schedule, seed,
                     truth["lower"], truth["upper"], truth["gap"], time.perf_counter() - start)
        out.info("%-8s mean gap %.2f", schedule, float(np.mean(gaps)))


if __name__ == "__main__":
    main()
