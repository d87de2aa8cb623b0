"""Where one batched gradient of the suite's latent GP goes: the linear algebra it needs.

Run from the repository root::

    python3 benchmarks/gp_gradient.py        # about 10 s on 2 cores

Times one call of the compiled batched densities and gradients (what every leapfrog step of
every chain evaluates) of ``known_evidence.latent_gp(30)`` at 32 chains, then the batched
linear-algebra operations its graph holds, each compiled alone by PyTensor (Numba backend) on
32 matrices of 30 x 30: the Cholesky factorisation, a triangular solve with a 30 x 30
right-hand side (the Cholesky's gradient needs two) and a batched matrix product. Where those
add up to most of the call, the model evaluation is the linear algebra itself, and only fewer
evaluations (steps, chains, leapfrog steps) make the runs cheaper.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
from _common import seconds_per_call
from pytensor.tensor.linalg import cholesky, solve_triangular

from pymc_bdmc import known_evidence
from pymc_bdmc.model.density import ModelDensity


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=32)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    chains, n = args.chains, 30
    density = ModelDensity(known_evidence.latent_gp(n).model)
    rng = np.random.default_rng(0)
    x = 0.3 * rng.normal(size=(chains, density.n_dim))
    model_call = seconds_per_call(density.parts, x)

    matrices = rng.normal(size=(chains, n, n))
    spd = matrices @ matrices.transpose(0, 2, 1) + n * np.eye(n)
    upper = np.linalg.cholesky(spd).transpose(0, 2, 1).copy()
    a, b = pt.tensor3("a"), pt.tensor3("b")
    parts = {
        "Cholesky": (pytensor.function([a], cholesky(a)), (spd,)),
        "triangular solve, 30 x 30 right-hand side": (
            pytensor.function([a, b], solve_triangular(a, b, lower=False)), (upper, spd)),
        "matrix product": (pytensor.function([a, b], a @ b), (upper, spd)),
    }
    print(f"latent GP, {n} points, {chains} chains: one batched call of the densities and "
          f"gradients {model_call * 1e6:.0f} us")
    for name, (fn, inputs) in parts.items():
        print(f"  {name} on {chains} matrices: {seconds_per_call(fn, *inputs) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
