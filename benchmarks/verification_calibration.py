"""False-alarm rates and power of the kernel tests in ``pymc_bdmc.verification``.

    python3 benchmarks/verification_calibration.py [--reps 100] [--tests geweke,invariance]
                                                   [--correct-only] [--first-seed 0]

Each row runs one test ``reps`` times with independent seeds and reports how often it rejected
at ``alpha = 0.01`` (with a 95% Clopper-Pearson interval). Correct kernels measure the false-alarm
rate (the target is <= 1%), broken ones the power. The kernels and models are those of
``tests/test_verification.py``: a 5-observation Normal-Inverse-Gamma regression (Geweke at
beta = 1, invariance at beta = 0.3) and a correlated two-coefficient Gaussian regression
(reversibility).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from _common import quiet
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_verification import (  # noqa: E402
    ALPHA,
    _posterior_params,
    _tempered,
    broken_hmc,
    gaussian_gibbs,
    hmc,
)

from pymc_bdmc import known_evidence  # noqa: E402
from pymc_bdmc.kernels.hmc import HMCParams  # noqa: E402
from pymc_bdmc.verification import Verifier  # noqa: E402


def rate(rejections):
    k, n = int(np.sum(rejections)), len(rejections)
    low = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    high = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k:4d}/{n:<4d} = {k / n:6.1%}  [{low:5.1%}, {high:5.1%}]"


def rows(tests):
    nig = known_evidence.normal_inverse_gamma_regression(n_obs=5, n_coef=2, seed=1)
    verifier = Verifier(nig.model)
    plan = verifier.hmc_plan(n_steps=20, random_seed=1)
    T = plan.n_steps
    if "geweke" in tests:
        for label, kernel in [
            ("tuned HMC plan (correct)", plan.transition),
            ("HMC, no Metropolis, step x1",
             broken_hmc(1.0, _posterior_params(plan), metropolis=False)),
            ("HMC, no Metropolis, step x1.5",
             broken_hmc(1.0, _posterior_params(plan, 1.5), metropolis=False)),
            ("HMC, kinetic energy w/o mass",
             broken_hmc(1.0, _posterior_params(plan), kinetic_mass=False)),
        ]:
            yield "geweke (100 chains x 200)", label, lambda s, k=kernel: verifier.geweke(
                k, t=T, random_seed=10_000 + s)
    if "invariance" in tests:
        t, beta, params, exact = _tempered(plan, nig, 0.3)
        for label, kernel in [
            ("tuned HMC plan (correct)", plan.transition),
            ("HMC, no Metropolis", broken_hmc(beta, params, metropolis=False)),
            ("HMC at beta_{t+3}", hmc(float(plan.betas[t + 3]), params)),
        ]:
            yield "invariance (beta 0.3)", label, lambda s, k=kernel: verifier.invariance(
                k, t=t, beta=beta, exact_sampler=exact, random_seed=20_000 + s)
    if "reversibility" in tests:
        am = known_evidence.linear_regression(n_obs=1, n_coef=2, prior_sd=1.0, noise_sd=0.3, seed=9)
        v2 = Verifier(am.model)
        x = am.constants["x"]
        precision = np.eye(2) + x.T @ x / 0.3**2
        mean = np.linalg.solve(precision, x.T @ am.data["y"] / 0.3**2)
        exact2 = lambda n, rng: am.sample_tempered(1.0, n, rng)  # noqa: E731
        variance = v2.flatten(exact2(4000, np.random.default_rng(0))).var(axis=0)
        for label, kernel in [
            ("HMC (correct)", hmc(1.0, HMCParams(0.5, variance, 3, 0.5))),
            ("Gibbs scan 0,1,0 (correct)", gaussian_gibbs(mean, precision, [0, 1, 0])),
            ("Gibbs scan 0,1 (unreversed)", gaussian_gibbs(mean, precision, [0, 1])),
        ]:
            yield "reversibility", label, lambda s, k=kernel: v2.reversibility(
                k, t=1, beta=1.0, exact_sampler=exact2, random_seed=30_000 + s)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--tests", default="geweke,invariance,reversibility")
    parser.add_argument("--correct-only", action="store_true",
                        help="only the correct kernels (false-alarm rates)")
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    quiet()
    print(f"rejections at alpha = {ALPHA} over {args.reps} independent runs")
    for test, label, run in rows(args.tests.split(",")):
        if args.correct_only and "correct" not in label:
            continue
        start = time.perf_counter()
        seeds = range(args.first_seed, args.first_seed + args.reps)
        rejected = [run(seed).p_value < ALPHA for seed in seeds]
        seconds = (time.perf_counter() - start) / args.reps
        print(f"{test:<26}{label:<32}{rate(rejected)}  {seconds:5.2f} s/run", flush=True)


if __name__ == "__main__":
    main()
