"""Scale moves: the location-scale structure found in model graphs, the exactness of its map,
and the Metropolis-Hastings move built on it (invariance, reversibility, power)."""

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.kernels.hmc import HMCInfo
from pymc_bdmc.kernels.scale_moves import ScaleMoves
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.verification import Verifier

ALPHA = 1e-3


@pytest.fixture(scope="module")
def verifier_of():
    """One :class:`Verifier` per model builder, shared by this module's tests.

    Compiling a model's density, simulator and scale map is most of what these tests cost, and
    several tests check the same model: each builder's model is built and compiled once.
    """
    verifiers = {}

    def get(build):
        if build not in verifiers:
            verifiers[build] = Verifier(build())
        return verifiers[build]

    return get


def _groups(model_or_density):
    density = (model_or_density if isinstance(model_or_density, ModelDensity)
               else ModelDensity(model_or_density))
    return {g.hyper: g.children for g in density.location_scale_groups}, density


def _centred_schools():
    return known_evidence.eight_schools(centered=True).model


def test_scale_groups_are_found_in_centred_hierarchies_and_walks_only(verifier_of):
    walk = known_evidence.gaussian_random_walk(20).model
    assert _groups(walk)[0] == {"sigma_log__": ("x",)}
    assert _groups(verifier_of(_centred_schools).density)[0] == {"tau_log__": ("theta",)}
    # Non-centred: the children are standard normals with fixed scales; nothing to move.
    assert _groups(known_evidence.eight_schools(centered=False).model)[0] == {}
    with pm.Model() as nested:
        log_s = pm.Normal("log_s", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        top = pm.Normal("top", 0.0, pm.math.exp(log_s), shape=3)
        low = pm.Normal("low", top[np.array([0, 0, 1, 2])], tau, shape=4)
        pm.Normal("ordered", 0.0, tau, shape=2,
                  transform=pm.distributions.transforms.ordered, initval=[-1.0, 1.0])
        pm.StudentT("heavy", nu=3, mu=0.0, sigma=tau)
        pm.Gamma("positive", 2.0, tau)  # not a location-scale family on the real line
        pm.Normal("y", low, 1.0, observed=np.zeros(4))
    groups, _ = _groups(nested)
    # A scale given by an expression of a free variable counts; a transformed Normal and a
    # Gamma do not move; a Student-t child does; a child's descendants move with it.
    assert groups == {"log_s": ("top", "low"), "tau_log__": ("low", "heavy")}


def _robust_hierarchy():
    # Heavy-tailed group effects and a Laplace random walk: centred, so funnels.
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", 1.0)
        nu = pm.Gamma("nu", 4.0, 0.5)
        theta = pm.StudentT("theta", nu=nu, mu=0.5, sigma=tau, shape=4)
        walk = pm.RandomWalk("walk", init_dist=pm.Cauchy.dist(0.0, tau),
                             innovation_dist=pm.Laplace.dist(0.1, tau), steps=3)
        pm.Normal("y", theta + walk, 1.0, observed=np.zeros(4))
    return model


def test_heavy_tailed_children_and_walks_move_with_their_scale(verifier_of):
    assert _groups(verifier_of(_robust_hierarchy).density)[0] == {
        "tau_log__": ("theta", "walk")}


def _map_and_jacobian(density, group, x, delta):
    index = density.location_scale_groups.index(group)

    def moved(point, shift):
        proposed = point.copy()
        proposed[group.coordinates] += shift
        new, log_jac = density.location_scale_map(np.concatenate([point, proposed])[None])
        return new[0, index], log_jac[0, index]

    return moved


def _centred_gp(n=6):
    x = np.linspace(0.0, 1.0, n)[:, None]
    with pm.Model() as model:
        eta = pm.HalfNormal("eta", 1.0)
        ell = pm.Gamma("ell", 2.0, 2.0)
        gp = pm.gp.Latent(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ell))
        f = gp.prior("f", X=x, reparameterize=False)
        pm.Normal("y", f, 0.3, observed=np.sin(3.0 * x[:, 0]))
    return model


def test_a_centred_latent_gp_moves_with_its_amplitude_and_lengthscale(verifier_of):
    assert _groups(verifier_of(_centred_gp).density)[0] == {"eta_log__": ("f",),
                                                            "ell_log__": ("f",)}


@pytest.mark.parametrize("build", [
    lambda: known_evidence.gaussian_random_walk(12).model,
    lambda: known_evidence.random_intercepts(4, 3).model,
    _centred_gp,
    _robust_hierarchy,
])
def test_the_map_is_undone_by_the_opposite_move_and_its_log_jacobian_is_exact(build,
                                                                             verifier_of):
    density = verifier_of(build).density
    rng = np.random.default_rng(1)
    for group in density.location_scale_groups:
        x = rng.normal(size=density.n_dim)
        moved = _map_and_jacobian(density, group, x, 0.8)
        new, log_jac = moved(x, 0.8)
        back, log_jac_back = moved(new, -0.8)
        np.testing.assert_allclose(back, x, atol=1e-12)
        np.testing.assert_allclose(log_jac_back, -log_jac, atol=1e-12)
        # The whole map x -> x' (the hyper-parameter shifted by a constant) has Jacobian
        # determinant exp(log_jac): finite differences, to 1e-6.
        eps = 1e-6
        jac = np.stack([(moved(x + eps * e, 0.8)[0] - moved(x - eps * e, 0.8)[0]) / (2 * eps)
                        for e in np.eye(density.n_dim)], axis=1)
        np.testing.assert_allclose(np.linalg.slogdet(jac)[1], log_jac, atol=1e-6)
        assert abs(log_jac) > 1.0  # the children really are stretched


