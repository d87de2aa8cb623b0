"""``pmb.sample_unnormalized_evidence`` (issue 18): the entry point on a 4x4 Ising model.

The exact evidence is a 1-D adaptive quadrature over the coupling of likelihoods normalised by
enumerating all 2^16 fields (as in tests/test_unnormalized_importance.py). Tolerance: 0.2 nats
(the issue's target for a 4x4 field) at fixed seeds; measured errors were below 0.13 nats for
SAVIS and 0.03 for MAVIS over seeds 0-3 with the defaults. Random-weight SMC at its defaults
(1000 particles, 16 auxiliary draws per row) had errors of mean -0.04 and sd 0.08 nats over
seeds 0-11 (seed 11: -0.02), about 2 s a run.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import integrate, stats

import pymc_bdmc as pmb
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.evidence import unnormalized as entry
from pymc_bdmc.methods import unnormalized as estimators
from pymc_bdmc.pipeline import driver
from pymc_bdmc.unnormalized import pilot as unnormalized_pilot
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    enumerated_log_partition,
    ising_enumerate,
    ising_statistics,
)

PRIOR = (0.2, 0.5)  # c ~ N(0.2, 0.5²)


@pytest.fixture(scope="module")
def field():
    return IsingSimulator((4, 4)).sample([0.35, 0.0], 1, np.random.default_rng(0))[0]


@pytest.fixture(scope="module")
def exact_log_evidence(field):
    s_y, enumerated, prior = ising_statistics(field), ising_enumerate((4, 4)), stats.norm(*PRIOR)

    def log_joint(c):
        c = np.atleast_1d(c)
        eta = np.stack([c, np.zeros_like(c)], -1)
        return prior.logpdf(c) + c * s_y[0] - enumerated_log_partition(*enumerated, eta)

    peak = max(log_joint(np.linspace(-2, 3, 501)))
    value, _ = integrate.quad(lambda c: np.exp(log_joint(c)[0] - peak), -np.inf, np.inf,
                              epsabs=0, epsrel=1e-12)
    return np.log(value) + peak


def _model(field):
    with pm.Model() as model:
        c = pm.Normal("c", *PRIOR)
        pmb.Ising("y", c, observed=field)
    return model


@pytest.fixture(scope="module")
def results(field):
    model = _model(field)
    return {method: pmb.sample_unnormalized_evidence(method, model=model, random_seed=11,
                                                     progressbar=False)
            for method in ("auto", "mavis", "rwsmc")}


@pytest.mark.parametrize("method", ["auto", "mavis", "rwsmc"])
def test_evidence_against_quadrature(results, exact_log_evidence, method):
    ev = results[method]["evidence"]
    assert abs(float(ev["lower"]) - exact_log_evidence) < 0.2
    assert abs(float(ev["certified_lower"]) - exact_log_evidence) < 0.2


def test_groups_and_attributes(results, field):
    tree = results["auto"]
    assert {"posterior", "evidence", "auxiliary"} <= set(tree.children)
    ev, aux, post = tree["evidence"], tree["auxiliary"], tree["posterior"]
    assert ev.attrs["estimate_kind"] == "unbiased"
    assert ev.attrs["method"] == "savis"  # exact simulator: auto picks SAVIS
    assert results["mavis"]["evidence"].attrs["method"] == "mavis"
    assert ev.attrs["exact"] == 1 and ev.attrs["log_z_source"] == "exact"
    assert post["c"].shape == (1, 1000)
    # The posterior mean of the coupling is near the data's maximum-likelihood region.
    assert 0.0 < float(post["c"].mean()) < 1.0
    eta_hat = aux["eta_hat"].values
    assert eta_hat[1] == 0.0 and eta_hat[0] == pytest.approx(float(aux["theta_hat"][0]))
    sim = IsingSimulator((4, 4))
    assert float(aux["log_z_hat"]) == pytest.approx(float(sim.log_partition(eta_hat)))
    assert int(aux["n_aux_draws"]) == 1000 and aux.attrs["exact"] == 1
    assert np.isfinite(float(aux["log_z_hat_lower"])) and np.isfinite(float(aux["log_z_hat_upper"]))


#: The evidence fields every pymc_bdmc result has (NaN where a method has no such number).
CORE_FIELDS = ("lower", "upper", "gap", "gap_se", "lower_se", "upper_se")


@pytest.mark.parametrize("method", ["auto", "rwsmc", "abc"])
def test_evidence_has_the_layout_of_every_result(results, field, method):
    # One layout (issue 38): pmb.compare reads the same fields from every result, and the
    # observed_data group says which data the evidence refers to.
    if method == "abc":
        tree = pmb.sample_unnormalized_evidence("abc", model=_model(field), draws=40,
                                                pilot_draws=20, pilot_tune=30, n_sim=5,
                                                epsilon=2.0, random_seed=0, progressbar=False)
    else:
        tree = results[method]
    ev = tree["evidence"]
    assert list(ev.data_vars)[:len(CORE_FIELDS)] == list(CORE_FIELDS)
    assert all(np.isnan(float(ev[name])) for name in ("upper", "gap", "gap_se", "upper_se"))
    if method == "rwsmc":  # one run gives no standard error
        assert np.isnan(float(ev["lower_se"]))
    else:
        assert 0 < float(ev["lower_se"]) == float(ev["relative_se"])
    observed = tree["observed_data"]
    assert list(observed.data_vars) == ["y"]
    np.testing.assert_array_equal(observed["y"].values, field)


def test_rwsmc_result(results):
    # Random-weight SMC needs no pilot and no Z(θ̂): certified_lower is its own estimate.
    tree = results["rwsmc"]
    ev, aux, post = tree["evidence"], tree["auxiliary"], tree["posterior"]
    assert ev.attrs["method"] == "rwsmc" and ev.attrs["estimate_kind"] == "unbiased"
    assert ev.attrs["exact"] == 1 and ev.attrs["log_z_source"] == "none"
    assert float(ev["certified_lower"]) == float(ev["lower"])
    assert float(ev["log_increment"].sum()) == pytest.approx(float(ev["lower"]), abs=1e-10)
    assert ev["log_increment"].sizes["row"] == 4 and ev["log_weight"].sizes["particle"] == 1000
    assert int(aux["n_particles"]) == 1000 and int(aux["n_aux"]) == entry.RWSMC_N_AUX
    assert int(aux["n_aux_draws"]) == 1000 * 4 * entry.RWSMC_N_AUX
    assert 0.1 < float(aux["acceptance_rate"]) < 0.9
    # Final particles, resampled: their mean is near the exact posterior mean 0.39 of c
    # (tests/test_unnormalized_smc.py); the Monte Carlo sd of this mean is about 0.01.
    assert post["c"].shape == (1, 1000)
    assert float(post["c"].mean()) == pytest.approx(0.39, abs=0.05)


def test_rwsmc_refuses_a_likelihood_that_is_not_an_ising_field(monkeypatch):
    _no_sampling(monkeypatch)
    with pm.Model():
        theta = pm.Normal("theta")
        pmb.ERGM("y", theta, observed=np.zeros((4, 4), int))
        with pytest.raises(BDMCInputError, match=r"not a pmb\.Ising"):
            pmb.sample_unnormalized_evidence("rwsmc")


def test_same_seed_same_result(field):
    model = _model(field)
    kwargs = dict(model=model, draws=100, pilot_draws=100, pilot_tune=50, bound_chains=4,
                  random_seed=5, progressbar=False)
    a, b = (pmb.sample_unnormalized_evidence(**kwargs) for _ in range(2))
    assert float(a["evidence"]["lower"]) == float(b["evidence"]["lower"])
    np.testing.assert_array_equal(a["posterior"]["c"].values, b["posterior"]["c"].values)
    np.testing.assert_array_equal(a["evidence"]["log_weight"].values,
                                  b["evidence"]["log_weight"].values)
    other = pmb.sample_unnormalized_evidence(**(kwargs | {"random_seed": 6}))
    assert float(other["evidence"]["lower"]) != float(a["evidence"]["lower"])
    smc = dict(model=model, draws=50, n_aux=2, random_seed=5, progressbar=False)
    a, b = (pmb.sample_unnormalized_evidence("rwsmc", **smc) for _ in range(2))
    assert float(a["evidence"]["lower"]) == float(b["evidence"]["lower"])
    np.testing.assert_array_equal(a["posterior"]["c"].values, b["posterior"]["c"].values)


def _no_sampling(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("sampled before refusing")

    monkeypatch.setattr(unnormalized_pilot, "exchange_sampler", fail)
    monkeypatch.setattr(estimators, "CompiledPrior", fail)
    monkeypatch.setattr(estimators, "random_weight_smc", fail)


def test_model_without_unnormalised_likelihood_is_refused_before_sampling(monkeypatch):
    _no_sampling(monkeypatch)
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=np.zeros(3))
        with pytest.raises(BDMCInputError, match="exactly one observed variable"):
            pmb.sample_unnormalized_evidence(random_seed=0)


def test_second_observed_variable_is_refused(field, monkeypatch):
    _no_sampling(monkeypatch)
    model = _model(field)
    with model:
        pm.Normal("z", model["c"], 1, observed=np.zeros(2))
    with pytest.raises(BDMCInputError, match=r"\['y', 'z'\]"):
        pmb.sample_unnormalized_evidence(model=model)


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="exchange"), "`method` must be one of"),
    (dict(draws=0), "`draws` must be a positive integer"),
    (dict(method="rwsmc", draws=1), "needs `draws` >= 2"),
    (dict(method="rwsmc", n_moves=-1), "`n_moves` must be a non-negative integer"),
])
def test_bad_arguments_are_refused_before_sampling(field, monkeypatch, kwargs, match):
    _no_sampling(monkeypatch)
    with pytest.raises(BDMCInputError, match=match):
        pmb.sample_unnormalized_evidence(model=_model(field), **kwargs)


def test_bounded_prior_uses_the_jacobian(field):
    # c ~ Uniform(0, 1): the pilot and proposal live on logit(c), so log p(θ) must carry the
    # Jacobian; an error there shifts the evidence by far more than the tolerance.
    s_y, enumerated = ising_statistics(field), ising_enumerate((4, 4))
    grid = np.linspace(0.0, 1.0, 20001)
    log_lik = grid * s_y[0] - enumerated_log_partition(*enumerated,
                                                       np.stack([grid, 0 * grid], -1))
    exact = np.log(integrate.trapezoid(np.exp(log_lik), grid))
    with pm.Model():
        c = pm.Uniform("c", 0.0, 1.0)
        pmb.Ising("y", c, observed=field)
        tree = pmb.sample_unnormalized_evidence(random_seed=2, progressbar=False)
    assert abs(float(tree["evidence"]["lower"]) - exact) < 0.2
    assert 0.0 < float(tree["posterior"]["c"].min()) and float(tree["posterior"]["c"].max()) < 1


def test_edges_only_ergm_against_closed_form():
    # log Z(θ) = C(n, 2) log(1 + e^θ): the evidence is a 1-D integral of a closed form.
    rng = np.random.default_rng(0)
    upper = np.triu((rng.random((8, 8)) < 0.3).astype(int), 1)
    y = upper + upper.T
    edges, pairs, prior = y.sum() / 2, 28, stats.norm(-0.5, 1.0)
    value, _ = integrate.quad(
        lambda t: np.exp(prior.logpdf(t) + t * edges - pairs * np.log1p(np.exp(t))), -20, 20,
        epsabs=0, epsrel=1e-12)
    with pm.Model():
        theta = pm.Normal("theta", -0.5, 1.0)
        pmb.ERGM("y", theta, observed=y)
        tree = pmb.sample_unnormalized_evidence(random_seed=3, progressbar=False)
    assert tree["evidence"].attrs["method"] == "savis"
    assert abs(float(tree["evidence"]["lower"]) - np.log(value)) < 0.2
    assert abs(float(tree["evidence"]["certified_lower"]) - np.log(value)) < 0.2


def test_user_family_without_a_normaliser_is_refused_before_sampling(monkeypatch):
    _no_sampling(monkeypatch)
    with pm.Model():
        lam = pm.Exponential("lam", 1.0)
        pmb.ExponentialFamily("y", pm.math.log(lam)[None], statistic=lambda v: v.sum()[None],
                              sampler=lambda eta, rng: rng.poisson(np.exp(eta[0]), 3),
                              observed=np.array([2.0, 0.0, 3.0]))
        with pytest.raises(BDMCInputError, match="MCMC kernel"):
            pmb.sample_unnormalized_evidence(method="mavis")
        with pytest.raises(BDMCInputError, match="neither an exact normaliser"):
            pmb.sample_unnormalized_evidence()


def test_inexact_simulation_picks_mavis_and_says_biased(field):
    # Swendsen-Wang draws (exact=False): "auto" runs MAVIS and nothing claims unbiasedness.
    with pm.Model():
        c = pm.Normal("c", *PRIOR)
        pmb.Ising("y", c, observed=field, exact=False, sweeps=10)
        tree = pmb.sample_unnormalized_evidence(draws=200, pilot_draws=200, pilot_tune=100,
                                                n_bridges=4, bound_chains=8, bound_bridges=20,
                                                random_seed=0, progressbar=False)
    ev = tree["evidence"]
    assert ev.attrs["method"] == "mavis" and ev.attrs["exact"] == 0
    assert ev.attrs["estimate_kind"] == "biased" and tree["auxiliary"].attrs["exact"] == 0
    assert np.isfinite(float(ev["lower"]))
    # pmb.bayes_factor claims no bound from a biased estimate.
    bf = pmb.bayes_factor(tree, tree)
    assert bf.kinds == ("biased estimate", "biased estimate")
    assert bf.interval == (-np.inf, np.inf)


class _Recorder:
    """Stands in for PyMC's progress bar: records rows and how far each advanced."""

    def __init__(self, enabled):
        self.enabled, self.rows = enabled, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description, completed=0, total=None):
        self.rows.append([description, completed, total])
        return len(self.rows) - 1

    def advance(self, task):
        self.rows[task][1] += 1

    prefix = ""

    def finish(self, summary):
        self.summary = summary


