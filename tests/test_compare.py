"""Bayes factors and comparison tables against closed-form evidence; plots render."""

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from scipy import stats

import pymc_bdmc as pmb
from pymc_bdmc.compare import evidence_strength

# AIS lower bounds at n_steps=400 on these 1-3 parameter models are within ~0.05 nats; the
# difference of two is held to 0.25.
LOG_BF_TOL = 0.25


def _regression_pair(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(25, 2))
    y = x @ np.array([1.5, -0.5]) + rng.normal(0, 0.7, 25)
    models, truths = {}, {}
    for name, prior_sd in (("tight", 1.0), ("vague", 10.0)):
        with pm.Model() as m:
            w = pm.Normal("w", 0, prior_sd, shape=2)
            pm.Normal("y", pm.math.dot(x, w), 0.7, observed=y)
        models[name] = m
        cov = 0.49 * np.eye(25) + prior_sd**2 * x @ x.T
        truths[name] = stats.multivariate_normal(np.zeros(25), cov).logpdf(y)
    return models, truths


@pytest.fixture(scope="module")
def ais_pair():
    models, truths = _regression_pair()
    results = {}
    for name, m in models.items():
        with m:
            results[name] = pmb.sample_ais(n_steps=400, chains=32, random_seed=3,
                                           progressbar=False)
    return results, truths


def test_bayes_factor_matches_closed_form(ais_pair):
    results, truths = ais_pair
    bf = pmb.bayes_factor(results["tight"], results["vague"])
    exact = truths["tight"] - truths["vague"]
    assert exact > 2  # the vague prior is penalised: the test compares a real difference
    assert abs(bf.log_bf - exact) < LOG_BF_TOL
    assert bf.kinds == ("lower bound", "lower bound")
    # lower bounds alone bound nothing from above: the interval is honest about it
    assert bf.interval == (-np.inf, np.inf)
    assert bf.strength == evidence_strength(exact)


def test_compare_ranks_by_evidence(ais_pair):
    results, truths = ais_pair
    table = pmb.compare({"vague": results["vague"], "tight": results["tight"]})
    assert isinstance(table, pd.DataFrame)
    assert list(table.index) == ["tight", "vague"]
    assert table.loc["tight", "log_bf"] == 0
    assert table.loc["vague", "log_bf"] == pytest.approx(truths["vague"] - truths["tight"],
                                                          abs=LOG_BF_TOL)
    assert set(table["kind"]) == {"lower bound"}


def test_compare_names_the_mapping_it_takes(ais_pair):
    results, _ = ais_pair
    with pytest.raises(pmb.BDMCInputError, match=r"must map model names to results.*got list"):
        pmb.compare([results["vague"], results["tight"]])


def test_bdmc_results_are_refused():
    # The new user's report: bayes_factor of two sample_bdmc results printed a decisive log BF
    # with an inverted interval. Each result refers to data simulated from its own model.
    models, _ = _regression_pair()
    bdmc = {}
    for name, m in models.items():
        with m:
            bdmc[name] = pmb.sample_bdmc(n_steps=20, chains=8, random_seed=1, progressbar=False)
    assert bdmc["tight"]["evidence"].attrs["algorithm"] == "bdmc"
    with pytest.raises(pmb.BDMCInputError, match="sample_bdmc results certify an estimator"):
        pmb.bayes_factor(bdmc["vague"], bdmc["tight"])
    with pytest.raises(pmb.BDMCInputError, match=r"pmb\.calibrate"):
        pmb.compare(bdmc)


def test_calibrated_bayes_factor_carries_the_certificate():
    # Before, a Bayes factor of two calibrate results had the interval [-inf, inf]; now each
    # certified lower bound gets the upper side its calibration measured on simulated data.
    models, truths = _regression_pair()
    results = {}
    for name, m in models.items():
        with m:
            results[name] = pmb.calibrate(tolerance=0.2, n_steps=(50, 200), chains=32,
                                          random_seed=5, progressbar=False)
    bf = pmb.bayes_factor(results["tight"], results["vague"])
    assert bf.kinds == ("certified lower bound", "certified lower bound")
    lo, hi = bf.interval
    assert np.isfinite(lo) and np.isfinite(hi) and lo < bf.log_bf < hi
    assert lo < truths["tight"] - truths["vague"] < hi
    for name, cert in zip(("tight", "vague"), bf.certificates, strict=True):
        cal = results[name]["calibration"]
        assert cert.holds and cert.gap == cal.attrs["certified_gap"]
        assert cert.gap_se == float(cal["gap_se"][-1])
    assert "certified: gap" in str(bf)
    table = pmb.compare(results)
    assert (table["kind"] == "certified lower bound").all()
    assert np.isfinite(table["upper"]).all()


def _evidence_tree(lower, upper, se=0.1):
    ds = xr.Dataset({"lower": lower, "upper": upper, "lower_se": se, "upper_se": se})
    return xr.DataTree.from_dict({"evidence": ds})


def test_intervals_propagate_the_bounds_exactly():
    a = _evidence_tree(-10.0, -9.0)
    b = _evidence_tree(-14.0, -13.5)
    bf = pmb.bayes_factor(a, b)
    assert bf.log_bf == pytest.approx(-9.5 - (-13.75))
    assert bf.interval == pytest.approx((-10.0 - (-13.5), -9.0 - (-14.0)))
    c = _evidence_tree(-12.0, np.nan)  # lower bound only
    table = pmb.compare({"a": a, "b": b, "c": c})
    assert list(table.index) == ["a", "c", "b"]
    assert table.loc["c", "kind"] == "lower bound"
    assert table.loc["c", "log_bf_upper"] == np.inf
    assert table.loc["b", "log_bf_lower"] == pytest.approx(-14.0 - (-9.0))


@pytest.mark.parametrize("log10_bf, label", [(0.3, "not worth more than a bare mention"),
                                             (0.7, "substantial"), (1.5, "strong"),
                                             (3.0, "decisive"), (-3.0, "decisive")])
def test_kass_raftery_scale(log10_bf, label):
    assert evidence_strength(log10_bf * np.log(10)) == label


def test_kl_certificate_is_positive_and_shrinks_with_n_steps():
    am = pmb.known_evidence.linear_regression(n_obs=30, n_coef=4, seed=4)
    bounds = []
    for n_steps in (20, 400):
        values = []
        for seed in range(3):
            with am.model:
                # From the prior, where 20 steps are far too few (a fitted base nearly is
                # this posterior, and its bound is ~0 at any length).
                r = pmb.sample_bdmc(n_steps=n_steps, chains=16, random_seed=seed,
                                    progressbar=False, base="prior")
            values.append(float(r["evidence"]["posterior_kl_bound"]))
        bounds.append(np.mean(values))
    assert bounds[0] > 0 and bounds[1] > 0
    assert bounds[1] < bounds[0] / 3


def test_plots_render_to_png(tmp_path, ais_pair):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from pymc_bdmc import plots

    am = pmb.known_evidence.gamma_poisson(seed=1)
    runs = {}
    for n_steps in (10, 100):
        with am.model:
            runs[n_steps] = pmb.sample_bdmc(n_steps=n_steps, chains=16, random_seed=1,
                                            progressbar=False)
    plots.plot_annealing(runs[100])
    plots.plot_log_weights(runs[100])
    plots.plot_bounds(runs, truth=am.log_evidence_of(runs[100]))
    plots.plot_compare(pmb.compare(ais_pair[0]))
    for i, num in enumerate(plt.get_fignums()):
        path = tmp_path / f"fig{i}.png"
        plt.figure(num).savefig(path)
        assert path.stat().st_size > 1000
    plt.close("all")
