"""Where the time goes on a long random walk (or a latent GP): cProfile of one default call.

Run from the repository root::

    python3 benchmarks/profile_walk.py                      # sample_ais(), 1000 steps, T=1000
    python3 benchmarks/profile_walk.py --steps 100          # mostly the pilot
    python3 benchmarks/profile_walk.py --call sample_bdmc --length 500
    python3 benchmarks/profile_walk.py --model gp --length 80 --steps 100   # 80 x 80 Cholesky

The model is ``known_evidence.gaussian_random_walk(T)`` (``T + 1`` coordinates, exact
evidence by quadrature over the innovation scale), or with ``--model gp``
``known_evidence.latent_gp(T)`` (``T`` inputs, ``T + 2`` coordinates). The call runs with
``cores=1`` so that the profile sees every model evaluation, and prints the error against the
exact evidence, the process's peak resident memory (``ru_maxrss``, KiB on Linux), the pilot's
log lines, the functions with the most time of their own and the package's functions by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import resource
import time
import warnings

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("walk", "gp"), default="walk")
    parser.add_argument("--length", type=int, default=1000,
                        help="the walk's T, or the GP's number of inputs")
    parser.add_argument("--steps", type=int, default=1000, help="annealing steps (n_steps)")
    parser.add_argument("--call", choices=("sample_ais", "sample_bdmc"), default="sample_ais")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=int, default=30, help="rows of each profile table")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    for name in ("pymc", "pytensor", "matplotlib", "numba"):
        logging.getLogger(name).setLevel(logging.ERROR)

    build = {"walk": known_evidence.gaussian_random_walk,
             "gp": known_evidence.latent_gp}[args.model]
    case = build(args.length)
    profile = cProfile.Profile()
    start = time.perf_counter()
    with case.model:
        profile.enable()
        result = getattr(pmb, args.call)(n_steps=args.steps, random_seed=args.seed,
                                         progressbar=False, cores=1)
        profile.disable()
    seconds = time.perf_counter() - start
    evidence = result["evidence"]
    if args.call == "sample_bdmc":
        truth = case.log_evidence({"y": result["observed_data"]["y"].values})
        what = f"gap {float(evidence['gap']):+.3f}, lower bound"
    else:
        truth = case.log_evidence()
        what = "lower bound"
    print(f"\n{args.call}, {args.model} of length {args.length}, {args.steps} steps, seed "
          f"{args.seed}: {what} minus exact {float(evidence['lower']) - truth:+.3f} nats, "
          f"{seconds:.1f} s, path from the {evidence.attrs['path_start']}, peak resident "
          f"memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB\n")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(args.rows)
    stats.sort_stats("cumtime").print_stats("pymc_bdmc", args.rows)


if __name__ == "__main__":
    main()
