"""Vectorized chromatic Gibbs updates of discrete variables (the HMC + Gibbs path)."""

import logging

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
import scipy.sparse as sp
from count_models import (
    binomial_count_evidence,
    binomial_count_model,
    latent_rate_evidence,
    latent_rate_model,
)
from scipy import stats
from scipy.special import gammaln, log_softmax, logsumexp

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.kernels.gibbs import ChromaticGibbs, OwnedTerms, _draw_shift
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.discrete import discrete_coordinates
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.testbed import binary_attributes
from pymc_bdmc.testbed.gibbs_models import CollapsedLinearGaussian

# As in test_step_methods: P(lower > log Z + b) < e^-b, so a correct sampler fails a side with
# probability < 0.1%; BOUND_TOL is the accuracy seen at these settings over scratch seeds.
RIGOROUS_SLACK = np.log(1000.0)
BOUND_TOL = 1.0


def _prior_points(model, density, n, seed=0):
    return ModelSimulator(model, density.layout).draw_prior(n, np.random.default_rng(seed))


def _gibbs_for(model, n_points=2):
    density = ModelDensity(model)
    coordinates = discrete_coordinates(model, density.layout)
    points = _prior_points(model, density, 8)
    return density, coordinates, ChromaticGibbs.build(coordinates, density.terms,
                                                      points[:n_points]), points


def _attributes_model(n_obs=6, n_attributes=3, n_dim=4):
    return binary_attributes(n_obs, n_dim, n_attributes=n_attributes, discrete=True, seed=2)


def _attributes():
    return _attributes_model().model


def _mixture_of_five():
    return known_evidence.categorical_mixture(n_obs=5, n_components=3, seed=4).model


def _switchpoint():
    return known_evidence.switchpoint_poisson(n_obs=12, seed=1).model


#: Counts of a Binomial whose number of trials n is unknown: impossible below n = 6.
BINOMIAL_COUNTS = np.array([5, 2, 2, 6, 5])


def _binomial_trials(counts=BINOMIAL_COUNTS):
    with pm.Model() as model:
        n = pm.DiscreteUniform("n", 0, 30)
        p = pm.Beta("p", 1, 1)
        pm.Binomial("y", n=n, p=p, observed=counts)
    return model


def _binomial_trials_evidence(counts) -> float:
    # p(y) = sum_n 1/31 int_0^1 prod_i Binomial(y_i; n, p) dp, by quadrature.
    from scipy import integrate, stats

    counts = np.asarray(counts)
    terms = [np.log(integrate.quad(lambda p, n=n: np.prod(stats.binom.pmf(counts, n, p)), 0, 1,
                                   epsabs=0, epsrel=1e-10, limit=200)[0]) - np.log(31)
             for n in range(int(counts.max()), 31)]
    return float(logsumexp(terms))


# Compiling a model's densities and simulator is most of what the tests below cost, and several
# of them check the same model: these module-scoped fixtures build and compile each one once.
@pytest.fixture(scope="module")
def gibbs_of():
    """``_gibbs_for(build())``, once per model builder."""
    built = {}

    def get(build):
        if build not in built:
            built[build] = _gibbs_for(build())
        return built[build]

    return get


@pytest.fixture(scope="module")
def attributes_3():
    return binary_attributes(5, 3, n_attributes=2, discrete=True, seed=3)


@pytest.fixture(scope="module")
def mixture_of_six():
    return known_evidence.categorical_mixture(n_obs=6, n_components=3, seed=1)


@pytest.fixture(scope="module")
def attributes_4():
    return binary_attributes(5, 3, n_attributes=2, discrete=True, seed=4)


# -- supports ----------------------------------------------------------------------------------
def test_supports_of_finite_discrete_distributions():
    with pm.Model() as model:
        p = pm.Beta("p", 2, 2)
        pm.Bernoulli("z", p, shape=2)
        pm.Categorical("c", p=np.ones(4) / 4)
        pm.DiscreteUniform("d", -1, np.array([1, 3]))
        pm.Binomial("b", 5, 0.3)
        pm.Normal("y", 0, 1, observed=[0.0])
    density = ModelDensity(model)
    coords = discrete_coordinates(model, density.layout)
    assert coords.names == ("z", "c", "d", "b")
    np.testing.assert_array_equal(coords.lower, [0, 0, 0, -1, -1, 0])
    np.testing.assert_array_equal(coords.size, [2, 2, 4, 3, 5, 6])
    np.testing.assert_array_equal(density.layout.to_point(np.arange(9.0))["d"], [4, 5])
    assert all(density.layout.is_discrete(n) for n in coords.names)
    assert coords.index.tolist() == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("make, least", [
    (lambda: pm.Poisson("k", 3.0), 0.0),
    (lambda: pm.DiscreteUniform("k", 0, pm.DiscreteUniform("top", 1, 3)), 0.0),
    (lambda: pm.Binomial("k", 500, 0.1), 0.0),
    (lambda: pm.Geometric("k", 0.3), 1.0),
    # A pm.Truncated count gives no parameters to read (it raised ValueError here): its least
    # value is not known, so it never shares a color with another window count.
    (lambda: pm.Truncated("k", pm.Poisson.dist(3.0), lower=1), -np.inf),
    (lambda: pm.ZeroInflatedPoisson("k", 0.5, 3.0), -np.inf),
], ids=["unbounded", "random-bound", "too-wide", "geometric", "truncated", "zero-inflated"])
def test_coordinates_without_a_fixed_small_support_are_drawn_from_windows(make, least):
    from pymc_bdmc.model.discrete import WINDOW

    with pm.Model() as model:
        make()
        pm.Normal("y", 0, 1, observed=[0.0])
    coords = discrete_coordinates(model, ModelDensity(model).layout)
    k = coords.names.index("k")
    assert coords.window[k] and coords.size[k] == WINDOW and coords.lower[k] == least


