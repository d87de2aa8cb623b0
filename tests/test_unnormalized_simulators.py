"""Simulators and exact normalisers of un-normalised likelihoods (issue 18): Ising and ERGM.

Exact identities are checked at 1e-10; Monte Carlo checks use fixed seeds and a tolerance of
4 standard errors (or a chi-square bound of about 5 standard deviations), so a correct
implementation fails them with probability well below 1e-3 and a biased one fails them.
"""

import numpy as np
import pytest
from scipy.special import expit, logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.ergm import ERGMSimulator, check_adjacency, ergm_statistics
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    enumerated_log_partition,
    ising_enumerate,
    ising_natural,
    ising_statistics,
)

ETAS = [(0.3, 0.0), (-0.7, 0.0), (2.0, 0.0), (0.4, 0.4), (0.5, -0.3), (-0.2, 0.9)]


def _all_fields(shape):
    h, w = shape
    codes = np.arange(2 ** (h * w))
    return (2 * ((codes[:, None] >> np.arange(h * w)) & 1) - 1).reshape(-1, h, w)


def _exact_probabilities(shape, eta):
    fields = _all_fields(shape)
    log_gamma = ising_statistics(fields) @ np.asarray(eta)
    return fields, np.exp(log_gamma - logsumexp(log_gamma))


