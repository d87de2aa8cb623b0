"""SMC and the sequential harmonic mean estimator (reverse SMC): identities, unbiasedness,
closed-form evidence, the BDMC sandwich, variants that must be caught, and input checks."""

from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.algorithms.smc import DataPointPath, TemperingPath, smc_forward, smc_reverse
from pymc_bdmc.kernels.tuning import tune_plan
from pymc_bdmc.model.density import DensityParts, ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.parallel import smc_groups
from pymc_bdmc.pipeline import driver
from pymc_bdmc.resampling import systematic_resample

# Deterministic identities (same random stream, same arithmetic): round-off only.
IDENTITY = 1e-10
# Z-space means of many independent populations: 4 standard errors (false alarm ~6e-5 per check;
# the designs below keep the weights' 4th moments finite so the standard error is reliable).
N_SE = 4.0
# Rigorous sandwich slack: P(lower > log Z + b) < e^-b; with b = log(1000) a correct
# implementation fails each side with probability < 0.1%, an index or sign error always.
RIGOROUS_SLACK = np.log(1000.0)
# |lower - log Z| at default settings with a fixed seed. Over 8 seeds the default tempering run
# was within 0.07 nats on these models (sd <= 0.035), the data-point run within 0.14 (sd <= 0.055).
TEMPERING_TOL = 0.15
DATA_TOL = 0.3


@pytest.fixture(scope="module")
def small():
    """A 2-coefficient regression on 8 observations: exact posterior, cheap density."""
    am = known_evidence.linear_regression(n_obs=8, n_coef=2, prior_sd=1.0, noise_sd=1.0, seed=3)
    density = ModelDensity(am.model)
    return am, density, ModelSimulator(am.model, density.layout)


def _exact_posterior(am, n, rng):
    # The regression's only free variable is ``w``: its flat vector is ``w`` itself.
    return am.sample_tempered(1.0, n, rng)["w"]


def _plan(density, simulator, rng, schedule, transitions_per_step=1):
    pilot = simulator.draw_prior(128, rng)
    plan, _ = tune_plan(rng, pilot, density.parts(pilot), density.parts, schedule=schedule,
                        n_steps=len(schedule) - 1, n_leapfrog=3,
                        transitions_per_step=transitions_per_step)
    return plan


@pytest.fixture(scope="module")
def tempering_plan(small):
    # Geometric from 1e-3, ratio ~1.27: every stage's weight factor has a finite 4th moment in
    # both directions for this Gaussian model, so Z-space means have reliable standard errors.
    _, density, simulator = small
    return _plan(density, simulator, np.random.default_rng(11),
                 pmb.schedules.geometric(30, start=1e-3))


def _z_mean_test(log_w, log_target):
    """Standardized deviation of mean(exp(log_w - log_target)) from 1."""
    w = np.exp(np.asarray(log_w) - log_target)
    return (w.mean() - 1.0) / (w.std() / np.sqrt(w.size))


# -- identities ----------------------------------------------------------------------------------
def test_smc_without_resampling_is_ais_exactly(small, tempering_plan):
    # ess_threshold=0 never resamples: each particle is then an AIS chain, and with the same
    # random stream the weights, states and the evidence must be AIS's to round-off.
    am, density, simulator = small
    plan, path = tempering_plan, TemperingPath(tempering_plan.betas)
    transition = plan.transition(density.parts)
    x0 = simulator.draw_prior(24, np.random.default_rng(1))
    ais = ais_forward(np.random.default_rng(2), x0, density.parts(x0), plan.betas, transition)
    smc = smc_forward(np.random.default_rng(2), x0, density.parts(x0), path, transition,
                      chains=3, ess_threshold=0.0)
    np.testing.assert_allclose(smc.particle_log_weight.ravel(), ais.log_weight, rtol=IDENTITY)
    np.testing.assert_array_equal(smc.x, ais.x)
    np.testing.assert_allclose(
        smc.log_weight,
        [pmb.log_mean_exp(ais.log_weight[c * 8:(c + 1) * 8]) for c in range(3)], rtol=IDENTITY,
    )
    assert not smc.resampled.any()

    x_star = _exact_posterior(am, 1, np.random.default_rng(3))[0]
    ais = ais_reverse(np.random.default_rng(4), x_star, 24, plan.betas, transition,
                      density.parts, spread_transitions=2)
    shme = smc_reverse(np.random.default_rng(4), x_star, 8, path, transition, density.parts,
                       chains=3, ess_threshold=0.0, spread_transitions=2)
    np.testing.assert_allclose(shme.particle_log_weight.ravel(), ais.log_weight, rtol=IDENTITY)
    np.testing.assert_array_equal(shme.x, ais.x)