def _poisson_window_model():
    # k ~ Poisson(lam), lam ~ Gamma: k's support is unbounded, so it is a window coordinate.
    with pm.Model() as model:
        lam = pm.Gamma("lam", 2.0, 0.5)
        k = pm.Poisson("k", lam, shape=2)
        pm.Normal("y", k, 1.5, observed=[[3.0, 5.0], [4.0, 6.0]])
    return model


@pytest.mark.parametrize("beta", [0.0, 0.6])
def test_window_conditionals_are_the_model_density_over_the_window(beta):
    density, _, gibbs, points = _gibbs_for(_poisson_window_model())
    (color,) = gibbs.colors
    assert color.window.all() and not gibbs.fusable
    x = points[2:6]
    offsets = np.random.default_rng(3).integers(0, color.size[0], (len(x), len(color.coords)))
    lower = color.lower_at(x[:, color.coords], offsets)
    logits = ChromaticGibbs.conditional_logits(color, x, beta, density.terms, lower)
    for j, coord in enumerate(color.coords):
        for k in range(len(x)):
            values = lower[k, j] + np.mod(x[k, coord] - lower[k, j] + np.arange(color.size[j]),
                                          color.size[j])
            rows = np.repeat(x[k:k + 1], color.size[j], axis=0)
            rows[:, coord] = values
            exact = density.parts(rows).tempered_logp(beta)
            finite = np.isfinite(exact)  # values below 0 are impossible
            np.testing.assert_array_equal(np.isfinite(logits[: color.size[j], k, j]), finite)
            np.testing.assert_allclose(log_softmax(logits[: color.size[j], k, j])[finite],
                                       log_softmax(exact)[finite], rtol=1e-10, atol=1e-10)


def test_window_sweeps_leave_the_tempered_posterior_invariant():
    # One count, lam fixed by the point: the exact conditional of k at beta 0.6 over 0..60,
    # against 4000 chains started at one value after 40 window sweeps (forward and reversed).
    density, _, gibbs, points = _gibbs_for(_poisson_window_model())
    beta, coord = 0.6, gibbs.colors[0].coords[0]
    x = np.repeat(points[:1], 4000, axis=0)
    rng = np.random.default_rng(8)
    for i in range(40):
        x, _ = gibbs.sweep(rng, x, beta, density.terms, reverse=bool(i % 2))
    values = np.arange(61.0)
    rows = np.repeat(points[:1], len(values), axis=0)
    rows[:, coord] = values
    exact = np.exp(log_softmax(density.parts(rows).tempered_logp(beta)))
    seen = np.array([np.mean(x[:, coord] == v) for v in values])
    # 4000 draws: 4 standard errors of the largest cell is under 0.032.
    np.testing.assert_allclose(seen, exact, atol=0.032)


# -- dependencies and colors -------------------------------------------------------------------
def test_elementwise_terms_add_up_to_the_densities(gibbs_of):
    density, _, _, points = gibbs_of(_attributes)
    prior, lik = density.terms(points)
    parts = density.parts(points)
    np.testing.assert_allclose(prior.sum(1), parts.log_prior, rtol=1e-12)
    np.testing.assert_allclose(lik.sum(1), parts.log_likelihood, rtol=1e-12)


def test_rows_of_binary_attributes_are_one_color_per_attribute(gibbs_of):
    # Given A, the rows of Z are independent; the attributes of one row are not.
    _, coordinates, gibbs, _ = gibbs_of(_attributes)  # 6 rows, 3 attributes
    assert len(gibbs.colors) == 3 and gibbs.n_coordinates == 18
    for color in gibbs.colors:  # Z is (rows, attributes), row-major in the flat vector
        rows, attributes = np.divmod(color.coords - coordinates.index[0], 3)
        assert len(set(attributes.tolist())) == 1 and sorted(rows.tolist()) == list(range(6))


def test_a_markov_chain_of_binaries_is_colored_like_a_checkerboard():
    with pm.Model() as model:
        z = pm.Bernoulli("z", 0.5, shape=7)
        coupling = pt.sum(pt.eq(z[1:], z[:-1]))  # neighbours like to agree
        pm.Potential("ising", 0.8 * coupling)
        pm.Normal("y", pt.sum(z), 1, observed=[3.0])
    density = ModelDensity(model, potentials_in_likelihood=True)
    coordinates = discrete_coordinates(model, density.layout)
    points = np.array([density.layout.ravel({"z": v})
                       for v in ([0, 1, 0, 1, 1, 0, 0], [1, 1, 0, 0, 1, 0, 1])])
    gibbs = ChromaticGibbs.build(coordinates, density.terms, points)
    # The Potential is one scalar term touched by every z: no two z are independent.
    assert len(gibbs.colors) == 7


def test_independent_coordinates_share_one_color():
    with pm.Model() as model:
        z = pm.Categorical("z", p=[0.2, 0.5, 0.3], shape=5)
        pm.Normal("y", pt.cast(z, "float64"), 1, observed=np.arange(5.0))
    _, _, gibbs, _ = _gibbs_for(model)
    assert len(gibbs.colors) == 1 and gibbs.evaluations_per_sweep == 1


