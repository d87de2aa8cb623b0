"""Does the certified gap predict the real-data error? Plain versus data-matched simulation.

For each model, at a fixed, short ``n_steps`` (so that errors are visible): the BDMC gap on
data simulated from the prior predictive (``sample_bdmc(match_data=False)``), the gap on the
data set nearest the real data (``sample_bdmc(match_data=True)``), and the error of
``sample_ais`` on the real data against its quadrature evidence. A certificate transfers where
the gap is at least the real-data error's size. Besides the suite (whose real data are
themselves simulated from the model), two random walks whose real data are atypical: innovation
scale 1.5 and 0.02 under a ``HalfNormal(0.5)`` prior (3 prior sds out, and nearly flat).

    python3 benchmarks/matching.py --seeds 3 --n-steps 50
"""

import argparse
import sys
import time

import numpy as np
import pymc as pm

sys.path.insert(0, "benchmarks")
from _common import quiet  # noqa: E402
from geometry import SUITE  # noqa: E402

import pymc_bdmc as pmb  # noqa: E402
from pymc_bdmc import known_evidence as tq  # noqa: E402
from pymc_bdmc.known_evidence import AnalyticModel  # noqa: E402


def atypical_walk(sigma: float, n_obs: int = 60, seed: int = 0) -> AnalyticModel:
    """``tq.gaussian_random_walk(n_obs)``'s model, on data simulated with innovation ``sigma``."""
    rng = np.random.default_rng(seed)
    x = rng.normal() + np.concatenate([[0.0], np.cumsum(sigma * rng.normal(size=n_obs - 1))])
    y = x + 0.5 * rng.normal(size=n_obs)
    with pm.Model() as model:
        walk = pm.GaussianRandomWalk("x", sigma=pm.HalfNormal("sigma", 0.5), steps=n_obs - 1,
                                     init_dist=pm.Normal.dist(0.0, 1.0))
        pm.Normal("y", walk, 0.5, observed=y)
    return AnalyticModel(model, tq.gaussian_random_walk(n_obs).log_evidence_fn, {"y": y})


MODELS = {**SUITE,
          "random walk T=60, real sigma 1.5": lambda: atypical_walk(1.5),
          "random walk T=60, real sigma 0.02": lambda: atypical_walk(0.02)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-steps", type=int, default=50)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    quiet()
    common = dict(n_steps=args.n_steps, progressbar=False, cores=1)
    print(f"n_steps={args.n_steps}, seeds 0-{args.seeds - 1}: |gap| plain, |gap| matched "
          "(match distance / median candidate's), |sample_ais error| on the real data")
    for name, build in MODELS.items():
        if args.only and args.only not in name:
            continue
        exact = build()
        truth = exact.log_evidence(exact.data)
        plain, matched, real, distance, median = [], [], [], [], []
        start = time.perf_counter()
        for seed in range(args.seeds):
            with exact.model:
                plain_run = pmb.sample_bdmc(random_seed=seed, match_data=False, **common)
                plain.append(abs(float(plain_run["evidence"]["gap"])))
                result = pmb.sample_bdmc(random_seed=seed, match_data=True, **common)
                lower = float(pmb.sample_ais(random_seed=seed, **common)["evidence"]["lower"])
            matched.append(abs(float(result["evidence"]["gap"])))
            distance.append(result["evidence"].attrs["data_match_distance"])
            median.append(result["evidence"].attrs["data_match_median_distance"])
            real.append(abs(lower - truth))
        print(f"{name:<38} plain {np.mean(plain):6.2f}  matched {np.mean(matched):6.2f} "
              f"({np.mean(distance):.2f} / {np.mean(median):.2f})  real error "
              f"{np.mean(real):6.2f}   [{time.perf_counter() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
