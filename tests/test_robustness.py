"""Numerical failures and interrupts: reported, never silently poisoning the estimate."""

import logging

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_bdmc as pmb
import pymc_bdmc.parallel.annealing as annealing
import pymc_bdmc.pipeline.pilot as pilot
from pymc_bdmc.algorithms.ais import ais_forward, ais_reverse
from pymc_bdmc.kernels.hmc import HMCParams, hmc_step
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.density import DensityParts, ModelDensity

FAST = dict(n_steps=12, chains=6, random_seed=0, progressbar=False)


@pytest.fixture(scope="module")
def normal_model():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=np.array([0.3, -0.1, 0.8]))
    return model


@pytest.fixture(scope="module")
def normal_density(normal_model):
    return ModelDensity(normal_model)


def _corrupting(transition, bad_step, chain, value):
    """Wrap a transition so that at ``bad_step`` one chain's state becomes ``value``."""

    def apply(rng, x, parts, t):
        x, parts, info = transition(rng, x, parts, t)
        if t == bad_step:
            x = x.copy()
            x[chain] = value
            lik = parts.log_likelihood.copy()
            lik[chain] = np.nan if np.isnan(value) else np.inf
            parts = DensityParts(parts.log_prior, lik, parts.grad_log_prior,
                                 parts.grad_log_likelihood)
        return x, parts, info

    return apply


def _hmc(parts_fn, betas):
    params = HMCParams(0.8, np.ones(1), 3, 0.2)

    def transition(rng, x, parts, t):
        return hmc_step(rng, x, parts, float(betas[t]), params, parts_fn)

    return transition


@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["NaN", "inf"])
def test_forward_chain_failing_mid_run_gets_zero_weight_and_is_reported(normal_density, value):
    betas = np.linspace(0, 1, 11)
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(5, 1))
    kernel = _corrupting(_hmc(normal_density.parts, betas), bad_step=3, chain=2, value=value)
    run = ais_forward(rng, x0, normal_density.parts(x0), betas, kernel)
    assert run.failed_step.tolist() == [-1, -1, 4, -1, -1]  # seen at the next weight update
    assert run.n_failed[4] == 1 and run.n_failed.sum() == 1 and run.n_failed_total == 1
    assert run.log_weight[2] == -np.inf
    assert np.all(np.isfinite(np.delete(run.log_weight, 2)))
    assert np.isfinite(pmb.log_mean_exp(run.log_weight))  # the lower bound survives


@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["NaN", "inf"])
def test_reverse_chain_failing_mid_run_gets_zero_weight_and_is_reported(normal_density, value):
    # Without the guard, an infinite log-likelihood makes the reverse weight +inf and the upper
    # bound -inf (a "bound" below everything); a zero weight only loosens the upper bound.
    betas = np.linspace(0, 1, 11)
    rng = np.random.default_rng(1)
    kernel = _corrupting(_hmc(normal_density.parts, betas), bad_step=6, chain=0, value=value)
    run = ais_reverse(rng, np.array([0.3]), 4, betas, kernel, normal_density.parts)
    assert run.failed_step.tolist() == [6, -1, -1, -1]
    assert run.log_weight[0] == -np.inf
    assert np.isfinite(-pmb.log_mean_exp(run.log_weight))


def test_hmc_never_accepts_an_infinite_density(normal_density):
    def parts_fn(x):
        parts = normal_density.parts(x)
        singular = x[:, 0] > 0.5
        return DensityParts(parts.log_prior, np.where(singular, np.inf, parts.log_likelihood),
                            parts.grad_log_prior, parts.grad_log_likelihood)

    rng = np.random.default_rng(2)
    x = np.full((200, 1), -0.5)
    parts = parts_fn(x)
    for _ in range(20):
        x, parts, info = hmc_step(rng, x, parts, 1.0, HMCParams(1.0, np.ones(1), 3, 0.2),
                                  parts_fn)
    assert np.all(x[:, 0] <= 0.5) and np.all(np.isfinite(parts.log_likelihood))


