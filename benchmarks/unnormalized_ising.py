"""First- vs second-order Ising on simulated fields: log Bayes factor errors of SAVIS and MAVIS.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/unnormalized_ising.py [--seeds 3] [--size 10]

A first version of the issue-18 benchmark (Everitt et al. 2017, §2.6.1, §3.3), without a
driver: exact transfer-matrix simulation only, no Gibbs-simulation variant, no cost matching.
Each seed simulates one H x H field (even seeds from a first-order model with coupling 0.3,
odd seeds from a second-order one with couplings (0.3, 0.1)). Priors: c ~ N(0, 1) (first
order), (c1, c2) ~ N(0, I) (second order). For each model an exchange-algorithm pilot gives θ̂
and a Gaussian proposal (sd x 1.5); the evidence is then estimated by SAVIS with the exact
Z(θ̂), by MAVIS (5 bridges) with the exact Z(θ̂), by SAVIS with the reverse-annealing upper
bound on log Z(θ̂) plugged in (nothing exact plugged in), and by random-weight SMC tempering
the data one row at a time (no pilot, nothing plugged in). The truth is a trapezoid rule over
±7 posterior sd of exact transfer-matrix likelihoods. One BLAS thread is much faster on a busy
2-core machine (the transfer matrix does many small matrix-vector products).
"""

# ruff: noqa: RUF001, RUF002, RUF003

import argparse
import time

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from pymc_bdmc.unnormalized import (
    IsingRowPath,
    IsingSimulator,
    exchange_sampler,
    mavis,
    normaliser_bounds,
    random_weight_smc,
    savis,
)
from pymc_bdmc.unnormalized.ising import ising_natural, ising_statistics

MODELS = {
    "first": dict(d=1, natural=lambda t: ising_natural(t[0], "first")),
    "second": dict(d=2, natural=lambda t: np.asarray(t, dtype=float)),
}


def exact_log_evidence(sim, s_y, natural, prior, centre, sd, points):
    axes = [np.linspace(m - 7 * s, m + 7 * s, points) for m, s in zip(centre, sd, strict=True)]
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))
    eta = np.array([natural(t) for t in mesh])
    log_joint = prior.logpdf(mesh) + eta @ s_y - sim.log_partition(eta)
    return logsumexp(log_joint) + np.sum([np.log(a[1] - a[0]) for a in axes])


def one_model(name, y, rng, args):
    spec = MODELS[name]
    sim = IsingSimulator(y.shape, name)
    s_y = ising_statistics(y)
    prior = stats.multivariate_normal(np.zeros(spec["d"]), np.eye(spec["d"]))
    out, clock = {}, time.perf_counter()
    chain = exchange_sampler(sim, s_y, spec["natural"], prior.logpdf, np.zeros(spec["d"]),
                             args.pilot, rng, step_size=0.05, burn_in=200)
    out["t_pilot"] = time.perf_counter() - clock
    sd = np.sqrt(np.diag(np.atleast_2d(np.cov(chain.theta, rowvar=False))))
    clock = time.perf_counter()
    out["truth"] = exact_log_evidence(sim, s_y, spec["natural"], prior, chain.pilot(), sd,
                                      101 if spec["d"] == 1 else 41)
    out["t_truth"] = time.perf_counter() - clock
    q = chain.proposal(scale=1.5)
    theta = np.asarray(q.rvs(size=args.draws, random_state=rng)).reshape(args.draws, -1)
    eta = np.array([spec["natural"](t) for t in theta])
    eta_hat = spec["natural"](chain.pilot())
    common = (sim, s_y, eta, prior.logpdf(theta), q.logpdf(theta), eta_hat)
    log_z_hat = sim.log_partition(eta_hat)
    runs = {
        "savis": lambda: savis(*common, log_z_hat, n_aux=args.n_aux, rng=rng),
        "mavis": lambda: mavis(*common, log_z_hat, n_aux=args.n_aux, n_bridges=5, rng=rng),
        "savis+upper": lambda: savis(*common, normaliser_bounds(
            sim, eta_hat, np.zeros(2), y.size * np.log(2.0), 64, rng).upper,
            n_aux=args.n_aux, rng=rng),
        "rw-smc": lambda: random_weight_smc(
            IsingRowPath(y, name), spec["natural"], prior.logpdf,
            prior.rvs(size=args.particles, random_state=rng).reshape(args.particles, -1), rng,
            n_aux=16),
    }
    for method, run in runs.items():
        clock = time.perf_counter()
        result = run()
        ess = getattr(result, "ess", np.nan)  # SMC: resampled, no single ESS
        out[method] = (result.log_evidence, ess, time.perf_counter() - clock)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--draws", type=int, default=400, help="importance draws per model")
    parser.add_argument("--n-aux", type=int, default=1)
    parser.add_argument("--pilot", type=int, default=1000, help="exchange draws per model")
    parser.add_argument("--particles", type=int, default=200, help="random-weight SMC")
    args = parser.parse_args()
    errors = {m: [] for m in ("savis", "mavis", "savis+upper", "rw-smc")}
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        order = "first" if seed % 2 == 0 else "second"
        eta_true = ising_natural(0.3, "first") if order == "first" else np.array([0.3, 0.1])
        y = IsingSimulator((args.size, args.size), order).sample(eta_true, 1, rng)[0]
        res = {name: one_model(name, y, rng, args) for name in MODELS}
        truth = res["first"]["truth"] - res["second"]["truth"]
        print(f"seed {seed} (data: {order} order): log BF12 truth {truth:+.3f}; pilot "
              f"{res['first']['t_pilot'] + res['second']['t_pilot']:.0f}s, truth "
              f"{res['first']['t_truth'] + res['second']['t_truth']:.0f}s")
        for method, errs in errors.items():
            est = res["first"][method][0] - res["second"][method][0]
            errs.append(est - truth)
            print(f"  {method:12s} log BF12 {est:+.3f}  error {est - truth:+.3f}  "
                  f"ESS {res['first'][method][1]:.0f}/{res['second'][method][1]:.0f}  "
                  f"{res['first'][method][2] + res['second'][method][2]:.1f}s")
    for method, errs in errors.items():
        errs = np.abs(errs)
        print(f"{method:12s} |error|: median {np.median(errs):.3f}, max {errs.max():.3f}, "
              f"share > 0.5 nats {np.mean(errs > 0.5):.2f}")


if __name__ == "__main__":
    main()