# -- exactness of the conditionals -------------------------------------------------------------
@pytest.mark.parametrize("beta", [0.0, 0.37, 1.0])
@pytest.mark.parametrize("build", [_mixture_of_five, _switchpoint, _binomial_trials])
def test_conditionals_equal_brute_force(beta, build, gibbs_of):
    # A switchpoint's move changes only the terms of the times it crosses: every value of its
    # support must be tried to find all the terms it touches.
    density, _, gibbs, points = gibbs_of(build)
    x = points[2:6]
    for color in gibbs.colors:
        logits = ChromaticGibbs.conditional_logits(color, x, beta, density.terms)
        for j, coord in enumerate(color.coords):
            for k in range(len(x)):
                values = color.lower[j] + np.mod(x[k, coord] - color.lower[j]
                                                 + np.arange(color.size[j]), color.size[j])
                rows = np.repeat(x[k:k + 1], color.size[j], axis=0)
                rows[:, coord] = values
                exact = density.parts(rows).tempered_logp(beta)
                np.testing.assert_allclose(log_softmax(logits[: color.size[j], k, j]),
                                           log_softmax(exact), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("fused", [False, True])
def test_a_discrete_count_below_the_data_gets_zero_weight_not_a_refusal(fused):
    # n below a count makes the data impossible. At beta = 0 the conditional was prior + 0 *
    # -inf = NaN there, so the check against the model's conditionals refused the model.
    # Monte Carlo tolerance: on seeds 0-5 (64 chains, 200 steps) AIS was within 0.20 of the
    # exact evidence; BDMC's bounds within 0.73 (seed 0) and 0.11 (seed 2, here: 0.03, 0.09).
    with _binomial_trials():
        ais = pmb.sample_ais(n_steps=200, chains=64, random_seed=2, progressbar=False,
                             fused_kernel=fused)
        bdmc = pmb.sample_bdmc(n_steps=200, chains=64, random_seed=2, progressbar=False,
                               fused_kernel=fused)
    assert ais["evidence"].attrs["kernel"] == "hmc+gibbs"
    assert float(ais["evidence"]["lower"]) == pytest.approx(
        _binomial_trials_evidence(BINOMIAL_COUNTS), abs=0.3)
    simulated = _binomial_trials_evidence(bdmc["observed_data"]["y"].values)
    assert float(bdmc["evidence"]["lower"]) == pytest.approx(simulated, abs=0.3)
    assert -0.3 < float(bdmc["evidence"]["upper"]) - simulated < 0.5


def test_the_upper_bound_counts_the_prior_mass_where_the_data_are_impossible():
    # Seed 0 simulates counts that 24 of 32 prior draws of n make impossible. Reverse chains
    # never reach that prior mass, so without a correction the upper bound sat about
    # log(32 / 8) above log p(y*) at any length; before that the search doubled to 59500 steps
    # (78 s) at a gap of 1.5. The mass where the data are possible is now estimated from prior
    # draws of a stream of its own and taken out of the upper bound.
    with _binomial_trials():
        result = pmb.sample_bdmc(random_seed=0, progressbar=False)
    evidence = result["evidence"]
    simulated = _binomial_trials_evidence(result["observed_data"]["y"].values)
    assert 0.1 < evidence.attrs["possible_start_mass"] < 0.5
    assert evidence.attrs["certified"] == 1
    assert abs(float(evidence["upper"]) - simulated) < 0.3
    assert int(evidence["n_divergent_forward"]) == 0  # those chains' rejected moves


def test_the_search_stops_where_impossible_starts_floor_the_gap(caplog, monkeypatch):
    # Where the possible mass cannot be estimated (fewer possible draws than asked for within
    # the draws allowed, here by construction), the floor stays, and the search stops at once.
    import pymc_bdmc.pipeline.draws as draws

    monkeypatch.setattr(draws, "MAX_POSSIBLE_DRAWS", 1024)
    monkeypatch.setattr(draws, "POSSIBLE_DRAWS", 4096)
    with _binomial_trials(), caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(random_seed=0, progressbar=False)
    evidence = result["evidence"]
    assert evidence.attrs["certified"] == 0 and len(evidence.attrs["auto_n_steps"]) == 1
    assert "possible_start_mass_below" in evidence.attrs
    assert "24 of 32 forward chains started where the simulated data are impossible" in (
        evidence.attrs["auto_stop"])
    assert "no run length removes" in caplog.text and "reparameteris" not in caplog.text


def test_owned_term_sums_match_a_dense_product_with_empty_coordinates():
    # Coordinates 0 and 3 touch no term (3 is last, so its group start is past the end).
    owner = np.zeros((4, 7))
    owner[1, [0, 4]] = 1.0
    owner[2, [1, 2, 6]] = 1.0
    terms = np.random.default_rng(0).normal(size=(5, 7))
    sums = OwnedTerms.from_touched(sp.csr_matrix(owner)).sums(terms)
    np.testing.assert_allclose(sums, terms @ owner.T, rtol=1e-14, atol=1e-14)
    nothing = OwnedTerms.from_touched(sp.csr_matrix((3, 7)))
    np.testing.assert_array_equal(nothing.sums(terms), np.zeros((5, 3)))


def test_draws_follow_the_softmax():
    # Evenly spaced uniforms through the inverse CDF reproduce the probabilities.
    n = 10_000
    with np.errstate(divide="ignore"):
        logits = np.log(np.array([0.2, 0.0, 0.5, 0.3])) + 7.0  # any constant
    shifts = _draw_shift(np.broadcast_to(logits[:, None, None], (4, n, 1)),
                         np.linspace(0, 1, n, endpoint=False)[:, None])
    counts = np.bincount(shifts.ravel(), minlength=4) / n
    np.testing.assert_allclose(counts, [0.2, 0.0, 0.5, 0.3], atol=1e-4)
    # No finite logit (an impossible state): stay put.
    assert _draw_shift(np.full((3, 1, 1), -np.inf), np.array([[0.5]]))[0, 0] == 0


def test_sweep_leaves_the_tempered_posterior_invariant():
    # Z given A: exact posterior over the 2**3 patterns of row 0, against long-run frequencies.
    problem = _attributes_model(n_obs=4, n_attributes=3)
    density, _, gibbs, points = _gibbs_for(problem.model)
    beta = 0.6
    x = np.repeat(points[:1], 4000, axis=0)
    rng = np.random.default_rng(5)
    for i in range(6):
        x, _ = gibbs.sweep(rng, x, beta, density.terms, reverse=bool(i % 2))
    z = density.layout.unravel(x)["Z"][:, 0, :]
    patterns = np.array(np.meshgrid(*[[0, 1]] * 3, indexing="ij")).reshape(3, -1).T
    rows = np.repeat(points[:1], len(patterns), axis=0)
    z_slice = density.layout.slices[density.layout.names.index("Z")]
    rows[:, z_slice.start:z_slice.start + 3] = patterns
    exact = np.exp(log_softmax(density.parts(rows).tempered_logp(beta)))
    seen = np.array([np.mean(np.all(z == p, axis=1)) for p in patterns])
    # 4000 exact draws: 4 standard errors of the largest cell is under 0.032.
    np.testing.assert_allclose(seen, exact, atol=0.032)


# -- the compiled color update -----------------------------------------------------------------
def _mixed_supports_model():
    # One color holding supports of 2, 3 and 4 values (narrower ones padded in the update).
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0, shape=3)
        b = pm.Bernoulli("b", 0.3, shape=2)
        c = pm.Categorical("c", [0.2, 0.5, 0.3])
        u = pm.DiscreteUniform("u", 1, 4)
        pm.Normal("y_b", mu[0] * b, 1.0, observed=[0.5, -1.0])
        pm.Normal("y_c", mu[1] + c, 1.0, observed=1.5)
        pm.Normal("y_u", mu[2] * u, 1.0, observed=[2.0, 3.0])
    return model