def _singular_model():
    # A likelihood with a +inf "singularity" region the posterior can reach.
    def logp(value, mu):
        return pt.switch(pt.gt(mu, 0.8), np.inf, pm.logp(pm.Normal.dist(mu, 1.0), value))

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 0.3)
        pm.CustomDist("y", mu, logp=logp, observed=np.array([2.0, 2.5, 3.0]),
                      random=lambda mu, rng=None, size=None: rng.normal(mu, 1.0, size))
    return model


def test_singular_density_is_rejected_and_counted_not_propagated(caplog):
    # Before HMC refused non-finite proposals, the pilot accepted +inf states and its log Z was
    # inf; now such proposals are rejected and reported as divergences.
    with _singular_model(), caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        result = pmb.sample_ais(**FAST)
    ev = result["evidence"]
    assert np.isfinite(float(ev.lower)) and np.isfinite(result["evidence"].attrs["pilot_log_z"])
    assert int(ev.n_failed_forward) == 0
    assert int(ev.n_divergent_forward) == int(result["annealing"].n_divergent_forward.sum()) > 0
    assert "divergent HMC trajectories in the forward run" in caplog.text


def test_failed_chains_reach_the_result_and_the_log(normal_model, monkeypatch, caplog):
    original = AnnealingPlan.transition

    def corrupted(self, parts_fn, fused=None, discrete=None, moves=None):
        return _corrupting(original(self, parts_fn, fused, discrete, moves), bad_step=5, chain=1,
                           value=np.nan)

    monkeypatch.setattr(AnnealingPlan, "transition", corrupted)
    with normal_model, caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(**FAST)
    ev = result["evidence"]
    for direction, step in (("forward", 6), ("reverse", 5)):
        assert int(ev[f"n_failed_{direction}"]) == 1
        assert ev[f"failed_step_{direction}"].values.tolist() == [-1, step, -1, -1, -1, -1]
        assert int(result["annealing"][f"n_failed_{direction}"].sum()) == 1
        assert f"1 of 6 {direction} chains reached a non-finite state" in caplog.text
    assert ev.log_weight_forward.values[1] == -np.inf
    assert np.isfinite(float(ev.lower)) and np.isfinite(float(ev.upper))


# -- interrupts ------------------------------------------------------------------------------------


def _interrupting(run, after):
    """Wrap an AIS runner so that Ctrl-C arrives after ``after`` annealing steps."""

    def wrapped(*args, on_step=None, **kwargs):
        done = []

        def step():
            on_step()
            done.append(1)
            if len(done) == after:
                raise KeyboardInterrupt

        return run(*args, on_step=step, **kwargs)

    return wrapped


def test_interrupt_during_reverse_returns_the_lower_bound(normal_model, monkeypatch, caplog):
    monkeypatch.setattr(annealing, "ais_reverse", _interrupting(annealing.ais_reverse, 5))
    with normal_model, caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(**FAST)
    ev = result["evidence"]
    assert np.isfinite(float(ev.lower))
    assert np.isnan(float(ev.upper)) and np.isnan(float(ev.gap))
    assert "log_weight_reverse" not in ev
    assert "step 5 of 12" in ev.attrs["interrupted"]
    assert "Interrupted during reverse AIS (step 5 of 12)" in caplog.text
    # the lower bound is exactly what an uninterrupted run gives
    monkeypatch.undo()
    with normal_model:
        full = pmb.sample_bdmc(**FAST)
    assert float(full["evidence"].lower) == float(ev.lower)
    assert "interrupted" not in full["evidence"].attrs


@pytest.mark.parametrize("phase, where", [("forward", "during forward AIS at step 4 of 12"),
                                          ("pilot", "during pilot tuning")])
