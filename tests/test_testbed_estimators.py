"""The testbed's remaining estimators (issue 6): CMS, nested sampling, Bayesian Monte Carlo, the
package's own SMC / SHME rows and the VB symmetry correction, against exact values."""

import dataclasses
import itertools

import numpy as np
import pymc as pm
import pytest
from scipy import optimize, stats
from scipy.special import gammaln, logsumexp

import pymc_bdmc as pmb
import pymc_bdmc.testbed as tb
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.testbed import estimators as est
from pymc_bdmc.testbed.chib import DiscreteGibbs, chib_murray_salakhutdinov, cms_run
from pymc_bdmc.testbed.models import enumerate_clustering_log_evidence
from pymc_bdmc.testbed.nested import (
    _ConstrainedWalk,
    nested_sampling,
    nested_sampling_estimator,
)
from pymc_bdmc.testbed.quadrature import (
    _neg_profile_log_ml,
    bayesian_monte_carlo,
    bmc_integral,
    gaussian_prior,
    kernel_means,
)


@pytest.fixture(scope="module")
def regression2():
    # 2 coefficients, 20 points: Gaussian prior and likelihood, exact evidence.
    return tb.problem_from_analytic(pmb.known_evidence.linear_regression(n_obs=20, n_coef=2),
                                    seed=1, name="regression2")


@pytest.fixture(scope="module")
def tiny_clustering():
    # 5 points, 3 clusters: 3**5 = 243 assignments, enumerated exactly.
    return tb.clustering(n_obs=5, n_dim=2, n_clusters=3, seed=3)


def _all_states(collapsed):
    return np.array(list(itertools.product(range(collapsed.n_values),
                                           repeat=collapsed.n_sites)))


# -- Gibbs forms: collapsed discrete latents ---------------------------------------------------

def test_collapsed_clustering_matches_independent_enumeration(tiny_clustering):
    # Woodbury form vs the full-covariance Cholesky enumeration of models.py.
    assert tiny_clustering.gibbs_model.log_evidence_enumerated() == pytest.approx(
        enumerate_clustering_log_evidence(tiny_clustering), rel=1e-12)


def test_collapsed_binary_joint_matches_direct_gaussian_marginal():
    problem = tb.binary_attributes(n_obs=4, n_dim=3, n_attributes=2, seed=2)
    c, info = problem.gibbs_model, problem.info
    states = _all_states(c)  # 2**8 attribute matrices
    y = problem.observed["y"]
    direct = []
    for h in states:
        z = h.reshape(4, 2).astype(float)
        cov = info["sigma_noise"] ** 2 * np.eye(4) + info["sigma_a"] ** 2 * z @ z.T
        log_pz = stats.bernoulli(info["p_attribute"]).logpmf(h).sum()
        direct.append(log_pz + stats.multivariate_normal(np.zeros(4), cov).logpdf(y.T).sum())
    np.testing.assert_allclose(c.log_joint(states), direct, rtol=1e-12)
    assert c.log_evidence_enumerated() == pytest.approx(logsumexp(direct), rel=1e-12)
    with pytest.raises(ValueError, match="too many"):
        c.log_evidence_enumerated(max_states=100)


def test_exchangeable_components_of_the_benchmark_problems(regression2):
    assert tb.clustering(n_obs=4, n_dim=2, n_clusters=3).n_exchangeable_components == 3
    assert tb.binary_attributes(n_obs=4, n_dim=2, n_attributes=2).n_exchangeable_components == 2
    assert tb.low_rank(n_obs=4, n_dim=3, rank=2).n_exchangeable_components == 2
    assert regression2.n_exchangeable_components == 1
    assert regression2.gibbs_model is None
    assert isinstance(tb.low_rank(n_obs=4, n_dim=3).gibbs_model, tb.LowRankGibbs)


# -- Gibbs operator and the Chib-Murray-Salakhutdinov estimator -------------------------------

