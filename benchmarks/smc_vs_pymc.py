"""Forward SMC of pymc_bdmc vs pm.sample_smc on a 50-parameter regression with exact evidence.

    python3 benchmarks/smc_vs_pymc.py [--seeds 3] [--particles 128 256] [--draws 500 1000 2000]

Model: ``known_evidence.linear_regression(n_obs=200, n_coef=50)`` on its own data (exact ``log p(y)``
from the Gaussian marginal). For every seed both tools run one after the other, at each budget
(pymc_bdmc: ``particles`` per population, 4 populations, defaults otherwise; PyMC: ``draws``
particles, one chain, IMH kernel, one core), so their wall times are measured under the same
machine load. Reported per budget: bias, RMSE and spread of the log-evidence error, mean wall
time per call (compilation included for both, as a user sees it), and the time ratio of each
pymc_bdmc budget to each PyMC budget from the same runs.

Multi-threaded BLAS stalls on a machine whose cores are shared with other jobs, so the script
pins BLAS to one thread (for both tools) unless ``--blas-threads`` says otherwise.
"""

import argparse
import os
import sys


def _blas_threads_from_argv() -> str:
    # Must be set before NumPy is imported.
    if "--blas-threads" in sys.argv:
        return sys.argv[sys.argv.index("--blas-threads") + 1]
    return "1"


for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _blas_threads_from_argv()

import logging  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from _common import quiet, run_pymc_smc  # noqa: E402

import pymc_bdmc as pmb  # noqa: E402
from pymc_bdmc import known_evidence  # noqa: E402


def run_ours(am, particles, seed):
    start = time.perf_counter()
    with am.model:
        result = pmb.sample_smc_evidence(particles=particles, random_seed=seed,
                                         progressbar=False)
    wall = time.perf_counter() - start
    ev = result["evidence"]
    return float(ev["lower"]), wall, ev.attrs["compile_time"], float(ev["lower_se"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--particles", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--draws", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--blas-threads", default="1")
    args = parser.parse_args()
    quiet()
    logging.getLogger("pymc").setLevel(logging.ERROR)

    am = known_evidence.linear_regression(n_obs=200, n_coef=50)
    truth = am.log_evidence()
    print(f"linear_regression(n_obs=200, n_coef=50): 50 parameters, exact log p(y) = "
          f"{truth:.3f}; BLAS threads = {os.environ['OPENBLAS_NUM_THREADS']}", flush=True)
    rows = {}  # label -> list of (error, wall seconds)
    for seed in range(args.seeds):
        for particles in args.particles:
            lower, wall, compile_time, se = run_ours(am, particles, 100 + seed)
            label = f"pymc_bdmc SMC, 4 x {particles} particles"
            rows.setdefault(label, []).append((lower - truth, wall))
            print(f"seed {seed}  {label:34s} error {lower - truth:+8.3f} (reported se "
                  f"{se:.3f})  {wall:6.1f} s (compile {compile_time:.1f} s)", flush=True)
        for draws in args.draws:
            log_ml, wall = run_pymc_smc(am, draws, 100 + seed)
            label = f"pm.sample_smc, {draws} draws"
            rows.setdefault(label, []).append((log_ml - truth, wall))
            print(f"seed {seed}  {label:34s} error {log_ml - truth:+8.3f}  {wall:6.1f} s",
                  flush=True)

    print("\nsummary over seeds (error = estimate - exact log p(y), in nats)")
    print(f"{'':36s}{'bias':>9s}{'RMSE':>9s}{'min':>9s}{'max':>9s}{'s/run':>8s}")
    seconds = {}
    for label, values in rows.items():
        err, wall = np.array(values).T
        seconds[label] = wall.mean()
        print(f"{label:36s}{err.mean():+9.3f}{np.sqrt(np.mean(err**2)):9.3f}{err.min():+9.3f}"
              f"{err.max():+9.3f}{wall.mean():8.1f}")
    print("\nwall-time ratio pymc_bdmc / pm.sample_smc (same runs):")
    ours = [k for k in seconds if k.startswith("pymc_bdmc")]
    theirs = [k for k in seconds if k.startswith("pm.")]
    print(f"{'':36s}" + "".join(f"{k.split(', ')[1]:>14s}" for k in theirs))
    for k in ours:
        print(f"{k:36s}" + "".join(f"{seconds[k] / seconds[t]:14.2f}" for t in theirs))


if __name__ == "__main__":
    main()
