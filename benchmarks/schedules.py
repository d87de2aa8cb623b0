"""Annealing schedules compared on a 20-parameter regression (BDMC, n_steps=1000, 32 chains).

    python3 benchmarks/schedules.py [--seeds 5]

Prints, per schedule, the bounds' errors against the exact log evidence (mean [min, max] over
seeds, each seed simulating its own data set), the gap and the wall time per run.
"""

import argparse

from _common import bdmc_errors, quiet, summarize

from pymc_bdmc import known_evidence, schedules


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n-steps", type=int, default=1000)
    args = parser.parse_args()
    quiet()
    model = known_evidence.linear_regression(n_obs=100, n_coef=20, seed=1)
    n = args.n_steps
    for label, schedule in [
        ("adaptive (default)", "adaptive"),
        ("sigmoid, delta=4 (paper)", "sigmoid"),
        ("geometric from 1e-4", schedules.geometric(n, 1e-4)),
        ("linear", "linear"),
    ]:
        rows = bdmc_errors(model, range(args.seeds), n_steps=None if not isinstance(schedule, str)
                           else n, chains=32, schedule=schedule)
        print(summarize(label, rows), flush=True)


if __name__ == "__main__":
    main()
