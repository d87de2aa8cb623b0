"""ERGM evidence (issue 18): exact edges-only MAVIS, and the inexact (Gibbs) path, flagged.

Truths by quadrature: edges-only from the closed-form normaliser, edges + two-stars on 6 nodes
from the enumerated one. Fixed seeds; tolerances stated at each assertion.
"""

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from pymc_bdmc.unnormalized import ERGMSimulator, mavis, savis


def _graph(n, edges, seed):
    rng = np.random.default_rng(seed)
    iu = np.triu_indices(n, 1)
    on = rng.choice(len(iu[0]), size=edges, replace=False)
    y = np.zeros((n, n), int)
    y[iu[0][on], iu[1][on]] = 1
    return y + y.T


def _grid_truth_and_proposal(sim, s_y, prior, axes):
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))
    log_joint = prior.logpdf(mesh) + mesh @ s_y - sim.log_partition(mesh)
    log_ev = logsumexp(log_joint) + sum(np.log(a[1] - a[0]) for a in axes)
    w = np.exp(log_joint - logsumexp(log_joint))
    mean = w @ mesh
    cov = np.atleast_2d((mesh - mean).T @ ((mesh - mean) * w[:, None]))
    return log_ev, mean, stats.multivariate_normal(mean, 2.25 * cov)


def test_edges_only_mavis_with_gibbs_bridges():
    sim = ERGMSimulator(12)
    y = _graph(12, 20, seed=0)
    s_y = sim.statistics(y)
    prior = stats.multivariate_normal([0.0], [[25.0]])
    log_ev, mean, q = _grid_truth_and_proposal(sim, s_y, prior, [np.linspace(-5, 3, 4001)])
    rng = np.random.default_rng(1)
    theta = q.rvs(size=500, random_state=rng).reshape(-1, 1)
    result = mavis(sim, s_y, theta, prior.logpdf(theta), q.logpdf(theta), mean,
                   sim.log_partition(mean), n_bridges=3, rng=rng)
    error = result.log_evidence - log_ev
    # Over 20 seeds this estimate's error had mean +0.015 and sd 0.038 nats (unbiased in
    # Z-space: 1.016 +- 0.009), while the weights' own relative SE averaged 0.030: it
    # understates the spread. 0.15 nats is 4 sd of the measured spread.
    assert result.exact and abs(error) < 0.15, error


def test_two_stars_with_gibbs_simulation_is_close_and_flagged_inexact():
    sim = ERGMSimulator(6, ("edges", "two_stars"), exact=False, sweeps=20)
    y = _graph(6, 7, seed=2)
    s_y = sim.statistics(y)
    prior = stats.multivariate_normal([0.0, 0.0], np.eye(2))
    axes = [np.linspace(-5, 4, 181), np.linspace(-2.5, 2.5, 181)]
    log_ev, mean, q = _grid_truth_and_proposal(sim, s_y, prior, axes)
    rng = np.random.default_rng(3)
    theta = q.rvs(size=600, random_state=rng)
    result = savis(sim, s_y, theta, prior.logpdf(theta), q.logpdf(theta), mean,
                   sim.log_partition(mean), n_aux=2, rng=rng)
    error = result.log_evidence - log_ev
    assert result.exact is False  # Gibbs draws: no unbiasedness guarantee, and it says so
    assert abs(error) < 4 * result.relative_se and abs(error) < 0.2, error