@pytest.mark.parametrize("make", [
    _mixed_supports_model,
    _mixture_of_five,
    _attributes,
], ids=["mixed supports", "categorical mixture", "binary attributes"])
def test_compiled_color_updates_make_the_numpy_sweeps_draws(make, gibbs_of):
    density, _, gibbs, points = gibbs_of(make)
    assert gibbs.fusable
    update = density.fused_gibbs(gibbs.max_size)
    assert update is not None and density.fused_gibbs(gibbs.max_size) is update  # compiled once
    x = np.repeat(points[2:6], 3, axis=0)
    for beta in (0.0, 0.4, 1.0):
        for reverse in (False, True):
            numpy_x, numpy_moved = gibbs.sweep(np.random.default_rng(3), x, beta, density.terms,
                                               reverse)
            fused_x, fused_moved = gibbs.sweep(np.random.default_rng(3), x, beta, density.terms,
                                               reverse, update)
            np.testing.assert_array_equal(fused_x, numpy_x)
            np.testing.assert_array_equal(fused_moved, numpy_moved)
            assert numpy_moved.any()  # the comparison covers actual moves
    # Outputs are fresh arrays: a later call does not overwrite an earlier result.
    first = update(gibbs.colors[0], x, 1.0, np.full((len(x), len(gibbs.colors[0].coords)), 0.5))
    kept = first.copy()
    update(gibbs.colors[0], x, 1.0, np.full((len(x), len(gibbs.colors[0].coords)), 0.99))
    np.testing.assert_array_equal(first, kept)


def test_unbalanced_colors_keep_the_numpy_update():
    # One coordinate touching 40 terms, nine touching one each: a rectangle of 10 x 40 terms
    # would be mostly padding.
    with pm.Model() as model:
        a = pm.Bernoulli("a", 0.5)
        b = pm.Bernoulli("b", 0.5, shape=9)
        pm.Normal("y_a", a, 1.0, observed=np.linspace(-1, 1, 40))
        pm.Normal("y_b", b, 1.0, observed=np.full(9, 0.3))
    _, _, gibbs, _ = _gibbs_for(model)
    assert len(gibbs.colors) == 1 and not gibbs.fusable


def test_fused_and_numpy_kernels_give_the_same_bounds_on_a_discrete_model(attributes_3):
    problem = attributes_3
    runs = []
    for fused in (False, True):
        with problem.model:
            runs.append(pmb.sample_bdmc(n_steps=40, chains=8, random_seed=5, progressbar=False,
                                        fused_kernel=fused))
    assert runs[1]["evidence"].attrs["gibbs_compiled"]
    assert not runs[0]["evidence"].attrs["gibbs_compiled"]
    for bound in ("lower", "upper"):
        np.testing.assert_allclose(float(runs[1]["evidence"][bound]),
                                   float(runs[0]["evidence"][bound]), rtol=1e-9)