@pytest.mark.parametrize("kind", ["clustering", "binary"])
def test_gibbs_sweep_is_stationary_and_reverse_sweep_is_its_reverse(kind):
    problem = (tb.clustering(n_obs=4, n_dim=2, n_clusters=3, seed=0) if kind == "clustering"
               else tb.binary_attributes(n_obs=3, n_dim=2, n_attributes=2, seed=0))
    c = problem.gibbs_model
    gibbs = DiscreteGibbs(c.log_joint, c.n_sites, c.n_values)
    states = _all_states(c)
    log_joint = c.log_joint(states)
    post = np.exp(log_joint - logsumexp(log_joint))
    # T[a, b] = T(b <- a): one column of transition probabilities per target state.
    fwd = np.exp(np.stack([gibbs.log_transition(s, states) for s in states], axis=1))
    rev = np.exp(np.stack([gibbs.log_transition(s, states, reverse=True) for s in states],
                          axis=1))
    np.testing.assert_allclose(fwd.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(post @ fwd, post, atol=1e-12)
    # T~(h <- h') = T(h' <- h) p(h|y) / p(h'|y)
    np.testing.assert_allclose(rev, fwd.T * post[None, :] / post[:, None], atol=1e-12)


def test_gibbs_sweep_draws_from_its_transition_probabilities(tiny_clustering):
    c = tiny_clustering.gibbs_model
    gibbs = DiscreteGibbs(c.log_joint, c.n_sites, c.n_values)
    states = _all_states(c)
    start = np.array([0, 1, 2, 0, 1])
    n = 20000
    for reverse in (False, True):
        moved = gibbs.sweep(np.random.default_rng(1), np.tile(start, (n, 1)), reverse=reverse)
        index = np.ravel_multi_index(moved.T, (3,) * 5)
        observed = np.bincount(index, minlength=len(states))
        expected = n * np.exp(gibbs.log_transition(states, np.tile(start, (len(states), 1)),
                                                   reverse=reverse))
        keep = expected > 5  # pool the rare states into one cell
        obs = np.append(observed[keep], observed[~keep].sum())
        exp_ = np.append(expected[keep], expected[~keep].sum())
        assert stats.chisquare(obs, exp_).pvalue > 1e-4


@pytest.mark.parametrize("kind", ["clustering", "binary"])
def test_cms_is_unbiased_for_the_evidence_and_a_lower_bound_in_log(kind, tiny_clustering):
    problem = (tiny_clustering if kind == "clustering"
               else tb.binary_attributes(n_obs=3, n_dim=3, n_attributes=2, seed=4))
    c = problem.gibbs_model
    gibbs = DiscreteGibbs(c.log_joint, c.n_sites, c.n_values)
    states = _all_states(c)
    log_joint = c.log_joint(states)
    exact = logsumexp(log_joint)
    h_star = states[np.argmax(log_joint)]
    # Short runs (S = 3) leave plenty of variance, which an unbiased estimator must average out.
    run = cms_run(np.random.default_rng(0), gibbs, h_star, 3, chains=4000)
    ratio = np.exp(run.log_estimate - exact)
    se = ratio.std() / np.sqrt(ratio.size)
    assert abs(ratio.mean() - 1.0) < 4 * se  # measured on clustering: 1.001 +- 0.014
    log_error = run.log_estimate - exact
    assert log_error.mean() + 4 * log_error.std() / np.sqrt(log_error.size) < 0  # Jensen
    assert set(np.unique(run.start_index)) == {1, 2, 3}


def test_unbiasedness_check_detects_a_chain_started_at_h_star(tiny_clustering):
    # The check above has power: Chib's average over a chain *started at* h* (instead of the
    # CMS draw from the reverse operator) is biased here, by about +26% in p(y) at S = 3.
    c = tiny_clustering.gibbs_model
    gibbs = DiscreteGibbs(c.log_joint, c.n_sites, c.n_values)
    states = _all_states(c)
    log_joint = c.log_joint(states)
    exact, h_star = logsumexp(log_joint), states[np.argmax(log_joint)]
    rng = np.random.default_rng(1)
    h = np.tile(h_star, (4000, 1))
    log_sum = np.full(4000, -np.inf)
    for _ in range(3):
        h = gibbs.sweep(rng, h)
        log_sum = np.logaddexp(log_sum, gibbs.log_transition(h_star, h))
    ratio = np.exp(log_joint.max() - (log_sum - np.log(3)) - exact)
    assert ratio.mean() - 1.0 > 4 * ratio.std() / np.sqrt(ratio.size)


def test_cms_estimator_close_to_enumeration():
    problem = tb.clustering(n_obs=6, n_dim=2, n_clusters=3, seed=1)
    exact = problem.gibbs_model.log_evidence_enumerated()
    results = [chib_murray_salakhutdinov(problem, 30, seed) for seed in range(8)]
    per_chain = np.concatenate([r.info["per_chain"] for r in results]) - exact
    ratio = np.exp(per_chain)
    assert abs(ratio.mean() - 1.0) < 4 * ratio.std() / np.sqrt(ratio.size)
    # pooled over 32 chains (measured over 20 seeds: +0.003 nats)
    assert abs(logsumexp(per_chain) - np.log(per_chain.size)) < 0.05
    for r in results:  # each estimate combines its 4 chains by log-mean-exp
        assert r.log_evidence == pytest.approx(logsumexp(r.info["per_chain"]) - np.log(4))


def test_block_gibbs_reverse_sweep_satisfies_generalized_detailed_balance():
    # T(b <- a) p(a, y) = T~(a <- b) p(b, y) for the two-block sweep and its reverse (densities)
    model = tb.low_rank(n_obs=5, n_dim=3, rank=2, seed=0).gibbs_model
    gibbs = model.gibbs()
    rng = np.random.default_rng(0)
    a, b = model.sample_prior(6, rng), model.sample_prior(6, rng)
    forward = gibbs.log_transition(b, a) + model.log_joint(a)
    backward = np.array([gibbs.log_transition(a[i], b[i:i + 1], reverse=True)[0]
                         for i in range(6)]) + model.log_joint(b)
    np.testing.assert_allclose(forward, backward, rtol=1e-12)
    # and the joint is the PyMC model's (prior + likelihood) at the same U, V
    problem = tb.low_rank(n_obs=5, n_dim=3, rank=2, seed=0)
    density = ModelDensity(problem.model, compile_kwargs={"mode": "FAST_COMPILE"})
    u, v = model.split(a)
    parts = density.parts(np.stack([density.layout.ravel({"U": u[i], "V": v[i]})
                                    for i in range(6)]))
    np.testing.assert_allclose(model.log_joint(a), parts.log_prior + parts.log_likelihood,
                               rtol=1e-12)


def test_cms_on_low_rank_block_gibbs_matches_quadrature():
    # Rank 1, 3 x 2: p(y) = integral N(v | 0, I) prod_i N(y_i | 0, I + v v') dv over v in R^2,
    # by an 801^2 grid (the integrand is smooth and decays like a Gaussian). With
    # C = I + v v': log det C = log(1 + |v|^2), y' C^-1 y = |y|^2 - (v'y)^2 / (1 + |v|^2).
    problem = tb.low_rank(n_obs=3, n_dim=2, rank=1, seed=2)
    y = problem.observed["y"]
    grid = np.linspace(-7, 7, 801)
    v = np.stack(np.meshgrid(grid, grid, indexing="ij"), axis=-1).reshape(-1, 2)
    norm2 = 1 + np.sum(v**2, axis=1)
    quad = np.sum(y**2) - np.sum((v @ y.T) ** 2, axis=1) / norm2
    log_integrand = (-0.5 * (3 * np.log(norm2) + quad) - 3 * np.log(2 * np.pi)
                     + stats.norm.logpdf(v).sum(axis=1))
    exact = logsumexp(log_integrand) + 2 * np.log(grid[1] - grid[0])
    model = problem.gibbs_model
    gibbs = model.gibbs()
    rng = np.random.default_rng(0)
    h = gibbs.sweep(rng, model.sample_prior(4, rng))
    h_star = h[np.argmax(model.log_joint(h))]
    run = cms_run(np.random.default_rng(11), gibbs, h_star, 10, chains=4000)
    ratio = np.exp(run.log_estimate - exact)
    assert abs(ratio.mean() - 1.0) < 4 * ratio.std() / np.sqrt(ratio.size)
    assert abs(np.log(ratio.mean())) < 0.05  # pooled over 4000 chains (measured: 0.01-0.03)


def test_cms_needs_a_gibbs_model(regression2):
    with pytest.raises(ValueError, match="no Gibbs form"):
        chib_murray_salakhutdinov(regression2, 10, seed=0)


# -- nested sampling ----------------------------------------------------------------------------

def test_nested_sampling_with_exact_replacements_is_calibrated():
    # Prior N(0, I_5), L(x) = exp(-|x|^2 / (2 s2)): Z = (s2 / (1 + s2))^(5/2), and the prior
    # restricted to L > L_min (a ball) can be sampled exactly, isolating the accumulation.
    d, s2 = 5, 0.1
    exact = 0.5 * d * np.log(s2 / (1 + s2))

    def log_l(x):
        return -0.5 * np.sum(x**2, axis=-1) / s2

    def oracle(rng, starts, log_l_min, live):
        radius2 = stats.chi2.ppf(rng.random(len(starts))
                                 * stats.chi2.cdf(-2 * s2 * log_l_min, d), d)
        v = rng.standard_normal((len(starts), d))
        x = np.sqrt(radius2)[:, None] * v / np.linalg.norm(v, axis=1, keepdims=True)
        return x, log_l(x)

    errors, sds = [], []
    for seed in range(60):
        rng = np.random.default_rng(seed)
        x0 = rng.standard_normal((20, d))
        run = nested_sampling(rng, x0, log_l(x0), oracle, batch=4)
        assert run.converged
        errors.append(run.log_evidence - exact)
        sds.append(run.log_evidence_sd)
    errors = np.array(errors)
    # Unbiased in log Z (within 4 standard errors), with Skilling's spread sqrt(H / N).
    assert abs(errors.mean()) < 4 * errors.std() / np.sqrt(errors.size)
    assert 0.7 < errors.std() / np.mean(sds) < 1.4


def test_nested_sampling_on_conjugate_model(regression2):
    for seed in range(3):
        result = nested_sampling_estimator(regression2, 100, seed)
        assert result.info["converged"]
        # within 4 of Skilling's standard deviations sqrt(H / N) (about 0.2 nats here)
        assert abs(result.log_evidence - regression2.log_evidence) < 4 * result.info[
            "log_evidence_sd"]


def test_nested_sampling_proposals_span_every_direction_with_few_live_points():
    # 8 live points in 20 dimensions span 7 directions; the proposal must not be confined there.
    walk = _ConstrainedWalk(density=None, n_steps=1)
    live = np.random.default_rng(0).normal(size=(8, 20)) * np.arange(1, 21)
    walk.set_covariance(live)
    cov = walk.chol @ walk.chol.T
    assert np.linalg.matrix_rank(cov, tol=1e-6 * np.trace(cov) / 20) == 20
    np.testing.assert_allclose(np.diag(cov), np.var(live, axis=0, ddof=1) * 2.38**2 / 20,
                               rtol=1e-9)
    many = np.random.default_rng(1).normal(size=(400, 3)) @ np.array([[1, 0.9, 0], [0, 1, 0],
                                                                       [0, 0, 2]])
    walk.set_covariance(many)
    weight = 1 - 3 / 400
    expected = np.cov(many, rowvar=False)
    expected = weight * expected + (1 - weight) * np.diag(np.diag(expected))
    np.testing.assert_allclose(walk.chol @ walk.chol.T, expected * 2.38**2 / 3, rtol=1e-9)


def test_nested_sampling_refuses_bad_input(regression2):
    with pytest.raises(ValueError, match="at least 2 live points"):
        nested_sampling_estimator(regression2, 1, seed=0)
    x = np.zeros((4, 1))
    with pytest.raises(ValueError, match="batch"):
        nested_sampling(np.random.default_rng(0), x, np.zeros(4), None, batch=3)


# -- Bayesian Monte Carlo -----------------------------------------------------------------------

def test_bmc_exact_when_integrand_is_a_kernel_at_a_design_point():
    rng = np.random.default_rng(0)
    d = 3
    mean, root = rng.normal(size=d), rng.normal(size=(d, d))
    cov = root @ root.T + np.eye(d)
    ell = np.array([0.7, 1.3, 0.9])
    points = 2 * rng.normal(size=(15, d))
    centre = points[4]
    log_f = 2.0 - 0.5 * np.sum(((points - centre) / ell) ** 2, axis=1)
    # integral exp(-1/2 (x - c)' A^-1 (x - c)) N(x | b, B) dx
    #   = (2 pi)^(d/2) |A|^(1/2) N(c | b, A + B)
    exact = (2.0 + 0.5 * d * np.log(2 * np.pi) + np.sum(np.log(ell))
             + stats.multivariate_normal(mean, np.diag(ell**2) + cov).logpdf(centre))
    result = bmc_integral(points, log_f, mean, cov, ell, jitter=0.0)
    assert result.log_integral == pytest.approx(exact, abs=1e-10)
    # the kernel means themselves: a Gaussian integral, checked by brute-force Monte Carlo
    draws = rng.multivariate_normal(mean, cov, size=400_000)
    mc = np.exp(-0.5 * np.sum(((draws - points[0]) / ell) ** 2, axis=1))
    z = kernel_means(points[:1], ell, mean, cov)[0]
    assert z == pytest.approx(mc.mean(), abs=4 * mc.std() / np.sqrt(mc.size))


def test_gp_lengthscale_objective_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(30, 3))
    f = np.exp(-np.sum(points**2, axis=1))
    log_ell = np.log([0.5, 1.0, 2.0])
    _, grad = _neg_profile_log_ml(log_ell, points, f, 1e-8)
    numeric = optimize.approx_fprime(log_ell,
                                     lambda t: _neg_profile_log_ml(t, points, f, 1e-8)[0], 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4)


