"""Un-normalised likelihoods (issue 18): PyMC distributions, their marker, bad input, refusals.

Exact identities are checked at 1e-10; Monte Carlo checks use fixed seeds and a tolerance of
4 standard errors (or a chi-square bound of about 5 standard deviations), so a correct
implementation fails them with probability well below 1e-3 and a biased one fails them.
"""

import warnings

import numpy as np
import pymc as pm
import pytest
from pytensor.compile.maker import FunctionMaker

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError
from pymc_bdmc.unnormalized import unnormalized_variables
from pymc_bdmc.unnormalized.ergm import ergm_statistics
from pymc_bdmc.unnormalized.ising import ising_statistics

pytestmark = pytest.mark.filterwarnings(
    "ignore:Numba will use object mode:UserWarning",  # the simulators are Python code
)


# --- PyMC distributions ---------------------------------------------------------------------
def _grid(seed=0, shape=(4, 5)):
    return np.random.default_rng(seed).choice([-1, 1], size=shape)


@pytest.mark.parametrize("neighbourhood, coupling, eta", [
    ("first", 0.7, (0.7, 0.0)), ("second", 0.7, (0.7, 0.7)),
    ("second", np.array([0.7, -0.2]), (0.7, -0.2)),
])
def test_ising_logp_is_log_gamma(neighbourhood, coupling, eta):
    y = _grid()
    with pm.Model() as model:
        c = pm.Normal("c", 0, 1, shape=np.shape(coupling))
        obs = pmb.Ising("y", c, observed=y, neighbourhood=neighbourhood)
    logp = model.compile_logp(vars=[obs])({"c": coupling})
    assert logp == pytest.approx(ising_statistics(y) @ np.array(eta), abs=1e-12)
    assert obs.type.shape == y.shape
    assert obs.owner.op.exact and obs.owner.op.neighbourhood == neighbourhood


def test_ergm_and_exponential_family_logp_are_log_gamma():
    y = np.zeros((5, 5), int)
    for i, j in [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4)]:
        y[i, j] = y[j, i] = 1
    theta = np.array([0.5, -0.2, 0.3])
    with pm.Model() as model:
        t = pm.Normal("t", 0, 1, shape=3)
        obs = pmb.ERGM("g", t, statistics=("edges", "two_stars", "triangles"), observed=y,
                       exact=False)
    logp = model.compile_logp(vars=[obs])({"t": theta})
    assert logp == pytest.approx(ergm_statistics(y) @ theta, abs=1e-12)

    counts = np.array([2.0, 0.0, 3.0, 1.0])
    with pm.Model() as model:
        lam = pm.Exponential("lam", 1.0)
        obs = pmb.ExponentialFamily("y", pm.math.log(lam)[None], observed=counts,
                                    statistic=lambda v: v.sum()[None])
    logp = model.compile_logp(vars=[obs])({"lam_log__": np.log(2.5)})
    assert logp == pytest.approx(np.log(2.5) * counts.sum(), abs=1e-12)


def test_logp_is_minus_inf_outside_the_support():
    with pm.Model():
        c = pm.Normal("c")
        obs = pmb.Ising("y", c, observed=_grid())
    logp = pm.logp(obs, np.zeros((4, 5), dtype=np.int64)).eval({c: 0.3})
    assert logp == -np.inf
    with pm.Model():
        t = pm.Normal("t")
        graph = pmb.ERGM("g", t, observed=np.zeros((3, 3), int))
    asymmetric = np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]])
    assert pm.logp(graph, asymmetric).eval({t: 0.1}) == -np.inf


def test_unnormalized_likelihoods_names_them_and_survives_cloning():
    y = _grid()
    with pm.Model() as model:
        c = pm.Uniform("c", 0, 1)
        mu = pm.Normal("mu")
        pmb.Ising("field", c, observed=y)
        pm.Normal("z", mu, 1, observed=[0.1, 0.2])
    assert pmb.unnormalized_likelihoods(model) == ["field"]
    with model:
        assert pmb.unnormalized_likelihoods() == ["field"]
    assert pmb.unnormalized_likelihoods(model.copy()) == ["field"]
    assert pmb.unnormalized_likelihoods(pm.observe(model, {"field": -y})) == ["field"]
    with pm.Model() as normal:
        pm.Normal("z", pm.Normal("mu"), 1, observed=[0.1])
    assert pmb.unnormalized_likelihoods(normal) == []
    # A latent field is an un-normalised prior: not a likelihood, but still refused.
    with pm.Model() as latent:
        pmb.Ising("x", pm.Uniform("c", 0, 1), shape=(3, 3))
    assert pmb.unnormalized_likelihoods(latent) == []
    assert unnormalized_variables(latent) == ["x"]


