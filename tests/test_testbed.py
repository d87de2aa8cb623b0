"""Testbed estimators against closed-form evidence, with their bias directions checked."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_bdmc as pmb
import pymc_bdmc.testbed as tb
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.testbed import estimators as est
from pymc_bdmc.testbed.models import _mixture_log_density, enumerate_clustering_log_evidence


@pytest.fixture(scope="module")
def regression():
    # Gaussian posterior over 5 coefficients, 50 points; simulated (theta*, y*) known.
    return tb.problem_from_analytic(pmb.known_evidence.linear_regression(), seed=1,
                                    name="regression")


@pytest.fixture(scope="module")
def poisson():
    return tb.problem_from_analytic(pmb.known_evidence.gamma_poisson(), seed=2, name="poisson")


def test_with_observed_swaps_data_and_leaves_model_alone():
    analytic = pmb.known_evidence.gamma_poisson()
    new = np.arange(20)
    model = tb.with_observed(analytic.model, {"y": new})
    np.testing.assert_array_equal(model.rvs_to_values[model["y"]].data, new)
    np.testing.assert_array_equal(analytic.model.rvs_to_values[analytic.model["y"]].data,
                                  analytic.data["y"])
    with pytest.raises(ValueError, match="not observed"):
        tb.with_observed(analytic.model, {"rate": 1.0})


def test_problem_from_analytic_truth_is_closed_form(regression):
    assert regression.log_evidence == pytest.approx(
        pmb.known_evidence.linear_regression().log_evidence(regression.observed))
    assert set(regression.generating_point) == {"w"}


@pytest.mark.parametrize("n_obs, n_coef", [(50, 5), (3, 5), (400, 20)])
def test_regression_evidence_without_the_n_by_n_covariance_is_the_dense_density(n_obs, n_coef):
    # The closed form avoids the n x n covariance (10^5 observations need 75 GiB for it).
    from scipy import stats

    from pymc_bdmc.known_evidence.closed_form import gaussian_regression_log_evidence

    rng = np.random.default_rng(n_obs)
    x, y = rng.normal(size=(n_obs, n_coef)), 3.0 * rng.normal(size=n_obs)
    dense = stats.multivariate_normal(np.zeros(n_obs), 0.7**2 * np.eye(n_obs)
                                      + 1.3**2 * x @ x.T).logpdf(y)
    assert gaussian_regression_log_evidence(y, x, 1.3, 0.7) == pytest.approx(dense, rel=1e-12)


def test_laplace_exact_on_gaussian_posterior(regression):
    result = est.laplace(regression, 1, seed=0)
    assert result.log_evidence == pytest.approx(regression.log_evidence, abs=1e-3)
    assert result.info["positive_definite"]


def test_bic_is_order_one_off(regression):
    error = est.bic(regression, 1, seed=0).log_evidence - regression.log_evidence
    assert abs(error) < 15  # BIC drops O(1) terms: here d/2 log(2 pi) - log-prior terms


def test_likelihood_weighting_accurate_in_1d_and_under_in_5d(poisson, regression):
    values = [est.likelihood_weighting(poisson, 2000, seed).log_evidence for seed in range(5)]
    assert np.mean(values) == pytest.approx(poisson.log_evidence, abs=0.05)
    # Unbiased for p(y): log of it is under on average; in 5-D with 500 draws, far under.
    under = [est.likelihood_weighting(regression, 500, seed).log_evidence
             - regression.log_evidence for seed in range(3)]
    assert max(under) < -5


def test_harmonic_mean_overestimates(regression):
    exact = [est.harmonic_mean_exact(regression, 200, seed).log_evidence
             - regression.log_evidence for seed in range(3)]
    assert min(exact) > 0  # unbiased for 1/p(y): log p(y) overestimated, here by several nats
    mcmc = est.harmonic_mean(regression, 200, seed=0).log_evidence - regression.log_evidence
    assert mcmc > 0


def test_harmonic_mean_exact_needs_generating_point():
    with pytest.raises(ValueError, match="no generating parameters"):
        est.harmonic_mean_exact(pmb.known_evidence.gamma_poisson().model, 10, seed=0)


def test_variational_bayes_elbo_is_below_and_close(regression):
    result = est.variational_bayes(regression, 1500, seed=0)
    se = result.info["elbo_se"]
    assert result.log_evidence < regression.log_evidence + 3 * se
    assert result.log_evidence > regression.log_evidence - 2.0


def test_ais_and_reverse_ais_sandwich_truth(regression):
    lower = est.ais(regression, 200, seed=0).log_evidence
    upper = est.reverse_ais(regression, 200, seed=0).log_evidence
    truth = regression.log_evidence
    assert truth - 1.5 < lower < truth + 0.3
    assert truth - 0.3 < upper < truth + 1.5


def test_smc_log_marginal_likelihood_reads_ragged_stages():
    ragged = np.empty((2, 1), dtype=object)
    ragged[0, 0] = np.array([np.nan, -3.0, -2.5])
    ragged[1, 0] = np.array([np.nan, -2.0, np.nan])
    tree = {"sample_stats": xr.Dataset(
        {"log_marginal_likelihood": (("chain", "draw"), ragged)})}
    np.testing.assert_array_equal(est.smc_log_marginal_likelihood(tree), [-2.5, -2.0])


def test_smc_peer_close_on_conjugate_model(poisson):
    result = est.smc(poisson, 300, seed=1)
    assert result.log_evidence == pytest.approx(poisson.log_evidence, abs=0.3)


def test_estimator_registry_is_consistent():
    assert {s.bias for s in est.ESTIMATORS.values()} <= {"lower", "upper", "neither"}
    for spec in est.ESTIMATORS.values():
        with pytest.raises(ValueError, match="positive"):
            spec.fn(pmb.known_evidence.gamma_poisson(), 0, seed=0)


# -- benchmark models -------------------------------------------------------------------------

@pytest.mark.parametrize("factory", [tb.clustering, tb.binary_attributes])
def test_mixture_likelihood_matches_numpy(factory):
    problem = factory(n_obs=8, n_dim=3, seed=4)
    density = ModelDensity(problem.model, compile_kwargs={"mode": "FAST_COMPILE"})
    x = problem.generating_vector(density.layout)
    info = problem.info
    if factory is tb.clustering:
        means = problem.generating_point["theta"]
        log_w = np.full(info["n_clusters"], -np.log(info["n_clusters"]))
    else:
        patterns = tb.models.binary_patterns(info["n_attributes"])
        means = patterns @ problem.generating_point["A"]
        p = info["p_attribute"]
        log_w = (patterns * np.log(p) + (1 - patterns) * np.log1p(-p)).sum(1)
    expected = _mixture_log_density(problem.observed["y"], means, log_w, info["sigma_noise"])
    assert density.parts(x[None]).log_likelihood[0] == pytest.approx(expected, rel=1e-8)


def test_low_rank_model_shapes():
    problem = tb.low_rank(n_obs=6, n_dim=4, rank=2, seed=1)
    assert problem.observed["y"].shape == (6, 4)
    assert problem.generating_point["U"].shape == (6, 2)
    assert problem.n_data == 6


def test_mixture_simulator_draws_rows():
    problem = tb.clustering(n_obs=5, n_dim=2, n_clusters=3, seed=0)
    draws = pm.draw(problem.model["y"], draws=2, random_seed=1, mode="FAST_COMPILE")
    assert draws.shape == (2, 5, 2) and np.all(np.isfinite(draws))


@pytest.mark.slow
def test_bdmc_ground_truth_matches_enumeration_on_tiny_clustering():
    problem = tb.clustering(n_obs=8, n_dim=2, n_clusters=2, seed=3)
    exact = enumerate_clustering_log_evidence(problem)
    truth = tb.ground_truth(problem, n_steps=300, seed=5)
    assert truth["method"] == "bdmc"
    assert truth["lower"] - 0.3 < exact < truth["upper"] + 0.3
    assert truth["gap"] < 1.0


def test_compare_estimators_dataset_and_time_to_accuracy(poisson):
    results = pmb.compare_estimators(poisson, ["likelihood_weighting", "laplace"],
                                     levels=(1, 2), trials=2)
    assert results["estimate"].dims == ("estimator", "level", "trial")
    assert results.attrs["truth"] == pytest.approx(poisson.log_evidence)
    assert results["budget"].sel(estimator="likelihood_weighting").values.tolist() == [1000, 2000]
    reach = tb.time_to_accuracy(results, threshold=10.0)
    assert np.all(np.isfinite(reach.values))  # both are accurate on a 1-D conjugate model
    assert np.all(tb.time_to_accuracy(results, threshold=1e-9).values == np.inf)
    assert "| likelihood_weighting | lower |" in tb.summary_table(results)


def test_compare_estimators_rejects_unknown_names(poisson):
    with pytest.raises(ValueError, match="Unknown estimators"):
        pmb.compare_estimators(poisson, ["nope"], truth={"truth": 0.0})
