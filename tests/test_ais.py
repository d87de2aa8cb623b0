"""AIS against closed-form evidence, and unbiasedness of both directions in Z-space."""

import numpy as np
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.kernels.tuning import tune_plan
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator

# Monte Carlo tolerance for Z-space means: 4 standard errors (false alarm ~6e-5 per check).
N_SE = 4.0
# |lower - log Z| on the model's own data with default settings and a fixed seed; the estimator's
# spread at these budgets is ~0.05-0.1 nats, so 0.3 leaves room without hiding a bias.
LOG_Z_TOL = 0.3


@pytest.fixture(scope="module")
def small_regression():
    am = known_evidence.linear_regression(n_obs=8, n_coef=2, prior_sd=1.0, noise_sd=1.0, seed=3)
    density = ModelDensity(am.model)
    return am, density, ModelSimulator(am.model, density.layout)


def _exact_posterior(am, n, rng):
    # Conjugate posterior of the regression weights: N(m, S), S = (I/t^2 + X'X/s^2)^-1.
    x, t, s = (am.constants[k] for k in ("x", "prior_sd", "noise_sd"))
    cov = np.linalg.inv(np.eye(x.shape[1]) / t**2 + x.T @ x / s**2)
    mean = cov @ x.T @ am.data["y"] / s**2
    return rng.multivariate_normal(mean, cov, size=n)


def _plan(simulator, density, rng, n_steps):
    # Geometric from beta_1 = 1e-3 with ratio <= 4/3: for this Gaussian model (prior precision 1,
    # likelihood precision ~8) every step's weight factor then has a finite 4th moment, so the
    # sample mean's standard error is itself reliable (reverse weights are harmonic-mean-like:
    # a large beta_1 gives them infinite variance and a mean test would be meaningless).
    pilot = simulator.draw_prior(128, rng)
    plan, _ = tune_plan(rng, pilot, density.parts(pilot), density.parts,
                        schedule=pmb.schedules.geometric(n_steps, start=1e-3), n_steps=n_steps,
                        n_leapfrog=3)
    return plan


# Seed 1 repeats seed 0's check on other draws: in --runslow only.
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_forward_and_reverse_weights_are_unbiased_in_z_space(small_regression, seed):
    am, density, simulator = small_regression
    rng = np.random.default_rng(sum(map(ord, "unbiased")) + seed)
    plan = _plan(simulator, density, rng, n_steps=30)
    log_z = am.log_evidence()
    k = 40_000
    x0 = simulator.draw_prior(k, rng)
    fwd = ais_forward(rng, x0, density.parts(x0), plan.betas, plan.transition(density.parts))
    w = np.exp(fwd.log_weight - log_z)  # E[w] = 1
    assert abs(w.mean() - 1) < N_SE * w.std() / np.sqrt(k)

    x_star = _exact_posterior(am, k, rng)
    rev = ais_reverse(rng, x_star, k, plan.betas, plan.transition(density.parts), density.parts)
    v = np.exp(rev.log_weight + log_z)  # E[v] = 1
    assert abs(v.mean() - 1) < N_SE * v.std() / np.sqrt(k)


def test_mean_weights_of_a_wrong_direction_would_be_caught(small_regression):
    # A test of the test: with the reverse increments' sign flipped, E[v] = 1 fails badly.
    am, density, simulator = small_regression
    rng = np.random.default_rng(7)
    plan = _plan(simulator, density, rng, n_steps=30)
    k = 20_000
    x_star = _exact_posterior(am, k, rng)
    rev = ais_reverse(rng, x_star, k, plan.betas, plan.transition(density.parts), density.parts)
    v_wrong = np.exp(-rev.log_weight - am.log_evidence())
    assert abs(v_wrong.mean() - 1) > N_SE * v_wrong.std() / np.sqrt(k)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: known_evidence.linear_regression(n_obs=30, n_coef=4, seed=2),
        lambda: known_evidence.normal_inverse_gamma_regression(n_obs=25, n_coef=3, seed=4),
        lambda: known_evidence.beta_binomial(seed=5),
        lambda: known_evidence.gamma_poisson(seed=6),
    ],
    ids=["linear-regression", "normal-inverse-gamma", "beta-binomial", "gamma-poisson"],
)
def test_sample_ais_matches_closed_form_evidence(factory):
    am = factory()
    with am.model:
        result = pmb.sample_ais(n_steps=400, chains=32, random_seed=11, progressbar=False)
    lower = float(result["evidence"]["lower"])
    assert abs(lower - am.log_evidence()) < LOG_Z_TOL
    assert np.isnan(float(result["evidence"]["upper"]))


def test_the_pilot_probes_longer_trajectories_on_a_quarter_of_its_particles(small_regression):
    am, density, simulator = small_regression
    rng = np.random.default_rng(sum(map(ord, "probes")))
    x0 = simulator.draw_prior(64, rng)
    rows = []

    def counted(x):
        rows.append(len(x))
        return density.parts(x)

    _, pilot = tune_plan(rng, x0, density.parts(x0), counted, schedule="adaptive", n_steps=100,
                         n_leapfrog=None)
    # Per temperature: three adaptation transitions of 3 leapfrog steps by every particle, one
    # gradient per step, then one probe of 6 and one of 12 steps by 16 random particles.
    temperatures = pilot.n_steps
    assert rows.count(64) == temperatures * 3 * 3
    assert rows.count(16) == temperatures * (6 + 12)
    assert len(rows) == rows.count(64) + rows.count(16)
    # Every length measured a positive jump at every temperature after the prior's.
    assert np.all(pilot.jump_per_gradient[1:] > 0)
    # The pilot's own SMC estimate is still close to the exact evidence.
    assert abs(pilot.log_z - am.log_evidence()) < LOG_Z_TOL

    rows.clear()
    tune_plan(rng, x0, density.parts(x0), counted, schedule="adaptive", n_steps=100, n_leapfrog=3)
    assert set(rows) == {64}


def test_a_short_path_anneals_with_one_transition_per_temperature_a_long_one_with_two():
    """The pilot's path length sets the default; a given ``transitions_per_step`` is kept.

    The beta-binomial's path is short (far fewer than ``first_n_steps`` steps at
    ``steps_per_squared_length``); a rate of 10^6 steps per squared length makes the same path
    long. One transition per temperature costs half the gradients of two: the runs' counts say so.
    """
    am = known_evidence.beta_binomial(seed=5)
    made = {}
    for label, kwargs in (("short", {}),
                          ("long", {"tuning": pmb.Tuning(steps_per_squared_length=1e6)}),
                          ("given", {"transitions_per_step": 3})):
        with am.model:
            result = pmb.sample_ais(n_steps=100, random_seed=3, progressbar=False, **kwargs)
        made[label] = result
        assert abs(float(result["evidence"]["lower"]) - am.log_evidence()) < LOG_Z_TOL
    tps = {k: r["annealing"].attrs["transitions_per_step"] for k, r in made.items()}
    assert tps == {"short": 1, "long": 2, "given": 3}
    calls = {k: r["evidence"].attrs["run_model_evaluations"] for k, r in made.items()}
    np.testing.assert_allclose(calls["long"], 2 * calls["short"], rtol=0.02)
