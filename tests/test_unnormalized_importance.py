"""SAVIS and MAVIS (issue 18): unbiasedness in Z-space and evidence against exact values.

Exact identities at 1e-10. Monte Carlo checks use fixed seeds; "within 4 SE" means the mean
of unbiased Z-space estimates differs from the truth by less than 4 standard errors, and each
such test also asserts that 4 SE is small (< 0.1 relative), so a bias of 10 % would fail it.
"""

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.ergm import ERGMSimulator
from pymc_bdmc.unnormalized.importance import (
    auxiliary_log_weights,
    importance_evidence,
    log_inverse_normaliser,
    mavis,
    normaliser_bounds,
    savis,
)
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    enumerated_log_partition,
    ising_enumerate,
    ising_statistics,
)


def _within_4_se(values, truth):
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert 4 * se < 0.1 * truth, f"too noisy to detect a 10 % bias: se={se}"
    assert abs(values.mean() - truth) < 4 * se, (values.mean(), truth, se)


def test_savis_auxiliary_weight_has_mean_one_over_z_exactly():
    # Σ_u f(u|η) q_u(u) / gamma(u|η) = 1/Z(η), summed over all 2^9 fields of a 3x3 grid.
    stats_all, log_count = ising_enumerate((3, 3))
    eta, eta_ref = np.array([0.5, -0.2]), np.array([0.1, 0.3])
    log_z = enumerated_log_partition(stats_all, log_count, eta)
    log_z_ref = enumerated_log_partition(stats_all, log_count, eta_ref)
    log_f = stats_all @ eta - log_z + log_count
    log_mean = logsumexp(log_f + auxiliary_log_weights(stats_all, eta, eta_ref, log_z_ref))
    assert log_mean == pytest.approx(-log_z, abs=1e-10)


@pytest.mark.parametrize("n_bridges, eta_ref", [
    (0, (0.45, 0.0)),   # SAVIS from a pilot-like reference
    (10, (0.2, 0.0)),   # MAVIS, Swendsen-Wang bridges
    (40, (0.0, 0.0)),   # MAVIS to the uniform field: Z = 2^16 is known, nothing plugged in
])
def test_inverse_normaliser_is_unbiased_in_z_space(n_bridges, eta_ref):
    shape, eta = (4, 4), np.array([0.6, 0.0])  # near the critical coupling of a 4x4 grid
    sim = IsingSimulator(shape)
    eta_ref = np.array(eta_ref)
    log_z_ref = 16 * np.log(2.0) if not eta_ref.any() else sim.log_partition(eta_ref)
    log_r = log_inverse_normaliser(sim, eta, eta_ref, log_z_ref, 6000,
                                   np.random.default_rng(n_bridges), n_bridges=n_bridges)
    # Z(η) R̂ has mean 1 exactly.
    _within_4_se(np.exp(log_r + sim.log_partition(eta)), 1.0)


def test_more_bridges_reduce_the_variance():
    sim, eta, eta_ref = IsingSimulator((4, 4)), np.array([0.6, 0.0]), np.array([0.0, 0.0])
    rng = np.random.default_rng(3)
    spread = [np.std(log_inverse_normaliser(sim, eta, eta_ref, 16 * np.log(2.0), 1000, rng,
                                            n_bridges=k)) for k in (0, 10)]
    assert spread[1] < 0.5 * spread[0], spread


# --- 4x4 Ising evidence against quadrature -------------------------------------------------
@pytest.fixture(scope="module")
def ising_problem():
    """A 4x4 first-order field at coupling 0.35, prior N(0.2, 0.5²), exact evidence."""
    shape = (4, 4)
    sim = IsingSimulator(shape)
    y = sim.sample([0.35, 0.0], 1, np.random.default_rng(0))[0]
    s_y = ising_statistics(y)
    enumerated = ising_enumerate(shape)
    prior = stats.norm(0.2, 0.5)

    def log_joint(c):  # log p(c) + log f(y | c), the likelihood normalised by enumeration
        eta = np.stack([np.atleast_1d(c), np.zeros(np.size(c))], -1)
        return prior.logpdf(c) + c * s_y[0] - enumerated_log_partition(*enumerated, eta)

    peak = max(log_joint(np.linspace(-2, 3, 501)))
    value, err = integrate.quad(lambda c: np.exp(log_joint(c)[0] - peak), -np.inf, np.inf,
                                epsabs=0, epsrel=1e-12)
    log_evidence = np.log(value) + peak
    mean, _ = integrate.quad(lambda c: c * np.exp(log_joint(c)[0] - log_evidence), -5, 5)
    second, _ = integrate.quad(lambda c: c * c * np.exp(log_joint(c)[0] - log_evidence), -5, 5)
    return dict(sim=sim, s_y=s_y, prior=prior, log_evidence=log_evidence,
                post_mean=mean, post_sd=np.sqrt(second - mean**2))


