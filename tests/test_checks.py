"""Bad input: a clear error before any sampling, and the user's model untouched."""

import logging

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


def _no_free_variables():
    # Before: "ValueError: Cannot join an empty list of tensors" from the flat layout.
    with pm.Model() as m:
        pm.Normal("y", 0.0, 1.0, observed=np.array([0.1, 0.2]))
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


def _intrinsic_car():
    W = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    with pm.Model() as m:
        phi = pm.ICAR("phi", W=W)
        pm.Poisson("y", pm.math.exp(phi), observed=[1, 2, 3])
    return m


def _custom_without_random():
    with pm.Model() as m:
        d = pm.CustomDist("d", 0.0, logp=lambda v, mu: -((v - mu) ** 2))
        pm.Normal("y", d, 1, observed=[1.0])
    return m


def _custom_likelihood_without_random():
    # The likelihood a logp-only CustomDist (a Normal's): mu ~ N(0, 1), y_i | mu ~ N(mu, 1).
    def logp(value, mu):
        return -0.5 * (value - mu) ** 2 - 0.5 * np.log(2 * np.pi)

    with pm.Model() as m:
        mu = pm.Normal("mu")
        pm.CustomDist("y", mu, logp=logp, observed=np.array([0.3, 1.1]))
    return m


def _simulator_likelihood():
    def simulate(rng, mu, size=None):
        return rng.normal(mu, 1.0, size=size)

    with pm.Model() as m:
        mu = pm.Normal("mu", 0, 3)
        pm.Simulator("y", simulate, params=(mu,), epsilon=1.0, observed=np.array([0.3, 1.1]))
    return m


def _minibatch_scaled():
    with pm.Model() as m:
        pm.Normal("y", pm.Normal("mu"), 1.0, observed=np.array([0.3, 1.1]), total_size=20)
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


def _inf_data():
    with pm.Model() as m:
        mu = pm.Normal("mu")
        d = pm.Data("d", np.array([1.0, np.inf]))
        pm.Normal("y", mu, 1, observed=d)
    return m


def _data_outside_support():
    # Uniform(0, b) likelihood: prior draws of b below max(y) give log-likelihood -inf.
    with pm.Model() as m:
        b = pm.HalfNormal("b", 2.0)
        pm.Uniform("y", 0, b, observed=np.array([0.5, 1.5]))
    return m


def _data_impossible_everywhere():
    # Uniform(0, b) with b ~ HalfNormal(2) and a datum at 50: b > 50 has prior mass 1e-136.
    with pm.Model() as m:
        b = pm.HalfNormal("b", 2.0)
        pm.Uniform("y", 0, b, observed=np.array([0.5, 50.0]))
    return m


def _uniform_evidence(y):
    # p(y) = int_{max y}^inf HalfNormal(b; 2) b^-n db, by quadrature.
    from scipy import integrate, stats

    y = np.asarray(y, dtype=float)
    value, _ = integrate.quad(lambda b: stats.halfnorm.pdf(b, scale=2.0) * b ** -float(y.size),
                              y.max(), np.inf)
    return np.log(value)


