"""A dense metric's products in the HMC kernel: general against triangular, per coordinate count.

A dense metric's factor is the Cholesky factor of its covariance (lower-triangular). Each
leapfrog step multiplies all chains' momenta and gradients by it; ``hmc.times_lower`` uses
BLAS's triangular product, ``hmc.times_general`` the general one. Also the exact check that
picks between them. Milliseconds per product for 64 chains.

Run from the repository root::

    python3 benchmarks/dense_metric.py
    python3 benchmarks/dense_metric.py --coordinates 200,1000 --chains 32
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pymc_bdmc.kernels.hmc import is_lower_triangular, times_general, times_lower


def milliseconds(fn, min_seconds: float = 0.5) -> float:
    """Mean milliseconds of ``fn()`` over at least ``min_seconds``, after one warm-up call."""
    fn()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n * 1e3


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinates", default="250,500,1000")
    parser.add_argument("--chains", type=int, default=64)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'coordinates':>11s} {'general':>9s} {'triangular':>10s} {'check':>7s}  (ms, "
          f"{args.chains} chains)")
    for n in (int(c) for c in args.coordinates.split(",")):
        a = rng.normal(size=(n, n))
        factor = np.linalg.cholesky(a @ a.T / n + np.eye(n))
        rows = rng.normal(size=(args.chains, n))
        general = milliseconds(lambda: times_general(rows, factor, True))
        lower = milliseconds(lambda: times_lower(rows, factor, True))
        check = milliseconds(lambda: is_lower_triangular(factor))
        print(f"{n:11d} {general:9.2f} {lower:10.2f} {check:7.2f}", flush=True)


if __name__ == "__main__":
    main()