def test_interrupt_before_the_forward_run_ends_returns_nothing(normal_model, monkeypatch, caplog,
                                                               phase, where):
    if phase == "forward":
        monkeypatch.setattr(annealing, "ais_forward", _interrupting(annealing.ais_forward, 4))
    else:
        def tune_plan(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(pilot, "tune_plan", tune_plan)
    with normal_model, caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        with pytest.raises(KeyboardInterrupt):
            pmb.sample_bdmc(**FAST)
    assert f"Interrupted {where}: no bound is valid" in caplog.text
    assert "nothing is returned" in caplog.text


def test_divergence_totals_are_in_the_result(normal_model):
    with normal_model:
        result = pmb.sample_bdmc(**FAST)
    ev, ann = result["evidence"], result["annealing"]
    assert int(ev.n_divergent_forward) == int(ann.n_divergent_forward.sum())
    assert int(ev.n_divergent_reverse) == int(ann.n_divergent_reverse.sum())
    assert int(ev.n_failed_forward) == int(ev.n_failed_reverse) == 0
    assert np.all(ev.failed_step_forward.values == -1)


def test_healthy_runs_report_no_failures(normal_density):
    betas = np.linspace(0, 1, 6)
    x0 = np.random.default_rng(3).normal(size=(4, 1))
    run = ais_forward(np.random.default_rng(4), x0, normal_density.parts(x0), betas,
                      _hmc(normal_density.parts, betas))
    assert run.n_failed_total == 0 and np.all(run.failed_step == -1)
    assert np.all(np.isfinite(run.log_weight))


def test_theta_star_deep_in_a_funnel_neck_is_certified_by_the_scale_moves(caplog):
    # Seed 4 of the 60-step random walk simulates sigma* = 0.001: theta* sits deep in the
    # funnel's neck. With HMC alone the reverse chains could not leave it (acceptance 0.00
    # against 0.94 forward near beta = 1; gap 6 nats at 300 steps, 5.5 at 24000). The scale
    # moves carry the walk with sigma out of the neck: measured gap 0.13 at 600 steps (0.13 and
    # 0.33 with the curvature's difference step 10% smaller or larger; 0.29-0.65 at 300 steps,
    # where the pilot's curvature noise, cut since 13144d2, once gave 0.22).
    from pymc_bdmc import known_evidence

    walk = known_evidence.gaussian_random_walk(60)
    with walk.model, caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(n_steps=600, random_seed=4, progressbar=False)
    truth = walk.log_evidence({"y": result["observed_data"]["y"].values})
    ev = result["evidence"]
    assert result["annealing"].attrs["scale_moves"] == 1
    assert abs(float(ev["gap"])) < 0.5
    assert abs(float(ev["lower"]) - truth) < 0.5 and abs(float(ev["upper"]) - truth) < 0.5
    assert "reverse chains hardly moved" not in caplog.text


def test_reverse_chains_stuck_at_theta_star_are_reported(caplog):
    # The same kernels on the same temperatures: reverse chains that accept nothing near
    # beta = 1 while the forward chains move are stuck where theta* is (acceptances as
    # measured on the walk above with HMC alone).
    from pymc_bdmc.algorithms.ais import AISRun
    from pymc_bdmc.estimators import evidence_bounds
    from pymc_bdmc.pipeline.diagnostics import log_ais_diagnostics

    def run(acceptance, log_w):
        n = len(log_w)
        parts = DensityParts(np.zeros(n), np.zeros(n), np.zeros((n, 1)), np.zeros((n, 1)))
        rates = np.concatenate([[np.nan], np.full(300, acceptance)])
        return AISRun(log_w, np.zeros((n, 1)), parts, rates, np.zeros(301),
                      np.zeros(301, dtype=int), np.zeros(301, dtype=int), np.full(n, -1))

    rng = np.random.default_rng(0)
    forward = run(0.94, rng.normal(-40.0, 0.3, 8))
    for acceptance, stuck in ((0.00, True), (0.9, False)):
        caplog.clear()
        reverse = run(acceptance, rng.normal(34.0, 0.3, 8))
        bounds = evidence_bounds(rng, forward.log_weight, reverse.log_weight)
        with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
            log_ais_diagnostics(bounds, forward, reverse)
        assert ("reverse chains hardly moved" in caplog.text) is stuck


def test_the_stuck_warning_names_the_coordinate_of_theta_star_far_from_the_forward_chains(
        caplog):
    from pymc_bdmc.algorithms.ais import AISRun
    from pymc_bdmc.estimators import evidence_bounds
    from pymc_bdmc.pipeline.diagnostics import (
        OUTLYING_SCORE,
        log_ais_diagnostics,
        outlying_coordinate,
    )

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3)) * [1.0, 2.0, 0.0]  # the last coordinate never moved
    median, mad = np.median(x, axis=0), np.median(np.abs(x - np.median(x, axis=0)), axis=0)
    # theta* 6 robust standard deviations out in the second coordinate, far in the third,
    # whose forward spread is zero and which is therefore left out.
    theta = median + np.array([1.0 * 1.4826 * mad[0], -6.0 * 1.4826 * mad[1], 50.0])
    index, score = outlying_coordinate(theta, x)
    assert index == 1 and score == pytest.approx(-6.0, abs=1e-12)
    assert outlying_coordinate(median + 0.9 * OUTLYING_SCORE * 1.4826 * mad, x) is None

    def run(acceptance, log_w, states):
        n = len(log_w)
        parts = DensityParts(np.zeros(n), np.zeros(n), np.zeros((n, 3)), np.zeros((n, 3)))
        rates = np.concatenate([[np.nan], np.full(300, acceptance)])
        return AISRun(log_w, states, parts, rates, np.zeros(301), np.zeros(301, dtype=int),
                      np.zeros(301, dtype=int), np.full(n, -1))

    forward = run(0.94, rng.normal(-40.0, 0.3, 64), x)
    reverse = run(0.0, rng.normal(34.0, 0.3, 64), np.tile(theta, (64, 1)))
    bounds = evidence_bounds(rng, forward.log_weight, reverse.log_weight)
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        log_ais_diagnostics(bounds, forward, reverse, theta=theta, labels=["a", "b[0]", "c"])
    assert "Its farthest coordinate is b[0], -6.0 robust standard deviations" in caplog.text