@pytest.mark.parametrize("method, rows", [
    ("savis", [("Exchange pilot", 30 + 20), ("Bounds on log Z(θ̂)", 2 * (5 + 1)), ("SAVIS", 40)]),
    ("rwsmc", [("Random-weight SMC (rows)", 4)]),
    ("abc", [("Exchange pilot", 30 + 20), ("ABC", 40)]),
])
def test_progress_rows_advance_to_their_totals(field, monkeypatch, method, rows):
    bars = []

    def create(enabled):
        bars.append(_Recorder(enabled))
        return bars[-1]

    monkeypatch.setattr(driver, "stage_progress", create)
    monkeypatch.delenv("CI", raising=False)
    kwargs = dict(model=_model(field), draws=40, pilot_draws=20, pilot_tune=30, n_aux=2,
                  bound_chains=4, bound_bridges=5, n_sim=5, random_seed=0)
    pmb.sample_unnormalized_evidence(method, progressbar=True, **kwargs)
    assert bars[-1].enabled
    assert [(d, total) for d, _, total in bars[-1].rows] == rows
    assert all(done == total for _, done, total in bars[-1].rows)
    pmb.sample_unnormalized_evidence(method, progressbar=False, **kwargs)
    assert not bars[-1].enabled
    monkeypatch.setenv("CI", "true")  # never a bar in CI, as for the other drivers
    pmb.sample_unnormalized_evidence(method, progressbar=True, **kwargs)
    assert not bars[-1].enabled


def test_real_progress_bar_runs(field, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    tree = pmb.sample_unnormalized_evidence("rwsmc", model=_model(field), draws=20, n_aux=1,
                                            random_seed=0, progressbar=True)
    assert np.isfinite(float(tree["evidence"]["lower"]))
