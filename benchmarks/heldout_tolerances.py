"""Errors of sample_heldout_likelihood on the PPCA configuration of tests/test_heldout.py.

    python3 benchmarks/heldout_tolerances.py [--seeds 10] [--n-steps 300] [--chains 16]

Per seed: the forward run on the 8 held-out test cases (largest per-case error, total error and
its bootstrap se), and BDMC on 5 cases simulated with the parameters fixed (largest
lower - exact, smallest upper - exact, largest per-case |gap|, total gap). ``--n-steps 1`` is
likelihood weighting (no annealing), the test of the tests' tolerances. The test module's model
and data are imported, so the numbers refer to exactly what the tests check.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from _common import quiet

import pymc_bdmc as pmb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_heldout import (
    FAST,
    _ppca_truth,
    ppca_heldout_data,
    ppca_log_density,
    ppca_model,
)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-steps", type=int, default=300)
    parser.add_argument("--chains", type=int, default=16)
    args = parser.parse_args()
    quiet()
    model, params, y = ppca_model(), _ppca_truth(), ppca_heldout_data()
    exact = ppca_log_density(params, y)
    settings = {"n_steps": args.n_steps, "chains": args.chains, "progressbar": False,
                "compile_kwargs": FAST}
    for seed in range(args.seeds):
        with model:
            res = pmb.sample_heldout_likelihood(params, {"y": y}, random_seed=seed, **settings)
        h = res["heldout"]
        err = h["lower"].values - exact
        line = (f"seed {seed}: held-out max|err| {np.abs(err).max():.3f}  total err "
                f"{err.sum():+.3f} (se {float(h['total_lower_se']):.3f})")
        if args.n_steps > 1:
            with model:
                sim = pmb.sample_heldout_likelihood(params, simulate=True, random_seed=seed,
                                                    **settings)
            s = sim["heldout"]
            truth = ppca_log_density(params, sim["observed_data"]["y"].values)
            line += (f" | simulated: max(lower-exact) {np.max(s['lower'].values - truth):+.3f}"
                     f"  min(upper-exact) {np.min(s['upper'].values - truth):+.3f}"
                     f"  max|gap| {np.abs(s['gap'].values).max():.3f}"
                     f"  total gap {float(s['total_gap']):+.3f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
