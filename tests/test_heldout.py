"""Held-out likelihood: per-case AIS with the globals fixed, and its BDMC validation.

Ground truth: probabilistic PCA, ``z_i ~ N(0, I_k)``, ``y_i ~ N(W z_i + b, s^2 I_d)``, so
``y_i ~ N(b, W W' + s^2 I)`` exactly; and a Gamma-Poisson model (log-transformed latent rates)
whose per-case marginal is closed form too.

Tolerances were set from seeds 0-9 of the PPCA configuration below (s = 0.1, n_steps=300,
16 chains; `python3 benchmarks/heldout_tolerances.py`): on the 8 held-out cases the largest
per-case error was 0.32 nats and the largest total error 0.82 (bootstrap se of the total about
0.28); on 5 simulated cases, lower - exact was at most +0.20, upper - exact at least -0.21, the
largest per-case |gap| 0.40 and the largest |total gap| 0.59. Likelihood weighting (n_steps=1)
missed the total by 58-242 nats: see ``test_likelihood_weighting_misses_the_tolerance``, the
test of the test.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import gammaln

import pymc_bdmc as pmb
from pymc_bdmc.estimators import log_mean_exp
from pymc_bdmc.kernels.case_pilot import resample_within_cases
from pymc_bdmc.model.cases import CaseDensity, condition_on_parameters

FAST = {"mode": "FAST_RUN"}
CASE_TOL = 0.5     # nats, per case bound (observed max error 0.32 over 80 cases)
TOTAL_TOL = 1.5    # nats, sum over 8 cases (observed max 0.82, about 5 se)
GAP_TOL = 1.0      # nats, per-case |gap| (observed max 0.40) and |total gap| (max 0.59)
RIGOROUS_SLACK = np.log(1000.0)  # Markov: each side fails with probability < 0.1%

D, K, SIGMA = 4, 2, 0.1


def _ppca_truth():
    rng = np.random.default_rng(0)
    return {"W": rng.normal(size=(D, K)), "b": rng.normal(size=D), "sigma": SIGMA}


def ppca_model(n_cases=5, initval=False):
    """PPCA with named dims (resizable case dimension) and training data of n_cases rows."""
    y = np.random.default_rng(1).normal(size=(n_cases, D))
    coords = {"case": np.arange(n_cases), "obs_dim": np.arange(D), "lat": np.arange(K)}
    with pm.Model(coords=coords) as model:
        w = pm.Normal("W", 0, 1, dims=("obs_dim", "lat"))
        b = pm.Normal("b", 0, 1, dims="obs_dim")
        sigma = pm.HalfNormal("sigma", 1, initval=0.7 if initval else None)
        z = pm.Normal("z", 0, 1, dims=("case", "lat"))
        pm.Normal("y", z @ w.T + b, sigma, observed=y, dims=("case", "obs_dim"))
    return model


def ppca_log_density(params, y):
    cov = params["W"] @ params["W"].T + params["sigma"] ** 2 * np.eye(D)
    return stats.multivariate_normal(params["b"], cov).logpdf(y)


def ppca_heldout_data(n_cases=8):
    params = _ppca_truth()
    cov = params["W"] @ params["W"].T + params["sigma"] ** 2 * np.eye(D)
    return np.random.default_rng(2).multivariate_normal(params["b"], cov, size=n_cases)


@pytest.fixture(scope="module")
def ppca():
    return ppca_model(initval=True)


@pytest.fixture(scope="module")
def forward_result(ppca):
    with ppca:
        return pmb.sample_heldout_likelihood(
            _ppca_truth(), {"y": ppca_heldout_data()}, n_steps=300, chains=16, random_seed=11,
            progressbar=False, compile_kwargs=FAST,
        )


@pytest.fixture(scope="module")
def simulated_result(ppca):
    with ppca:
        return pmb.sample_heldout_likelihood(
            _ppca_truth(), n_steps=300, chains=16, simulate=True, random_seed=12,
            progressbar=False, compile_kwargs=FAST,
        )


# -- exact identities ---------------------------------------------------------------------------
def test_resample_within_cases_is_exact_for_degenerate_and_uniform_weights():
    rng = np.random.default_rng(0)
    weights = np.full((6, 3), 1 / 6)
    weights[:, 1] = 0.0
    weights[4, 1] = 1.0
    idx = resample_within_cases(rng, weights)
    assert idx.shape == (6, 3)
    # systematic resampling of uniform weights returns every index exactly once, in order
    np.testing.assert_array_equal(idx[:, 0], np.arange(6))
    np.testing.assert_array_equal(idx[:, 2], np.arange(6))
    np.testing.assert_array_equal(idx[:, 1], np.full(6, 4))


def test_resample_within_cases_counts_follow_weights():
    rng = np.random.default_rng(1)
    weights = np.array([[0.5, 0.1], [0.25, 0.1], [0.25, 0.8]])
    idx = resample_within_cases(rng, weights)
    # each count is floor or ceil of n * w (systematic resampling), per column on its own
    for col in range(2):
        counts = np.bincount(idx[:, col], minlength=3)
        assert np.all(np.abs(counts - 3 * weights[:, col]) < 1)


def gamma_poisson_model(n_cases=6, n_counts=4):
    y = np.random.default_rng(3).poisson(2.0, size=(n_cases, n_counts))
    with pm.Model(coords={"case": np.arange(n_cases), "count": np.arange(n_counts)}) as model:
        a = pm.HalfNormal("a", 3)
        rate = pm.HalfNormal("rate", 3)
        lam = pm.Gamma("lam", alpha=a, beta=rate, dims="case")
        pm.Poisson("y", lam[:, None], observed=y, dims=("case", "count"))
    return model, y


def gamma_poisson_log_density(a, rate, y):
    s, r = y.sum(axis=1), y.shape[1]
    return (a * np.log(rate) - gammaln(a) + gammaln(a + s) - (a + s) * np.log(rate + r)
            - gammaln(y + 1).sum(axis=1))


def test_case_density_rows_match_hand_computation():
    # Log-transformed latents: the per-case prior carries the Jacobian, the gradients are per
    # case. Exact (round-off) identities of the compiled per-row densities.
    model, y = gamma_poisson_model()
    a, rate = 2.5, 1.5
    density = CaseDensity(condition_on_parameters(model, {"a": a, "rate": rate}),
                          compile_kwargs=FAST)
    assert density.layout.n_cases == 6 and density.layout.case_size == 1
    u = np.random.default_rng(4).normal(size=(3 * 6, 1))  # 3 chains x 6 cases of log(lam)
    parts = density.parts(u)
    lam = np.exp(u[:, 0])
    y_rows = np.tile(y, (3, 1))
    prior = stats.gamma(a, scale=1 / rate).logpdf(lam) + u[:, 0]
    lik = stats.poisson(lam[:, None]).logpmf(y_rows).sum(axis=1)
    np.testing.assert_allclose(parts.log_prior, prior, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts.log_likelihood, lik, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts.grad_log_prior[:, 0], a - rate * lam, rtol=1e-12)
    np.testing.assert_allclose(parts.grad_log_likelihood[:, 0],
                               y_rows.sum(axis=1) - y.shape[1] * lam, rtol=1e-12)


def test_result_bookkeeping_is_exact(forward_result):
    params, y = _ppca_truth(), ppca_heldout_data()
    h = forward_result["heldout"]
    assert h.sizes == {"case": 8, "ais_chain": 16}
    np.testing.assert_allclose(h["lower"], log_mean_exp(h["log_weight_forward"].values, axis=0),
                               rtol=0, atol=1e-12)
    assert float(h["total_lower"]) == pytest.approx(float(h["lower"].sum()), abs=1e-12)
    assert np.all(np.isnan(h["upper"])) and np.isnan(float(h["total_upper"]))
    assert h.attrs["n_steps"] == 300 and h.attrs["chains"] == 16 and h.attrs["random_seed"] == 11
    # Every posterior draw of every case carries that case's own densities at its state: the
    # rows <-> flat-vector mapping and the per-case resampling are consistent.
    z = forward_result["posterior"]["z"].values[0]  # (draw, case, lat)
    stats_ = forward_result["sample_stats"]
    lik = stats.norm(z @ params["W"].T + params["b"], SIGMA).logpdf(y[None]).sum(axis=-1)
    np.testing.assert_allclose(stats_["log_likelihood"].values[0], lik, rtol=1e-10)
    np.testing.assert_allclose(stats_["log_prior"].values[0],
                               stats.norm.logpdf(z).sum(axis=-1), rtol=1e-10)
    source = stats_["source_chain"].values[0]
    np.testing.assert_array_equal(
        stats_["log_weight"].values[0],
        np.take_along_axis(h["log_weight_forward"].values, source, axis=0),
    )
    np.testing.assert_allclose(forward_result["observed_data"]["y"].values, y)


def test_one_step_weights_are_the_likelihood_of_the_prior_draw(ppca):
    # n_steps=1: no kernel runs, and each (chain, case) weight is p(y_i | z_i) at its exact
    # prior draw z_i, which is also the final state.
    with ppca:
        res = pmb.sample_heldout_likelihood(_ppca_truth(), {"y": ppca_heldout_data()},
                                            schedule=[0.0, 1.0], n_steps=None, chains=16,
                                            random_seed=3, progressbar=False,
                                            compile_kwargs=FAST)
    stats_ = res["sample_stats"]
    np.testing.assert_array_equal(stats_["log_weight"].values, stats_["log_likelihood"].values)
    assert res["heldout"].attrs["n_steps"] == 1


# -- Monte Carlo against closed form ------------------------------------------------------------
def test_heldout_ppca_matches_exact_density(forward_result):
    exact = ppca_log_density(_ppca_truth(), ppca_heldout_data())
    h = forward_result["heldout"]
    np.testing.assert_array_less(np.abs(h["lower"].values - exact), CASE_TOL)
    assert abs(float(h["total_lower"]) - exact.sum()) < TOTAL_TOL
    assert float(h["total_lower_markov"]) < exact.sum() + RIGOROUS_SLACK
    assert np.all(h["ess_forward"].values > 8)  # of 16 chains


def test_likelihood_weighting_misses_the_tolerance(ppca):
    # Test of the test: without annealing (n_steps=1) the same check fails by many nats, so the
    # tolerances above can tell a working annealer from a broken one.
    exact = ppca_log_density(_ppca_truth(), ppca_heldout_data())
    with ppca:
        res = pmb.sample_heldout_likelihood(_ppca_truth(), {"y": ppca_heldout_data()},
                                            n_steps=1, schedule="linear", chains=16,
                                            random_seed=11, progressbar=False,
                                            compile_kwargs=FAST)
    h = res["heldout"]
    assert np.abs(h["lower"].values - exact).max() > 10 * CASE_TOL
    assert float(h["total_lower"]) < exact.sum() - 10 * TOTAL_TOL


def test_bdmc_sandwiches_each_simulated_case(simulated_result):
    exact = ppca_log_density(_ppca_truth(), simulated_result["observed_data"]["y"].values)
    h = simulated_result["heldout"]
    assert h.sizes["case"] == 5  # the model's own number of cases
    np.testing.assert_array_less(h["lower"].values, exact + CASE_TOL)
    np.testing.assert_array_less(exact - CASE_TOL, h["upper"].values)
    np.testing.assert_array_less(np.abs(h["gap"].values), GAP_TOL)
    total = exact.sum()
    assert float(h["total_lower"]) - RIGOROUS_SLACK <= total <= float(h["total_upper"]) + \
        RIGOROUS_SLACK
    assert abs(float(h["total_gap"])) < GAP_TOL
    np.testing.assert_allclose(h["gap"], h["upper"] - h["lower"], atol=1e-12)
    assert float(h["total_gap"]) == pytest.approx(float(h["gap"].sum()), abs=1e-10)
    # the simulated latents are recorded; the cases are drawn, not the model's training data
    assert simulated_result["generating_values"]["z"].shape == (5, K)
    assert "log_weight_reverse" in h and h.attrs["simulate"]


def test_plan_certified_on_simulated_cases_runs_on_the_test_cases(ppca, simulated_result):
    # The recipe: certify on simulated cases, then apply exactly that frozen plan to the test
    # cases (no pilot run).
    plan = pmb.AnnealingPlan.from_result(simulated_result)
    with ppca:
        res = pmb.sample_heldout_likelihood(_ppca_truth(), {"y": ppca_heldout_data()},
                                            plan=plan, chains=16, random_seed=13,
                                            progressbar=False, compile_kwargs=FAST)
    ann = res["annealing"]
    np.testing.assert_array_equal(ann["beta"].values, plan.betas)
    np.testing.assert_array_equal(ann["step_size"].values, plan.step_size)
    np.testing.assert_array_equal(ann["inverse_mass"].values, plan.inv_mass)
    h = res["heldout"]
    assert h.attrs["schedule"] == "given plan" and h.attrs["pilot_steps"] == 0
    exact = ppca_log_density(_ppca_truth(), ppca_heldout_data())
    np.testing.assert_array_less(np.abs(h["lower"].values - exact), CASE_TOL)
    assert abs(float(h["total_lower"]) - exact.sum()) < TOTAL_TOL


def test_gamma_poisson_heldout_matches_closed_form():
    model, _ = gamma_poisson_model(n_cases=6)
    y_test = np.random.default_rng(5).poisson(3.0, size=(9, 4))
    with model:
        res = pmb.sample_heldout_likelihood({"a": 2.5, "rate": 1.5}, {"y": y_test},
                                            n_steps=200, chains=16, random_seed=2,
                                            progressbar=False, compile_kwargs=FAST)
    exact = gamma_poisson_log_density(2.5, 1.5, y_test)
    h = res["heldout"]
    np.testing.assert_array_less(np.abs(h["lower"].values - exact), CASE_TOL)
    assert abs(float(h["total_lower"]) - exact.sum()) < TOTAL_TOL


def test_users_model_is_untouched(ppca, forward_result):
    # The fixture resized the cases (5 -> 8) and fixed W, b, sigma on a clone.
    assert int(ppca.dim_lengths["case"].get_value()) == 5
    assert [rv.name for rv in ppca.free_RVs] == ["W", "b", "sigma", "z"]
    assert ppca.rvs_to_initial_values[ppca["sigma"]] is not None
    assert ppca.initial_point()["z"].shape == (5, K)


# -- bad input ----------------------------------------------------------------------------------
def _coupled_model():
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1)
        steps = pm.Normal("steps", 0, 1, shape=5)
        pm.Normal("y", w * pm.math.cumsum(steps), 1, observed=np.zeros(5))
    return model


def _fixed_shape_model():
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1, shape=2)
        z = pm.Normal("z", 0, 1, shape=(5, 2))
        pm.Normal("y", (z * w).sum(axis=1), 1, observed=np.zeros(5))
    return model


def _discrete_latent_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=2)
        c = pm.Bernoulli("c", 0.5, shape=5)
        pm.Normal("y", mu[c], 1, observed=np.zeros(5))
    return model


def _potential_model():
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1)
        z = pm.Normal("z", 0, 1, shape=5)
        pm.Potential("pen", -(z**2).sum())
        pm.Normal("y", w * z, 1, observed=np.zeros(5))
    return model


def _scalar_observation_model():
    with pm.Model() as model:
        w = pm.Normal("w", 0, 1)
        z = pm.Normal("z", 0, 1)
        pm.Normal("y", w * z, 1, observed=0.3)
    return model


PARAMS = _ppca_truth()
Y = ppca_heldout_data()


@pytest.mark.parametrize(
    ("make_model", "kwargs", "message"),
    [
        (ppca_model, {"params": {"W": PARAMS["W"]}}, "not per-case latents"),
        (ppca_model, {"params": {**PARAMS, "w": 1.0}}, "not free variables"),
        (ppca_model, {"params": {**PARAMS, "W": PARAMS["W"].T}}, "has shape"),
        (ppca_model, {"params": {**PARAMS, "sigma": -1.0}}, "outside the support"),
        (ppca_model, {"params": {**PARAMS, "b": np.full(D, np.nan)}}, "non-finite"),
        (ppca_model, {"params": {}}, "non-empty mapping"),
        (ppca_model, {"params": {**PARAMS, "z": np.zeros((5, K))}}, "no latent variables"),
        (ppca_model, {"data": {"y": np.where(Y > 2, np.nan, Y)}}, "non-finite"),
        (ppca_model, {"data": {"y": Y[:, :3]}}, "do not fit"),
        (ppca_model, {"data": {"x": Y}}, "not observed variables"),
        (ppca_model, {"data": {"y": Y[0]}, "simulate": False}, "do not fit"),
        (ppca_model, {"data": {"y": Y}, "simulate": True}, "do not also pass `data`"),
        (ppca_model, {"chains": 0}, "chains"),
        (ppca_model, {"plan": pmb.AnnealingPlan(np.array([0.0, 1.0]), np.array([np.nan, 0.1]),
                                                np.ones((2, 3)), 3, 0.5)},
         "3 latent coordinates per case"),
        (_fixed_shape_model, {"params": {"w": np.ones(2)}, "data": {"y": np.zeros(7)}},
         "cannot be resized"),
        (_fixed_shape_model, {"params": {"w": np.ones(2)}, "data": {"y": np.zeros((5, 1))}},
         "do not fit"),
        (_discrete_latent_model, {"params": {"mu": np.zeros(2)}}, "discrete"),
        (_potential_model, {"params": {"w": 1.0}}, "Potentials"),
        (_scalar_observation_model, {"params": {"w": 1.0}}, "first axis"),
        (_scalar_observation_model, {"params": {"w": 1.0}, "data": {"y": np.zeros(3)}},
         "first axis"),
    ],
    ids=["missing-global", "unknown-param", "param-shape", "param-support", "param-nan",
         "no-params", "nothing-left", "data-nan", "data-trailing-shape", "data-unknown-name",
         "data-no-case-rows", "simulate-and-data", "bad-chains", "plan-dimension",
         "fixed-shape-resize", "fixed-shape-data", "discrete-latent", "potential",
         "scalar-observation", "scalar-observation-with-data"],
)
def test_bad_input_is_refused_before_sampling(make_model, kwargs, message):
    kwargs = {"params": PARAMS, **kwargs}
    with make_model(), pytest.raises(pmb.BDMCInputError, match=message):
        pmb.sample_heldout_likelihood(n_steps=10, progressbar=False, random_seed=0,
                                      compile_kwargs=FAST, **kwargs)


def test_cases_coupled_through_the_latents_are_refused():
    # Latents with the right shape that interact across cases (a cumulative sum): the numerical
    # independence check must catch them before sampling.
    with _coupled_model(), pytest.raises(pmb.BDMCInputError, match="not independent"):
        pmb.sample_heldout_likelihood({"w": 1.0}, n_steps=10, progressbar=False,
                                      compile_kwargs=FAST)