# -- the sampler -------------------------------------------------------------------------------
def _collapsed_log_evidence(problem, result):
    info = problem.info
    y = result["observed_data"]["y"].values
    return CollapsedLinearGaussian(y, info["sigma_a"], info["sigma_noise"],
                                   info["n_attributes"], "binary",
                                   p_attribute=info["p_attribute"]).log_evidence_enumerated()


def _assert_sandwich(lower, truth, upper):
    assert lower - RIGOROUS_SLACK <= truth <= upper + RIGOROUS_SLACK, (lower, truth, upper)
    assert abs(lower - truth) < BOUND_TOL and abs(upper - truth) < BOUND_TOL, (lower, truth,
                                                                                upper)


def test_binary_attributes_sandwich_encloses_enumerated_evidence(attributes_3):
    problem = attributes_3
    with problem.model:
        result = pmb.sample_bdmc(n_steps=200, chains=16, random_seed=7, progressbar=False)
    ev = result["evidence"]
    assert ev.attrs["kernel"] == "hmc+gibbs" and ev.attrs["gibbs_colors"] == 2
    _assert_sandwich(float(ev.lower), _collapsed_log_evidence(problem, result), float(ev.upper))


@pytest.mark.parametrize("method, settings", [
    ("ais", dict(n_steps=150, chains=16, random_seed=11)),
    ("smc", dict(n_steps=30, particles=64, random_seed=3)),
])
def test_categorical_mixture_sandwich_encloses_enumerated_evidence(method, settings,
                                                                  mixture_of_six):
    problem = mixture_of_six
    with problem.model:
        result = pmb.sample_bdmc(method=method, progressbar=False, **settings)
    ev = result["evidence"]
    assert ev.attrs["kernel"] == "hmc+gibbs"
    _assert_sandwich(float(ev.lower), problem.log_evidence_of(result), float(ev.upper))


def test_a_switchpoint_model_gets_its_exact_evidence_at_the_defaults():
    # PyMC's coal-mining example. Its Gibbs kernel once summed only the terms of the few times
    # a single probe shift crossed, sampled another distribution and put the lower bound 13
    # nats under the exact value at 60 counts, however long the run.
    problem = known_evidence.switchpoint_poisson(n_obs=40, seed=3)
    with problem.model:
        bdmc = pmb.sample_bdmc(random_seed=1, progressbar=False)["evidence"]
        ais = pmb.sample_ais(random_seed=2, progressbar=False)
    assert ais["evidence"].attrs["kernel"] == "hmc+gibbs"
    _assert_sandwich(float(bdmc.lower), problem.log_evidence_of(bdmc.parent),
                     float(bdmc.upper))
    truth, lower = problem.log_evidence(), float(ais["evidence"].lower)
    assert lower - RIGOROUS_SLACK <= truth and abs(lower - truth) < BOUND_TOL, (lower, truth)


def test_a_coordinate_whose_terms_the_probes_missed_is_drawn_from_every_term(gibbs_of):
    from pymc_bdmc.pipeline.discrete import differing_conditionals

    density, coordinates, gibbs, points = gibbs_of(_switchpoint)
    assert differing_conditionals(gibbs, density, points[2:8]).size == 0

    def blind_after_time_4(x):  # terms of times 5 and later look fixed to the probe
        prior, lik = density.terms(x)
        lik = lik.copy()
        lik[:, 5:] = density.terms(points[:1])[1][:, 5:]
        return prior, lik

    blind = ChromaticGibbs.build(coordinates, blind_after_time_4, points[:2])
    np.testing.assert_array_equal(differing_conditionals(blind, density, points[2:8]),
                                  coordinates.index)
    every = ChromaticGibbs.build(coordinates, blind_after_time_4, points[:2],
                                 touch_all=coordinates.index)
    assert differing_conditionals(every, density, points[2:8]).size == 0


def _n_mixture():
    # Three sites' abundances N_i ~ Poisson(6), each seen twice: y_ij ~ Binomial(N_i, 0.5).
    with pm.Model() as model:
        pm.Binomial("y", n=pm.Poisson("N", 6.0, shape=3)[:, None], p=0.5,
                    observed=np.array([[3, 4], [5, 2], [6, 6]]))
    return model


def test_states_where_other_sites_make_the_data_impossible_do_not_split_the_colors():
    # The check compares each conditional with the model's density at states that other
    # coordinates can make impossible (N_1 below 5): there the model is -inf at every value of
    # N_0, and such a state says nothing about N_0's conditional. Counted as a difference, it
    # gave the N-mixture's independent sites a color each (6 term evaluations a sweep, not 1).
    from pymc_bdmc.pipeline.discrete import differing_conditionals

    density, coordinates, gibbs, _ = _gibbs_for(_n_mixture())
    states = np.array([[2.0, 1.0, 6.0], [7.0, 8.0, 9.0], [0.0, 5.0, 7.0]])
    assert np.isneginf(density.parts(states[[0, 2]]).log_likelihood).all()
    assert len(gibbs.colors) == 1
    assert differing_conditionals(gibbs, density, states).size == 0
    # A term the kernel misses is still caught at the states where the data are possible.
    def blind_to_site_0(x):
        prior, lik = density.terms(x)
        lik = lik.copy()
        lik[:, :2] = density.terms(states[1:2])[1][:, :2]
        return prior, lik

    blind = ChromaticGibbs.build(coordinates, blind_to_site_0, states[1:2])
    assert 0 in differing_conditionals(blind, density, states)


