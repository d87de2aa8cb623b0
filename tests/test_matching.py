"""Data-matched simulation: the selected theta* stays an exact posterior sample, the selected
data are the nearest, and sample_bdmc/calibrate certify on them."""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.errors import SimulatedDataOverflow
from pymc_bdmc.model.checks import BDMCInputError
from pymc_bdmc.model.simulate import JointDraw
from pymc_bdmc.pipeline.matching import data_summaries, guarded_draw, matched_draw, n_candidates

N_OBS, PRIOR_SD, NOISE_SD = 5, 2.0, 1.0


class _ConjugateSimulator:
    """``mu ~ N(0, 2)``, ``y_i ~ N(mu, 1)``: exact joint draws, without PyMC (fast)."""

    def __init__(self, fail_every: int = 0):
        self.fail_every, self.calls = fail_every, 0

    def draw_joint(self, rng):
        self.calls += 1
        mu = rng.normal(0.0, PRIOR_SD)
        y = rng.normal(mu, NOISE_SD, N_OBS)
        if self.fail_every and self.calls % self.fail_every == 0:
            raise SimulatedDataOverflow("simulated data not finite")
        return JointDraw(np.array([mu]), {"mu": np.array(mu)}, {"y": y})


def _posterior_residual(draw: JointDraw) -> float:
    """``(mu* - E[mu | y*]) / sd[mu | y*]``: N(0, 1) when mu* is a posterior sample of y*."""
    precision = 1 / PRIOR_SD**2 + N_OBS / NOISE_SD**2
    mean = draw.observed["y"].sum() / NOISE_SD**2 / precision
    return (float(draw.free["mu"]) - mean) * np.sqrt(precision)


def test_the_selected_theta_is_an_exact_posterior_sample_of_the_selected_data():
    # Real data far out (mean 4, two prior sds): the selected data sets are atypical, yet the
    # selected mu* given them is posterior-distributed, because the choice saw only the data.
    rng = np.random.default_rng(0)
    real = {"y": np.full(N_OBS, 4.0)}
    residuals = [_posterior_residual(matched_draw(_ConjugateSimulator(), real, 20, rng).truth)
                 for _ in range(600)]
    assert stats.kstest(residuals, "norm").pvalue > 0.01
    # Test of the test: choosing by the parameter instead (mu nearest 4) is not exact.
    biased = []
    for _ in range(600):
        draws = [_ConjugateSimulator().draw_joint(rng) for _ in range(20)]
        biased.append(_posterior_residual(min(draws, key=lambda d: abs(d.free["mu"] - 4.0))))
    assert stats.kstest(biased, "norm").pvalue < 1e-6


def test_the_nearest_data_set_is_selected_and_failed_candidates_are_dropped():
    rng = np.random.default_rng(1)
    real = {"y": np.linspace(2.0, 3.0, N_OBS)}
    matched = matched_draw(_ConjugateSimulator(fail_every=3), real, 30, rng)
    assert matched.n_candidates == 30 and matched.distance <= matched.median_distance
    # Re-drawing the same candidates: none of the finite ones is nearer.
    again = np.random.default_rng(1)
    simulator, draws = _ConjugateSimulator(fail_every=3), []
    for _ in range(30):
        try:
            draws.append(simulator.draw_joint(again))
        except BDMCInputError:
            pass
    assert len(draws) == 20
    summaries = np.stack([data_summaries(d.observed) for d in draws])
    target = data_summaries(real)
    spread = 1.4826 * np.median(np.abs(summaries - np.median(summaries, axis=0)), axis=0)
    distances = np.sqrt(np.mean(((summaries - target) / spread) ** 2, axis=1))
    assert matched.distance == pytest.approx(distances.min(), rel=1e-12)
    np.testing.assert_array_equal(matched.truth.observed["y"],
                                  draws[int(np.argmin(distances))].observed["y"])
    with pytest.raises(BDMCInputError, match="not finite"):
        matched_draw(_ConjugateSimulator(fail_every=1), real, 5, rng)


def test_the_default_guard_keeps_theta_an_exact_posterior_sample():
    # With a factor of 1 the guard replaces about half the draws here; the kept mu* is still
    # posterior-distributed given the kept data, since the rule reads the data alone.
    rng = np.random.default_rng(3)
    real = {"y": np.full(N_OBS, 4.0)}
    residuals, redrawn = [], 0
    for _ in range(600):
        chosen = guarded_draw(_ConjugateSimulator(), real, rng, rng, n=20, factor=1.0)
        residuals.append(_posterior_residual(chosen.truth))
        redrawn += chosen.redrawn
    assert 150 < redrawn < 450
    assert stats.kstest(residuals, "norm").pvalue > 0.01


def test_the_guard_keeps_the_first_draw_unless_its_data_are_far_out_or_overflow():
    real = {"y": np.zeros(N_OBS)}
    kept = guarded_draw(_ConjugateSimulator(), real, np.random.default_rng(4),
                        np.random.default_rng(5), n=30)
    alone = _ConjugateSimulator().draw_joint(np.random.default_rng(4))
    np.testing.assert_array_equal(kept.truth.observed["y"], alone.observed["y"])
    assert kept.redrawn == 0 and kept.distance < 10
    assert kept.attrs() == {"data_matched": 0, "data_match_distance": kept.distance,
                            "data_match_median_distance": kept.median_distance,
                            "data_redrawn": 0}
    # Real data 40 prior sds out: every draw is far, and the first no farther than the rest.
    far = {"y": np.full(N_OBS, 80.0)}
    assert guarded_draw(_ConjugateSimulator(), far, np.random.default_rng(4),
                        np.random.default_rng(5), n=30).redrawn == 0
    # The first draw's data overflow: the nearest finite candidate instead.
    first_fails = _ConjugateSimulator(fail_every=31)
    first_fails.calls = 30
    drawn = guarded_draw(first_fails, real, np.random.default_rng(4), np.random.default_rng(5),
                         n=30)
    assert first_fails.calls == 31 + 30 and drawn.redrawn == 1 and drawn.n_candidates == 30
    assert np.all(np.isfinite(drawn.truth.observed["y"]))
    with pytest.raises(SimulatedDataOverflow):
        guarded_draw(_ConjugateSimulator(fail_every=1), real, np.random.default_rng(4),
                     np.random.default_rng(5), n=30)


