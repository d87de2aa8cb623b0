"""Bad input: a clear error before any sampling, and the user's model untouched."""

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError

SAMPLERS = [pmb.sample_ais, pmb.sample_bdmc]
FAST = dict(n_steps=10, chains=4, random_seed=0, progressbar=False)


def _no_observed():
    with pm.Model() as m:
        pm.Normal("mu")
    return m


def _flat_prior():
    with pm.Model() as m:
        a = pm.Flat("a")
        pm.Normal("y", a, 1, observed=[1.0])
    return m


def _half_flat_prior():
    with pm.Model() as m:
        s = pm.HalfFlat("s")
        pm.Normal("y", 0, s, observed=[1.0])
    return m


def _custom_without_random():
    with pm.Model() as m:
        d = pm.CustomDist("d", 0.0, logp=lambda v, mu: -((v - mu) ** 2))
        pm.Normal("y", d, 1, observed=[1.0])
    return m


def _potential():
    with pm.Model() as m:
        mu = pm.Normal("mu")
        pm.Potential("pot", -(mu**2))
        pm.Normal("y", mu, 1, observed=[1.0])
    return m


def _discrete():
    with pm.Model() as m:
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1, observed=[1.0])
    return m


def _nan_data():
    with pm.Model() as m:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=np.array([1.0, np.nan]))
    return m


def _inf_data():
    with pm.Model() as m:
        mu = pm.Normal("mu")
        d = pm.Data("d", np.array([1.0, np.inf]))
        pm.Normal("y", mu, 1, observed=d)
    return m


def _data_outside_support():
    # Uniform(0, b) likelihood: prior draws of b below max(y) give log-likelihood -inf.
    with pm.Model() as m:
        b = pm.HalfNormal("b", 1.0)
        pm.Uniform("y", 0, b, observed=np.array([0.5, 1.5]))
    return m


CASES = {
    "no observed variables": (_no_observed, "no observed variables", SAMPLERS),
    "Flat prior": (_flat_prior, "improper Flat/HalfFlat", SAMPLERS),
    "HalfFlat prior": (_half_flat_prior, "improper Flat/HalfFlat", SAMPLERS),
    "CustomDist without random": (_custom_without_random, "Cannot draw exactly", SAMPLERS),
    "Potential": (_potential, "Potentials", SAMPLERS),
    "NaN observations": (_nan_data, "NaN or masked", SAMPLERS),
    "inf observations": (_inf_data, "non-finite", SAMPLERS),
    "data outside the likelihood's support": (_data_outside_support, "not finite", [pmb.sample_ais]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model_is_refused_before_sampling(case, monkeypatch):
    make, message, samplers = CASES[case]
    import pymc_bdmc.sampling as sampling

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampling started despite bad input")

    monkeypatch.setattr(sampling, "tune_plan", no_sampling)
    for sampler in samplers:
        model = make()
        names_before = sorted(model.named_vars)
        with pytest.raises(BDMCInputError, match=message):
            with model:
                sampler(**FAST)
        assert sorted(model.named_vars) == names_before


def test_potentials_allowed_for_ais_when_declared_likelihood():
    with _potential():
        result = pmb.sample_ais(potentials_in_likelihood=True, **FAST)
    assert np.isfinite(float(result["evidence"]["lower"]))


def test_potentials_are_refused_by_bdmc_even_when_declared():
    with pytest.raises(TypeError):  # sample_bdmc has no such switch: it cannot be made valid
        with _potential():
            pmb.sample_bdmc(potentials_in_likelihood=True, **FAST)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_steps=0), "n_steps"),
        (dict(n_steps=2.5), "n_steps"),
        (dict(chains=0), "chains"),
        (dict(chains=True), "chains"),
        (dict(schedule=[0.0, 0.7, 0.3, 1.0], n_steps=None), "non-decreasing"),
        (dict(schedule=[0.1, 0.5, 1.0], n_steps=None), "start at exactly 0"),
        (dict(schedule=[0.0, 0.5, 0.9], n_steps=None), "end at exactly 1"),
        (dict(schedule="bogus"), "Unknown schedule"),
        (dict(target_accept=1.5), "target_accept"),
        (dict(step_size_jitter=1.0), "step_size_jitter"),
        (dict(n_leapfrog=0), "n_leapfrog"),
        (dict(confidence=1.0), "confidence"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=[0.0])
        for sampler in SAMPLERS:
            with pytest.raises(BDMCInputError, match=message):
                sampler(**{**FAST, **kwargs})


def test_error_messages_are_actionable():
    # Discrete free variables are supported (PyMC step methods); a step method built on another
    # model is not, and the message says which variable and what to do.
    model = _discrete()
    with pm.Model():
        foreign = pm.Metropolis([pm.Poisson("k", 3.0)])
    with pytest.raises(BDMCInputError) as err, model:
        pmb.sample_bdmc(step=foreign, **FAST)
    text = str(err.value)
    assert "['k']" in text and "inside the model's context" in text