def test_one_color_of_window_counts_keeps_their_exact_conditional():
    # The three sites' counts are one color. A window reaching below 0 once put a negative count
    # into the Binomial's trials, which fails PyMC's parameter check for every element: the
    # other sites' values in that row were -inf too, and the counts drifted down (means 0.46 to
    # 0.57 under the exact ones after 10 sweeps, 50 standard errors; BDMC's bounds on a 6-site
    # N-mixture were both 4.6 nats above the exact evidence, and certified).
    model = _n_mixture()
    density, _, gibbs, _ = _gibbs_for(model)
    assert len(gibbs.colors) == 1 and gibbs.colors[0].window.all()
    np.testing.assert_array_equal(gibbs.colors[0].lower, 0.0)  # a Poisson's least value
    y = np.array([[3, 4], [5, 2], [6, 6]])  # _n_mixture's counts
    n = np.arange(120)
    log_post = (stats.poisson.logpmf(n, 6.0)[None, :]
                + stats.binom.logpmf(y[:, :, None], n, 0.5).sum(axis=1))
    post = np.exp(log_post - logsumexp(log_post, axis=1, keepdims=True))
    rng = np.random.default_rng(0)
    chains = 20000
    x = np.stack([rng.choice(n.size, size=chains, p=p) for p in post], axis=1).astype(float)
    for _ in range(10):
        x, _ = gibbs.sweep(rng, x, 1.0, density.terms)
    exact = post @ n
    se = x.std(axis=0) / np.sqrt(chains)
    assert np.all(np.abs(x.mean(axis=0) - exact) < 4 * se), (x.mean(axis=0) - exact, se)


def test_latent_counts_as_another_likelihoods_rate_get_their_exact_evidence():
    # With one color and windows reaching below 0, AIS was 0.92 to 1.04 nats above the exact
    # evidence on seeds 0-2, and BDMC's sandwich on seed 2 lay 2.3 to 2.9 nats below it. Monte
    # Carlo tolerance: on seeds 0-3 (64 chains, 100 steps) AIS was within 0.08 of it, BDMC's
    # bounds within 0.36.
    with latent_rate_model():
        ais = pmb.sample_ais(n_steps=100, chains=64, random_seed=0, progressbar=False)
        bdmc = pmb.sample_bdmc(n_steps=100, chains=64, random_seed=2, progressbar=False)
    assert ais["evidence"].attrs["gibbs_colors"] == 1
    assert float(ais["evidence"]["lower"]) == pytest.approx(latent_rate_evidence(), abs=0.25)
    simulated = latent_rate_evidence(bdmc["observed_data"]["y"].values)
    assert float(bdmc["evidence"]["lower"]) == pytest.approx(simulated, abs=0.3)
    assert float(bdmc["evidence"]["upper"]) == pytest.approx(simulated, abs=0.4)


def test_window_counts_below_a_support_it_does_not_know_get_colors_of_their_own(monkeypatch):
    # Where the support's least value is unknown, a window's values below it are evaluated, and
    # could make the other sites' terms -inf: each site's conditional then comes from every
    # term, in a color of its own. The check, with windows up to the current values, sees the
    # poisoned terms of the site above the others.
    from pymc_bdmc.model import discrete as discrete_module
    from pymc_bdmc.pipeline.discrete import differing_conditionals, gibbs_kernel

    monkeypatch.setattr(discrete_module, "_LEAST_VALUE", {})
    model = _n_mixture()
    density, _, gibbs, points = _gibbs_for(model)
    assert len(gibbs.colors) == 1 and np.all(gibbs.colors[0].lower == -np.inf)
    states = np.array([[7.0, 8.0, 9.0], [6.0, 5.0, 12.0]])
    np.testing.assert_array_equal(differing_conditionals(gibbs, density, states), [2])
    split = gibbs_kernel(density, points)
    assert len(split.colors) == 3
    assert differing_conditionals(split, density, states).size == 0


def test_a_flagged_window_count_splits_every_window_count_of_its_color():
    # The flagged count may be the victim of another's value (N_k / 20 above 1 as a Binomial's
    # p fails the check for every element), which the check sees only at some states.
    from pymc_bdmc.pipeline.discrete import with_color_windows

    _, _, gibbs, _ = _gibbs_for(_n_mixture())
    np.testing.assert_array_equal(with_color_windows(gibbs, np.array([1])), [0, 1, 2])
    np.testing.assert_array_equal(with_color_windows(gibbs, np.zeros(0, dtype=int)), [])


def test_nested_switchpoints_get_their_exact_evidence():
    # The second switchpoint moves the terms after the first only: at the probes' value of the
    # first, the terms before it look untouched. Its conditional is caught at other prior draws
    # and drawn from every term instead.
    n = 24
    times = np.arange(n)
    y = np.random.default_rng(0).poisson(np.where(times <= 8, 4.0, np.where(times <= 16, 1.0,
                                                                            3.0)))
    with pm.Model():
        first = pm.DiscreteUniform("first", 0, n - 1)
        second = pm.DiscreteUniform("second", 0, n - 1)
        rates = pm.Exponential("rates", 1.0, shape=3)
        pm.Poisson("y", pm.math.switch(first >= times, rates[0],
                                       pm.math.switch(second >= times, rates[1], rates[2])),
                   observed=y)
        result = pmb.sample_ais(n_steps=400, random_seed=3, progressbar=False)

    def segment(counts):  # an Exponential(1) rate integrated against these counts
        return gammaln(counts.sum() + 1) - (counts.sum() + 1) * np.log(len(counts) + 1.0)

    truth = logsumexp([
        segment(y[times <= a]) + segment(y[(times > a) & (times <= b)])
        + segment(y[(times > a) & (times > b)]) for a in range(n) for b in range(n)
    ]) - 2 * np.log(n) - gammaln(y + 1).sum()
    lower = float(result["evidence"].lower)
    assert lower - RIGOROUS_SLACK <= truth and abs(lower - truth) < BOUND_TOL, (lower, truth)


