"""How much a linear metric can help HMC on a random walk's posterior: stiffness, measured.

Run from the repository root::

    python3 benchmarks/metric_stiffness.py            # the 500- and 200-step walks

The stiffness of a metric ``L L^T`` is the largest eigenvalue of the second moment of the
whitened scores ``L^T grad log p`` (``pymc_bdmc.kernels.mass.stiffness``); it bounds the stable
leapfrog step, and it is 1 for a Gaussian target in its own covariance metric. Here it is
measured on 2000 *exact* posterior draws of ``known_evidence.gaussian_random_walk(T)``:
``log sigma`` from its marginal posterior on a grid, then the walk given ``sigma`` from its
Gaussian conditional. Metrics compared, each fitted to a pilot-sized subset of the draws
(64 and 256 particles, equal weights, as the pilot would hold at ``beta = 1``):

* the diagonal (marginal variances: the kernel above 400 coordinates);
* low rank plus diagonal (the Ledoit-Wolf shrunk correlation in the low-rank form of
  ``low_rank_shrunk_correlation``, as the fitted base uses);
* dense (the same estimate as a Cholesky factor: the kernel up to 400 coordinates);
* the draws' exact covariance (the best any linear metric can do).

If even the exact covariance leaves the stiffness near the diagonal's, the stiffness comes from
the posterior's curvature changing with ``sigma`` (the funnel), which no fixed linear metric
removes; longer trajectories and the scale moves are what help.
"""

from __future__ import annotations

import argparse

import numpy as np

from pymc_bdmc import known_evidence as tq
from pymc_bdmc.kernels.mass import low_rank_shrunk_correlation, shrunk_correlation, stiffness
from pymc_bdmc.model.density import ModelDensity

#: The walk's prior and noise scales (``gaussian_random_walk``'s defaults).
INNOVATION_PRIOR_SD, NOISE_SD = 0.5, 0.5


def exact_posterior_draws(n_steps: int, n: int, rng) -> tuple[np.ndarray, ModelDensity]:
    """``n`` exact posterior draws of the walk on the flat unconstrained space."""
    analytic = tq.gaussian_random_walk(n_steps)
    density = ModelDensity(analytic.model)
    assert density.layout.names == ("sigma_log__", "x")
    y = np.asarray(analytic.data["y"], dtype=float)
    t = np.arange(n_steps)
    walk = np.minimum.outer(t, t).astype(float)
    grid = np.linspace(-8.0, 1.0, 400)
    log_post = []
    for u in grid:
        chol = np.linalg.cholesky(1.0 + np.exp(2 * u) * walk + NOISE_SD**2 * np.eye(n_steps))
        z = np.linalg.solve(chol, y)
        # log N(y; 0, C(u)) + log HalfNormal(e^u) + u (the log transform's Jacobian), + const
        log_post.append(-0.5 * z @ z - np.sum(np.log(np.diag(chol)))
                        - 0.5 * (np.exp(u) / INNOVATION_PRIOR_SD) ** 2 + u)
    log_post = np.array(log_post)
    weights = np.exp(log_post - log_post.max())
    cell = rng.choice(len(grid), size=n, p=weights / weights.sum())
    x = np.zeros((n, n_steps + 1))
    for k in np.unique(cell):
        rows = cell == k
        prior = 1.0 + np.exp(2 * grid[k]) * walk
        gain = np.linalg.solve(prior + NOISE_SD**2 * np.eye(n_steps), prior)  # symmetric
        cov = prior - prior @ gain
        chol = np.linalg.cholesky(cov + 1e-10 * np.eye(n_steps))
        x[rows, 0] = grid[k] + (rng.uniform(size=rows.sum()) - 0.5) * (grid[1] - grid[0])
        x[rows, 1:] = gain.T @ y + rng.standard_normal((rows.sum(), n_steps)) @ chol.T
    return x, density


def factors(pilot: np.ndarray) -> dict[str, np.ndarray]:
    """The metrics' factors fitted to an equally weighted pilot population."""
    weights = np.full(len(pilot), 1.0 / len(pilot))
    scale = np.sqrt(pilot.var(axis=0))
    level, basis, eigenvalues, _ = low_rank_shrunk_correlation(pilot, weights)
    root = np.eye(pilot.shape[1]) + (basis * (np.sqrt(eigenvalues) - 1.0)) @ basis.T
    correlation, _ = shrunk_correlation(pilot, weights)
    return {"diagonal": scale,
            f"low rank ({basis.shape[1]})": (scale * np.sqrt(level))[:, None] * root,
            "dense": np.linalg.cholesky(correlation * np.outer(scale, scale))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="*", default=[500, 200])
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    for n_steps in args.steps:
        x, density = exact_posterior_draws(n_steps, args.draws, rng)
        parts = density.parts(x)
        scores = parts.grad_log_prior + parts.grad_log_likelihood
        weights = np.full(len(x), 1.0 / len(x))
        exact = np.linalg.cholesky(np.cov(x.T) + 1e-12 * np.eye(x.shape[1]))
        print(f"random walk, T={n_steps} ({x.shape[1]} coordinates), posterior sd of log sigma "
              f"{x[:, 0].std():.2f}; exact covariance: stiffness "
              f"{stiffness(scores, weights, exact):.1f}")
        for n_pilot in (64, 256):
            pilot = x[rng.choice(len(x), n_pilot, replace=False)]
            measured = ", ".join(f"{name} {stiffness(scores, weights, factor):.1f}"
                                 for name, factor in factors(pilot).items())
            print(f"  {n_pilot}-particle pilot: {measured}")


if __name__ == "__main__":
    main()