def test_prior_predictive_draws_come_from_the_simulators():
    y = _grid(shape=(3, 4))
    graph = np.zeros((4, 4), int)
    graph[0, 1] = graph[1, 0] = 1
    with pm.Model() as model:
        c = pm.Normal("c", 0, 0.3, shape=2)
        pmb.Ising("y", c, observed=y, neighbourhood="second")
        pmb.ERGM("g", pm.Normal("t"), observed=graph)
        pmb.ExponentialFamily("n", pm.math.log(pm.Exponential("lam", 1.0))[None],
                              statistic=lambda v: v.sum()[None], observed=np.ones(3),
                              sampler=lambda eta, rng: rng.poisson(np.exp(eta[0]), 3))
    prior = pm.sample_prior_predictive(draws=20, model=model, random_seed=1)
    fields = prior.prior_predictive["y"].values.reshape(-1, 3, 4)
    assert set(np.unique(fields)) == {-1, 1}
    graphs = prior.prior_predictive["g"].values.reshape(-1, 4, 4)
    pmb.unnormalized.ergm.check_adjacency(graphs)
    assert prior.prior_predictive["n"].values.shape == (1, 20, 3)
    # Batched draws (a leading `shape` entry is PyMC's `size`).
    draws = pm.draw(pmb.Ising.dist(0.3, shape=(2, 3, 3)), random_seed=2)
    assert draws.shape == (2, 3, 3) and set(np.unique(draws)) == {-1, 1}


def test_exponential_family_without_sampler_has_no_simulator():
    with pm.Model():
        obs = pmb.ExponentialFamily("y", pm.Normal("a", shape=1), observed=np.ones(3),
                                    statistic=lambda v: v.sum()[None])
    with pytest.raises(BDMCInputError, match="sampler="):
        pm.draw(obs, random_seed=0)


# --- bad input, before any sampling ---------------------------------------------------------
@pytest.mark.parametrize("data, match", [
    (np.array([[0, 1], [1, 0]]), r"only spins -1 and \+1"),
    (np.array([[1, 2], [-1, 1]]), r"only spins -1 and \+1"),
    (np.array([1, -1, 1]), "shape"),
])
def test_ising_refuses_bad_spins(data, match):
    with pm.Model(), pytest.raises(BDMCInputError, match=match):
        pmb.Ising("y", pm.Normal("c"), observed=data)


def test_data_containers_are_checked_and_work():
    with pm.Model(), pytest.raises(BDMCInputError, match=r"only spins -1 and \+1"):
        pmb.Ising("y", pm.Normal("c"), observed=pm.Data("d", np.zeros((3, 3), int)))
    with pm.Model() as model:
        c = pm.Normal("c")
        obs = pmb.Ising("y", c, observed=pm.Data("d", _grid()))
    assert model.compile_logp(vars=[obs])({"c": 0.5}) == pytest.approx(
        0.5 * ising_statistics(_grid())[0])


def test_ising_refuses_bad_options():
    y = _grid()
    with pm.Model():
        c = pm.Normal("c")
        with pytest.raises(BDMCInputError, match="exact=False"):
            pmb.Ising("y", c, observed=np.ones((13, 13), int), neighbourhood="second")
        assert pmb.Ising("f", c, observed=np.ones((13, 13), int)).owner.op.exact  # by CFTP
        wide = pmb.Ising("w", c, observed=np.ones((13, 13), int), exact=False)
        assert wide.owner.op.exact is False
        with pytest.raises(BDMCInputError, match="boundary"):
            pmb.Ising("b", c, observed=y, boundary="periodic")
        with pytest.raises(BDMCInputError, match="neighbourhood"):
            pmb.Ising("n", c, observed=y, neighbourhood="third")
        with pytest.raises(BDMCInputError, match="one coupling"):
            pmb.Ising("t", pm.Normal("c2", shape=2), observed=y)