def test_ais_on_real_data_matches_enumeration(attributes_4):
    problem = attributes_4
    with problem.model:
        result = pmb.sample_ais(n_steps=200, chains=32, random_seed=2, progressbar=False)
    truth = _collapsed_log_evidence(problem, result)
    lower = float(result["evidence"].lower)
    assert lower - RIGOROUS_SLACK <= truth and abs(lower - truth) < BOUND_TOL, (lower, truth)
    # The discrete posterior draws are integers of the model's dtype.
    z = result["posterior"]["Z"].values
    assert np.issubdtype(z.dtype, np.integer) and set(np.unique(z)) <= {0, 1}


@pytest.mark.parametrize("window", [False, True], ids=["enumerated", "window"])
def test_same_seed_same_numbers_in_batches(window, attributes_3):
    # The window offsets are drawn from each chain's own stream, as the uniforms are.
    model = _poisson_window_model() if window else attributes_3.model
    runs = []
    for batch in (None, 8):
        with model:
            runs.append(pmb.sample_ais(n_steps=30, chains=16, random_seed=4, progressbar=False,
                                       chains_per_batch=batch))
    np.testing.assert_allclose(runs[0]["sample_stats"]["log_weight"].values,
                               runs[1]["sample_stats"]["log_weight"].values, rtol=1e-10)


# -- routing and refusals ----------------------------------------------------------------------
def test_an_uncertified_discrete_model_is_told_to_sum_its_counts_out(caplog):
    # The remedy for a gap that does not shrink: for Gibbs and HMC in turn, marginalising the
    # discrete variables, not a reparameterisation (which is about funnels).
    with binomial_count_model(), caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(random_seed=0, target_gap=1e-4, max_time=2.0,
                                 progressbar=False)
    assert result["evidence"].attrs["certified"] == 0
    assert "summing the discrete variables out of the likelihood" in caplog.text
    assert "non-centred for a funnel" not in caplog.text


def test_a_latent_count_runs_on_the_window_kernel_with_its_exact_evidence():
    # N ~ Poisson(5), p ~ Beta(2, 2), y ~ Binomial(N, p) (tests/test_step_methods.py runs it with
    # PyMC's steps). Monte Carlo tolerance: on seeds 0-5 (64 chains, 100 steps) AIS and BDMC's
    # bounds were within 0.08 of the exact evidence (chains whose N makes the data impossible
    # start where they are possible, and both bounds take out that prior mass).
    with binomial_count_model():
        ais = pmb.sample_ais(n_steps=100, chains=64, random_seed=2, progressbar=False)
        bdmc = pmb.sample_bdmc(n_steps=100, chains=64, random_seed=2, progressbar=False)
    assert ais["evidence"].attrs["kernel"] == "hmc+gibbs" and "step_methods" not in ais.children
    assert float(ais["evidence"]["lower"]) == pytest.approx(
        binomial_count_evidence([2, 4]), abs=0.25)
    simulated = binomial_count_evidence(bdmc["observed_data"]["y"].values)
    assert float(bdmc["evidence"]["lower"]) == pytest.approx(simulated, abs=0.25)
    assert -0.25 < float(bdmc["evidence"]["upper"]) - simulated < 0.6


def test_given_step_methods_are_used_for_finite_discrete_variables():
    problem = known_evidence.categorical_mixture(n_obs=4, n_components=2, seed=1)
    m = problem.model
    with m:
        result = pmb.sample_ais(n_steps=10, chains=2, random_seed=1, progressbar=False,
                                step=pm.CategoricalGibbsMetropolis([m["z"]]))
    assert "step_methods" in result.children


def test_smc_evidence_on_real_data_with_discrete_variables_matches_enumeration(attributes_4):
    problem = attributes_4
    with problem.model:
        result = pmb.sample_smc_evidence(n_steps=30, particles=64, random_seed=2,
                                         progressbar=False)
    truth = _collapsed_log_evidence(problem, result)
    lower = float(result["evidence"].lower)
    assert lower - RIGOROUS_SLACK <= truth and abs(lower - truth) < BOUND_TOL, (lower, truth)


def test_smc_refuses_data_tempering_and_step_methods_for_discrete_models_before_sampling():
    problem = binary_attributes(4, 2, n_attributes=2, discrete=True)
    with problem.model, pytest.raises(pmb.BDMCInputError, match="path='tempering'"):
        pmb.sample_bdmc(method="smc", path="data", n_steps=5, progressbar=False)
    with problem.model, pytest.raises(pmb.BDMCInputError, match="path='tempering'"):
        pmb.sample_smc_evidence(path="data", n_steps=5, progressbar=False)
    with problem.model, pytest.raises(pmb.BDMCInputError, match="method='ais'"):
        pmb.sample_bdmc(method="smc", n_steps=5, progressbar=False,
                        step=pm.BinaryGibbsMetropolis([problem.model["Z"]]))


