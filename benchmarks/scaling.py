"""How the cost of AIS scales: chains, annealing steps, data size, processes; and the overhead.

Run from the repository root::

    python3 benchmarks/scaling.py            # about 2-4 minutes on 2 cores
    python3 benchmarks/scaling.py --coordinates 500,1000,2000,5000 --only-coordinates

All runs use one frozen plan per model (``sample_ais(plan=...)``, no pilot) and report the
sampling time stored in the result, so compilation is excluded; the model is compiled once.

* chains: seconds per chain at 1, 8 and 64 chains (target: 64 chains cost <= 1/10 per chain);
* steps: seconds at 250, 500 and 1000 steps, divided by steps (flat = linear);
* data: seconds per step at 100, 1000 and 10000 observations;
* overhead: wall time / (batched model calls x seconds of one batched call), where one call is
  timed alone on the same batch (target <= 1.3), with the NumPy HMC kernel and with the fused
  (compiled) kernel, whose compilation is excluded like the model's;
* processes: a long AIS run with ``cores=1`` and ``cores=2`` (same seed, same numbers), the
  second ``cores=2`` call reusing the started workers and their compiled model;
* coordinates (``--coordinates``): seconds per step of AIS on centred group intercepts
  (``known_evidence.group_intercepts``, run non-centred from the prior, 32 chains, 100 steps)
  per leapfrog step and per coordinate, and one batched model call, from 500 to 5,000 groups
  (flat = linear in the dimension).
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import pymc as pm

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.cache import compiled_model


def regression(n_obs: int, n_coef: int = 8, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_obs, n_coef))
    y = X @ rng.normal(size=n_coef) + rng.normal(size=n_obs)
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 2.0)
        w = pm.Normal("w", 0.0, 1.0, shape=n_coef)
        pm.Normal("y", pm.math.dot(X, w), sigma, observed=y)
    return model


def frozen_plan(model: pm.Model, n_steps: int) -> AnnealingPlan:
    with model:
        result = pmb.sample_ais(n_steps=n_steps, chains=16, random_seed=0, progressbar=False,
                                cores=1)
    return AnnealingPlan.from_result(result)


def timed_ais(model, plan, chains, seed=1, **kwargs):
    with model:
        result = pmb.sample_ais(plan=plan, chains=chains, random_seed=seed, progressbar=False,
                                **{"cores": 1, **kwargs})
    return result["evidence"].attrs


def seconds_per_call(model, chains: int, repeats: int = 2000) -> float:
    density = compiled_model(model).density
    x = 0.1 * np.random.default_rng(0).normal(size=(chains, density.n_dim))
    fn = density._parts_fn  # the compiled batched function alone
    for _ in range(50):
        fn(x)
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    return (time.perf_counter() - start) / repeats


def per_coordinate(groups: list[int], n_steps: int = 100, chains: int = 32) -> None:
    print(f"## coordinates (group intercepts x 20, non-centred, {chains} chains, {n_steps} "
          "steps)")
    for n_groups in groups:
        model = known_evidence.group_intercepts(n_groups, 20, seed=0).model
        with model:
            result = pmb.sample_ais(n_steps=n_steps, chains=chains, random_seed=0, cores=1,
                                    progressbar=False, max_time=None, reparameterize=True,
                                    base="prior")
        attrs = result["evidence"].attrs
        n_leapfrog = int(result["annealing"].attrs["n_leapfrog"])
        per_gradient = attrs["time_forward"] / n_steps / n_leapfrog
        n_dim = n_groups + 2
        print(f"coordinates={n_dim:5d}  seconds per step={attrs['time_forward'] / n_steps:.4f} "
              f"(n_leapfrog {n_leapfrog})  per leapfrog step and coordinate="
              f"{per_gradient / n_dim * 1e6:.2f} us  one batched call="
              f"{attrs['model_call_seconds'] * 1e3:.2f} ms "
              f"({attrs['model_call_seconds'] / n_dim * 1e6:.3f} us per coordinate)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--parallel-steps", type=int, default=1000)
    parser.add_argument("--parallel-obs", type=int, default=10000)
    parser.add_argument("--coordinates", default="",
                        help="comma-separated numbers of groups, e.g. 500,1000,2000,5000")
    parser.add_argument("--only-coordinates", action="store_true")
    args = parser.parse_args()
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    if args.coordinates:
        per_coordinate([int(g) for g in args.coordinates.split(",")])
        if args.only_coordinates:
            return

    model = regression(200)
    plan = frozen_plan(model, args.steps)

    print("## chains (n_obs=200, 9 parameters, %d steps)" % plan.n_steps)
    per_chain = {}
    for chains in (1, 8, 64):
        attrs = timed_ais(model, plan, chains)
        per_chain[chains] = attrs["sampling_time"] / chains
        print(f"chains={chains:3d}  seconds={attrs['sampling_time']:.3f}  "
              f"per chain={per_chain[chains] * 1e3:.2f} ms")
    print(f"per-chain cost at 64 / at 1 chain: {per_chain[64] / per_chain[1]:.3f} "
          "(target <= 0.1)")

    print("\n## steps (32 chains)")
    for n_steps in (250, 500, 1000):
        p = frozen_plan(model, n_steps)
        attrs = timed_ais(model, p, 32)
        print(f"n_steps={n_steps:5d}  seconds={attrs['sampling_time']:.3f}  "
              f"per step={attrs['sampling_time'] / n_steps * 1e3:.3f} ms")

    print("\n## data size (32 chains, %d steps)" % plan.n_steps)
    for n_obs in (100, 1000, 10000):
        m = regression(n_obs)
        p = frozen_plan(m, args.steps)
        attrs = timed_ais(m, p, 32)
        call = seconds_per_call(m, 32)
        ratio = attrs["sampling_time"] / (attrs["model_evaluations"] * call)
        print(f"n_obs={n_obs:6d}  seconds={attrs['sampling_time']:.3f}  "
              f"per step={attrs['sampling_time'] / p.n_steps * 1e3:.3f} ms  "
              f"one batched call={call * 1e6:.1f} us  calls={attrs['model_evaluations']}  "
              f"overhead ratio={ratio:.2f} (target <= 1.3)")
        timed_ais(m, p, 32, fused_kernel=True)  # compiles the fused kernel (kept with the model)
        fused = timed_ais(m, p, 32, fused_kernel=True)
        fused_ratio = fused["sampling_time"] / (fused["model_evaluations"] * call)
        print(f"             fused kernel: seconds={fused['sampling_time']:.3f}  "
              f"overhead ratio={fused_ratio:.2f}  "
              f"speed-up {attrs['sampling_time'] / fused['sampling_time']:.2f}x")

    print(f"\n## processes (AIS, 64 chains, {args.parallel_steps} steps, "
          f"n_obs={args.parallel_obs})")
    m = regression(args.parallel_obs)
    p = frozen_plan(m, args.parallel_steps)
    times, lowers = {}, {}
    # the second cores=2 call finds its workers started and the model compiled there
    for cores in (1, 2, "2 again"):
        with m:
            start = time.perf_counter()
            result = pmb.sample_ais(plan=p, chains=64, random_seed=3, progressbar=False,
                                    cores=2 if cores == "2 again" else cores)
            times[cores] = time.perf_counter() - start
        lowers[cores] = float(result["evidence"]["lower"])
        print(f"cores={cores}  wall={times[cores]:.2f} s  lower={lowers[cores]:.6f}  "
              f"({result['evidence'].attrs['workers']})")
    print(f"speed-up with 2 processes: {times[1] / times[2]:.2f}x (first call), "
          f"{times[1] / times['2 again']:.2f}x (workers warm); "
          f"same lower bound: {lowers[1] == lowers[2] == lowers['2 again']}")


if __name__ == "__main__":
    main()