def test_bmc_exact_on_a_pymc_model_with_a_kernel_shaped_likelihood():
    # x ~ N(0, 2^2 I_2), y ~ N(x, 0.5^2 I_2): L(x) is an SE kernel of lengthscale 0.5 centred
    # at y, so with y among the design points BMC is exact: log N(y | 0, (4 + 0.25) I).
    y = np.array([0.8, -1.1])
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 2.0, shape=2)
        pm.Normal("y", x, 0.5, observed=y)
    density = ModelDensity(model, compile_kwargs={"mode": "FAST_COMPILE"})
    simulator = ModelSimulator(model, density.layout)
    mean, cov = gaussian_prior(density, simulator, np.random.default_rng(0))
    np.testing.assert_allclose(mean, 0.0, atol=1e-8)
    np.testing.assert_allclose(cov, 4.0 * np.eye(2), rtol=1e-6)
    points = np.vstack([simulator.draw_prior(10, np.random.default_rng(1)), y])
    log_lik = density.parts(points).log_likelihood
    result = bmc_integral(points, log_lik, mean, cov, np.full(2, 0.5), jitter=0.0)
    exact = stats.multivariate_normal(np.zeros(2), 4.25 * np.eye(2)).logpdf(y)
    assert result.log_integral == pytest.approx(exact, abs=1e-6)


