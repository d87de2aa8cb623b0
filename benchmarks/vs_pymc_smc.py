"""pymc_bdmc AIS vs pm.sample_smc on closed-form models: accuracy against time, side by side.

    python3 benchmarks/vs_pymc_smc.py [--seeds 4] [--target 0.05]

For each model (on its own data, exact log evidence known) both tools run at increasing budgets
(AIS n_steps; SMC particles), each budget over several seeds. Reported: RMSE against the truth
and mean wall time per run (compilation included for both), the cheapest budget whose RMSE is
below --target, and the ratio of the two tools' times measured in the same run. Also the
overhead ratio of pymc_bdmc: sampling time / (model evaluations x time of one batched call).
"""

import argparse
import time

import numpy as np
from _common import quiet, run_pymc_smc

import pymc_bdmc as pmb
from pymc_bdmc import testing
from pymc_bdmc.model.cache import clear_cache
from pymc_bdmc.model.density import ModelDensity

MODELS = {
    "regression 5 coef, N=50": lambda: testing.linear_regression(50, 5, seed=1),
    "Normal-InvGamma 3 coef, N=30": lambda: testing.normal_inverse_gamma_regression(30, 3, seed=1),
    "Gamma-Poisson": lambda: testing.gamma_poisson(seed=4),
}
AIS_STEPS = (100, 200, 400, 800, 1600)
SMC_DRAWS = (250, 500, 1000, 2000, 4000)


def run_ais(am, n_steps, seed):
    clear_cache()  # compilation included in every run, as for pm.sample_smc
    start = time.perf_counter()
    with am.model:
        r = pmb.sample_ais(n_steps=n_steps, chains=32, random_seed=seed, progressbar=False)
    return float(r["evidence"]["lower"]), time.perf_counter() - start, r


def cheapest(budgets, rmse, seconds, target):
    ok = [i for i in range(len(budgets)) if rmse[i] <= target]
    return (budgets[ok[0]], seconds[ok[0]]) if ok else (None, np.nan)


def overhead_ratio(am, result):
    density = ModelDensity(am.model)
    x = np.random.default_rng(0).normal(size=(32, density.n_dim)) * 0.1
    density.parts(x)
    calls = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(200):
            density._parts_fn(x)
        calls.append((time.perf_counter() - start) / 200)
    per_call = min(calls)
    attrs = result["evidence"].attrs
    return attrs["sampling_time"] / (attrs["model_evaluations"] * per_call), per_call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--target", type=float, default=0.05)
    args = parser.parse_args()
    quiet()
    import logging
    logging.getLogger("pymc").setLevel(logging.ERROR)
    for label, factory in MODELS.items():
        am = factory()
        truth = am.log_evidence()
        print(f"\n{label}: exact log p(y) = {truth:.3f}", flush=True)
        tools = {}
        for tool, budgets, runner in (("pymc_bdmc AIS", AIS_STEPS, run_ais),
                                      ("pm.sample_smc", SMC_DRAWS, run_pymc_smc)):
            rmse, seconds = [], []
            for budget in budgets:
                out = [runner(am, budget, seed) for seed in range(args.seeds)]
                err = np.array([o[0] for o in out]) - truth
                rmse.append(float(np.sqrt(np.mean(err**2))))
                seconds.append(float(np.mean([o[1] for o in out])))
                print(f"  {tool:14s} budget {budget:5d}: RMSE {rmse[-1]:.3f}  "
                      f"bias {err.mean():+.3f}  {seconds[-1]:.2f} s/run", flush=True)
                if tool == "pymc_bdmc AIS" and budget == 1600:
                    ratio, per_call = overhead_ratio(am, out[0][2])
                    print(f"  overhead at n_steps=1600: {ratio:.2f} x model time "
                          f"({per_call * 1e6:.1f} us per batched call)", flush=True)
            tools[tool] = cheapest(budgets, rmse, seconds, args.target)
        (b1, t1), (b2, t2) = tools["pymc_bdmc AIS"], tools["pm.sample_smc"]
        print(f"  RMSE <= {args.target}: pymc_bdmc n_steps={b1} in {t1:.2f} s; "
              f"pm.sample_smc draws={b2} in {t2:.2f} s; time ratio {t1 / t2:.2f}", flush=True)


if __name__ == "__main__":
    main()