@pytest.mark.parametrize("seed", [0, 1])
def test_data_impossible_at_some_prior_draws_restart_those_chains_where_they_are_possible(
        seed, caplog):
    # A third to a half of the prior's b lie below max(y): those chains start instead from
    # prior draws above it, and both bounds take out the prior's mass below it. Monte Carlo
    # tolerance: on seeds 0-5 (64 chains, 100 steps) AIS was within 0.11 of the quadrature
    # evidence, BDMC's bounds within 0.09 (0.13 and 0.21 above it when those chains carried zero
    # weight instead).
    with _data_outside_support(), caplog.at_level(logging.INFO, logger="pymc_bdmc"):
        ais = pmb.sample_ais(n_steps=100, chains=64, random_seed=seed, progressbar=False)
        bdmc = pmb.sample_bdmc(n_steps=100, chains=64, random_seed=seed, progressbar=False)
    assert "those chains start instead from draws at which they are possible" in caplog.text
    for result in (ais, bdmc):
        evidence = result["evidence"]
        assert evidence.attrs["possible_starts_redrawn"] > 0
        assert int(evidence["n_failed_forward"]) == 0
    assert float(ais["evidence"]["lower"]) == pytest.approx(_uniform_evidence([0.5, 1.5]),
                                                            abs=0.25)
    with _data_outside_support():
        prior_path = pmb.sample_ais(n_steps=20, chains=64, random_seed=seed, base="prior",
                                    progressbar=False)
    assert prior_path["evidence"].attrs["pilot_steps"] > 1
    # From the prior: P(b > 1.5) = 0.453, from 256 possible draws (relative sd about 0.05).
    assert prior_path["evidence"].attrs["possible_start_mass"] == pytest.approx(0.453, abs=0.1)
    simulated = _uniform_evidence(bdmc["observed_data"]["y"].values)
    assert float(bdmc["evidence"]["lower"]) == pytest.approx(simulated, abs=0.25)
    assert float(bdmc["evidence"]["upper"]) == pytest.approx(simulated, abs=0.35)


def test_smcs_upper_bound_takes_out_the_mass_where_the_data_are_impossible():
    # Seed 2 simulates data that 95% of the prior's b make impossible. SMC's resampling leaves
    # those particles behind, but its reverse runs never reach that mass: the upper bound sat
    # -log P = 2.92 above log p(y*), and +0.22 and +0.29 on seeds 0-1. With 1 / P estimated from
    # draws of the possible stream, seeds 0-2 were within 0.09 of the quadrature evidence.
    with _data_outside_support():
        bdmc = pmb.sample_bdmc(method="smc", n_steps=100, random_seed=2, progressbar=False)
    evidence = bdmc["evidence"]
    simulated = _uniform_evidence(bdmc["observed_data"]["y"].values)
    assert evidence.attrs["possible_start_mass"] < 0.1
    assert "possible_starts_redrawn" not in evidence.attrs  # SMC's starts are its own
    assert float(evidence["upper"]) == pytest.approx(simulated, abs=0.3)
    assert float(evidence["lower"]) == pytest.approx(simulated, abs=0.3)


