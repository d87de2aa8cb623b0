"""Reproduce the BDMC paper's estimator comparison (Grosse, Ghahramani & Adams 2015, §6) small.

Simulates one data set from each benchmark model (clustering, low rank, binary attributes),
computes a BDMC ground truth (forward and reverse AIS through one pilot-tuned plan, adaptive
schedule by default, as ``pymc_bdmc.sample_bdmc``), runs every registered testbed estimator that
applies (AIS, SMC, CMS, nested sampling, BMC, VB, ...) at a few budgets and prints, per model, a
Markdown table of mean error, RMSE and time, and the time each estimator needs to reach an RMSE
below 10 nats.

Run from the repository root::

    python3 benchmarks/paper_study.py --levels 1 4 --trials 3 --n-obs 50 --n-dim 10
"""

import argparse
import logging
import time

import pymc_bdmc.testbed as tb

MODELS = {
    "clustering": tb.clustering,
    "low_rank": tb.low_rank,
    "binary_attributes": tb.binary_attributes,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--estimators", nargs="+", default=None)
    parser.add_argument("--levels", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--n-obs", type=int, default=50)
    parser.add_argument("--n-dim", type=int, default=10)
    parser.add_argument("--truth-steps", type=int, default=1000)
    parser.add_argument("--truth-chains", type=int, default=32)
    parser.add_argument("--truth-schedule", default="adaptive",
                        choices=["adaptive", "sigmoid", "linear", "geometric"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="save one figure per model: PREFIX_model.png")
    args = parser.parse_args()
    # pymc_bdmc's own handler prints INFO messages; no root handler, so nothing is doubled.
    logging.getLogger("pymc_bdmc").setLevel(logging.INFO)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    out = logging.getLogger("pymc_bdmc.paper_study")
    out.setLevel(logging.INFO)
    for name in args.models:
        start = time.perf_counter()
        problem = MODELS[name](n_obs=args.n_obs, n_dim=args.n_dim, seed=args.seed)
        truth = tb.ground_truth(problem, args.truth_steps, chains=args.truth_chains,
                                schedule=args.truth_schedule)
        results = tb.compare_estimators(problem, estimators=args.estimators, levels=args.levels,
                                        trials=args.trials, seed=args.seed, truth=truth)
        a = results.attrs
        out.info("\n### %s (%s)\n\nground truth (%s, %d steps, %s schedule): [%.2f, %.2f], "
                 "gap %.2f; truth = midpoint %.2f; %.0f s in all\n\n%s\n", name, problem.info,
                 a["truth_method"], args.truth_steps, args.truth_schedule, a["truth_lower"],
                 a["truth_upper"],
                 a["truth_gap"], a["truth"], time.perf_counter() - start,
                 tb.summary_table(results))
        if args.plot:
            import matplotlib

            matplotlib.use("Agg")
            ax = tb.plot_estimates(results)
            ax.figure.savefig(f"{args.plot}_{name}.png", dpi=100, bbox_inches="tight")


if __name__ == "__main__":
    main()