def test_bmc_on_conjugate_model(regression2):
    for seed in range(2):
        result = bayesian_monte_carlo(regression2, 100, seed)
        assert result.info["prior"] == "gaussian"
        assert result.log_evidence == pytest.approx(regression2.log_evidence, abs=0.1)


def test_bmc_non_gaussian_prior_reweights_or_refuses():
    poisson = tb.problem_from_analytic(pmb.known_evidence.gamma_poisson(), seed=2, name="poisson")
    result = bayesian_monte_carlo(poisson, 60, seed=0)
    assert result.info["prior"] == "reweighted"
    assert result.log_evidence == pytest.approx(poisson.log_evidence, abs=0.1)
    with pytest.raises(ValueError, match="not Gaussian in PyMC's unconstrained space"):
        bayesian_monte_carlo(poisson, 60, seed=0, non_gaussian_prior="raise")


# -- the package's SMC and SHME rows, and the VB symmetry correction ---------------------------

def test_forward_smc_and_shme_sandwich_truth(regression2):
    truth = regression2.log_evidence
    lower = [est.forward_smc(regression2, 25, seed).log_evidence for seed in range(2)]
    upper = [est.sequential_harmonic_mean(regression2, 25, seed).log_evidence
             for seed in range(2)]
    assert all(truth - 0.5 < v < truth + 0.2 for v in lower)
    assert all(truth - 0.2 < v < truth + 0.5 for v in upper)