def test_a_fitted_base_where_the_data_are_impossible_at_some_draws():
    # Base draws of b below max(y) restart where the data are possible, as prior draws do.
    # The pilot's equilibration left its -inf particles in the sd that decides when it has
    # settled (NaN: a RuntimeWarning, and every move made). Tolerance: on seeds 0-2 (64 chains,
    # 100 steps) AIS was within 0.06 of the quadrature evidence, BDMC's bounds within 0.05.
    import warnings

    with _data_outside_support(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        bdmc = pmb.sample_bdmc(n_steps=100, chains=64, random_seed=0, base="fitted",
                               progressbar=False)
    evidence = bdmc["evidence"]
    assert evidence.attrs["path_start"] == "fitted gaussian"
    assert evidence.attrs["possible_starts_redrawn"] > 0
    simulated = _uniform_evidence(bdmc["observed_data"]["y"].values)
    assert float(evidence["lower"]) == pytest.approx(simulated, abs=0.25)
    assert float(evidence["upper"]) == pytest.approx(simulated, abs=0.25)


def test_data_impossible_at_every_start_say_what_to_change():
    # As on BDMC's simulated data, where the model's own data are possible at some draws (the
    # terms are then not traced): every chain would start at zero weight.
    from pymc_bdmc.model.checks import check_finite_start
    from pymc_bdmc.model.layout import DensityParts, FlatLayout

    model = _data_impossible_everywhere()
    layout = FlatLayout.of_model(model, model.initial_point())
    x = np.zeros((4, layout.size))
    parts = DensityParts(np.zeros(4), np.full(4, -np.inf), x, x)
    with pytest.raises(BDMCInputError, match=r"impossible at all 4 prior draws.*pilot_chains"):
        check_finite_start(parts, "prior draws", layout, x, impossible_data="allow")
    with pytest.raises(BDMCInputError, match="not finite at 4 of 4"):  # as before, if refused
        check_finite_start(parts, "prior draws", layout, x)


def _nb_sites():
    # Four sites' latent counts N_i ~ NegativeBinomial(mu=6, alpha=3), y_ij ~ Binomial(N_i, p).
    with pm.Model() as model:
        p = pm.Beta("p", 2, 2)
        count = pm.NegativeBinomial("N", mu=6.0, alpha=3.0, shape=4)
        pm.Binomial("y", n=count[:, None], p=p, observed=np.array([[3, 4], [5, 2], [0, 1], [6, 6]]))
    return model


def test_simulated_data_impossible_at_every_pilot_draw_are_piloted_where_they_are_possible():
    # calibrate's seed 0 simulates counts that none of the pilot's 64 prior draws make possible:
    # the call was refused. The pilot, as the runs, now draws where the data are possible. Its
    # real-data estimate against the exact evidence (a sum over N and quadrature over p):
    # +0.06 (the call's noise: 32 chains, and the mass where the data are possible, 0.18, from
    # 256 draws; at 256 chains x 200 steps sample_ais was within 0.03 on seeds 0-3).
    from scipy import integrate, stats
    from scipy.special import logsumexp

    y, counts = np.array([[3, 4], [5, 2], [0, 1], [6, 6]]), np.arange(300)
    prior = stats.nbinom.logpmf(counts, 3.0, 3.0 / 9.0)

    def joint(p):
        return np.exp(sum(logsumexp(prior + stats.binom.logpmf(row[:, None], counts, p).sum(0))
                          for row in y)) * stats.beta.pdf(p, 2, 2)

    exact = np.log(integrate.quad(joint, 0, 1, limit=400, epsrel=1e-10)[0])
    with _nb_sites():
        result = pmb.calibrate(random_seed=0, progressbar=False)
    assert result["calibration"].attrs["certified"] == 1
    assert float(result["evidence"]["lower"]) == pytest.approx(exact, abs=0.4)


def test_simulated_data_impossible_at_every_pilot_draw_say_what_else_to_try(monkeypatch):
    # Where no draws can replace them (fewer than asked for within the draws allowed, here by
    # construction), the refusal names the simulated data and the two ways to draw others.
    import pymc_bdmc.pipeline.draws as draws

    monkeypatch.setattr(draws, "MAX_POSSIBLE_DRAWS", 1024)
    monkeypatch.setattr(draws, "POSSIBLE_DRAWS", 4096)
    with _nb_sites(), pytest.raises(BDMCInputError, match=r"(?s)impossible at all 64 prior "
                                                          r"draws.*BDMC's simulated data.*"
                                                          r"match_data=True"):
        pmb.calibrate(random_seed=0, progressbar=False)


def test_the_likelihoods_spread_ignores_particles_where_the_data_are_impossible():
    from pymc_bdmc.kernels.tuning import likelihood_sd

    weights = np.full(4, 0.25)
    assert likelihood_sd(np.array([-1.0, -3.0, -np.inf, -np.inf]), weights) == pytest.approx(1.0)
    assert likelihood_sd(np.array([-1.0, -3.0, 5.0, 7.0]), np.array([0.5, 0.5, 0, 0])) == (
        pytest.approx(1.0))
    assert np.isnan(likelihood_sd(np.full(4, -np.inf), weights))


def _data_resized():
    # pm.set_data changed the data's length; the likelihood kept its fixed shape=3.
    with pm.Model() as m:
        d = pm.Data("d", np.zeros(3))
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1, observed=d, shape=3)
    pm.set_data({"d": np.zeros(5)}, model=m)
    return m


def _simulation_leaves_support():
    # Beta(a, a) with a ~ 0.01: simulated data round to exactly 0 or 1, where the model's own
    # log-density is infinite, so the reverse run has no finite starting point.
    with pm.Model() as m:
        a = pm.HalfNormal("a", 0.01)
        pm.Beta("y", a, a, observed=np.full(5, 0.5))
    return m