@pytest.mark.parametrize("data, match", [
    (np.array([[0, 1, 0], [0, 0, 1], [0, 1, 0]]), "not symmetric"),
    (np.array([[0, 2], [2, 0]]), "binary"),
    (np.array([[1, 1], [1, 0]]), "diagonal"),
    (np.array([[0, 1, 1], [1, 0, 1]]), "square"),
])
def test_ergm_refuses_bad_adjacency(data, match):
    with pm.Model(), pytest.raises(BDMCInputError, match=match):
        pmb.ERGM("g", pm.Normal("t"), observed=data)


def test_ergm_refuses_bad_options():
    y = np.zeros((4, 4), int)
    with pm.Model():
        t = pm.Normal("t", shape=2)
        with pytest.raises(BDMCInputError, match="exact=False"):
            pmb.ERGM("a", t, statistics=("edges", "two_stars"), observed=y)
        with pytest.raises(BDMCInputError, match="statistics"):
            pmb.ERGM("b", t, statistics=("edges", "k_stars"), observed=y, exact=False)
        with pytest.raises(BDMCInputError, match="one entry per statistic"):
            pmb.ERGM("c", pm.Normal("t3", shape=3), statistics=("edges", "two_stars"),
                     observed=y, exact=False)


# --- refusals by the normalised-likelihood drivers ------------------------------------------
@pytest.fixture
def ising_model():
    with pm.Model() as model:
        c = pm.Uniform("c", 0, 1)
        pmb.Ising("y", c, observed=_grid())
    return model


def _no_compiling(*args, **kwargs):
    raise AssertionError("a PyTensor function was compiled before the refusal")


@pytest.mark.parametrize("driver", ["sample_ais", "sample_bdmc", "sample_smc_evidence",
                                    "calibrate"])
def test_normalised_drivers_refuse_unnormalised_likelihoods(driver, ising_model, monkeypatch):
    # Every PyTensor function is built by FunctionMaker.create: refused before any of them.
    monkeypatch.setattr(FunctionMaker, "create", _no_compiling)
    with warnings.catch_warnings(), pytest.raises(BDMCInputError) as err:
        warnings.simplefilter("error")
        getattr(pmb, driver)(model=ising_model, random_seed=0, progressbar=False)
    message = str(err.value)
    assert "pmb.sample_unnormalized_evidence" in message and "['y']" in message
    assert "not available" not in message  # the entry point exists now


@pytest.mark.parametrize("entry", ["compare_estimators", "ground_truth", "Problem",
                                   *sorted(pmb.testbed.ESTIMATORS)])
def test_testbed_refuses_unnormalised_likelihoods(entry, ising_model, monkeypatch):
    # The testbed runs its estimators on a user's model too: the same refusal, same message,
    # before anything is compiled; also for a hand-made Problem around such a model.
    monkeypatch.setattr(FunctionMaker, "create", _no_compiling)
    if entry == "compare_estimators":
        def call():
            return pmb.testbed.compare_estimators(ising_model, levels=(1,), trials=1)
    elif entry == "ground_truth":
        def call():
            return pmb.testbed.ground_truth(ising_model)
    elif entry == "Problem":
        problem = pmb.testbed.Problem("ising", ising_model, log_evidence=-1.0)
        def call():
            return pmb.testbed.compare_estimators(problem, levels=(1,), trials=1)
    else:
        def call():
            return pmb.testbed.ESTIMATORS[entry].fn(ising_model, 10, 0)
    with pytest.raises(BDMCInputError) as err:
        call()
    message = str(err.value)
    assert "pmb.sample_unnormalized_evidence" in message and "['y']" in message


def test_heldout_likelihood_refuses_unnormalised_likelihoods(ising_model):
    # Refused before sampling, though after model/cases.py compiles its check of `params`.
    with pytest.raises(BDMCInputError, match="sample_unnormalized_evidence"):
        pmb.sample_heldout_likelihood({"c": np.array(0.5)}, model=ising_model, random_seed=0,
                                      progressbar=False)


def test_a_latent_unnormalised_field_is_refused_too():
    # A hidden Ising field makes p(θ, x) un-normalised in θ: the evidence is just as wrong.
    with pm.Model() as model:
        c = pm.Uniform("c", 0, 1)
        x = pmb.Ising("x", c, shape=(3, 3))
        pm.Normal("y", x, 1.0, observed=np.zeros((3, 3)))
    with pytest.raises(BDMCInputError, match=r"\['x'\].*sample_unnormalized_evidence"):
        pmb.sample_ais(model=model, random_seed=0, progressbar=False)
