"""The 100k x 20 regression on a local Dask cluster of 2 workers, against the same run here.

Run from the repository root (``pip install -e ".[test]"`` brings ``distributed``)::

    python3 benchmarks/cluster_regression.py
    python3 benchmarks/cluster_regression.py --n-obs 20000 --n-steps 50   # a quick look

Runs ``pmb.sample_ais`` with a fixed length (a searched length depends on timing) three ways on
``known_evidence.linear_regression(n_obs, 20, seed=3)``, the regression of
``time_to_certificate.py --large``: in this process in one batch, in this process in the
cluster's blocks (``chains_per_batch`` = chains / 2), and on a ``distributed.LocalCluster`` of 2
single-threaded worker processes (``executor=client``). Prints each run's lower bound, error
against the exact ``log p(y)`` and seconds, and the largest difference of the per-chain log
weights between the runs: zero where the chains are cut the same way; round-off where BLAS sums
a batched matrix product over another number of rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import quiet

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence


def _run(label: str, model, **kwargs) -> tuple[str, np.ndarray, float, float]:
    start = time.perf_counter()
    with model:
        result = pmb.sample_ais(progressbar=False, **kwargs)
    seconds = time.perf_counter() - start
    log_w = result["evidence"]["log_weight_forward"].values.ravel()
    return label, log_w, float(result["evidence"]["lower"]), seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-obs", type=int, default=100_000)
    parser.add_argument("--n-steps", type=int, default=100)
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    quiet()
    from distributed import Client, LocalCluster

    am = known_evidence.linear_regression(args.n_obs, 20, seed=3)
    exact = am.log_evidence()
    common = dict(n_steps=args.n_steps, chains=args.chains, random_seed=args.seed)
    runs = [_run("this process, one batch", am.model, cores=1, **common),
            _run("this process, 2 batches", am.model, cores=1,
                 chains_per_batch=args.chains // 2, **common)]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        runs.append(_run("LocalCluster, 2 workers", am.model, executor=client, **common))
    print(f"# {time.strftime('%Y-%m-%d')}, pymc_bdmc {pmb.__version__}, regression "
          f"{args.n_obs} x 20, {args.n_steps} steps, {args.chains} chains, seed {args.seed}; "
          f"exact log p(y) {exact:.3f}")
    reference = runs[0][1]
    for label, log_w, lower, seconds in runs:
        print(f"{label:<26} lower {lower:.6f} (error {lower - exact:+.3f}) {seconds:6.1f} s | "
              f"max |log w - one batch's| {np.max(np.abs(log_w - reference)):.2e}")
    print(f"LocalCluster against 2 batches here: max |difference| "
          f"{np.max(np.abs(runs[2][1] - runs[1][1])):.2e}")


if __name__ == "__main__":
    main()