def test_the_map_of_a_batch_of_walks_is_exact():
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0, shape=2)
        walk = pm.GaussianRandomWalk("x", sigma=sigma, init_dist=pm.Normal.dist(0, sigma),
                                     steps=5, shape=(2, 6))
        pm.Normal("y", walk, 1.0, observed=np.zeros((2, 6)))
    density = ModelDensity(model)
    (group,) = density.location_scale_groups
    x = np.random.default_rng(2).normal(size=density.n_dim)
    moved = _map_and_jacobian(density, group, x, 0.5)
    new, log_jac = moved(x, 0.5)
    # Each walk's first value and increments are stretched by its own scale's ratio.
    walks, new_walks = x[2:].reshape(2, 6), new[2:].reshape(2, 6)
    ratio = np.exp(0.5)
    np.testing.assert_allclose(np.diff(new_walks), ratio * np.diff(walks), atol=1e-12)
    np.testing.assert_allclose(new_walks[:, 0], ratio * walks[:, 0], atol=1e-12)
    np.testing.assert_allclose(log_jac, 12 * 0.5, atol=1e-12)


def _moves_kernel(density, beta, scale_map=None):
    moves = ScaleMoves(density.location_scale_groups, scale_map or density.location_scale_map)
    sd = np.full(density.n_dim, 1.0)

    def factory(parts_fn):
        def transition(rng, x, parts, t):
            x, parts, rates = moves.sweep(rng, x, parts, beta, sd, parts_fn)
            x, parts, _ = moves.sweep(rng, x, parts, beta, sd, parts_fn, reverse=True)
            rate = np.full(len(x), rates.mean())
            return x, parts, HMCInfo(rate, rate > 0, np.zeros(len(x), dtype=bool))
        return transition

    return factory


@pytest.fixture(scope="module")
def schools(verifier_of):
    verifier = verifier_of(_centred_schools)
    return verifier.model, verifier


@pytest.mark.parametrize("build", [
    _centred_schools,  # the prior funnel
    _centred_gp,
    _robust_hierarchy,
])
def test_scale_moves_leave_the_prior_invariant_and_are_reversible(build, verifier_of):
    verifier = verifier_of(build)
    kernel = _moves_kernel(verifier.density, 0.0)
    result = verifier.invariance(kernel, t=1, beta=0.0, alpha=ALPHA, random_seed=3)
    assert result.passed, str(result)
    result = verifier.reversibility(kernel, t=1, beta=0.0, alpha=ALPHA, random_seed=4)
    assert result.passed, str(result)


def test_scale_moves_without_their_jacobian_are_caught(schools):
    _, verifier = schools
    density = verifier.density

    def no_jacobian(z):
        moved, log_jac = density.location_scale_map(z)
        return moved, np.zeros_like(log_jac)

    result = verifier.invariance(_moves_kernel(density, 0.0, no_jacobian), t=1, beta=0.0,
                                 alpha=ALPHA, random_seed=3)
    assert not result.passed


def test_scale_moves_keep_the_posterior_geweke(schools):
    _, verifier = schools
    result = verifier.geweke(_moves_kernel(verifier.density, 1.0), t=1, n_chains=60,
                             n_iterations=60, alpha=ALPHA, random_seed=6)
    assert result.passed, str(result)


def test_the_plan_records_the_scale_moves_and_a_reused_plan_makes_them():
    from pymc_bdmc.kernels.plan import AnnealingPlan

    walk = known_evidence.gaussian_random_walk(20)
    with walk.model:
        first = pmb.sample_ais(n_steps=50, chains=8, random_seed=1, progressbar=False)
        plan = AnnealingPlan.from_result(first)
        again = pmb.sample_ais(plan=plan, chains=8, random_seed=1, progressbar=False)
        smc = pmb.sample_bdmc(method="smc", n_steps=20, chains=2, particles=16,
                              random_seed=1, progressbar=False)
    assert plan.scale_moves
    assert again["annealing"].attrs["scale_moves"] == 1
    assert smc["smc"].attrs["scale_moves"] == 1
    # The same plan on the same seed gives the same chains.
    np.testing.assert_array_equal(again["evidence"]["log_weight_forward"].values,
                                  first["evidence"]["log_weight_forward"].values)
    with known_evidence.eight_schools(centered=False).model:
        plain = pmb.sample_ais(n_steps=20, chains=8, random_seed=1, progressbar=False)
    assert plain["annealing"].attrs["scale_moves"] == 0