def test_particle_weights_average_to_the_population_estimate(small, tempering_plan):
    # Algorithm 2's bookkeeping: within each population, mean_k w_k = Z^ (whatever resampled).
    _, density, simulator = small
    x0 = simulator.draw_prior(64, np.random.default_rng(5))
    run = smc_forward(np.random.default_rng(6), x0, density.parts(x0),
                      TemperingPath(tempering_plan.betas), tempering_plan.transition(density.parts),
                      chains=4, ess_threshold=0.9)
    assert run.resampled.any() and not run.resampled.all()
    np.testing.assert_allclose(pmb.log_mean_exp(run.particle_log_weight, axis=1), run.log_weight,
                               rtol=IDENTITY)
    np.testing.assert_allclose(np.nansum(run.log_evidence_increment, axis=0), run.log_weight,
                               rtol=IDENTITY)


# -- unbiasedness in Z-space, and wrong variants that it catches ---------------------------------
def _forward_z(small, plan, path, transition, parts_fn, seed, chains=2000, particles=8):
    am, _, simulator = small
    rng = np.random.default_rng(seed)
    x0 = simulator.draw_prior(chains * particles, rng)
    run = smc_forward(rng, x0, parts_fn(x0), path, transition, chains=chains,
                      ess_threshold=0.5)
    return run, _z_mean_test(run.log_weight, am.log_evidence())


def _reverse_z(small, path, transition, parts_fn, seed, chains=2000, particles=8, **kwargs):
    am = small[0]
    rng = np.random.default_rng(seed)
    x_star = _exact_posterior(am, chains, rng)  # one exact posterior draw per population
    run = smc_reverse(rng, x_star, particles, path, transition, parts_fn, chains=chains,
                      ess_threshold=0.5, **kwargs)
    return run, _z_mean_test(run.log_weight, -am.log_evidence())


def test_forward_smc_and_shme_are_unbiased_in_z_space(small, tempering_plan):
    _, density, _ = small
    path, transition = TemperingPath(tempering_plan.betas), tempering_plan.transition(density.parts)
    run, z = _forward_z(small, tempering_plan, path, transition, density.parts, seed=21)
    # Both branches of the evidence update are exercised: resampled and carried weights.
    assert 0 < run.resampled.mean() < 1
    assert abs(z) < N_SE, f"E[Z^]/Z deviates from 1 by {z:.1f} standard errors"
    run, z = _reverse_z(small, path, transition, density.parts, seed=22)
    assert 0 < run.resampled.mean() < 1
    assert abs(z) < N_SE, f"E[V^] p(y) deviates from 1 by {z:.1f} standard errors"


