"""Non-centred local-scale variables sampled in centred form: which models qualify, the exact
change of variables, the user's model and data untouched, and the evidence against quadrature."""

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import testing_quadrature
from pymc_bdmc.model.cache import clear_cache, compiled_model
from pymc_bdmc.model.centring import centred_model


def _horseshoe(n_coefficients=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(20, n_coefficients))
    with pm.Model(coords={"k": range(n_coefficients)}) as model:
        data = pm.Data("x", x)
        tau = pm.HalfCauchy("tau", 0.1)
        lam = pm.HalfCauchy("lam", 1.0, dims="k")
        z = pm.Normal("z", 0.0, 1.0, dims="k")
        beta = pm.Deterministic("beta", 0.5 - z * tau * lam, dims="k")
        pm.Normal("y", data @ beta, 1.0, observed=rng.normal(size=20))
    return model


def test_only_standard_normals_scaled_by_a_local_scale_are_centred():
    assert centred_model(_horseshoe()).centred == ("z",)
    # Global scales only: left as written (eight schools, a scalar times a vector).
    eight = testing_quadrature.eight_schools(centered=False).model
    assert centred_model(eight).model is eight
    assert centred_model(testing_quadrature.local_scales_regression(centered=True).model
                         ).centred == ()
    with pm.Model() as other:
        lam = pm.HalfNormal("lam", 1.0, shape=3)
        wide = pm.Normal("wide", 0.0, 2.0, shape=3)      # not standard
        twice = pm.Normal("twice", 0.0, 1.0, shape=3)    # used twice
        pm.Normal("y", wide * lam + twice * lam + twice, 1.0, observed=np.zeros(3))
    assert centred_model(other).centred == ()


def test_the_centred_density_is_the_change_of_variables_and_the_user_model_is_untouched():
    model = _horseshoe()
    names_before = set(model.named_vars)
    centring = centred_model(model)
    new = centring.model
    assert set(model.named_vars) == names_before and model.free_RVs[2].name == "z"
    assert {v.name for v in new.free_RVs} == {"tau", "lam", "z_centred"}
    assert {v.name for v in new.deterministics} == {"beta", "z"}
    assert new.named_vars_to_dims["z_centred"] == ("k",)
    rng = np.random.default_rng(1)
    user_logp, new_logp = model.compile_logp(), new.compile_logp()
    for _ in range(5):
        log_tau, log_lam = rng.normal(), rng.normal(size=5)
        z = rng.normal(size=5)
        scale = -np.exp(log_tau + log_lam)  # beta = 0.5 - z tau lam: loc 0.5, scale -tau lam
        point = {"tau_log__": log_tau, "lam_log__": log_lam, "z": z}
        centred_point = {"tau_log__": log_tau, "lam_log__": log_lam,
                         "z_centred": 0.5 + scale * z}
        # p'(x) = p(z = (x - loc) / scale) / |scale|, elementwise
        assert new_logp(centred_point) == pytest.approx(
            user_logp(point) - np.log(np.abs(scale)).sum(), abs=1e-10)


def test_set_data_on_the_user_model_reaches_the_compiled_centred_density():
    clear_cache()
    model = _horseshoe()
    density = compiled_model(model).density
    assert density.centred == ("z",)
    x = np.random.default_rng(2).normal(size=(3, density.n_dim))
    before = density.parts(x).log_likelihood
    pm.set_data({"x": 2.0 * model["x"].get_value()}, model=model)
    reused = compiled_model(model)
    assert reused.reused
    after = reused.density.parts(x).log_likelihood
    fresh = compiled_model(model, cache=False).density.parts(x).log_likelihood
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, fresh, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_bounds_of_a_centred_local_scale_model_sandwich_the_quadrature_evidence(seed):
    # Monte Carlo tolerance: 32 chains at 200 steps measured within 0.04 nats on both seeds.
    exact = testing_quadrature.local_scales_regression()
    with exact.model:
        result = pmb.sample_bdmc(n_steps=200, random_seed=seed, progressbar=False)
        ais = pmb.sample_ais(n_steps=200, random_seed=seed, progressbar=False)
    evidence = result["evidence"]
    assert evidence.attrs["centred"] == "z"
    truth = exact.log_evidence({"y": result["observed_data"]["y"].values})
    assert abs(float(evidence["lower"]) - truth) < 0.15
    assert abs(float(evidence["upper"]) - truth) < 0.15
    assert abs(float(ais["evidence"]["lower"]) - exact.log_evidence()) < 0.15
    # The posterior carries the user's variables: z recovered from the centred coefficients.
    post = ais["posterior"]
    z, lam, centred = (post[name].values for name in ("z", "lam", "z_centred"))
    np.testing.assert_allclose(z * lam, centred, rtol=1e-10)
    np.testing.assert_allclose(post["beta"].values, centred, rtol=1e-12)
