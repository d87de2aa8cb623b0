"""sample_ais(n_steps="auto"): lengthen until the lower bound stops moving, on the real data."""

import logging
import time

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.pipeline.lower_bound_search import CertifiedLength, LowerBoundSearch


def _fake(bias: float, calls: list, se: float = 0.01, log_z: float = -10.0):
    """Runs whose lower bound is ``log_z - bias / n_steps`` (the 1/n decay), with ``se``."""

    def run(attempt):
        calls.append(attempt.n_steps if attempt.chains is None
                     else (attempt.n_steps, attempt.chains))
        ev = xr.Dataset({"lower": log_z - bias / attempt.n_steps, "lower_se": se})
        ev.attrs.update(n_steps=attempt.n_steps, chains=attempt.chains or 32, pilot_time=0.0)
        return xr.DataTree.from_dict({"evidence": ev})

    return run


def _search(run, **kwargs):
    kwargs.setdefault("target_gap", 0.5)
    kwargs.setdefault("max_time", None)
    return LowerBoundSearch(run, started=time.perf_counter(), **kwargs).run()


def test_a_bound_that_stops_moving_stops_the_search():
    # bias 500 / n: -0.5 at 1000 steps, -0.25 at 2000, whose move (0.25) is the bias left.
    calls = []
    result = _search(_fake(500.0, calls))
    assert calls == [1000, 2000]
    attrs = result["evidence"].attrs
    assert attrs["converged"] == 1 and attrs["auto_stop"] == "converged"
    np.testing.assert_allclose(attrs["auto_bias_left"][1], 0.25)


def test_a_bound_far_from_converged_jumps_to_the_length_decay_predicts():
    # bias 5000 / n: moves 2.5 from 1000 to 2000 steps, so 2.5 nats are left at 2000, and
    # 1/n decay asks for 2000 * 2.5 / 0.5 = 10000 steps; there, 2.0 nats moved over 8000
    # steps leave 2.0 * 2000 / 8000 = 0.5: converged.
    calls = []
    result = _search(_fake(5000.0, calls))
    assert calls == [1000, 2000, 10000]
    assert result["evidence"].attrs["converged"] == 1


def test_a_small_move_measured_too_noisily_is_measured_with_more_chains():
    calls = []
    _search(_fake(500.0, calls, se=0.5))  # the move's noise, 0.7, is above the target
    assert calls[:2] == [1000, 2000]
    assert calls[2][0] == 2000 and calls[2][1] >= 64  # (0.7 / 0.5)^2 times the chains


def test_a_length_certified_by_bdmc_runs_once():
    calls = []
    result = _search(_fake(500.0, calls), known=CertifiedLength(300, 64, False))
    assert calls == [(300, 64)]
    attrs = result["evidence"].attrs
    assert attrs["converged"] == 1 and "certified by BDMC" in attrs["auto_stop"]


def test_the_budget_stops_the_search_and_the_warning_says_what_to_do(caplog):
    def slow(attempt):
        time.sleep(attempt.n_steps * 1e-4)
        return _fake(1e6, [])(attempt)

    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = _search(slow, max_time=0.35)
    assert result["evidence"].attrs["converged"] == 0
    assert "max_time" in result["evidence"].attrs["auto_stop"]
    assert "pmb.calibrate()" in caplog.text


@pytest.mark.parametrize("make, most", [
    (lambda: known_evidence.linear_regression(n_obs=50, n_coef=5, seed=1), 300),
    (lambda: known_evidence.gaussian_random_walk(60), None),
])
def test_sample_ais_at_its_defaults_is_within_half_a_nat(make, most):
    # A 5-coefficient regression needs 100 steps (then 200 to see it stop moving), not the
    # 1000 every model got before; a 60-step random walk needs more. Measured errors at
    # random_seed=4: -0.01 and -0.03.
    am = make()
    with am.model:
        result = pmb.sample_ais(random_seed=4, progressbar=False)
    attrs = result["evidence"].attrs
    assert attrs["converged"] == 1
    if most is not None:
        assert sum(attrs["auto_n_steps"]) <= most
    assert abs(float(result["evidence"]["lower"]) - am.log_evidence()) < 0.5


def test_after_a_certified_bdmc_search_sample_ais_runs_its_length():
    am = known_evidence.linear_regression(n_obs=30, n_coef=3, seed=2)
    with pm.Model() as other:
        pm.Normal("y", pm.Normal("mu"), 1.0, observed=np.zeros(3))
    with am.model:
        bdmc = pmb.sample_bdmc(chains=16, random_seed=1, progressbar=False)
        ais = pmb.sample_ais(random_seed=2, progressbar=False)
    assert bdmc["evidence"].attrs["certified"] == 1
    attrs = ais["evidence"].attrs
    np.testing.assert_array_equal(attrs["auto_n_steps"], [bdmc["evidence"].attrs["n_steps"]])
    assert attrs["chains"] == 32  # the certified run's 16 are fewer than sample_ais's own
    with other:  # another model has no certified length
        assert "certified" not in pmb.sample_ais(random_seed=3, progressbar=False)[
            "evidence"].attrs["auto_stop"]