def _chi_square(draws, shape, probabilities):
    h, w = shape
    codes = (((draws.reshape(len(draws), h * w) + 1) // 2) << np.arange(h * w)).sum(1)
    observed = np.bincount(codes, minlength=2 ** (h * w))
    expected = probabilities * len(draws)
    small = expected < 5  # pool rare fields so the chi-square approximation holds
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    dof = len(obs) - 1
    return ((obs - exp) ** 2 / exp).sum(), dof


# --- Ising: exact normaliser and sampler ----------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 4), (4, 3), (2, 5), (4, 4)])
def test_ising_transfer_matrix_log_z_matches_enumeration(shape):
    stats, log_count = ising_enumerate(shape)
    for neighbourhood in ("first", "second"):
        sim = IsingSimulator(shape, neighbourhood)
        for eta in ETAS:
            exact = enumerated_log_partition(stats, log_count, eta)
            assert sim.log_partition(eta) == pytest.approx(exact, abs=1e-10, rel=1e-12)
    # Vectorised over η, and the enumeration oracle against plain summation over all fields.
    etas = np.array(ETAS)
    assert np.allclose(IsingSimulator(shape).log_partition(etas),
                       enumerated_log_partition(stats, log_count, etas), atol=1e-10)
    direct = logsumexp(ising_statistics(_all_fields(shape)) @ etas.T, axis=0)
    assert np.allclose(enumerated_log_partition(stats, log_count, etas), direct, atol=1e-10)


def test_ising_statistics_and_natural_parameters():
    y = np.array([[1, -1, 1], [1, 1, -1]])
    # nearest: horizontal (-1, -1, 1, -1) + vertical (1, -1, -1) = -3;
    # diagonal: down-right (1, 1) + down-left (-1, 1) = 2
    assert ising_statistics(y).tolist() == [-3.0, 2.0]
    assert ising_natural(0.5, "first").tolist() == [0.5, 0.0]
    assert ising_natural(0.5, "second").tolist() == [0.5, 0.5]
    assert ising_natural([0.5, -0.1], "second").tolist() == [0.5, -0.1]
    with pytest.raises(BDMCInputError, match="one coupling"):
        ising_natural([0.5, -0.1], "first")


@pytest.mark.parametrize("shape, eta", [((2, 5), (0.5, -0.3)), ((5, 2), (0.9, 0.0)),
                                        ((3, 3), (-0.4, 0.6))])
def test_ising_exact_sampler_has_the_exact_distribution(shape, eta):
    # Chi-square over all 2^(H W) fields; (2, 5) goes through the transposed transfer matrix,
    # (5, 2) through the direct one, and η = 0.9 is well inside the ordered phase.
    rng = np.random.default_rng(11)
    draws = IsingSimulator(shape, "second").sample(eta, 60_000, rng)
    assert draws.shape == (60_000, *shape) and set(np.unique(draws)) == {-1, 1}
    _, probabilities = _exact_probabilities(shape, eta)
    chi2, dof = _chi_square(draws, shape, probabilities)
    assert chi2 < dof + 5 * np.sqrt(2 * dof), (chi2, dof)


def test_ising_chi_square_check_detects_a_wrong_coupling():
    # The test above can fail: draws at η = 0.5 are rejected as draws at η = 0.45.
    shape = (3, 3)
    draws = IsingSimulator(shape).sample((0.5, 0.0), 60_000, np.random.default_rng(2))
    _, wrong = _exact_probabilities(shape, (0.45, 0.0))
    chi2, dof = _chi_square(draws, shape, wrong)
    assert chi2 > dof + 5 * np.sqrt(2 * dof)


def test_swendsen_wang_leaves_the_ising_distribution_invariant():
    # Exact draws pushed through one sweep must keep E[s(y)] = ∇ log Z(η); mixed-sign couplings
    # exercise bonds between anti-aligned spins.
    shape, eta = (3, 4), np.array([0.6, -0.35])
    sim = IsingSimulator(shape, "second")
    rng = np.random.default_rng(5)
    start = sim.sample(eta, 4000, rng)
    moved = sim.mcmc(start, eta, rng, sweeps=2)
    assert (moved != start).mean() > 0.2  # it does move
    fields, p = _exact_probabilities(shape, eta)
    mean = p @ ising_statistics(fields)
    s = ising_statistics(moved)
    se = s.std(0) / np.sqrt(len(s))
    assert np.all(np.abs(s.mean(0) - mean) < 4 * se), (s.mean(0), mean, se)


def test_inexact_ising_simulator_for_wide_grids():
    with pytest.raises(BDMCInputError, match="exact=False"):
        IsingSimulator((13, 20), "second")  # first order is exact by CFTP (test_unnormalized_cftp)
    sim = IsingSimulator((13, 14), exact=False, sweeps=3)
    assert sim.exact is False
    draws = sim.sample((0.2, 0.0), 2, np.random.default_rng(0))
    assert draws.shape == (2, 13, 14) and set(np.unique(draws)) <= {-1, 1}
    # 12 wide is still exact, whichever side is short.
    assert IsingSimulator((40, 12)).exact and IsingSimulator((12, 40)).exact


# --- ERGM simulators ------------------------------------------------------------------------
def test_ergm_statistics_by_hand():
    # A triangle 0-1-2 plus the pendant edge 2-3: degrees (2, 2, 3, 1).
    y = np.zeros((4, 4), int)
    for i, j in [(0, 1), (0, 2), (1, 2), (2, 3)]:
        y[i, j] = y[j, i] = 1
    assert ergm_statistics(y).tolist() == [4.0, 1 + 1 + 3 + 0, 1.0]
    assert ergm_statistics(y, ("triangles", "edges")).tolist() == [1.0, 4.0]


def test_ergm_edges_only_exact_sampler_and_normaliser():
    sim = ERGMSimulator(7, ("edges",))
    theta = -0.8
    assert sim.exact
    # Closed form against the enumeration path (edges + two-stars with a zero coefficient).
    enumerated = ERGMSimulator(5, ("edges", "two_stars"), exact=False)
    assert enumerated.log_partition([theta, 0.0]) == pytest.approx(
        ERGMSimulator(5).log_partition([theta]), abs=1e-10)
    assert sim.log_partition([theta]) == pytest.approx(21 * np.log1p(np.exp(theta)), abs=1e-12)
    draws = sim.sample([theta], 20_000, np.random.default_rng(3))
    graphs = check_adjacency(draws)  # every draw is a simple graph
    edges = graphs[:, np.triu_indices(7, 1)[0], np.triu_indices(7, 1)[1]].sum(1)
    p = expit(theta)
    se = np.sqrt(21 * p * (1 - p) / len(edges))
    assert abs(edges.mean() - 21 * p) < 4 * se
    assert edges.var() == pytest.approx(21 * p * (1 - p), rel=0.05)


def test_ergm_gibbs_sampler_matches_enumerated_moments():
    # E[s(y)] = ∇ log Z(θ): central differences of the enumerated normaliser (6 nodes).
    theta = np.array([-0.5, 0.15, 0.3])
    sim = ERGMSimulator(6, ("edges", "two_stars", "triangles"), exact=False, sweeps=15)
    h = 1e-5
    mean = np.array([(sim.log_partition(theta + h * e) - sim.log_partition(theta - h * e)) / (2 * h)
                     for e in np.eye(3)])
    s = sim.statistics(sim.sample(theta, 1500, np.random.default_rng(4)))
    se = s.std(0) / np.sqrt(len(s))
    assert np.all(np.abs(s.mean(0) - mean) < 4 * se), (s.mean(0), mean, se)