def _proposal_draws(problem, n, rng):
    # The paper's recipe: a Gaussian proposal fitted to the posterior (widened), η̂ at its mean.
    q = stats.norm(problem["post_mean"], 1.5 * problem["post_sd"])
    c = q.rvs(size=n, random_state=rng)
    return np.stack([c, np.zeros(n)], 1), problem["prior"].logpdf(c), q.logpdf(c)


def test_quadrature_oracle_agrees_with_a_grid(ising_problem):
    # The exact evidence two ways (adaptive quadrature vs a fine trapezoid grid of exact
    # transfer-matrix likelihoods), so the reference itself is checked.
    grid = np.linspace(-3.0, 4.0, 14001)
    sim, s_y, prior = ising_problem["sim"], ising_problem["s_y"], ising_problem["prior"]
    log_lik = grid * s_y[0] - sim.log_partition(np.stack([grid, 0 * grid], 1))
    log_ev = logsumexp(prior.logpdf(grid) + log_lik) + np.log(grid[1] - grid[0])
    assert log_ev == pytest.approx(ising_problem["log_evidence"], abs=1e-8)


@pytest.mark.parametrize("method", ["savis", "mavis"])
def test_ising_4x4_evidence_against_quadrature(ising_problem, method):
    rng = np.random.default_rng(7)
    sim = ising_problem["sim"]
    eta, log_prior, log_q = _proposal_draws(ising_problem, 1000, rng)
    eta_ref = np.array([ising_problem["post_mean"], 0.0])
    kwargs = dict(n_aux=2, rng=rng) | ({"n_bridges": 4} if method == "mavis" else {})
    result = (savis if method == "savis" else mavis)(
        sim, ising_problem["s_y"], eta, log_prior, log_q, eta_ref, sim.log_partition(eta_ref),
        **kwargs)
    error = result.log_evidence - ising_problem["log_evidence"]
    assert result.method == method and result.exact and result.ess > 300
    assert result.relative_se < 0.05
    assert abs(error) < 4 * result.relative_se and abs(error) < 0.2, error


def test_savis_evidence_is_unbiased_in_z_space(ising_problem):
    # 40 small independent SAVIS runs: their p̂(y) / p(y) average to 1.
    rng = np.random.default_rng(11)
    sim = ising_problem["sim"]
    eta_ref = np.array([ising_problem["post_mean"], 0.0])
    ratios = []
    for _ in range(40):
        eta, log_prior, log_q = _proposal_draws(ising_problem, 100, rng)
        run = savis(sim, ising_problem["s_y"], eta, log_prior, log_q, eta_ref,
                    sim.log_partition(eta_ref), rng=rng)
        ratios.append(np.exp(run.log_evidence - ising_problem["log_evidence"]))
    _within_4_se(np.array(ratios), 1.0)


def test_mavis_without_a_plugged_in_normaliser(ising_problem):
    # Annealing each 1/Z(η_n) to the uniform field (Z = 2^16) needs no Z(η̂) at all.
    rng = np.random.default_rng(5)
    eta, log_prior, log_q = _proposal_draws(ising_problem, 400, rng)
    result = mavis(ising_problem["sim"], ising_problem["s_y"], eta, log_prior, log_q,
                   np.zeros(2), 16 * np.log(2.0), n_aux=1, n_bridges=12, rng=rng)
    error = result.log_evidence - ising_problem["log_evidence"]
    assert abs(error) < 4 * result.relative_se and abs(error) < 0.2, error


# --- bidirectional bounds on log Z, and the evidence with nothing plugged in -----------------
def test_normaliser_bounds_sandwich_the_10x10_transfer_matrix_value():
    sim, eta = IsingSimulator((10, 10)), np.array([0.3, 0.0])
    truth = sim.log_partition(eta)
    bounds = normaliser_bounds(sim, eta, np.zeros(2), 100 * np.log(2.0), 96,
                               np.random.default_rng(0), n_bridges=200)
    assert max(bounds.lower_se, bounds.upper_se) < 0.1  # precise enough to see 0.4 nats
    assert abs(bounds.lower - truth) < 4 * bounds.lower_se
    assert abs(bounds.upper - truth) < 4 * bounds.upper_se
    assert bounds.lower_markov < truth < bounds.upper_markov


