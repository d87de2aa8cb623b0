"""The compiled HMC transition is the NumPy kernel: same draws, same moves, to round-off."""

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.hmc import HMCParams, hmc_step
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.pipeline.execution import (
    FUSED_MIN_LEAPFROG_STEPS,
    FUSED_MIN_SWEEPS,
    FUSED_SWEEP_SAVING,
    KernelTiming,
    predicted_seconds,
    predicted_wall_seconds,
    use_fused_kernel,
)

ROUND_OFF = 1e-9


@pytest.fixture(scope="module")
def scale_model_density():
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        mu = pm.Normal("mu", 0.0, 1.0, shape=3)
        pm.Normal("y", mu, s, observed=rng.normal(size=(20, 3)))
    return ModelDensity(model)


def _assert_same_transition(density, x, beta, params, seed, base=None):
    parts_fn = density.parts if base is None else base.parts_fn(density.parts)
    parts = parts_fn(x)
    x_np, parts_np, info_np = hmc_step(np.random.default_rng(seed), x, parts, beta, params,
                                       parts_fn)
    calls = density.n_evaluations
    x_f, parts_f, info_f = density.fused_hmc().step(np.random.default_rng(seed), x, parts, beta,
                                                    params, base)
    assert density.n_evaluations - calls == params.n_leapfrog
    np.testing.assert_array_equal(info_f.accepted, info_np.accepted)
    np.testing.assert_allclose(x_f, x_np, rtol=ROUND_OFF, atol=ROUND_OFF)
    for field in ("log_prior", "log_likelihood", "grad_log_prior", "grad_log_likelihood"):
        np.testing.assert_allclose(getattr(parts_f, field), getattr(parts_np, field),
                                   rtol=ROUND_OFF, atol=ROUND_OFF)
    np.testing.assert_allclose(info_f.acceptance_rate, info_np.acceptance_rate, rtol=1e-7,
                               atol=1e-12)
    np.testing.assert_array_equal(info_f.divergent, info_np.divergent)
    return info_np


@pytest.mark.parametrize("n_leapfrog", [1, 4])
@pytest.mark.parametrize(("beta", "step_size"), [(0.0, 0.8), (0.3, 0.25), (1.0, 0.15)])
def test_fused_transition_matches_numpy_kernel(scale_model_density, n_leapfrog, beta,
                                               step_size):
    density = scale_model_density
    x = 0.5 * np.random.default_rng(1).normal(size=(16, density.n_dim))
    params = HMCParams(step_size, np.linspace(0.5, 1.5, density.n_dim), n_leapfrog, jitter=0.2)
    info = _assert_same_transition(density, x, beta, params, seed=2)
    # Some moves accepted and some rejected, or the comparison would prove little.
    assert 0 < info.accepted.sum() < len(x) or n_leapfrog == 1