def test_plan_is_reused_on_a_discrete_model(attributes_3):
    problem = attributes_3
    with problem.model:
        first = pmb.sample_ais(n_steps=20, chains=8, random_seed=1, progressbar=False)
        plan = pmb.AnnealingPlan.from_result(first)
        again = pmb.sample_ais(plan=plan, chains=8, random_seed=1, progressbar=False)
    # Layout: A (2 x 3) then Z (5 x 2). The plan pins Z: HMC never moves a discrete coordinate.
    assert np.all(plan.inv_mass[1:, 6:] == 0) and np.all(plan.inv_mass[1:, :6] > 0)
    np.testing.assert_allclose(again["evidence"].lower, first["evidence"].lower, rtol=1e-10)


# -- where a step's sweep goes -----------------------------------------------------------------
def _pinned_plan(gibbs, n_dim, transitions_per_step, n_leapfrog=3, n_steps=6):
    inv_mass = np.ones((n_steps + 1, n_dim))
    inv_mass[:, gibbs.pinned] = 0.0
    return pmb.AnnealingPlan(betas=np.linspace(0.0, 1.0, n_steps + 1),
                             step_size=np.full(n_steps + 1, 0.05), inv_mass=inv_mass,
                             n_leapfrog=n_leapfrog, jitter=0.0,
                             transitions_per_step=transitions_per_step)


@pytest.mark.parametrize("transitions_per_step, n_leapfrog, between", [
    (1, 3, True),     # a 12-value sweep costs more than a 3-step transition: HMC, sweep, HMC
    (1, 12, False),   # it costs less than a 12-step one: sweep, HMC, reversed sweep
    (2, 12, True),    # an even number of transitions surrounds it at no extra cost
])
def test_a_one_color_sweep_goes_between_transitions_where_that_is_cheaper(
        transitions_per_step, n_leapfrog, between, gibbs_of, monkeypatch):
    from pymc_bdmc.algorithms.ais import ais_forward
    from pymc_bdmc.kernels import plan as plan_module
    from pymc_bdmc.pipeline.execution import count_sweeps, count_transitions

    density, _, gibbs, points = gibbs_of(_switchpoint)
    assert gibbs.reversible and gibbs.states_per_sweep == 12
    plan = _pinned_plan(gibbs, points.shape[1], transitions_per_step, n_leapfrog)
    assert plan.sweep_between_transitions(gibbs) == between
    transitions = []
    hmc_step = plan_module.hmc_step
    monkeypatch.setattr(plan_module, "hmc_step",
                        lambda *a, **k: transitions.append(1) or hmc_step(*a, **k))
    terms_before = density.n_term_evaluations
    x = points[:4]
    ais_forward(np.random.default_rng(0), x, density.parts(x), plan.betas,
                plan.transition(density.parts, discrete=gibbs.bound_to(density.terms)))
    # The counts the sampler reports (and chooses workers on) are the calls made; ais_forward
    # makes n_steps - 1 transitions, the counts are per n_steps.
    n_transitions = count_transitions(plan, 1, 0, gibbs)
    per_step = n_transitions // plan.n_steps
    assert per_step == transitions_per_step + (between and transitions_per_step % 2)
    assert len(transitions) == per_step * (plan.n_steps - 1)
    sweeps = density.n_term_evaluations - terms_before  # one terms call per color and sweep
    assert sweeps == count_sweeps(plan, 1, 0, gibbs) // plan.n_steps * (plan.n_steps - 1)
    assert sweeps == (1 if between else 2) * (plan.n_steps - 1)


def test_a_sweep_of_several_colors_stays_around_the_transitions(gibbs_of):
    # Its reversal visits the colors in the other order: alone in the middle it would not be
    # reversible, so the step stays `sweep, HMC, reversed sweep`.
    _, _, gibbs, points = gibbs_of(_attributes)
    assert len(gibbs.colors) > 1 and not gibbs.reversible
    for transitions_per_step in (1, 2):
        plan = _pinned_plan(gibbs, points.shape[1], transitions_per_step)
        assert not plan.sweep_between_transitions(gibbs)
        assert plan.sweeps_per_step(gibbs) == 2
        assert plan.hmc_transitions_per_step(gibbs) == transitions_per_step


@pytest.mark.parametrize("build, per_temperature", [
    (_switchpoint, 1),   # one color of 12 states: more than a 3-step transition's gradients
    (_attributes, 3),    # several colors: before each of the three adaptation transitions
])
def test_the_pilot_sweeps_an_expensive_single_color_once_a_temperature(build, per_temperature,
                                                                      gibbs_of):
    from pymc_bdmc.kernels.tuning import run_pilot

    density, _, gibbs, points = gibbs_of(build)
    calls = []
    sweep = gibbs.bound_to(density.terms)

    def counted(rng, x, beta, reverse):
        calls.append(beta)
        return sweep(rng, x, beta, reverse)

    counted.gibbs = gibbs
    x0 = points[:8]
    pilot = run_pilot(np.random.default_rng(0), x0, density.parts(x0), density.parts,
                      n_leapfrog=None, target_accept=0.8, jitter=0.0, discrete=counted,
                      pinned=gibbs.pinned)
    n_temperatures = len(pilot.betas) - 1
    assert len(calls) == per_temperature * n_temperatures
    assert sorted(set(calls)) == sorted(pilot.betas[1:])