def test_evidence_with_the_upper_bound_plugged_in_is_unbiased(ising_problem):
    # exp(-upper) is an unbiased 1/Z(η̂), so SAVIS with it is unbiased for p(y) (module docs);
    # each replicate gets its own, independent reverse chains.
    rng = np.random.default_rng(13)
    sim = ising_problem["sim"]
    eta_hat = np.array([ising_problem["post_mean"], 0.0])
    ratios, uppers = [], []
    for _ in range(40):
        upper = normaliser_bounds(sim, eta_hat, np.zeros(2), 16 * np.log(2.0), 32, rng,
                                  n_bridges=100).upper
        eta, log_prior, log_q = _proposal_draws(ising_problem, 200, rng)
        run = savis(sim, ising_problem["s_y"], eta, log_prior, log_q, eta_hat, upper, rng=rng)
        ratios.append(np.exp(run.log_evidence - ising_problem["log_evidence"]))
        uppers.append(upper)
    assert np.std(uppers) > 0.01  # the plug-in really is random
    _within_4_se(np.array(ratios), 1.0)


# --- ERGM edges-only evidence against quadrature ------------------------------------------
def test_ergm_edges_only_savis_against_quadrature():
    # 16 nodes and 29 edges (the size of the paper's Gamaneg network), prior θ ~ N(0, 5²).
    n_dyads, edges = 120, 29.0
    sim = ERGMSimulator(16)
    prior = stats.norm(0.0, 5.0)

    def log_joint(t):
        return prior.logpdf(t) + t * edges - n_dyads * np.logaddexp(0.0, t)

    log_ev = np.log(integrate.quad(lambda t: np.exp(log_joint(t) + 69.0), -10, 10,
                                   epsabs=0, epsrel=1e-12)[0]) - 69.0
    # Beta(30, 92) is the posterior of p = logit⁻¹ θ under a flat prior: a good proposal.
    p_hat = (edges + 1) / (n_dyads + 2)
    q = stats.norm(np.log(p_hat / (1 - p_hat)), 1.5 / np.sqrt(n_dyads * p_hat * (1 - p_hat)))
    rng = np.random.default_rng(2)
    theta = q.rvs(size=2000, random_state=rng)
    theta_ref = np.array([np.log(p_hat / (1 - p_hat))])
    result = savis(sim, np.array([edges]), theta[:, None], prior.logpdf(theta), q.logpdf(theta),
                   theta_ref, sim.log_partition(theta_ref), n_aux=2, rng=rng)
    error = result.log_evidence - log_ev
    assert abs(error) < 4 * result.relative_se and abs(error) < 0.1, error
    assert expit(theta_ref[0]) == pytest.approx(p_hat)


# --- bookkeeping ---------------------------------------------------------------------------
def test_importance_evidence_weights_and_ess():
    log_ev, log_w, ess, rse = importance_evidence(np.zeros(4), np.zeros(4), np.log([1, 1, 1, 1]),
                                                  np.zeros(4))
    assert log_ev == pytest.approx(0.0, abs=1e-12) and ess == pytest.approx(4.0) and rse == 0.0
    log_ev, _, ess, _ = importance_evidence(np.zeros(3), np.log([0.5, 0.25, 0.25]),
                                            np.array([0.0, np.log(2.0), -np.inf]), np.zeros(3))
    assert log_ev == pytest.approx(np.log((2 + 8 + 0) / 3), abs=1e-12)
    assert ess == pytest.approx(10**2 / (4 + 64), rel=1e-12)


def test_inexact_simulation_is_reported_and_bad_shapes_refused():
    sim = IsingSimulator((4, 4), exact=False, sweeps=5)
    rng = np.random.default_rng(0)
    eta = np.array([[0.3, 0.0], [0.4, 0.0]])
    result = savis(sim, np.array([10.0, 0.0]), eta, np.zeros(2), np.zeros(2), np.zeros(2),
                   16 * np.log(2.0), rng=rng)
    assert result.exact is False
    with pytest.raises(BDMCInputError, match="same length"):
        savis(sim, np.array([10.0]), eta, np.zeros(2), np.zeros(2), np.zeros(2), 0.0, rng=rng)
    with pytest.raises(BDMCInputError, match="one entry per row"):
        savis(sim, np.array([10.0, 0.0]), eta, np.zeros(3), np.zeros(2), np.zeros(2), 0.0,
              rng=rng)
