import numpy as np
import pytest

from pymc_bdmc.estimators import evidence_bounds, importance_ess, log_mean_exp
from pymc_bdmc.resampling import systematic_resample

EXACT = 1e-12


def test_log_mean_exp_is_stable_and_exact():
    a = np.array([-1000.0, -1001.0, -1002.0])
    expected = -1000.0 + np.log(np.mean(np.exp([0.0, -1.0, -2.0])))
    assert log_mean_exp(a) == pytest.approx(expected, abs=EXACT)
    assert log_mean_exp(np.array([-np.inf, 0.0])) == pytest.approx(np.log(0.5), abs=EXACT)


def test_importance_ess_limits():
    assert importance_ess(np.zeros(10)) == pytest.approx(10)
    assert importance_ess(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(1)
    assert importance_ess(np.full(3, -np.inf)) == 0


def test_bounds_use_the_right_average_for_each_direction():
    rng = np.random.default_rng(0)
    fwd = np.array([-10.0, -11.0, -12.5])
    rev = np.array([9.0, 10.5, 11.0])  # reverse log weights estimate -log Z
    b = evidence_bounds(rng, fwd, rev, confidence=0.95)
    assert b.lower == pytest.approx(log_mean_exp(fwd), abs=EXACT)
    # -logmeanexp(rev), NOT logmeanexp(-rev)
    assert b.upper == pytest.approx(-log_mean_exp(rev), abs=EXACT)
    assert b.upper != pytest.approx(log_mean_exp(-rev))
    assert b.gap == pytest.approx(b.upper - b.lower, abs=EXACT)
    # The bounds come from independent chains: their standard errors add in quadrature.
    assert b.gap_se == pytest.approx(np.sqrt(b.lower_se**2 + b.upper_se**2), abs=EXACT)
    assert b.lower_mean_log_weight == pytest.approx(fwd.mean())
    assert b.upper_mean_log_weight == pytest.approx(-rev.mean())
    # Markov: P(log Zhat > log Z + b) < e^-b, so the 95% slack is log(20)
    assert b.lower_markov == pytest.approx(b.lower - np.log(20), abs=EXACT)
    assert b.upper_markov == pytest.approx(b.upper + np.log(20), abs=EXACT)
    # log-mean-exp bounds are tighter than the mean-log-weight ones (Jensen)
    assert b.lower >= b.lower_mean_log_weight and b.upper <= b.upper_mean_log_weight
    assert "gap" in str(b)


def test_forward_only_bounds_have_nan_upper():
    b = evidence_bounds(np.random.default_rng(0), np.zeros(4))
    assert np.isnan(b.upper) and np.isnan(b.gap) and b.lower == 0


def test_systematic_resampling_counts_are_within_one_of_expectation():
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(50))
    for _ in range(20):
        counts = np.bincount(systematic_resample(rng, w, 50), minlength=50)
        assert np.all(np.abs(counts - 50 * w) < 1 + 1e-9)
        assert counts.sum() == 50