@pytest.mark.parametrize(("dense", "with_base"), [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("beta", [0.0, 0.6])
def test_dense_and_fitted_base_forms_match_numpy_kernel(scale_model_density, dense, with_base,
                                                         beta):
    density = scale_model_density
    rng = np.random.default_rng(6)
    d = density.n_dim
    a = rng.normal(size=(d, d))
    covariance = a @ a.T / d + 0.5 * np.eye(d)
    # A base of rank 2 below the dimension, one eigenvalue above 1 and one below.
    basis = np.linalg.qr(rng.normal(size=(d, 2)))[0]
    base = GaussianBase(0.3 * rng.normal(size=d), np.sqrt(0.2 * np.diag(covariance)), basis,
                        np.array([3.0, 0.5]))
    x = base.sample(rng, 24)
    factor = np.linalg.cholesky(0.05 * covariance) if dense else None
    params = HMCParams(0.4, np.diag(0.05 * covariance), 4, jitter=0.2, mass_factor=factor)
    info = _assert_same_transition(density, x, beta, params, seed=7,
                                   base=base if with_base else None)
    # Some moves accepted and some rejected (at beta = 0 the Gaussian base accepts them all).
    assert 0 < info.accepted.sum() < len(x) or beta == 0.0
    assert density.has_fused_hmc(dense=dense, base=with_base)


def _full_rank_base(d, rng):
    a = rng.normal(size=(d, d))
    return GaussianBase.from_covariance(0.3 * rng.normal(size=d), a @ a.T / d + 0.2 * np.eye(d))


@pytest.mark.parametrize(("beta", "step_size"), [(0.0, 0.5), (0.6, 0.1), (1.0, 0.05)])
def test_principal_form_is_the_dense_kernel_with_the_base_factor(scale_model_density, beta,
                                                                 step_size):
    # A diagonal metric w in the base's principal coordinates is the dense metric
    # L = A diag(w), A = S U sqrt(Lambda): same draws, same trajectories, to round-off.
    density = scale_model_density
    rng = np.random.default_rng(8)
    base = _full_rank_base(density.n_dim, rng)
    parts_fn = base.parts_fn(density.parts)
    x = base.sample(rng, 24)
    parts = parts_fn(x)
    w = rng.uniform(0.2, 0.5, density.n_dim)
    factor = (base.scale[:, None] * base.basis) * np.sqrt(base.eigenvalues) * w
    np.testing.assert_allclose((factor / w) @ (factor / w).T, base.covariance, rtol=1e-10)
    results = [hmc_step(np.random.default_rng(9), x, parts, beta, HMCParams(step_size, np.ones(
        density.n_dim), 4, jitter=0.2, mass_factor=m), parts_fn) for m in (w, factor)]
    (x_p, parts_p, info_p), (x_d, parts_d, info_d) = results
    np.testing.assert_array_equal(info_p.accepted, info_d.accepted)
    np.testing.assert_allclose(x_p, x_d, rtol=ROUND_OFF, atol=ROUND_OFF)
    for field in ("log_prior", "log_likelihood", "grad_log_prior", "grad_log_likelihood"):
        np.testing.assert_allclose(getattr(parts_p, field), getattr(parts_d, field),
                                   rtol=ROUND_OFF, atol=ROUND_OFF)
    np.testing.assert_allclose(info_p.acceptance_rate, info_d.acceptance_rate, atol=1e-9)
    assert 0 < info_p.accepted.sum() < len(x) or beta == 0.0


@pytest.mark.parametrize("beta", [0.0, 0.6])
def test_principal_form_compiled_matches_numpy_kernel(scale_model_density, beta):
    density = scale_model_density
    rng = np.random.default_rng(10)
    base = _full_rank_base(density.n_dim, rng)
    x = base.sample(rng, 24)
    params = HMCParams(0.5, np.ones(density.n_dim), 4, jitter=0.2,
                       mass_factor=rng.uniform(0.2, 0.5, density.n_dim))
    info = _assert_same_transition(density, x, beta, params, seed=11, base=base)
    assert 0 < info.accepted.sum() < len(x) or beta == 0.0
    assert density.has_fused_hmc(dense=True, base=True, principal=True)


def test_principal_form_needs_a_base_and_the_compiled_one_a_full_rank_base(
        scale_model_density):
    density = scale_model_density
    x = np.zeros((4, density.n_dim))
    params = HMCParams(0.5, np.ones(density.n_dim), 2, mass_factor=np.ones(density.n_dim))
    low_rank = GaussianBase(np.zeros(density.n_dim), np.ones(density.n_dim),
                            np.eye(density.n_dim, 1), np.array([2.0]), principal_metrics=True)
    for base in (None, low_rank):
        with pytest.raises(ValueError, match="full-rank base"):
            density.fused_hmc().step(np.random.default_rng(0), x, density.parts(x), 0.5,
                                     params, base)
    with pytest.raises(ValueError, match="fitted base"):
        hmc_step(np.random.default_rng(0), x, density.parts(x), 0.5, params, density.parts)


def test_fused_transition_rejects_impossible_states_chain_by_chain(scale_model_density):
    density = scale_model_density
    x = 0.3 * np.random.default_rng(3).normal(size=(8, density.n_dim))
    x[0, 0] = -800.0  # log-scale: the scale underflows to 0, the likelihood is impossible
    x[1, 0] = 40.0
    params = HMCParams(0.1, np.ones(density.n_dim), 3, jitter=0.1)
    _assert_same_transition(density, x, 1.0, params, seed=4)


def test_fused_transition_on_a_regression(seed=5):
    am = known_evidence.normal_inverse_gamma_regression(30, 3, seed=1)
    density = ModelDensity(am.model)
    x = 0.2 * np.random.default_rng(seed).normal(size=(32, density.n_dim))
    params = HMCParams(0.05, np.full(density.n_dim, 0.3), 5, jitter=0.2)
    _assert_same_transition(density, x, 0.7, params, seed=seed)


@pytest.fixture(scope="module")
def regression_20_2():
    # One model for both runs below: its densities compile once (the compile cache).
    return known_evidence.normal_inverse_gamma_regression(20, 2, seed=3)


def test_fused_kernel_on_the_fitted_path_gives_the_same_bounds(regression_20_2):
    am = regression_20_2
    with am.model:
        runs = {fused: pmb.sample_bdmc(n_steps=60, chains=16, random_seed=4, progressbar=False,
                                       fused_kernel=fused)
                for fused in (False, True)}
    off, on = runs[False]["evidence"], runs[True]["evidence"]
    assert on.attrs["path_start"] == off.attrs["path_start"] == "fitted gaussian"
    assert on.attrs["fused_kernel"] and not off.attrs["fused_kernel"]
    for bound in ("lower", "upper"):
        np.testing.assert_allclose(float(on[bound]), float(off[bound]), rtol=1e-9)


def test_sampling_with_the_fused_kernel_gives_the_same_bounds(regression_20_2):
    am = regression_20_2
    with am.model:
        # The compiled kernel runs the prior's path (a fitted base's has none).
        runs = {fused: pmb.sample_bdmc(n_steps=60, chains=16, random_seed=4, progressbar=False,
                                       fused_kernel=fused, base="prior")
                for fused in (False, True)}
    off, on = runs[False]["evidence"], runs[True]["evidence"]
    assert on.attrs["fused_kernel"] and not off.attrs["fused_kernel"]
    assert on.attrs["model_evaluations"] == off.attrs["model_evaluations"]
    for bound in ("lower", "upper"):
        np.testing.assert_allclose(float(on[bound]), float(off[bound]), rtol=1e-9)
    np.testing.assert_allclose(runs[True]["annealing"]["acceptance_rate_forward"],
                               runs[False]["annealing"]["acceptance_rate_forward"], rtol=1e-7)


@dataclass
class _StubDensity:
    can_fuse_hmc: bool = True


LONG = -(-FUSED_MIN_LEAPFROG_STEPS // 3)  # transitions of 3 leapfrog steps: just enough


@pytest.mark.parametrize(("setting", "density", "n_transitions", "n_sweeps", "expected"), [
    (None, _StubDensity(), 100, 0, False),
    (None, _StubDensity(), LONG, 0, True),
    (None, _StubDensity(), LONG - 1, 0, False),
    (None, _StubDensity(), 100, FUSED_MIN_SWEEPS, True),  # long Gibbs runs
    (None, _StubDensity(can_fuse_hmc=False), LONG, 0, False),
    (True, _StubDensity(can_fuse_hmc=False), 10, 0, False),  # not available: NumPy kernel
    (True, _StubDensity(), 10, 0, True),
    (False, _StubDensity(), LONG, FUSED_MIN_SWEEPS, False),
])
def test_fused_kernel_is_chosen_from_the_runs_counts(setting, density, n_transitions, n_sweeps,
                                                     expected):
    plan = SimpleNamespace(n_leapfrog=3)
    assert use_fused_kernel(setting, density, plan, n_transitions, n_sweeps) is expected


def test_each_form_of_the_kernel_a_plan_uses_needs_its_own_long_run():
    # Diagonal steps then dense ones: two forms to compile, so twice the steps to pay for them.
    plan = SimpleNamespace(n_leapfrog=3, mass_index=np.array([-1, -1, 0, 1]))
    assert not use_fused_kernel(None, _StubDensity(), plan, LONG)
    assert use_fused_kernel(None, _StubDensity(), plan, 2 * LONG)


def test_principal_metrics_on_a_low_rank_base_run_the_numpy_kernel_even_when_asked():
    # The compiled principal form factors a full-rank base only; the NumPy kernel does both.
    density = _StubDensity()
    for basis, expected in ((np.eye(3), True), (np.eye(3, 1), False)):
        base = GaussianBase(np.zeros(3), np.ones(3), basis, np.full(basis.shape[1], 2.0))
        plan = SimpleNamespace(n_leapfrog=3, principal_metrics=True, base=base)
        assert use_fused_kernel(True, density, plan, 10) is expected


def test_a_seed_gives_the_same_numbers_whatever_this_process_compiled_before():
    # The kernels agree to round-off only, so the default must not take the fused one because
    # an earlier call compiled it: a warm call would then differ from a cold one.
    am = known_evidence.normal_inverse_gamma_regression(20, 2, seed=5)
    with am.model:
        def run(fused_kernel=None):
            return pmb.sample_bdmc(n_steps=60, chains=16, random_seed=4, progressbar=False,
                                   base="prior", fused_kernel=fused_kernel)["evidence"]
        cold = run()
        forced = run(fused_kernel=True)  # compiles the fused kernel in this process
        warm = run()
    assert forced.attrs["fused_kernel"]
    assert not cold.attrs["fused_kernel"] and not warm.attrs["fused_kernel"]
    for bound in ("lower", "upper"):
        assert float(warm[bound]) == float(cold[bound])


def test_the_predicted_wall_time_follows_the_kernel_and_the_workers_chosen():
    timing = KernelTiming(model_call=50e-6, transition=300e-6, sweep=100e-6)
    # NumPy kernel, one group: 1000 transitions and 200 sweeps as timed.
    assert predicted_wall_seconds(timing, 1000, 200, False, 3, 1) == pytest.approx(
        1000 * 300e-6 + 200 * 100e-6)
    # Fused: 1.6 x 3 model calls per transition, the sweeps' compiled saving; two groups at once.
    fused = (1000 * 1.6 * 3 * 50e-6 + 200 * (1 - FUSED_SWEEP_SAVING) * 100e-6) / 2
    assert predicted_wall_seconds(timing, 1000, 200, True, 3, 2) == pytest.approx(fused)
    assert predicted_wall_seconds(None, 1000, 200, True, 3, 2) == 0.0
    # A dense metric's products are not saved by fusing: they add to every leapfrog step.
    dense = KernelTiming(model_call=50e-6, transition=3e-3, metric=1e-3)
    assert predicted_wall_seconds(dense, 1000, 0, True, 3, 1) == pytest.approx(
        1000 * 3 * (1.6 * 50e-6 + 1e-3))


def test_a_group_of_chains_pays_the_part_that_does_not_shrink_with_fewer_chains():
    # Measured on the 1000-step walk's metric: 1.18 ms for 32 chains, 0.84 ms for 16, so
    # 0.5 ms of it is paid by every group; a group of 16 on a worker costs 0.84 ms, not 0.59.
    assert KernelTiming.per_group(1.18e-3, 0.84e-3, 2) == pytest.approx(0.84e-3)
    assert KernelTiming.per_group(1.18e-3, 0.84e-3, 4) == pytest.approx(0.5e-3 + 0.68e-3 / 4)
    assert KernelTiming.per_group(1.0, None, 2) == 0.5           # unmeasured: proportional
    assert KernelTiming.per_group(1.0, 0.5, 2) == 0.5            # proportional, measured
    assert KernelTiming.per_group(1.0, 1.2, 2) == 1.0            # noise: never above all chains
    # Every step dense, the last one (timed) too.
    timing = KernelTiming(model_call=50e-6, transition=3e-3, metric=1.18e-3,
                          model_call_half=25e-6, transition_half=2.5e-3, metric_half=0.84e-3,
                          transition_metric=1.18e-3, transition_metric_half=0.84e-3)
    assert predicted_wall_seconds(timing, 1000, 0, True, 3, 2) == pytest.approx(
        1000 * 3 * (1.6 * 25e-6 + 0.84e-3))
    assert predicted_wall_seconds(timing, 1000, 0, False, 3, 2) == pytest.approx(1000 * 2.5e-3)


def test_the_numpy_prediction_prices_the_plans_dense_steps_not_the_timed_ones():
    # The transition is timed on the last step's kernel. Where that kernel is diagonal but
    # half the steps are dense, each transition adds their average products (stochastic
    # volatility at T=400 in its other form: predicted 29 s, took 45 s) ...
    diagonal_last = KernelTiming(model_call=50e-6, transition=1e-3, metric=0.5e-3)
    assert diagonal_last.numpy_transition(10) == pytest.approx(1e-3 + 10 * 0.5e-3)
    assert predicted_wall_seconds(diagonal_last, 1000, 0, False, 10, 1) == pytest.approx(6.0)
    assert predicted_seconds(diagonal_last, 1000, 0, 10) == pytest.approx(6.0)
    # ... and where it is dense but only half the steps are, the other half saves them.
    dense_last = KernelTiming(model_call=50e-6, transition=11e-3, metric=0.5e-3,
                              transition_metric=1e-3)
    assert dense_last.numpy_transition(10) == pytest.approx(6e-3)
    # All steps like the timed one: the measured transition as it is.
    same = KernelTiming(model_call=50e-6, transition=11e-3, metric=1e-3, transition_metric=1e-3)
    assert same.numpy_transition(10) == pytest.approx(11e-3)
    assert KernelTiming(model_call=50e-6, transition=1e-3).numpy_transition(10) == 1e-3


def test_the_metrics_products_are_timed_on_the_plans_dense_steps_only(monkeypatch):
    from pymc_bdmc.pipeline import execution

    ticks = iter(range(1000))  # a clock that advances one second per reading
    monkeypatch.setattr(execution.time, "perf_counter", lambda: float(next(ticks)))
    x = np.zeros((4, 30))
    assert execution.metric_seconds(x, SimpleNamespace(is_dense=False, mass_index=None)) == 0.0
    # Two products per leapfrog step, each timed at one second, on the share of dense steps.
    half = SimpleNamespace(is_dense=True, mass_index=np.array([-1, 0, 0, -1, -1]))
    full = SimpleNamespace(is_dense=True, mass_index=np.array([-1, 0, 0, 0, 0]))
    assert execution.metric_seconds(x, half) == execution.METRIC_PRODUCTS * 0.5
    assert execution.metric_seconds(x, full) == execution.METRIC_PRODUCTS * 1.0


def test_fused_kernel_setting_is_checked_before_sampling():
    am = known_evidence.normal_inverse_gamma_regression(20, 2, seed=3)
    with am.model, pytest.raises(BDMCInputError, match="fused_kernel"):
        pmb.sample_ais(n_steps=10, fused_kernel="yes")
    with am.model, pytest.raises(BDMCInputError, match="fused_kernel"):
        pmb.sample_bdmc(n_steps=10, method="smc", fused_kernel=True)


def test_the_timing_knows_whether_its_timed_transition_was_dense(monkeypatch):
    from pymc_bdmc.kernels.plan import AnnealingPlan
    from pymc_bdmc.pipeline import execution

    am = known_evidence.normal_inverse_gamma_regression(20, 3, seed=1)
    density = ModelDensity(am.model)
    d = density.n_dim
    x = np.random.default_rng(0).normal(size=(16, d))

    def plan(mass_index):
        n = len(mass_index) - 1
        return AnnealingPlan(np.linspace(0, 1, n + 1), np.full(n + 1, 0.1), np.ones((n + 1, d)),
                             3, 0.0, mass_factors=np.eye(d)[None], mass_index=np.array(mass_index))

    ticks = iter(range(10**6))  # a clock that advances one second per reading
    monkeypatch.setattr(execution.time, "perf_counter", lambda: float(next(ticks)))
    last_diagonal = KernelTiming.measure(density, x, plan([-1, 0, 0, -1]))
    assert last_diagonal.metric > 0 and last_diagonal.transition_metric == 0.0
    last_dense = KernelTiming.measure(density, x, plan([-1, -1, -1, 0]))
    assert last_dense.metric > 0 and last_dense.transition_metric > 0
    assert last_dense.transition_metric_half > 0
    # Priced on every step, not on the plan's share (two of three steps, one of three).
    assert last_diagonal.metric == pytest.approx(execution.METRIC_PRODUCTS * 2 / 3)
    assert last_dense.metric == pytest.approx(execution.METRIC_PRODUCTS / 3)
    assert last_dense.transition_metric == execution.METRIC_PRODUCTS