def _simulated_data_overflow():
    # A scale of exp(1000) = inf at every prior draw: the simulated data are infinite.
    with pm.Model() as m:
        log_scale = pm.Normal("log_scale", 1000.0, 1.0)
        pm.Normal("y", 0.0, pm.math.exp(log_scale), observed=np.zeros(3))
    return m


def _potential_likelihood():
    # A custom likelihood written as a Potential: no observed variables at all.
    with pm.Model() as m:
        mu = pm.Normal("mu")
        pm.Potential("lik", pm.logp(pm.Normal.dist(mu, 1.0), np.array([0.3, 1.1])).sum())
    return m


def _likelihood_never_finite():
    # The likelihood's scale is negative for every prior draw: -inf wherever the prior has mass.
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        mu = pm.Normal("mu")
        pm.Normal("y", mu, -s, observed=np.array([0.3, 1.1]))
    return m


def _prior_never_drawable():
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0)
        mu = pm.Normal("mu", 0.0, -s)
        pm.Normal("y", mu, 1.0, observed=np.array([0.3, 1.1]))
    return m


def _ordered_transform():
    # Ordered cutpoints as PyMC's docs write them: the density is the Normal prior restricted to
    # ordered values (unnormalised), and pm.draw's values are not ordered.
    with pm.Model() as m:
        cut = pm.Normal("cut", 0.0, 3.0, shape=3, transform=pm.distributions.transforms.ordered,
                        initval=[-1.0, 0.0, 1.0])
        pm.OrderedLogistic("y", eta=0.0, cutpoints=cut, observed=np.array([0, 1, 3, 2]))
    return m


def _interval_on_a_normal():
    # An Interval transform narrows a Normal to (-0.1, 0.1): nearly every prior draw is outside.
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 3.0, transform=pm.distributions.transforms.Interval(-0.1, 0.1))
        pm.Normal("y", mu, 1.0, observed=np.array([0.3, 1.1]))
    return m


