"""Default BDMC on closed-form models: errors against the exact evidence, gap and wall time.

    python3 benchmarks/accuracy.py [--seeds 10] [--n-steps 1000] [--chains 32]

Each seed simulates its own data set from the model; the bar (issue 2) is lower <= truth + 0.2,
upper >= truth - 0.2 and gap <= 1 nat, in under 30 s per run including compilation.
"""

import argparse

import numpy as np
from _common import bdmc_errors, quiet, summarize

from pymc_bdmc import known_evidence

MODELS = {
    "regression 20 coef, N=50, unit scales": lambda: known_evidence.linear_regression(
        50, 20, prior_sd=1.0, noise_sd=1.0, seed=1),
    "regression 20 coef, N=100, sd 2 / 0.5": lambda: known_evidence.linear_regression(
        100, 20, prior_sd=2.0, noise_sd=0.5, seed=1),
    "Normal-InvGamma 10 coef, N=60": lambda: known_evidence.normal_inverse_gamma_regression(
        60, 10, seed=2),
    "Normal-InvGamma 3 coef, N=30": lambda: known_evidence.normal_inverse_gamma_regression(
        30, 3, seed=1),
    "Beta-Binomial": lambda: known_evidence.beta_binomial(seed=3),
    "Gamma-Poisson": lambda: known_evidence.gamma_poisson(seed=4),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-steps", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=32)
    args = parser.parse_args()
    quiet()
    for label, factory in MODELS.items():
        rows = bdmc_errors(factory(), range(args.seeds), n_steps=args.n_steps,
                           chains=args.chains)
        lower, upper, gap, _ = rows.T
        passed = np.mean((lower <= 0.2) & (upper >= -0.2) & (gap <= 1.0))
        print(summarize(label, rows) + f"  pass {passed:.0%}", flush=True)


if __name__ == "__main__":
    main()