def test_divergences_near_the_prior_are_pointed_at_the_priors_geometry(caplog):
    # An AR(2) with Normal(0, 0.5) coefficients over 80 steps (explosive prior draws) diverged
    # at 10992 of 11000 steps as written, most at beta 2e-38; the warning says where that comes
    # from (its other form, pm.AR non-centred, certified).
    from pymc_bdmc.algorithms.ais import AISRun
    from pymc_bdmc.estimators import evidence_bounds
    from pymc_bdmc.pipeline.diagnostics import (
        PRIOR_END_BETA,
        log_ais_diagnostics,
        prior_end_divergences,
    )

    betas = np.concatenate([[0.0], np.geomspace(1e-8, 1.0, 300)])
    early = np.zeros(301, dtype=int)
    early[1:100] = 3  # below 1e-5
    early[200:] = 1
    late = np.zeros(301, dtype=int)
    late[250:] = 4
    assert prior_end_divergences(early, betas) and not prior_end_divergences(late, betas)
    assert not prior_end_divergences(np.zeros(301, dtype=int), betas)
    assert np.all(betas[1:100] < PRIOR_END_BETA)

    def run(n_divergent):
        parts = DensityParts(np.zeros(8), np.zeros(8), np.zeros((8, 1)), np.zeros((8, 1)))
        rates = np.concatenate([[np.nan], np.full(300, 0.9)])
        return AISRun(np.zeros(8), np.zeros((8, 1)), parts, rates, np.zeros(301), n_divergent,
                      np.zeros(301, dtype=int), np.full(8, -1))

    rng = np.random.default_rng(0)
    for n_divergent, near_prior in ((early, True), (late, False)):
        caplog.clear()
        forward = run(n_divergent)
        bounds = evidence_bounds(rng, rng.normal(size=8), None)
        with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
            log_ais_diagnostics(bounds, forward, None, betas=betas)
        assert "divergent HMC trajectories in the forward run" in caplog.text
        assert ("near the prior" in caplog.text) is near_prior
    # On a path from a fitted Gaussian the target there is the Gaussian, not the prior.
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        log_ais_diagnostics(bounds, run(early), None, betas=betas, from_prior=False)
    assert "near the prior" not in caplog.text
    assert "near the path's start" in caplog.text and "fitted Gaussian" in caplog.text
