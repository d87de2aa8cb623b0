"""What a leapfrog step from a fitted base costs on a 500-step random walk, dense or banded.

Run from the repository root::

    python3 benchmarks/banded_base.py        # about 30 s on 2 cores

On a path from a full-rank fitted Gaussian (:class:`pymc_bdmc.kernels.base_distribution.
GaussianBase`), every leapfrog step maps the chains from principal coordinates to the model's
(``x = mean + A z``) and the gradient back (``A^T g``), two products with the dense ``d x d``
basis. A random walk's precision is tridiagonal plus one coordinate (its scale) coupled to all,
so the factor ``A = L^{-T}`` of its Cholesky factor ``L`` does the same with two bordered
bidiagonal substitutions. This times, at 32 chains and one BLAS thread (as the runs use):

* one batched call of the model's densities and gradients (``known_evidence.gaussian_random_walk``);
* the two dense products, as the base computes them;
* the two substitutions, compiled with Numba, the chains in the inner loop.

The ratio of the products to the model call is how far a run from a full-rank base is from the
model's own cost (the benchmark's "distance to the limit"); the substitutions' is how far one
with a banded factor would be. Both forms factor the same covariance (checked).
"""

from __future__ import annotations

import argparse
import warnings

import numba
import numpy as np
from _common import seconds_per_call
from threadpoolctl import threadpool_limits

from pymc_bdmc import known_evidence
from pymc_bdmc.model.density import ModelDensity


@numba.njit(cache=True)
def bordered_solve_transposed(z, inverse_diagonal, below, border, inverse_corner):
    """Rows of ``z`` (given as columns, ``z`` of shape (d, chains)) solved by ``L^T``."""
    d, chains = z.shape
    last = d - 1
    x = np.empty_like(z)
    for i in range(chains):
        x[last, i] = z[last, i] * inverse_corner
    for j in range(last - 1, -1, -1):
        for i in range(chains):
            upper = below[j + 1] * x[j + 1, i] if j + 1 < last else 0.0
            x[j, i] = (z[j, i] - border[j] * x[last, i] - upper) * inverse_diagonal[j]
    return x


@numba.njit(cache=True)
def bordered_solve(g, inverse_diagonal, below, border, inverse_corner):
    """Columns of ``g`` (shape (d, chains)) solved by ``L``."""
    d, chains = g.shape
    last = d - 1
    y = np.empty_like(g)
    total = np.zeros(chains)
    for j in range(last):
        for i in range(chains):
            previous = below[j] * y[j - 1, i] if j > 0 else 0.0
            y[j, i] = (g[j, i] - previous) * inverse_diagonal[j]
            total[i] += border[j] * y[j, i]
    for i in range(chains):
        y[last, i] = (g[last, i] - total[i]) * inverse_corner
    return y


def walk_precision(steps: int, rng: np.random.Generator) -> np.ndarray:
    """A walk's precision shape: tridiagonal, its last coordinate (the scale) coupled to all."""
    d = steps + 1
    precision = np.zeros((d, d))
    band = np.arange(steps)
    precision[band, band] = 2.0
    precision[band[:-1], band[1:]] = precision[band[1:], band[:-1]] = -1.0
    precision[0, 0] += 1.0
    precision[:steps, steps] = precision[steps, :steps] = rng.normal(scale=0.01, size=steps)
    precision[steps, steps] = 50.0
    return precision


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    density = ModelDensity(known_evidence.gaussian_random_walk(args.steps).model)
    d = density.n_dim
    x = 0.3 * rng.normal(size=(args.chains, d))

    precision = walk_precision(d - 1, rng)
    lower = np.linalg.cholesky(precision)
    eigenvalues, basis = np.linalg.eigh(np.linalg.inv(precision))
    root = np.sqrt(eigenvalues)
    factors = (1.0 / np.diag(lower)[:-1].copy(), np.r_[0.0, np.diag(lower, -1)[:-1]],
               lower[-1, :-1].copy(), 1.0 / lower[-1, -1])
    z = rng.standard_normal((args.chains, d))
    # The substitutions are L^{-T} z and L^{-1} g, and both factors give one covariance.
    inverse = np.linalg.inv(lower)
    zt = np.ascontiguousarray(z.T)
    np.testing.assert_allclose(bordered_solve_transposed(zt, *factors).T, z @ inverse,
                               rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(bordered_solve(zt, *factors).T, z @ inverse.T, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_allclose(inverse.T @ inverse, (basis * eigenvalues) @ basis.T, atol=1e-8)

    def dense_pair(z):
        return (((z * root) @ basis.T) @ basis) * root

    def banded_pair(zt):
        return bordered_solve(bordered_solve_transposed(zt, *factors), *factors)

    with threadpool_limits(limits=1, user_api="blas"):
        model_call = seconds_per_call(density.parts, x)
        dense = seconds_per_call(dense_pair, z)
        banded = seconds_per_call(banded_pair, np.ascontiguousarray(z.T))
    print(f"random walk, {args.steps} steps ({d} coordinates), {args.chains} chains:")
    print(f"  one batched call of the densities and gradients  {model_call * 1e6:7.0f} us")
    print(f"  two products with the dense basis                {dense * 1e6:7.0f} us "
          f"({dense / model_call:.1f} model calls)")
    print(f"  two bordered bidiagonal substitutions            {banded * 1e6:7.0f} us "
          f"({banded / model_call:.2f} model calls)")


if __name__ == "__main__":
    main()
