"""PyMC step methods as BDMC transitions: errors against exact evidence, and wall time.

    python3 benchmarks/step_methods.py [--seeds 4] [--n-steps 200] [--chains 16] [--cores 1]

Models: a Normal-Inverse-Gamma regression (closed form) run with the vectorized HMC kernel and
with NUTS, Metropolis and Slice; a 3-component mixture with explicit assignments and a
binary-attribute model, whose evidence is computed by enumerating every assignment. Each seed
simulates its own data set. Times include compilation and, with ``--cores > 1``, worker start-up.
"""

import argparse

import pymc as pm
from _common import bdmc_errors, quiet, summarize

from pymc_bdmc import known_evidence


def cases():
    regression = known_evidence.normal_inverse_gamma_regression(n_obs=15, n_coef=2, seed=4)
    mixture = known_evidence.categorical_mixture(n_obs=6, n_components=3, seed=1)
    binary = known_evidence.binary_attribute(n_obs=8, seed=1)
    m, b = mixture.model, binary.model
    with regression.model:
        yield "NIG regression: vectorized HMC", regression, None
        yield "NIG regression: NUTS", regression, pm.NUTS()
        yield "NIG regression: Metropolis", regression, pm.Metropolis()
        yield "NIG regression: Slice", regression, pm.Slice()
    with m:
        yield ("mixture K=3 N=6: NUTS + CatGibbs", mixture,
               [pm.NUTS([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])])
        yield ("mixture K=3 N=6: Metropolis + CatGibbs", mixture,
               [pm.Metropolis([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])])
    with b:
        yield "binary N=8: automatic", binary, None
        yield ("binary N=8: fixed-order Gibbs + Slice", binary,
               [pm.BinaryGibbsMetropolis([b["z"]], order=list(range(8))), pm.Slice([b["effect"]])])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--n-steps", type=int, default=200)
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--cores", type=int, default=1)
    args = parser.parse_args()
    quiet()
    for label, analytic, step in cases():
        rows = bdmc_errors(analytic, range(args.seeds), n_steps=args.n_steps,
                           chains=args.chains, step=step, cores=args.cores)
        print(summarize(label, rows), flush=True)


if __name__ == "__main__":
    main()