def test_summaries_are_mean_sd_and_roughness_along_the_last_axis():
    y = np.array([[0.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(data_summaries({"b": np.array([2.0]), "a": y}),
                               [y.mean(), y.std(), 0.75, 2.0, 0.0])


@pytest.mark.parametrize("bad", [1, -2, 2.5, "yes"])
def test_bad_match_data_is_refused_before_sampling(bad):
    assert n_candidates(True) == 100 and n_candidates(False) == 0 and n_candidates(7) == 7
    exact = known_evidence.linear_regression(n_obs=10, n_coef=2)
    with exact.model, pytest.raises(BDMCInputError, match="match_data"):
        pmb.sample_bdmc(match_data=bad, progressbar=False)


def test_sample_bdmc_sandwiches_the_exact_evidence_of_the_matched_data():
    # Monte Carlo tolerance: 300 steps, 32 chains on a 2-coefficient regression; both bounds
    # were within 0.01 of the truth by hand on seeds 0-2.
    exact = known_evidence.linear_regression(n_obs=10, n_coef=2, seed=3)
    with exact.model:
        result = pmb.sample_bdmc(n_steps=300, match_data=40, random_seed=2, progressbar=False)
    evidence = result["evidence"]
    assert evidence.attrs["data_matched"] == 40
    assert evidence.attrs["data_match_distance"] <= evidence.attrs["data_match_median_distance"]
    truth = exact.log_evidence_of(result)
    assert abs(float(evidence["lower"]) - truth) < 0.1
    assert abs(float(evidence["upper"]) - truth) < 0.1
    # The data certified on are the nearest of the 40 to the model's own, not the model's own.
    simulated = result["observed_data"]["y"].values
    assert not np.allclose(simulated, exact.data["y"])


def test_the_step_method_path_simulates_matched_data_too():
    import pymc as pm

    with pm.Model():
        k = pm.Poisson("k", 3.0)  # an unbounded discrete latent, given to PyMC's Metropolis
        pm.Normal("y", k, 1.0, observed=np.array([2.5, 3.1, 2.2]))
        result = pmb.sample_bdmc(n_steps=30, chains=4, match_data=10, random_seed=0,
                                 progressbar=False, cores=1, step=pm.Metropolis([k]))
    evidence = result["evidence"]
    assert evidence.attrs["kernel"] == "pymc_step_methods"
    assert evidence.attrs["data_matched"] == 10
    assert evidence.attrs["data_match_distance"] <= evidence.attrs["data_match_median_distance"]


def _observed_ar1(n_steps: int = 100):
    y = np.zeros(n_steps)
    noise = np.random.default_rng(0).normal(size=n_steps)
    for t in range(1, n_steps):
        y[t] = 0.7 * y[t - 1] + noise[t]
    with pm.Model() as model:
        rho = pm.Normal("rho", 0.0, 1.0)
        pm.AR("y", rho=[rho], sigma=pm.HalfNormal("sigma", 1.0),
              init_dist=pm.Normal.dist(0.0, 1.0), observed=y, shape=n_steps)
    return model


def test_an_explosive_simulated_series_is_replaced_by_default_and_kept_on_request():
    # rho ~ Normal(0, 1) drew -1.93 on this seed: a series of order 1e28 against real data of
    # order 1. Kept (match_data=False), the sandwich was off by astronomical amounts; replaced
    # by the nearest of 100 draws, it certifies.
    settings = dict(n_steps=200, chains=16, random_seed=2, progressbar=False)
    with _observed_ar1():
        guarded = pmb.sample_bdmc(**settings)
        plain = pmb.sample_bdmc(match_data=False, **settings)
    assert abs(float(plain["generating_values"]["rho"])) > 1.5
    assert np.abs(plain["observed_data"]["y"].values).max() > 1e20
    assert guarded["evidence"].attrs["data_redrawn"] == 1
    assert abs(float(guarded["generating_values"]["rho"])) < 1.0
    assert abs(float(guarded["evidence"]["gap"])) < 0.5


def test_the_default_leaves_a_typical_draw_and_its_results_as_they_were():
    exact = known_evidence.linear_regression(20, 2, seed=0)
    settings = dict(n_steps=50, chains=8, random_seed=4, progressbar=False)
    with exact.model:
        guarded = pmb.sample_bdmc(**settings)
        plain = pmb.sample_bdmc(match_data=False, **settings)
    assert guarded["evidence"].attrs["data_redrawn"] == 0
    for name in ("lower", "upper"):
        assert float(guarded["evidence"][name]) == float(plain["evidence"][name])


def test_an_uncertified_search_names_simulated_data_far_from_the_real_data():
    from pymc_bdmc.pipeline.auto_steps import far_data_advice

    far = {"data_matched": 0, "data_match_distance": 5.0, "data_match_median_distance": 1.2}
    assert "5.0 robust sds from yours" in far_data_advice(far)
    assert "match_data=True" in far_data_advice(far)
    assert far_data_advice({**far, "data_match_distance": 3.5}) == ""  # within 3 x the median
    assert far_data_advice({**far, "data_matched": 100}) == ""          # already matched
    assert far_data_advice({}) == ""                                    # match_data=False