CASES = {
    "ordered transform": (_ordered_transform, r"\['cut'\] have a `transform=` .*pt.sort",
                          SAMPLERS),
    "Interval transform on a Normal": (
        _interval_on_a_normal,
        r"\['mu_interval__'\] of the .* not finite in the unconstrained space, in \d+ of \d+ "
        r"draws \(the first: \{'mu_interval__': (nan|-?inf)\}\)", SAMPLERS),
    "no observed variables": (_no_observed, "no observed variables", SAMPLERS),
    "no free variables": (_no_free_variables, r"no free variables.*compile_logp\(\)\(\{\}\)",
                          [*SAMPLERS, pmb.calibrate, pmb.sample_smc_evidence]),
    "total_size (minibatch scaling)": (  # before: ran, and returned the scaled integral
        _minibatch_scaled, r"\['y'\] have `total_size=`.*no longer normalised", SAMPLERS),
    "a pm.Simulator likelihood": (  # before: NullTypeGradError from inside PyTensor
        _simulator_likelihood, r"\['y'\] are pm.Simulator: .* not a likelihood", SAMPLERS),
    "data impossible at every prior draw": (
        _data_impossible_everywhere, r"\['y'\] is not finite at any of 16 prior draws",
        [pmb.sample_ais]),
    "Flat prior": (_flat_prior, "improper Flat/HalfFlat", SAMPLERS),
    "HalfFlat prior": (_half_flat_prior, "improper Flat/HalfFlat", SAMPLERS),
    "CustomDist without random": (_custom_without_random, "Cannot draw exactly", SAMPLERS),
    "CustomDist likelihood without random (BDMC)": (
        _custom_likelihood_without_random,
        r"Cannot simulate data from the model .*`random=`.*`pmb.sample_ais\(\)` still gives",
        [pmb.sample_bdmc, pmb.calibrate]),
    "intrinsic CAR prior": (_intrinsic_car, r"\['phi'\] have intrinsic CAR priors.*pm.CAR",
                            SAMPLERS),
    "Potential": (_potential, "Potentials", SAMPLERS),
    "inf observations": (_inf_data, "non-finite", SAMPLERS),
    "data shape differs from the variable's": (_data_resized, "have shape", SAMPLERS),
    "likelihood never finite": (
        _likelihood_never_finite, r"\['y'\] is not finite at any of 16 prior draws", SAMPLERS),
    "prior with invalid parameters": (
        _prior_never_drawable, r"Drawing from the prior failed .*scale < 0.* \['mu'\]", SAMPLERS),
    "Potential likelihood, undeclared": (
        _potential_likelihood, "only the Potentials.*potentials_in_likelihood=True",
        [pmb.sample_ais]),
    "Potential likelihood (BDMC)": (
        _potential_likelihood, "no simulator.*pm.CustomDist.*random=", [pmb.sample_bdmc]),
    "simulated data that overflow": (
        _simulated_data_overflow, r"data \['y'\] simulated from the model are not finite",
        [pmb.sample_bdmc]),
    "simulated data outside the model's support": (
        _simulation_leaves_support, "simulated from the model itself", [pmb.sample_bdmc]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_model_is_refused_before_sampling(case, monkeypatch):
    make, message, samplers = CASES[case]
    import pymc_bdmc.pipeline.pilot as pilot  # where the drivers call tune_plan

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampling started despite bad input")

    monkeypatch.setattr(pilot, "tune_plan", no_sampling)
    for sampler in samplers:
        model = make()
        names_before = sorted(model.named_vars)
        with pytest.raises(BDMCInputError, match=message):
            with model:
                sampler(**FAST)
        assert sorted(model.named_vars) == names_before


@pytest.mark.parametrize("compile_kwargs, message", [
    ({"bogus": 1}, r"has \['bogus'\].*it takes \['accept_inplace'"),
    ("FAST_COMPILE", r"must be a dict .*got str"),
])
def test_compile_kwargs_pytensor_refuses_are_named(compile_kwargs, message):
    # Before: a TypeError from inside PyTensor ("function() got an unexpected keyword").
    for sampler in SAMPLERS:
        with _plain_normal_model():
            with pytest.raises(BDMCInputError, match=message):
                sampler(compile_kwargs=compile_kwargs, **FAST)


def _plain_normal_model():
    with pm.Model() as m:
        pm.Normal("y", pm.Normal("mu"), 1.0, observed=np.array([0.3, 1.1]))
    return m


def test_potentials_allowed_for_ais_when_declared_likelihood():
    with _potential():
        result = pmb.sample_ais(potentials_in_likelihood=True, **FAST)
    assert np.isfinite(float(result["evidence"]["lower"]))


def test_a_potential_declared_as_the_whole_likelihood_gives_the_evidence():
    # mu ~ N(0, 1), y_i | mu ~ N(mu, 1) as a Potential: p(y) = N(y; 0, I + 11^T).
    from scipy.stats import multivariate_normal

    y = np.array([0.3, 1.1])
    exact = multivariate_normal(np.zeros(2), np.eye(2) + 1.0).logpdf(y)
    with _potential_likelihood():
        result = pmb.sample_ais(potentials_in_likelihood=True, n_steps=100, chains=64,
                                random_seed=2, progressbar=False)
    # Seeds 2-7 gave errors within 0.033 nats.
    assert result["evidence"]["lower"] == pytest.approx(exact, abs=0.1)


def test_a_likelihood_with_no_random_method_still_gets_a_lower_bound():
    # The data cannot be simulated, but sample_ais needs only prior draws: p(y) = N(y; 0, I + 11^T).
    from scipy.stats import multivariate_normal

    exact = multivariate_normal(np.zeros(2), np.eye(2) + 1.0).logpdf([0.3, 1.1])
    with _custom_likelihood_without_random():
        result = pmb.sample_ais(n_steps=100, chains=64, random_seed=2, progressbar=False)
    assert result["evidence"]["lower"] == pytest.approx(exact, abs=0.1)


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
        (dict(pilot_chains=1), "pilot_chains"),
        (dict(transitions_per_step=0), "transitions_per_step"),
        (dict(schedule=[0.0, 0.5, 1.0], n_steps=5), "does not match"),
        (dict(schedule=[[0.0, 1.0]], n_steps=None), "1-D"),
        (dict(schedule=[0.0, np.nan, 1.0], n_steps=None), "non-finite"),
        (dict(schedule="linear", n_steps=None), "n_steps"),
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


def test_calibrate_refuses_a_potential_likelihood_with_the_reason():
    # Before: "TypeError: sample_bdmc() got an unexpected keyword argument".
    with pm.Model() as model:
        p = pm.Beta("p", 1.0, 1.0)
        pm.Potential("lik", pm.logp(pm.Binomial.dist(10, p), 3))
    with pytest.raises(BDMCInputError, match="no simulator: bidirectional Monte Carlo"):
        pmb.calibrate(model=model, potentials_in_likelihood=True, progressbar=False)


def test_observations_given_as_an_expression_of_data_are_data():
    # PyMC casts float 0/1 outcomes in pm.Data to a Bernoulli's integers: the observed value is
    # an expression (refused by BDMC before). With a Beta(2, 3) prior the evidence is exact:
    # log B(2 + k, 3 + n - k) - log B(2, 3).
    from scipy.special import betaln

    outcomes = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    with pm.Model() as model:
        data = pm.Data("outcomes", outcomes)
        pm.Bernoulli("y", pm.Beta("p", 2.0, 3.0), observed=data)
    assert model.rvs_to_values[model["y"]].owner is not None  # the cast: an expression
    k, n = outcomes.sum(), outcomes.size
    exact = betaln(2 + k, 3 + n - k) - betaln(2, 3)
    with model:
        result = pmb.calibrate(random_seed=0, progressbar=False)
    assert result["calibration"].attrs["certified"]
    assert abs(float(result["evidence"]["lower"]) - exact) < 0.1
    # the user's data container is untouched
    np.testing.assert_array_equal(data.get_value(), outcomes)


# -- data given to a compiled density -------------------------------------------------------------


@pytest.fixture(scope="module")
def poisson_density():
    from pymc_bdmc.model.density import ModelDensity

    with pm.Model() as model:
        rate = pm.Gamma("rate", 2.0, 1.0)
        pm.Poisson("k", rate, observed=np.array([1, 0, 3]))
        d = pm.Data("d", np.zeros(2))
        pm.Normal("z", rate, 1.0, observed=d * 2.0)
    return ModelDensity(model)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"k": np.array([1, 2])}, "have shape \\(2,\\), but the model's data have shape \\(3,\\)"),
        ({"k": np.array([1.0, np.nan, 2.0])}, "non-finite"),
        ({"k": np.array([1.5, 0.0, 2.0])}, "not integers"),
        ({"kk": np.array([1, 2, 3])}, "not an observed variable"),
        ({"z": np.zeros(3)}, "have shape \\(3,\\), but the model's data have shape \\(2,\\)"),
    ],
    ids=["wrong shape", "NaN", "fractional counts", "unknown name", "expression, wrong shape"],
)
def test_set_observed_refuses_bad_data_and_changes_nothing(poisson_density, data, message):
    before = poisson_density.observed_data()
    x = np.zeros((1, poisson_density.n_dim))
    lik_before = poisson_density.parts(x).log_likelihood
    # a valid entry first: the refused call must not have applied it either
    with pytest.raises(BDMCInputError, match=message):
        poisson_density.set_observed({"k": np.array([5, 5, 5]), **data})
    np.testing.assert_array_equal(poisson_density.observed_data()["k"], before["k"])
    np.testing.assert_array_equal(poisson_density.parts(x).log_likelihood, lik_before)