def test_data_point_smc_and_shme_are_unbiased_in_z_space():
    # Removing the last observation in reverse is a harmonic-mean step, ``1 / p(y_1 | x)`` under
    # ``p(x | y_1)``: its 4th moment is finite only if the prior tails beat ``p(y_1 | x)^-3``.
    # A Gamma(40, 10) prior on a Poisson rate does (rate 10 > 3, shape 40 > 3 * max y).
    a, b = 40.0, 10.0
    am = known_evidence.gamma_poisson(n_obs=12, a=a, b=b, seed=1)
    density = ModelDensity(am.model)
    simulator = ModelSimulator(am.model, density.layout)
    n = density.n_observations
    path = DataPointPath.in_blocks(n, n)  # one observation per stage
    rng = np.random.default_rng(31)
    plan = _plan(density, simulator, rng, path.n_included / n, transitions_per_step=2)
    transition = plan.observation_transition(density.weighted_parts, path.observation_weights)
    chains, particles = 1000, 8
    x0 = simulator.draw_prior(chains * particles, rng)
    forward = smc_forward(rng, x0, density.weighted_parts(x0, path.observation_weights(0)), path,
                          transition, chains=chains, ess_threshold=0.9)
    assert 0 < forward.resampled.mean() < 1
    z = _z_mean_test(forward.log_weight, am.log_evidence())
    assert abs(z) < N_SE, f"E[Z^]/Z deviates from 1 by {z:.1f} standard errors"
    # exact posterior draws of log(rate), one per population
    x_star = am.sample_tempered(1.0, chains, rng)["rate_log__"][:, None]
    reverse = smc_reverse(rng, x_star, particles, path, transition,
                          lambda x: density.weighted_parts(x, np.ones(n)), chains=chains,
                          ess_threshold=0.9)
    assert 0 < reverse.resampled.mean() < 1
    z = _z_mean_test(reverse.log_weight, -am.log_evidence())
    assert abs(z) < N_SE, f"E[V^] p(y) deviates from 1 by {z:.1f} standard errors"


def _resample_in_proportion_to_w(rng, weights, n):
    # SHME's weights are Algorithm 3's 1/w; resampling on their reciprocal is "proportional
    # to w", the forward rule wrongly reused in reverse.
    inverse = np.where(weights > 0, 1.0 / np.maximum(weights, 1e-300), 0.0)
    return systematic_resample(rng, inverse / inverse.sum(), n)


class _DroppedIncrement:
    """A path whose stage-``t`` incremental weight is (wrongly) left out."""

    def __init__(self, path, t):
        self.path, self.t, self.n_steps = path, t, path.n_steps

    def log_increment(self, parts, t):
        out = self.path.log_increment(parts, t)
        return np.zeros_like(out) if t == self.t else out


def test_wrong_variants_are_caught(small, tempering_plan):
    # Tests of the tests: the same checks that pass above must fail for these variants.
    _, density, _ = small
    path, transition = TemperingPath(tempering_plan.betas), tempering_plan.transition(density.parts)
    _, z = _reverse_z(small, path, transition, density.parts, seed=22, chains=1000,
                      resample_fn=_resample_in_proportion_to_w)
    assert z < -N_SE, f"resampling SHME in proportion to w went unnoticed (z = {z:.1f})"
    dropped = _DroppedIncrement(path, path.n_steps)
    _, z = _forward_z(small, tempering_plan, dropped, transition, density.parts, seed=21,
                      chains=1000)
    assert abs(z) > N_SE, f"a dropped incremental weight went unnoticed (z = {z:.1f})"


def _identity_move(rng, x, parts, t):
    info = SimpleNamespace(acceptance_rate=np.ones(len(x)), divergent=np.zeros(len(x), bool))
    return x, parts, info


def test_non_finite_particles_get_zero_weight_and_are_counted():
    # Particles 1 and 5 have a NaN log-likelihood: weight 0 from stage 1, counted once; the other
    # particles' increments are exp(0) = 1, so each population of 4 estimates exactly 3/4.
    n = 8
    lik = np.zeros(n)
    lik[[1, 5]] = np.nan
    parts = DensityParts(np.zeros(n), lik, np.zeros((n, 1)), np.zeros((n, 1)))
    run = smc_forward(np.random.default_rng(0), np.zeros((n, 1)), parts,
                      TemperingPath(np.array([0.0, 0.5, 1.0])), _identity_move, chains=2,
                      ess_threshold=0.0)
    assert run.n_failed.tolist() == [0, 2, 0] and run.n_failed_total == 2
    np.testing.assert_allclose(run.log_weight, np.log([0.75, 0.75]), rtol=IDENTITY)
    assert np.isneginf(run.particle_log_weight.ravel()[[1, 5]]).all()


