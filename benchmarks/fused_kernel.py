"""Seconds per HMC transition: the compiled (fused) kernel against the NumPy kernel.

Run from the repository root::

    python3 benchmarks/fused_kernel.py

For three small models (a 3-coefficient Normal-InvGamma regression, a 60-step Gaussian random
walk, a latent GP on 30 points), 32 and 256 chains, 3 and 12 leapfrog steps, and each form of
the compiled kernel (diagonal or dense metric, path from the prior or from a Gaussian base),
prints the mean seconds of one transition of each kernel and of one batched model call. The
compilation is excluded (one untimed transition first); the two kernels make the same moves
(``tests/test_fused_hmc.py``). One BLAS thread, as in the pipeline's runs.

Then whole runs: ``sample_ais(n_steps=1000)`` at the defaults otherwise, with
``fused_kernel=False`` and ``True``, each after clearing the model cache (so the compiled
kernel is built or loaded from PyTensor's cache in every run, as a user's fresh call would);
seconds per run, the mean of two.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from threadpoolctl import threadpool_limits

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.hmc import HMCParams, hmc_step
from pymc_bdmc.model.cache import clear_cache
from pymc_bdmc.model.density import ModelDensity

MODELS = {
    "Normal-InvGamma, 3 coefficients": lambda: known_evidence.normal_inverse_gamma_regression(30, 3,
                                                                                       seed=1),
    "random walk, T=60": lambda: known_evidence.gaussian_random_walk(60),
    "latent GP, 30 points": lambda: known_evidence.latent_gp(30),
}
REPEATS = 50


def seconds_per_call(fn) -> float:
    fn()  # compiles a form of the fused kernel the first time
    start = time.perf_counter()
    for _ in range(REPEATS):
        fn()
    return (time.perf_counter() - start) / REPEATS


def main() -> None:
    print("model | chains | leapfrog | form | fused ms | NumPy ms | model call ms")
    for name, factory in MODELS.items():
        density = ModelDensity(factory().model)
        fused = density.fused_hmc()
        d = density.n_dim
        base = GaussianBase.from_covariance(np.zeros(d), 0.01 * np.eye(d))
        for chains in (32, 256):
            x = base.sample(np.random.default_rng(0), chains)
            call = seconds_per_call(lambda x=x: density.parts(x))
            for n_leapfrog in (3, 12):
                for dense in (False, True):
                    for with_base in (False, True):
                        b = base if with_base else None
                        parts_fn = density.parts if b is None else b.parts_fn(density.parts)
                        parts = parts_fn(x)
                        params = HMCParams(0.01, np.ones(d), n_leapfrog, 0.2,
                                           np.eye(d) if dense else None)
                        rng = np.random.default_rng(1)
                        t_fused = seconds_per_call(
                            lambda b=b, parts=parts, params=params, x=x, rng=rng:
                            fused.step(rng, x, parts, 0.5, params, b))
                        t_numpy = seconds_per_call(
                            lambda parts=parts, params=params, x=x, rng=rng, fn=parts_fn:
                            hmc_step(rng, x, parts, 0.5, params, fn))
                        form = f"{'dense' if dense else 'diagonal'}, {'base' if b else 'prior'}"
                        print(f"{name} | {chains} | {n_leapfrog} | {form} | "
                              f"{1e3 * t_fused:.2f} | {1e3 * t_numpy:.2f} | {1e3 * call:.3f}",
                              flush=True)


def whole_runs() -> None:
    print("\nmodel | fused_kernel | seconds per sample_ais(n_steps=1000) run | path")
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    for name, factory in MODELS.items():
        model = factory().model
        for fused in (False, True):
            seconds = []
            for seed in (1, 2):
                clear_cache()
                start = time.perf_counter()
                with model:
                    result = pmb.sample_ais(n_steps=1000, random_seed=seed, progressbar=False,
                                            fused_kernel=fused)
                seconds.append(time.perf_counter() - start)
            print(f"{name} | {fused} | {np.mean(seconds):.2f} | "
                  f"{result['evidence'].attrs['path_start']}", flush=True)


if __name__ == "__main__":
    with threadpool_limits(1, "blas"):  # as the pipeline runs its chains
        main()
    whole_runs()