def test_set_observed_replaces_data_given_as_an_expression(poisson_density):
    # z's data are 2 * d, an expression of data alone: it is data the densities can replace.
    x = np.zeros((1, poisson_density.n_dim))  # rate = 1 (log-transformed 0)
    before = poisson_density.observed_data()
    np.testing.assert_array_equal(before["z"], [0.0, 0.0])
    try:
        lik_at_zero = poisson_density.parts(x).log_likelihood
        poisson_density.set_observed({"z": np.array([1.0, 3.0])})
        # z ~ N(rate = 1, 1): moving the data from (0, 0) to (1, 3) changes the log-likelihood
        # by -(0 + 4) / 2 + (1 + 1) / 2
        np.testing.assert_allclose(poisson_density.parts(x).log_likelihood - lik_at_zero, -1.0)
    finally:
        poisson_density.set_observed(before)


def test_set_observed_accepts_integer_valued_floats(poisson_density):
    before = poisson_density.observed_data()
    try:
        poisson_density.set_observed({"k": np.array([2.0, 0.0, 1.0])})
        assert poisson_density.observed_data()["k"].dtype == before["k"].dtype
        np.testing.assert_array_equal(poisson_density.observed_data()["k"], [2, 0, 1])
    finally:
        poisson_density.set_observed(before)