def test_interrupted_reverse_smc_returns_the_lower_bound(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # The tempering path runs its populations through parallel.smc_groups.
    monkeypatch.setattr(smc_groups, "smc_reverse", interrupted)
    am = known_evidence.gamma_poisson(n_obs=10, seed=3)
    with am.model:
        result = pmb.sample_bdmc(method="smc", n_steps=10, chains=2, particles=16,
                                 random_seed=4, progressbar=False)
    ev = result["evidence"]
    assert np.isfinite(float(ev["lower"])) and np.isnan(float(ev["upper"]))
    assert "reverse SMC" in ev.attrs["interrupted"]


# -- the order of the path in both directions ----------------------------------------------------
class _Recorder:
    def __init__(self, path, transition):
        self.path, self.transition, self.n_steps = path, transition, path.n_steps
        self.increments, self.moves = [], []

    def log_increment(self, parts, t):
        self.increments.append(t)
        return self.path.log_increment(parts, t)

    def move(self, rng, x, parts, t):
        self.moves.append(t)
        return self.transition(rng, x, parts, t)


def test_reverse_visits_the_forward_path_backwards(small, tempering_plan):
    am, density, simulator = small
    n_steps = tempering_plan.n_steps
    forward = _Recorder(TemperingPath(tempering_plan.betas),
                        tempering_plan.transition(density.parts))
    x0 = simulator.draw_prior(8, np.random.default_rng(0))
    smc_forward(np.random.default_rng(1), x0, density.parts(x0), forward, forward.move)
    assert forward.increments == list(range(1, n_steps + 1))
    assert forward.moves == list(range(1, n_steps))  # f_t's kernel after reaching f_t, t < T
    reverse = _Recorder(forward.path, forward.transition)
    x_star = _exact_posterior(am, 1, np.random.default_rng(2))[0]
    smc_reverse(np.random.default_rng(3), x_star, 8, reverse, reverse.move, density.parts,
                spread_transitions=2)
    assert reverse.increments == list(range(n_steps, 0, -1))
    assert reverse.moves == [n_steps, n_steps, *range(n_steps - 1, 0, -1)]


def test_sample_bdmc_reverse_uses_exactly_the_forward_betas(monkeypatch):
    am = known_evidence.gamma_poisson(n_obs=10, seed=3)
    seen = {}

    def spy(name, original):
        def wrapped(*args, **kwargs):
            seen[name] = args[3]  # the path (4th positional argument of both)
            return original(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(smc_groups, "smc_forward", spy("forward", smc_groups.smc_forward))
    monkeypatch.setattr(smc_groups, "smc_reverse", spy("reverse", smc_groups.smc_reverse))
    with am.model:
        result = pmb.sample_bdmc(method="smc", n_steps=15, chains=2, particles=16,
                                 random_seed=4, progressbar=False)
    np.testing.assert_array_equal(seen["reverse"].betas, seen["forward"].betas)
    np.testing.assert_array_equal(seen["reverse"].betas, result["smc"]["beta"].values)
    assert result["smc"]["beta"].values[0] == 0.0 and result["smc"]["beta"].values[-1] == 1.0


# -- the observation-weighted density ------------------------------------------------------------
def test_observation_weighted_density_is_compiled_once_and_exact(small):
    _, density, _ = small
    x = np.random.default_rng(0).normal(size=(5, density.n_dim))
    n = density.n_observations
    n_compiled = density.n_compilations
    full = density.weighted_parts(x, np.ones(n))
    parts = density.parts(x)
    np.testing.assert_allclose(full.log_likelihood, parts.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(full.grad_log_likelihood, parts.grad_log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(full.log_likelihood_per_observation.sum(axis=1),
                               parts.log_likelihood, rtol=1e-12)
    weights = np.random.default_rng(1).uniform(size=n)
    weighted = density.weighted_parts(x, weights)
    np.testing.assert_allclose(weighted.log_likelihood,
                               full.log_likelihood_per_observation @ weights, rtol=1e-12)
    h = 1e-6
    for d in range(density.n_dim):
        step = np.zeros(density.n_dim)
        step[d] = h
        fd = (density.weighted_parts(x + step, weights).log_likelihood
              - density.weighted_parts(x - step, weights).log_likelihood) / (2 * h)
        np.testing.assert_allclose(weighted.grad_log_likelihood[:, d], fd, rtol=1e-5, atol=1e-6)
    for k in range(n + 1):  # every mask of a data-point path: not one more compilation
        density.weighted_parts(x, (np.arange(n) < k).astype(float))
    assert density.n_compilations == n_compiled


def test_observation_parts_survive_resampling_and_acceptance(small):
    _, density, _ = small
    x = np.random.default_rng(2).normal(size=(4, density.n_dim))
    a = density.weighted_parts(x, np.ones(density.n_observations))
    b = density.weighted_parts(x + 1.0, np.ones(density.n_observations))
    picked = a.take(np.array([True, False, True, False]), b).select(np.array([0, 0, 1, 2]))
    np.testing.assert_array_equal(picked.log_likelihood_per_observation,
                                  np.stack([b.log_likelihood_per_observation[0]] * 2
                                           + [a.log_likelihood_per_observation[1],
                                              b.log_likelihood_per_observation[2]]))


# -- end to end: closed forms, the sandwich, convergence -----------------------------------------
@pytest.mark.parametrize(
    ("factory", "path", "tol"),
    [
        (lambda: known_evidence.linear_regression(n_obs=30, n_coef=4, seed=2), "tempering",
         TEMPERING_TOL),
        (lambda: known_evidence.normal_inverse_gamma_regression(n_obs=25, n_coef=3, seed=4),
         "tempering", TEMPERING_TOL),
        (lambda: known_evidence.beta_binomial(seed=5), "data", DATA_TOL),
        (lambda: known_evidence.gamma_poisson(seed=6), "data", DATA_TOL),
    ],
    ids=["linear-regression-tempering", "normal-inverse-gamma-tempering",
         "beta-binomial-data", "gamma-poisson-data"],
)
def test_sample_smc_evidence_matches_closed_form(factory, path, tol):
    am = factory()
    with am.model:
        result = pmb.sample_smc_evidence(path=path, random_seed=11, progressbar=False)
    ev = result["evidence"]
    assert abs(float(ev.lower) - am.log_evidence()) < tol
    assert np.isnan(float(ev.upper)) and np.isnan(float(ev.gap))
    stages = result["smc"]
    assert stages["resampled_forward"].dims == ("stage", "smc_chain")
    if path == "data":
        assert bool(stages["resampled_forward"].any())
        assert stages["n_observations"].values[-1] == am.data[next(iter(am.data))].size
        assert "beta" not in stages


@pytest.mark.parametrize("path", ["tempering", "data"])
def test_smc_sandwich_holds_on_simulated_data(path):
    am = known_evidence.gamma_poisson(n_obs=20, seed=10)
    with am.model:
        result = pmb.sample_bdmc(method="smc", path=path, random_seed=7, progressbar=False)
    ev = result["evidence"]
    truth = am.log_evidence_of(result)
    assert float(ev.lower) - RIGOROUS_SLACK <= truth <= float(ev.upper) + RIGOROUS_SLACK
    assert abs(float(ev.lower) - truth) < DATA_TOL and abs(float(ev.upper) - truth) < DATA_TOL
    assert float(ev.gap) < 2 * DATA_TOL
    assert result["evidence"]["log_weight_reverse"].dims == ("smc_chain",)
    assert np.isnan(float(ev["posterior_kl_bound"]))
    assert "generating_values" in result.children
    # the recorded log-likelihood of each posterior draw is the full one, whatever the path
    rate = result["posterior"]["rate"].values[0]
    y = result["observed_data"]["y"].values
    np.testing.assert_allclose(result["sample_stats"]["log_likelihood"].values[0],
                               stats.poisson.logpmf(y, rate[:, None]).sum(axis=1), rtol=1e-10)


def test_gap_shrinks_with_more_particles():
    am = known_evidence.linear_regression(n_obs=40, n_coef=6, seed=3)
    gaps = []
    for particles in (4, 64):
        with am.model:
            result = pmb.sample_bdmc(method="smc", n_steps=10, chains=16, particles=particles,
                                     random_seed=5, progressbar=False)
        ev = result["evidence"]
        truth = am.log_evidence_of(result)
        assert float(ev.lower) - RIGOROUS_SLACK <= truth <= float(ev.upper) + RIGOROUS_SLACK
        # mean over populations of log V^ + log Z^: the sum of both directions' biases (> 0)
        gaps.append(float(ev.upper_mean_log_weight - ev.lower_mean_log_weight))
    assert gaps[0] > 0 and gaps[1] > 0
    assert gaps[1] < gaps[0] / 3


@pytest.mark.slow
def test_gap_shrinks_with_more_moves_and_closes_on_a_50_parameter_regression():
    am = known_evidence.linear_regression(n_obs=100, n_coef=50, seed=1)
    gaps = []
    for transitions in (1, 10):
        with am.model:
            result = pmb.sample_bdmc(method="smc", n_steps=50, transitions_per_step=transitions,
                                     random_seed=3, progressbar=False)
        ev = result["evidence"]
        truth = am.log_evidence_of(result)
        assert float(ev.lower) - RIGOROUS_SLACK <= truth <= float(ev.upper) + RIGOROUS_SLACK
        gaps.append(float(ev.upper_mean_log_weight - ev.lower_mean_log_weight))
    assert gaps[1] < gaps[0] / 2
    assert gaps[1] < 1.0


# -- reproducibility and input checks ------------------------------------------------------------
def test_same_seed_gives_identical_results():
    am = known_evidence.beta_binomial(seed=2)
    runs = []
    for _ in range(2):
        with am.model:
            runs.append(pmb.sample_bdmc(method="smc", path="data", n_steps=4, chains=2,
                                        particles=16, random_seed=99, progressbar=False))
    for group in ("evidence", "smc", "posterior", "observed_data", "generating_values"):
        a, b = (r[group].to_dataset() for r in runs)
        assert a.drop_attrs().identical(b.drop_attrs()), group


def _scalar_observation_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1, shape=3)
        pm.MvNormal("y", mu, np.eye(3), observed=np.zeros(3))
    return model


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: pmb.sample_smc_evidence(model=m, path="data"), "leading data dimension"),
        (lambda m: pmb.sample_bdmc(model=m, method="smc", path="data"),
         "leading data dimension"),
        (lambda m: pmb.sample_smc_evidence(model=m, ess_threshold=1.5), "ess_threshold"),
        (lambda m: pmb.sample_smc_evidence(model=m, particles=1), "particles"),
        (lambda m: pmb.sample_smc_evidence(model=m, path="points"), "path"),
        (lambda m: pmb.sample_smc_evidence(model=m, path="data", schedule=[0.0, 0.5, 1.0]),
         "schedule"),
        (lambda m: pmb.sample_bdmc(model=m, method="sequential"), "method"),
        (lambda m: pmb.sample_bdmc(model=m, method="smc", n_steps=None), "n_steps"),
        (lambda m: pmb.sample_smc_evidence(model=m, n_steps=None), "n_steps"),
        (lambda m: pmb.sample_bdmc(model=m, particles=64), "method='smc'"),
    ],
)
def test_bad_input_is_refused_before_sampling(monkeypatch, call, match):
    def no_sampling(*args, **kwargs):
        raise AssertionError("sampling started")

    # Refused when checking arguments, or on compiling: no attempt starts.
    monkeypatch.setattr(driver, "run_attempt", no_sampling)
    with pytest.raises(pmb.BDMCInputError, match=match):
        call(_scalar_observation_model())


def test_data_point_tempering_refuses_potentials():
    am = known_evidence.gamma_poisson(n_obs=5, seed=1)
    with am.model:
        pm.Potential("extra", -0.1 * am.model["rate"])
    with pytest.raises(pmb.BDMCInputError, match="Potential"):
        pmb.sample_smc_evidence(model=am.model, path="data", potentials_in_likelihood=True,
                                progressbar=False)