def test_vb_symmetry_correction_adds_log_k_factorial(regression2):
    problem = dataclasses.replace(regression2, n_exchangeable_components=4)
    plain = est.variational_bayes(problem, 200, seed=0)
    corrected = est.variational_bayes_symmetric(problem, 200, seed=0)
    assert corrected.info["elbo"] == plain.info["elbo"]
    assert corrected.log_evidence - plain.log_evidence == pytest.approx(gammaln(5), abs=1e-9)
    assert plain.info["symmetry_correction"] == 0.0


def test_new_estimators_are_registered_with_their_directions(regression2):
    expected = {"cms": "lower", "forward_smc": "lower", "shme": "upper",
                "nested_sampling": "neither", "bayesian_monte_carlo": "neither",
                "variational_bayes_sym": "neither"}
    for name, bias in expected.items():
        assert est.ESTIMATORS[name].bias == bias
    assert est.ESTIMATORS["shme"].needs_generating_point
    assert not est.ESTIMATORS["cms"].applies_to(regression2)
    assert est.ESTIMATORS["cms"].applies_to(tb.clustering(n_obs=4, n_dim=2, n_clusters=2))


def test_compare_estimators_skips_cms_without_gibbs_model(regression2):
    results = pmb.compare_estimators(regression2, ["cms", "likelihood_weighting"], levels=(1,),
                                     trials=1)
    assert list(results.estimator.values) == ["likelihood_weighting"]
