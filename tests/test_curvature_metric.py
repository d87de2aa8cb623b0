"""Dense metrics and fitted bases from the target's curvature (above DENSE_MAX_DIM)."""

import dataclasses
import logging

import numpy as np
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError, known_evidence
from pymc_bdmc.kernels import mass, pilot_metrics
from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.mass import (
    curvature_correlation,
    curvature_mass_factor,
    exceeds_condition,
)
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.pipeline import path_choice


def _gaussian(d=6, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    covariance = a @ a.T + 0.1 * np.eye(d)
    mean = rng.normal(size=d)
    precision = np.linalg.inv(covariance)
    sd = np.sqrt(np.diag(covariance))
    return mean, covariance, covariance / np.outer(sd, sd), lambda x: -(x - mean) @ precision


def test_curvature_correlation_is_a_gaussians_exact_correlation_from_any_population():
    _, _, correlation, gradient = _gaussian()
    rng = np.random.default_rng(1)
    # Three particles nowhere near the target, with variances of any scale: a Gaussian's
    # Hessian is the same everywhere, and the difference steps scale with the variances.
    for population, variance in [(rng.normal(size=(3, 6)) * 5.0, np.full(6, 25.0)),
                                 (rng.normal(size=(64, 6)), np.linspace(0.01, 3.0, 6))]:
        found = curvature_correlation(population, variance, np.ones(6, bool), gradient)
        np.testing.assert_allclose(found, correlation, atol=1e-6)


def test_curvature_correlation_takes_the_magnitude_of_negative_curvature():
    rotation = np.linalg.qr(np.random.default_rng(2).normal(size=(3, 3)))[0]
    hessian = rotation @ np.diag([-4.0, 1.0, 0.25]) @ rotation.T  # a saddle: indefinite
    found = curvature_correlation(np.zeros((4, 3)), np.ones(3), np.ones(3, bool),
                                  lambda x: x @ hessian)
    covariance = rotation @ np.diag([1 / 4.0, 1.0, 4.0]) @ rotation.T  # inverse of |H|
    sd = np.sqrt(np.diag(covariance))
    np.testing.assert_allclose(found, covariance / np.outer(sd, sd), atol=1e-6)
    assert np.linalg.eigvalsh(found)[0] > 0


def test_curvature_correlation_refuses_non_finite_gradients_and_flat_targets():
    movable = np.ones(3, bool)
    nan_gradient = lambda x: np.where(x > 1e-7, np.nan, -x)  # noqa: E731
    assert curvature_correlation(np.zeros((4, 3)), np.ones(3), movable, nan_gradient) is None
    assert curvature_correlation(np.zeros((4, 3)), np.ones(3), movable, np.zeros_like) is None


def test_curvature_mass_factor_keeps_the_population_scales_and_skips_pinned_coordinates():
    _, _, correlation, gradient = _gaussian(d=5)
    full = lambda x: np.concatenate([gradient(x[:, :5]), -x[:, 5:]], axis=1)  # noqa: E731
    rng = np.random.default_rng(3)
    population = rng.normal(size=(16, 6))
    variance = np.array([0.5, 1.0, 2.0, 4.0, 0.25, 0.0])  # the last one pinned
    factor = curvature_mass_factor(population, np.full(16, 1 / 16), variance, variance > 0,
                                   gradient=full)
    inverse_mass = factor @ factor.T
    np.testing.assert_allclose(np.diag(inverse_mass), variance, rtol=1e-10)
    sd = np.sqrt(variance[:5])
    np.testing.assert_allclose(inverse_mass[:5, :5] / np.outer(sd, sd), correlation, atol=1e-6)
    assert not factor[5].any() and not factor[:, 5].any()
    # An uncorrelated target keeps the diagonal metric.
    assert curvature_mass_factor(population, np.full(16, 1 / 16), variance, variance > 0,
                                 gradient=lambda x: -x) is None


def test_the_condition_check_agrees_with_the_eigenvalues_with_or_without_them(monkeypatch):
    # A strong pair decides without an eigendecomposition; weaker ones take the eigenvalues.
    calls = []
    eigvalsh = np.linalg.eigvalsh
    monkeypatch.setattr(np.linalg, "eigvalsh", lambda a: calls.append(1) or eigvalsh(a))
    rng = np.random.default_rng(7)
    for rho in (0.1, 0.5, 0.8, 0.85, 0.99):
        for d in (2, 5, 30):
            # An AR(1) correlation, its neighbours correlated by rho, in a shuffled order.
            order = rng.permutation(d)
            lags = np.abs(np.subtract.outer(order, order))
            correlation = rho**lags
            values = eigvalsh(correlation)
            calls.clear()
            assert exceeds_condition(correlation, 10.0) == (values[-1] / values[0] > 10.0)
            assert bool(calls) == ((1 + rho) / (1 - rho) <= 10.0)
    assert not exceeds_condition(np.eye(4), 10.0)
    assert exceeds_condition(np.ones((3, 3)), 10.0)  # singular: left to the Cholesky


def test_a_pilot_reuses_measured_hessians_until_beta_grows_past_the_reuse_ratio(monkeypatch):
    # Prior and likelihood Gaussian with different correlations: the tempered target's
    # correlation changes with beta, and every temperature gets its own exactly, measured or
    # combined from the Hessians measured at a lower beta.
    _, _, _, prior_gradient = _gaussian(d=6, seed=10)
    _, _, _, likelihood_gradient = _gaussian(d=6, seed=11)
    measured = []

    def counting(*args, **kwargs):
        measured.append(1)
        return mass.curvature_hessians(*args, **kwargs)

    class Parts:
        def __init__(self, x):
            self.grad_log_prior = prior_gradient(x)
            self.grad_log_likelihood = likelihood_gradient(x)

        def tempered_grad(self, beta):
            return self.grad_log_prior + beta * self.grad_log_likelihood

    monkeypatch.setattr(pilot_metrics, "curvature_hessians", counting)
    choice = pilot_metrics.MetricChoice(Parts, 6, True, np.zeros(0, dtype=int),
                                        pmb.Tuning(dense_max_dim=4))
    assert choice.curvature and choice.dense
    x = np.random.default_rng(8).normal(size=(16, 6))
    ratio = pilot_metrics.CURVATURE_REUSE_RATIO
    betas = [0.01, 0.01 * ratio, 0.01 * ratio * 1.01, 0.1, 0.1 * ratio * 0.99, 1.0]
    variance = np.linspace(0.5, 2.0, 6)
    for beta in betas:
        found = choice.correlation_at(x, variance * (1 + beta), variance > 0, beta)
        exact = curvature_correlation(x, variance, variance > 0,
                                      lambda p, b=beta: Parts(p).tempered_grad(b))
        np.testing.assert_allclose(found, exact, atol=1e-6)
    # Measured at 0.01 (and kept at 0.015), 0.01515 (past the ratio), 0.1 (kept at 0.1485)
    # and 1.0.
    assert len(measured) == 4


def test_gaussian_base_from_a_given_correlation_keeps_the_populations_moments():
    _, _, correlation, _ = _gaussian(d=4)
    rng = np.random.default_rng(4)
    values = rng.normal(size=(20, 4)) * [1.0, 2.0, 0.5, 3.0] + [1.0, -1.0, 0.0, 2.0]
    weights = rng.dirichlet(np.ones(20))
    base = GaussianBase.from_correlation(values, weights, correlation)
    mean = weights @ values
    sd = np.sqrt(weights @ (values - mean) ** 2)
    np.testing.assert_allclose(base.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(base.covariance, correlation * np.outer(sd, sd), rtol=1e-10)
    with pytest.raises(np.linalg.LinAlgError):
        GaussianBase.from_correlation(values, weights, -np.eye(4))


def _near_identity_correlation(d, eigenvalues, seed):
    # The identity plus a few directions, as a hierarchy's curvature (many groups, few
    # shared parameters), plus round-off-sized symmetric noise.
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.normal(size=(d, len(eigenvalues))))[0]
    noise = 1e-7 * rng.normal(size=(d, d))
    return (np.eye(d) + (directions * (np.asarray(eigenvalues) - 1.0)) @ directions.T
            + noise + noise.T)


def test_a_base_from_a_nearly_identity_correlation_keeps_only_its_distinct_directions():
    d = 40
    correlation = _near_identity_correlation(d, [0.5, 1.8, 3.0], seed=7)
    rng = np.random.default_rng(8)
    values = rng.normal(size=(30, d)) * rng.uniform(0.5, 2.0, d)
    base = GaussianBase.from_correlation(values, np.full(30, 1 / 30), correlation)
    assert base.basis.shape == (d, 3) and not base.full_rank and base.principal_metrics
    np.testing.assert_allclose(np.sort(base.eigenvalues), [0.5, 1.8, 3.0], atol=1e-5)
    scale = np.outer(base.scale, base.scale)
    np.testing.assert_allclose(base.covariance, correlation * scale, atol=1e-5)
    # Where more than half the directions differ from 1, the whole basis is kept.
    spread = np.linspace(0.5, 2.0, 6)
    assert GaussianBase.from_correlation(values[:, :6], np.full(30, 1 / 30),
                                         _near_identity_correlation(6, spread, 9)).full_rank


def test_only_a_base_from_the_curvature_gives_principal_metrics():
    # Above dense_max_dim a path from a base fitted to the curvature (full rank or not) gets
    # metrics in the base's principal coordinates; one from the population's own correlation
    # keeps the curvature's dense metrics, even where that base has full rank.
    d, rng = 6, np.random.default_rng(13)
    values, weights = rng.normal(size=(64, d)), np.full(64, 1 / 64)
    tuning, pinned = pmb.Tuning(dense_max_dim=3), np.zeros(0, dtype=int)
    population = GaussianBase.fit(values, weights)
    assert population.full_rank and not population.principal_metrics
    for base, principal in ((population, False),
                            (GaussianBase.from_correlation(values, weights,
                                                           _gaussian(d=d)[2]), True),
                            (GaussianBase.from_correlation(
                                values, weights, _near_identity_correlation(d, [2.0], 14)),
                             True)):
        choice = pilot_metrics.MetricChoice(base.parts_fn(lambda x: None), d, True, pinned,
                                            tuning)
        assert choice.principal == principal and choice.dense != principal


@pytest.mark.parametrize("full_rank", [True, False])
def test_principal_coordinates_factor_the_base_exactly(full_rank):
    # A = from_principal(I) - mean (by rows): A A^T is the covariance; principal() inverts it,
    # principal_gradient is A^T, gradient_at_principal is grad log q0 and log q0 is
    # log_norm - |z|^2 / 2, whether A is the eigenbasis' factor or the symmetric root.
    d = 30
    rng = np.random.default_rng(10)
    values = rng.normal(size=(25, d)) * rng.uniform(0.5, 2.0, d) + rng.normal(size=d)
    correlation = (_gaussian(d=d, seed=11)[2] if full_rank
                   else _near_identity_correlation(d, [0.4, 2.5], seed=12))
    base = GaussianBase.from_correlation(values, np.full(25, 1 / 25), correlation)
    assert base.full_rank == full_rank
    factor = (base.from_principal(np.eye(d)) - base.mean).T
    np.testing.assert_allclose(factor @ factor.T, base.covariance, atol=1e-12)
    x, grad = rng.normal(size=(6, d)), rng.normal(size=(6, d))
    z = base.principal(x)
    np.testing.assert_allclose(base.from_principal(z), x, atol=1e-12)
    np.testing.assert_allclose(base.principal_step(x - base.mean), z, atol=1e-12)
    np.testing.assert_allclose(base.principal_gradient(grad), grad @ factor, atol=1e-12)
    log_q, grad_q = base.logpdf_and_grad(x)
    np.testing.assert_allclose(base.log_norm - 0.5 * np.sum(z**2, axis=1), log_q, atol=1e-10)
    np.testing.assert_allclose(base.gradient_at_principal(z), grad_q, atol=1e-10)


def test_fit_base_takes_the_posteriors_curvature_above_dense_max_dim():
    _, _, correlation, gradient = _gaussian(d=6)

    class Parts:
        def __init__(self, x):
            self.x = x

        def tempered_grad(self, beta):
            assert beta == 1.0  # the posterior's curvature, whatever the path
            return gradient(self.x)

    values = np.random.default_rng(5).normal(size=(8, 6))
    weights = np.full(8, 1 / 8)
    below = path_choice.fit_base(values, weights, Parts)
    assert not np.allclose(_correlation_of(below), correlation, atol=0.05)
    above = path_choice.fit_base(values, weights, Parts, pmb.Tuning(dense_max_dim=4))
    np.testing.assert_allclose(_correlation_of(above), correlation, atol=1e-6)


def _correlation_of(base):
    covariance = base.covariance
    sd = np.sqrt(np.diag(covariance))
    return covariance / np.outer(sd, sd)


def test_random_walk_sandwich_with_curvature_metrics_contains_the_quadrature_truth(monkeypatch,
                                                                                 caplog):
    # Curvature metrics and bases (as above the default limit) on a 31-coordinate walk.
    tuning = pmb.Tuning(dense_max_dim=10)
    am = known_evidence.gaussian_random_walk(30, seed=2)
    caplog.set_level(logging.DEBUG, logger="pymc_bdmc")
    with am.model:
        bdmc = pmb.sample_bdmc(n_steps=500, chains=32, random_seed=3, progressbar=False,
                               cores=1, tuning=tuning)
        ais = pmb.sample_ais(n_steps=500, chains=32, random_seed=4, progressbar=False, cores=1,
                             tuning=tuning)
    assert AnnealingPlan.from_result(bdmc).is_dense
    assert "their correlations from the model's curvature" in caplog.text
    assert bdmc["evidence"].attrs["pilot_chains"] == 64  # no enlarged pilot
    truth = am.log_evidence({"y": bdmc["observed_data"]["y"].values})
    ev = bdmc["evidence"]
    # Stochastic bounds: each may cross the truth by a little (P(> b nats) < exp(-b)).
    assert float(ev["lower"]) <= truth + 0.3
    assert float(ev["upper"]) >= truth - 0.3
    assert abs(float(ev["gap"])) < 0.5
    assert abs(float(ais["evidence"]["lower"]) - am.log_evidence()) < 0.5


def test_on_a_fitted_path_only_the_models_part_is_differenced():
    # The base's Hessian is constant: -(1 - beta) * precision is added instead of differencing
    # it, and the correlation is the same as differencing the whole path's density.
    from pymc_bdmc.model.layout import DensityParts

    gradient = _gaussian(d=5)[3]

    def model_parts(x):
        zeros = np.zeros(len(x))
        return DensityParts(zeros, zeros, gradient(x), np.zeros_like(x))

    rng = np.random.default_rng(6)
    base = GaussianBase.from_correlation(rng.normal(size=(12, 5)), np.full(12, 1 / 12),
                                         np.eye(5) * 0.6 + 0.4)
    np.testing.assert_allclose(base.precision, np.linalg.inv(base.covariance), rtol=1e-9,
                               atol=1e-12)
    path = base.parts_fn(model_parts)
    population, variance, movable = rng.normal(size=(8, 5)), np.ones(5), np.ones(5, bool)
    for beta in (0.1, 0.7):
        whole = curvature_correlation(population, variance, movable,
                                      lambda x, b=beta: path(x).tempered_grad(b))
        gradient_part, offset = path.curvature_terms(beta)
        split = curvature_correlation(population, variance, movable, gradient_part, offset)
        np.testing.assert_allclose(split, whole, atol=1e-6)


def test_on_a_fitted_path_the_reused_hessians_weight_the_base_by_one_minus_beta(monkeypatch):
    from pymc_bdmc.model.layout import DensityParts

    _, _, _, prior_gradient = _gaussian(d=5, seed=12)
    _, _, _, likelihood_gradient = _gaussian(d=5, seed=13)

    def model_parts(x):
        zeros = np.zeros(len(x))
        return DensityParts(zeros, zeros, prior_gradient(x), likelihood_gradient(x))

    rng = np.random.default_rng(14)
    base = GaussianBase.from_correlation(rng.normal(size=(12, 5)), np.full(12, 1 / 12),
                                         np.eye(5) * 0.6 + 0.4)
    path = base.parts_fn(model_parts)
    # A pinned coordinate keeps the path's metrics dense (not principal).
    choice = pilot_metrics.MetricChoice(path, 4, True, np.array([4]),
                                        pmb.Tuning(dense_max_dim=3))
    assert choice.dense and not choice.principal
    population, variance = rng.normal(size=(8, 5)), np.array([1.0, 0.5, 2.0, 1.5, 0.0])
    movable = variance > 0
    for beta in (0.1, 0.12, 0.7):  # measured, reused, measured
        whole = curvature_correlation(population, variance, movable,
                                      lambda x, b=beta: path(x).tempered_grad(b))
        np.testing.assert_allclose(choice.correlation_at(population, variance, movable, beta),
                                   whole, atol=1e-6)


def test_a_full_rank_base_runs_principal_metrics_and_certifies(monkeypatch, caplog):
    # With the limit patched, the 20-coefficient regression's fitted base is full rank (from
    # the curvature, as above DENSE_MAX_DIM) and its path's metrics are diagonal in the base's
    # principal coordinates (kernels/pilot_metrics.py): compiled and NumPy kernels give the
    # same bounds, the sandwich holds the exact evidence, and the plan round-trips.
    am = known_evidence.linear_regression(n_obs=50, n_coef=20, seed=1)
    caplog.set_level(logging.DEBUG, logger="pymc_bdmc")
    with am.model:
        runs = {fused: pmb.sample_bdmc(n_steps=200, chains=16, random_seed=2, progressbar=False,
                                       cores=1, fused_kernel=fused,
                                       tuning=pmb.Tuning(dense_max_dim=10))
                for fused in (True, False)}
    bd = runs[True]
    assert bd["evidence"].attrs["path_start"] == "fitted gaussian"
    assert "principal coordinates" in caplog.text
    plan = AnnealingPlan.from_result(bd)
    assert plan.base.full_rank and plan.mass_factors.shape[1:] == (plan.n_dim,)
    assert np.all(plan.mass_index[1:] >= 0)
    for bound in ("lower", "upper"):
        np.testing.assert_allclose(float(bd["evidence"][bound]),
                                   float(runs[False]["evidence"][bound]), rtol=1e-9)
    truth = am.log_evidence({"y": bd["observed_data"]["y"].values})
    ev = bd["evidence"]
    # Both bounds within 0.3 nats of the truth (a stochastic bound misses by b w.p. < e^-b).
    assert float(ev["lower"]) - 0.3 <= truth <= float(ev["upper"]) + 0.3
    assert abs(float(ev["gap"])) < 0.3
    np.testing.assert_array_equal(plan.mass_factors, bd["annealing"]["mass_factor"].values)
    assert bd["annealing"]["mass_factor"].dims == ("mass_matrix", "parameter")
    # Without its base the plan's principal scales mean nothing: refused before any sampling.
    with am.model, pytest.raises(BDMCInputError, match="principal coordinates"):
        pmb.sample_ais(plan=dataclasses.replace(plan, base=None), progressbar=False)
