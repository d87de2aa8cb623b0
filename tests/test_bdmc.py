"""Bidirectional Monte Carlo end to end: sandwich, convergence, reproducibility, hygiene."""

import arviz as az
import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence

# Markov slack for a rigorous sandwich check: P(lower > log Z + b) < e^-b, so with b = log(1000)
# a correct implementation fails each side with probability < 0.1%; a sign or index error is off
# by many nats and fails always.
RIGOROUS_SLACK = np.log(1000.0)
# Practical accuracy at n_steps=1000, 32 chains (the acceptance bar).
GAP_TOL = 1.0


@pytest.fixture(scope="module")
def regression():
    return known_evidence.linear_regression(n_obs=40, n_coef=6, seed=3)


@pytest.fixture(scope="module")
def regression_result(regression):
    with regression.model:
        return pmb.sample_bdmc(n_steps=1000, chains=32, random_seed=2024, progressbar=False)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: known_evidence.normal_inverse_gamma_regression(n_obs=30, n_coef=4, seed=8),
        lambda: known_evidence.beta_binomial(seed=9),
        lambda: known_evidence.gamma_poisson(seed=10),
    ],
    ids=["normal-inverse-gamma", "beta-binomial", "gamma-poisson"],
)
def test_sandwich_holds_on_simulated_data(factory):
    am = factory()
    with am.model:
        result = pmb.sample_bdmc(n_steps=1000, chains=32, random_seed=7, progressbar=False)
    ev = result["evidence"]
    truth = am.log_evidence_of(result)
    assert float(ev.lower) - RIGOROUS_SLACK <= truth <= float(ev.upper) + RIGOROUS_SLACK
    assert float(ev.gap) <= GAP_TOL
    assert abs(float(ev.lower) - truth) < GAP_TOL and abs(float(ev.upper) - truth) < GAP_TOL


def test_regression_sandwich_and_markov_bounds(regression, regression_result):
    ev = regression_result["evidence"]
    truth = regression.log_evidence_of(regression_result)
    assert float(ev.lower) - RIGOROUS_SLACK <= truth <= float(ev.upper) + RIGOROUS_SLACK
    assert float(ev.gap) <= GAP_TOL
    assert float(ev.lower_markov) < float(ev.lower) < float(ev.upper) + 0.5
    assert float(ev.upper_markov) > float(ev.upper)


def test_gap_shrinks_as_n_steps_grows(regression):
    gaps = []
    for n_steps in (25, 250):
        with regression.model:
            # From the prior: a fitted base nearly is this posterior, leaving no bias to shrink.
            r = pmb.sample_bdmc(n_steps=n_steps, chains=32, random_seed=5, progressbar=False,
                                base="prior")
        ev = r["evidence"]
        # the mean-log-weight gap estimates the sum of both directions' biases (> 0)
        gaps.append(float(ev.upper_mean_log_weight - ev.lower_mean_log_weight))
    assert gaps[0] > 0 and gaps[1] > 0
    assert gaps[1] < gaps[0] / 3


def test_tempered_density_compiled_once_whatever_n_steps(regression, monkeypatch):
    import pymc_bdmc.model.density as density_module
    import pymc_bdmc.model.simulate as simulate_module
    from pymc_bdmc.model.cache import clear_cache

    counts = []
    for n_steps in (10, 300):
        calls = []
        for module, name in ((density_module, "compile_function"),
                             (simulate_module, "compile_pytensor")):
            original = getattr(module, name)

            def counting(*args, _original=original, **kwargs):
                calls.append(1)
                return _original(*args, **kwargs)

            monkeypatch.setattr(module, name, counting)
        clear_cache()  # each call compiles afresh (else the second reuses the first's)
        with regression.model:
            pmb.sample_bdmc(n_steps=n_steps, chains=8, random_seed=1, progressbar=False)
        monkeypatch.undo()
        counts.append(len(calls))
    assert counts[0] == counts[1] > 0
    assert counts[0] <= 6  # parts (+ its check), simulator, constrain (+ its check)


