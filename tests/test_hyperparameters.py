"""Scalar hyperparameters are inputs of the compiled densities: new values, the same graph."""

import logging

import numpy as np
import pymc as pm

from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.hyperparameters import hyperparameter_inputs


def _intercepts(scale: float, noise: float):
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(4), 3)
    with pm.Model() as model:
        mu, tau = pm.Normal("mu", 1.0, scale), pm.HalfNormal("tau", scale)
        a = pm.Normal("a", mu, tau, shape=4)
        pm.Normal("y", a[group], noise, observed=rng.normal(size=12))
    return model


def test_a_model_with_other_prior_scales_loads_the_graph_and_computes_with_its_own_values(
        cache_dir, caplog):
    compiled_model(_intercepts(1.0, 0.5), cache=False)
    other = _intercepts(2.5, 0.8)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        density = compiled_model(other, cache=False).density
    assert "Rewritten graph loaded from the cache" in caplog.text  # no rewriting, no Numba
    x = np.random.default_rng(1).normal(scale=0.5, size=(5, density.n_dim))
    parts = density.parts(x)
    logp = other.compile_logp()  # PyMC's own, with the new values as constants
    for row, prior_plus_lik in zip(x, parts.log_prior + parts.log_likelihood, strict=True):
        np.testing.assert_allclose(prior_plus_lik, logp(density.layout.to_point(row)),
                                   rtol=1e-12)


def test_scalar_parameters_become_inputs_and_integers_only_where_they_set_no_shape_or_support():
    with pm.Model() as model:
        p = pm.Beta("p", 30, 30)  # integers of a continuous univariate variable: inputs
        pm.Normal("v", np.zeros(3), 1.5)  # the mean is an array: folded; the scale an input
        pm.Binomial("k", n=10, p=p, observed=4)  # an integer that sets the support: constant
        pm.Gamma("g", 2.0, 4.0)  # PyMC turns the rate into a scale: the rate is the input
        pm.LKJCorr("c", n=3, eta=2)  # multivariate: its integers may set its shape
    inputs = hyperparameter_inputs(model)
    assert sorted(float(shared.get_value()) for shared in inputs.values()) == [
        1.5, 2.0, 4.0, 30.0, 30.0]
    assert all(shared.type.ndim == 0 for shared in inputs.values())
    assert all(constant.type.dtype == shared.type.dtype for constant, shared in inputs.items())