def test_an_ordered_custom_dist_whose_draws_are_ordered_is_accepted():
    # Two sorted N(0, 1) draws have density 2 N(x1) N(x2) on x1 < x2: a normalised prior with an
    # exact sampler, so `transform=ordered` is right here. y ~ N(x1 + x2, 1) gives y ~ N(0, 3).
    from scipy.stats import norm

    def logp(value, mu):
        return pm.logp(pm.Normal.dist(mu, 1.0), value) + 0.5 * np.log(2.0)

    def random(mu, rng=None, size=None):
        return np.sort(rng.normal(mu, 1.0, size=(2,)))

    with pm.Model():
        x = pm.CustomDist("x", 0.0, logp=logp, random=random, shape=2, initval=[-0.5, 0.5],
                          transform=pm.distributions.transforms.ordered)
        pm.Normal("y", x.sum(), 1.0, observed=[0.3])
        result = pmb.sample_ais(n_steps=100, chains=16, random_seed=1, progressbar=False)
    # Seeds 1-3 gave errors of -0.003, +0.012 and +0.002 nats.
    assert float(result["evidence"]["lower"]) == pytest.approx(norm(0, np.sqrt(3)).logpdf(0.3),
                                                               abs=0.05)


def test_the_transitions_per_temperature_follow_the_paths_length_unless_given():
    from pymc_bdmc.pipeline.settings import validate

    def settings(tps, tuning=None):
        return validate(100, 32, "adaptive", None, tps, 0.9, 0.5, None, 0.95, tuning=tuning)

    default = settings(None)
    # 5 steps per squared length: a path of length 14 needs 980 steps, of 14.2 over 1000.
    assert [default.transitions_on(length) for length in (0.5, 14.0, 14.2, np.nan)] == [1, 1, 2, 2]
    assert settings(3).transitions_on(0.5) == 3
    assert settings(None, pmb.Tuning(short_path_transitions=4)).transitions_on(0.5) == 4
    for bad in (0, 1.5):
        with pytest.raises(BDMCInputError, match="short_path_transitions"):
            pmb.Tuning(short_path_transitions=bad)


@pytest.mark.parametrize("sampler", [pmb.sample_ais, pmb.sample_bdmc, pmb.sample_smc_evidence,
                                     pmb.sample_heldout_likelihood])
def test_a_model_in_the_first_positional_argument_is_refused_with_where_it_goes(sampler):
    # calibrate(model) takes the model first; these take n_steps (or params) first, and a model
    # given there was reported as "No model to run on".
    model = _plain_normal_model()
    with pytest.raises(BDMCInputError, match=r"A model was given as `(n_steps|params)`.*`model=`"):
        sampler(model, progressbar=False)


def test_no_model_says_how_to_give_one():
    with pytest.raises(BDMCInputError, match="No model to run on: call this inside `with"):
        pmb.sample_ais(**FAST)


def test_held_out_cases_with_every_variable_fixed_say_so_in_their_own_words():
    with pytest.raises(BDMCInputError, match="`params` fixes every free variable"):
        pmb.sample_heldout_likelihood({"mu": np.array(0.2)}, model=_plain_normal_model(),
                                      progressbar=False)