def test_same_seed_gives_identical_results(regression):
    runs = []
    for _ in range(2):
        with regression.model:
            runs.append(pmb.sample_bdmc(n_steps=50, chains=8, random_seed=99, progressbar=False))
    for group in ("evidence", "posterior", "annealing", "observed_data", "generating_values"):
        xr.testing.assert_equal(runs[0][group].to_dataset(), runs[1][group].to_dataset())
    with regression.model:
        other = pmb.sample_bdmc(n_steps=50, chains=8, random_seed=100, progressbar=False)
    assert float(other["evidence"]["lower"]) != float(runs[0]["evidence"]["lower"])


def _snapshot(model):
    return {
        "free": [rv.name for rv in model.free_RVs],
        "values": [v.name for v in model.value_vars],
        "observed": {rv.name: np.array(model.rvs_to_values[rv].data, copy=True)
                     for rv in model.observed_RVs},
        "named": sorted(model.named_vars),
        "initvals": dict(model.rvs_to_initial_values),
        "data": {k: np.array(v.get_value(), copy=True) for k, v in model.data_vars_dict.items()}
        if hasattr(model, "data_vars_dict") else {},
    }


def test_user_model_is_not_mutated(regression):
    model = regression.model
    before = _snapshot(model)
    with model:
        pmb.sample_bdmc(n_steps=20, chains=4, random_seed=0, progressbar=False)
        pmb.sample_ais(n_steps=20, chains=4, random_seed=0, progressbar=False)
    after = _snapshot(model)
    assert before["free"] == after["free"] and before["values"] == after["values"]
    assert before["named"] == after["named"] and before["initvals"] == after["initvals"]
    for name, data in before["observed"].items():
        np.testing.assert_array_equal(data, after["observed"][name])


def test_pm_data_observations_are_left_alone():
    with pm.Model() as model:
        y_data = pm.Data("y_data", np.array([0.5, -0.2, 1.0]))
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=y_data)
    with model:
        result = pmb.sample_bdmc(n_steps=30, chains=4, random_seed=3, progressbar=False)
    np.testing.assert_array_equal(y_data.get_value(), [0.5, -0.2, 1.0])
    assert not np.allclose(result["observed_data"]["y"].values, [0.5, -0.2, 1.0])


def test_result_layout_and_arviz_compatibility(regression, regression_result):
    dt = regression_result
    for group in ("posterior", "sample_stats", "observed_data", "generating_values", "evidence",
                  "annealing"):
        assert group in dt.children, group
    post = dt["posterior"]
    assert post["w"].dims == ("chain", "draw", "coef")
    assert post.sizes["draw"] == 32
    summary = az.summary(dt)
    assert len(summary) == 6
    ev = dt["evidence"]
    for name in ("lower", "upper", "gap"):
        assert ev[name].dims == ()
    assert float(ev.gap) == pytest.approx(float(ev.upper - ev.lower))
    assert ev["log_weight_forward"].dims == ("ais_chain",)
    ann = dt["annealing"]
    assert ann["beta"].dims == ("step",) and ann.sizes["step"] == 1001
    assert float(ann.beta[0]) == 0 and float(ann.beta[-1]) == 1
    assert np.all(np.diff(ann.beta.values) >= 0)
    # the data the bounds refer to is the simulated y*, not the model's own data
    assert not np.allclose(dt["observed_data"]["y"].values, regression.data["y"])
    theta = dt["generating_values"]["w"].values
    assert theta.shape == (6,)


def test_posterior_resample_is_close_to_exact_posterior(regression, regression_result):
    # Conjugate posterior of w given y*: a loose check that the weighted final states are right.
    x = regression.constants["x"]
    t, s = regression.constants["prior_sd"], regression.constants["noise_sd"]
    y = regression_result["observed_data"]["y"].values
    cov = np.linalg.inv(np.eye(x.shape[1]) / t**2 + x.T @ x / s**2)
    mean = cov @ x.T @ y / s**2
    draws = regression_result["posterior"]["w"].values.reshape(-1, x.shape[1])
    z = (draws.mean(0) - mean) / np.sqrt(np.diag(cov))
    assert np.all(np.abs(z) < 2.0)  # 32 draws: mean within 2 posterior sd
