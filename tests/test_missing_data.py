"""Observations with NaN or masked entries: the evidence of the entries that are present.

PyMC imputes missing entries as a free variable ``<name>_unobserved``; integrating over it gives
``p(y_observed)``, which for these models is known in closed form.
"""

import logging

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import gammaln

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError

pytestmark = pytest.mark.filterwarnings("ignore:Data in y contains missing values")

RNG = np.random.default_rng(0)
X = RNG.normal(size=40)
Y = 1.0 + 2.0 * X + RNG.normal(size=40)
MISSING = np.arange(40) % 8 == 0          # 5 of 40 entries


def _regression_log_evidence(x, y):
    # a, b ~ Normal(0, 3), y ~ Normal(a + b x, 1): y is Gaussian with covariance 9 X X' + I.
    design = np.column_stack([np.ones_like(x), x])
    cov = 9.0 * design @ design.T + np.eye(len(y))
    return stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y)


def _regression(y):
    with pm.Model() as model:
        a, b = pm.Normal("a", 0.0, 3.0), pm.Normal("b", 0.0, 3.0)
        pm.Normal("y", a + b * X, 1.0, observed=y)
    return model


def test_missing_entries_are_integrated_over_and_the_bounds_sandwich_p_of_the_rest(caplog):
    data = np.where(MISSING, np.nan, Y)
    model = _regression(data)
    with model, caplog.at_level(logging.INFO, logger="pymc_bdmc"):
        bd = pmb.sample_bdmc(n_steps=200, chains=16, random_seed=3, progressbar=False)
        ais = pmb.sample_ais(n_steps=200, chains=16, random_seed=3, progressbar=False)
    assert "5 of 40 entries of 'y' are missing" in caplog.text
    simulated = bd["observed_data"]["y_observed"].values
    assert simulated.shape == (35,)
    truth_simulated = _regression_log_evidence(X[~MISSING], simulated)
    evidence = bd["evidence"]
    # Conjugate and Gaussian: measured within 0.01 of the truth; 0.1 leaves Monte Carlo room.
    assert abs(float(evidence["lower"]) - truth_simulated) < 0.1
    assert abs(float(evidence["upper"]) - truth_simulated) < 0.1
    truth = _regression_log_evidence(X[~MISSING], Y[~MISSING])
    assert abs(float(ais["evidence"]["lower"]) - truth) < 0.1
    # ... and not that of the completed data, nor of the model with the entries dropped wrongly.
    assert abs(truth - _regression_log_evidence(X, Y)) > 5.0
    # The user's model and data are untouched.
    assert np.isnan(data[MISSING]).all()
    assert [rv.name for rv in model.free_RVs] == ["a", "b", "y_unobserved"]


def test_masked_counts_are_imputed_and_integrated_out():
    counts = np.random.default_rng(1).poisson(3.0, 30).astype(float)
    masked = np.ma.masked_array(counts, mask=np.arange(30) < 3)
    with pm.Model():
        lam = pm.Gamma("lam", 2.0, 0.5)
        pm.Poisson("y", lam, observed=masked)
        result = pmb.sample_ais(n_steps=100, chains=16, random_seed=2, progressbar=False)
    assert result["evidence"].attrs["kernel"] == "hmc+gibbs"  # the counts' window Gibbs kernel
    present = counts[3:]
    alpha, rate = 2.0, 0.5             # Gamma-Poisson: the evidence of the 27 present counts
    truth = (alpha * np.log(rate) - gammaln(alpha) + gammaln(alpha + present.sum())
             - (alpha + present.sum()) * np.log(rate + present.size)
             - gammaln(present + 1).sum())
    assert abs(float(result["evidence"]["lower"]) - truth) < 0.15


def test_held_out_cases_must_be_complete():
    model = _regression(np.where(MISSING, np.nan, Y))
    with model, pytest.raises(BDMCInputError, match="held-out cases must be complete"):
        pmb.sample_heldout_likelihood({"a": 1.0, "b": 2.0}, n_steps=10, chains=4, random_seed=0,
                                      progressbar=False)
