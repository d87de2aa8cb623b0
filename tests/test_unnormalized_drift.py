"""Inexact Ising simulation: the exchange pilot's drift is caught by the pseudo-likelihood."""

import logging

import numpy as np
import pymc as pm

import pymc_bdmc as pmb
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    ising_natural,
    ising_pseudo_likelihood_estimate,
)


def test_pseudo_likelihood_estimate_recovers_the_coupling():
    rng = np.random.default_rng(0)
    sim = IsingSimulator((10, 10), "first")
    fields = sim.sample(ising_natural(0.3, "first"), 50, rng)
    estimates = np.array([ising_pseudo_likelihood_estimate(y, "first") for y in fields])
    # Measured over 200 fields: mean 0.319, sd 0.083 (a consistent, slightly biased estimator).
    assert np.all(estimates[:, 1] == 0.0)
    assert abs(estimates[:, 0].mean() - 0.3) < 0.06
    second = IsingSimulator((10, 10), "second").sample(np.array([0.3, 0.1]), 50, rng)
    both = np.array([ising_pseudo_likelihood_estimate(y, "second") for y in second])
    np.testing.assert_allclose(both.mean(axis=0), [0.3, 0.1], atol=0.1)


def test_pseudo_likelihood_estimate_has_no_maximum_on_an_ordered_field():
    assert np.all(np.isnan(ising_pseudo_likelihood_estimate(np.ones((4, 4)), "first")))


def _fit(y, neighbourhood, **ising):
    with pm.Model():
        c = pm.Normal("c", 0.0, 1.0, shape=2 if neighbourhood == "second" else ())
        pmb.Ising("y", c, observed=y, neighbourhood=neighbourhood, **ising)
        return pmb.sample_unnormalized_evidence(method="savis", random_seed=0,
                                                progressbar=False)


def test_a_drifting_pilot_is_flagged(caplog):
    # Three Swendsen-Wang sweeps per draw are far from equilibrium; on these data the
    # second-order model's pilot ran to a nearest-neighbour coupling near 12 (measured).
    y = IsingSimulator((10, 10), "first").sample(ising_natural(0.3, "first"), 1,
                                                  np.random.default_rng(0))[0]
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        drifted = _fit(y, "second", exact=False, sweeps=3)
    aux = drifted["auxiliary"]
    assert int(aux["pilot_drift"]) == 1 and "has likely drifted" in caplog.text
    assert float(aux["eta_hat"][0]) > 5.0
    assert abs(float(aux["eta_pseudo_likelihood"][0]) - 0.3) < 0.2
    assert drifted["evidence"].attrs["exact"] == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        steady = _fit(y, "first", exact=False, sweeps=3)
    assert int(steady["auxiliary"]["pilot_drift"]) == 0 and "drifted" not in caplog.text


def test_exact_simulation_needs_no_drift_check():
    y = IsingSimulator((4, 4), "first").sample(ising_natural(0.3, "first"), 1,
                                                np.random.default_rng(1))[0]
    result = _fit(y, "first")
    assert "pilot_drift" not in result["auxiliary"]
