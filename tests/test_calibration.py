"""Calibration: certify on simulated data, then estimate on real data with the same plan."""

import numpy as np
import pytest
import xarray as xr

import pymc_bdmc as pmb


@pytest.fixture(scope="module")
def regression():
    return pmb.known_evidence.linear_regression(n_obs=30, n_coef=4, seed=6)


@pytest.fixture(scope="module")
def calibrated(regression):
    with regression.model:
        # From the prior, whose plan transfers to the real data as it is (a fitted base is
        # refitted there: tests/test_base_path.py).
        return pmb.calibrate(tolerance=0.6, n_steps=(5, 20, 400, 800), chains=16,
                             random_seed=12, progressbar=False, base="prior")


def test_stops_at_the_first_n_steps_within_tolerance(calibrated):
    cal = calibrated["calibration"]
    gaps = cal["gap"].values
    assert cal.attrs["certified"] == 1
    gap_se = cal["gap_se"].values
    assert abs(gaps[-1]) <= 0.6 and gap_se[-1] <= 0.6
    assert np.all((np.abs(gaps[:-1]) > 0.6) | (gap_se[:-1] > 0.6))
    assert cal.attrs["certified_n_steps"] == cal["n_steps"].values[-1]
    assert len(gaps) < 4  # it did stop early (5 and 20 steps are far too few here)


def test_certificate_matches_a_direct_bdmc_run(regression, calibrated):
    cal = calibrated["calibration"]
    with regression.model:
        direct = pmb.sample_bdmc(n_steps=int(cal.attrs["certified_n_steps"]), chains=16,
                                 random_seed=cal.attrs["simulation_seed"], progressbar=False,
                                 base="prior")
    assert float(direct["evidence"]["gap"]) == float(cal["gap"].values[-1])
    # the real-data run used exactly the certified plan
    plan = pmb.AnnealingPlan.from_result(direct)
    xr.testing.assert_equal(calibrated["annealing"]["beta"], direct["annealing"]["beta"])
    np.testing.assert_array_equal(calibrated["annealing"]["step_size"].values, plan.step_size)


def test_real_data_estimate_is_accurate(regression, calibrated):
    # the real-data lower bound is within the certified accuracy (the tolerance) of the truth
    tol = calibrated["calibration"].attrs["tolerance"]
    assert abs(float(calibrated["evidence"]["lower"]) - regression.log_evidence()) < tol
    assert np.array_equal(calibrated["observed_data"]["y"].values, regression.data["y"])


def test_a_large_negative_or_noisy_gap_certifies_nothing():
    # Upper 0.4 nats below lower is noise as large as the tolerance, not a tight sandwich: a
    # signed test once certified 50 steps whose real-data estimate was 1.2 nats off. A small gap
    # measured with a standard error beyond the tolerance is no certificate either: one
    # certified 20 steps whose real-data estimate was 1.46 nats off.
    from pymc_bdmc.estimators import certifies

    assert certifies(0.1, 0.0, 0.2) and certifies(-0.2, 0.0, 0.2)
    assert not certifies(-0.4, 0.0, 0.2) and not certifies(0.4, 0.0, 0.2)
    assert not certifies(np.nan, 0.0, 0.2)
    assert certifies(0.1, 0.2, 0.2)
    assert not certifies(0.1, 0.21, 0.2) and not certifies(0.1, np.nan, 0.2)


def test_uncertified_run_says_so(regression):
    with regression.model:
        r = pmb.calibrate(tolerance=1e-6, n_steps=(5, 10), chains=8, random_seed=1,
                          progressbar=False)
    assert r["calibration"].attrs["certified"] == 0
    assert list(r["calibration"]["n_steps"].values) == [5, 10]


def test_plan_must_match_the_model(regression):
    other = pmb.known_evidence.gamma_poisson(seed=0)
    with regression.model:
        bd = pmb.sample_bdmc(n_steps=10, chains=4, random_seed=0, progressbar=False)
    with pytest.raises(pmb.BDMCInputError, match="same model"):
        with other.model:
            pmb.sample_ais(plan=pmb.AnnealingPlan.from_result(bd), chains=4, progressbar=False)


def test_bad_calibration_arguments(regression):
    with regression.model:
        with pytest.raises(pmb.BDMCInputError, match="increasing"):
            pmb.calibrate(n_steps=(100, 50), progressbar=False)
        with pytest.raises(pmb.BDMCInputError, match="tolerance"):
            pmb.calibrate(tolerance=0, progressbar=False)
        with pytest.raises(pmb.BDMCInputError, match="'auto' or an increasing"):
            pmb.calibrate(n_steps="longer", progressbar=False)


def test_calibrate_takes_one_length_as_an_int(regression):
    # sample_bdmc's n_steps=50 is calibrate's [50]: the same runs, to the bit.
    with regression.model:
        one, listed = (pmb.calibrate(n_steps=n, chains=8, random_seed=2, progressbar=False)
                       for n in (50, [50]))
    assert one["calibration"].attrs["certified_n_steps"] == 50
    assert float(one["evidence"]["lower"]) == float(listed["evidence"]["lower"])
    assert float(one["calibration"]["upper"][-1]) == float(listed["calibration"]["upper"][-1])


def test_calibrate_at_the_defaults_runs_the_search_then_the_real_data_with_its_plan(regression):
    # n_steps="auto": sample_bdmc's search (target 0.5), then sample_ais on the real data with
    # the certified run's plan or, from a fitted base, its length. Closed-form evidence: on
    # seeds 0-2 by hand the real-data estimate was within 0.001 of it.
    with regression.model:
        real = pmb.calibrate(random_seed=1, progressbar=False)
    cal = real["calibration"]
    assert cal.attrs["certified"] == 1 and cal.attrs["tolerance"] == 0.5
    assert abs(cal.attrs["certified_gap"]) <= 0.5
    assert cal["n_steps"].values[-1] == cal.attrs["certified_n_steps"]
    assert np.isfinite(cal["lower"].values[-1]) and np.isfinite(cal["upper"].values[-1])
    assert real["evidence"].attrs["n_steps"] == cal.attrs["certified_n_steps"]
    assert abs(float(real["evidence"]["lower"]) - regression.log_evidence()) < 0.1


def test_discrete_model_calibrates_with_step_methods():
    # No HMC plan to transfer: the real-data run re-tunes PyMC step methods at the certified
    # n_steps, and says so.
    am = pmb.known_evidence.binary_attribute(n_obs=5, seed=2)
    with am.model:
        r = pmb.calibrate(tolerance=5.0, n_steps=(20,), chains=8, random_seed=3,
                          progressbar=False)
    cal = r["calibration"]
    assert cal.attrs["plan_transferred"] == 0 and cal.attrs["certified_n_steps"] == 20
    assert abs(float(r["evidence"]["lower"]) - am.log_evidence()) < 5.0


def _shifted_normal_mean(shift: float, n: int = 40):
    """``mu ~ N(0, 1)``, ``y_i ~ N(mu, 1)``, real data centred at ``shift``; exact evidence."""
    import pymc as pm
    from scipy import stats

    y = shift + np.random.default_rng(0).normal(size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    truth = stats.multivariate_normal(np.zeros(n), np.eye(n) + 1.0).logpdf(y)
    return model, truth


@pytest.mark.parametrize(("shift", "flagged"), [(0.5, False), (12.0, True)])
def test_real_data_harder_than_the_simulated_data_are_flagged(shift, flagged, caplog):
    model, truth = _shifted_normal_mean(shift)
    with model, caplog.at_level("WARNING", logger="pymc_bdmc"):
        # Two transitions per temperature, as the scenario was measured (one makes the
        # flagged estimate 2.2 nats low rather than over 5: flagged all the same).
        r = pmb.calibrate(tolerance=0.5, n_steps=(10, 20, 40), chains=16, random_seed=3,
                          progressbar=False, base="prior", transitions_per_step=2)
    cal = r["calibration"].attrs
    error = float(r["evidence"]["lower"]) - truth
    assert cal["certified"] == 1
    assert cal["real_data_harder"] == int(flagged)
    assert ("look harder" in caplog.text) is flagged
    if flagged:
        # Data 12 prior sds out: 20 steps certify typical simulated data, not these. The flag
        # is right to warn: the real-data estimate is far outside the certified tolerance.
        assert error < -5.0
        assert cal["forward_log_weight_sd_real"] > 4 * cal["forward_log_weight_sd_simulated"]
    else:
        assert abs(error) < 0.5


def test_the_transfer_rule():
    from pymc_bdmc.estimators import harder_than_certified

    assert harder_than_certified(3.0, 1.0, 0.5)       # 3x the spread, bias scale 4.5 nats
    assert not harder_than_certified(1.9, 1.0, 0.5)   # within twice the spread
    assert not harder_than_certified(0.9, 0.3, 0.5)   # 3x, but sd^2/2 = 0.4 < the tolerance
    assert harder_than_certified(np.nan, 1.0, 0.5)    # no finite forward weight at all


def test_fix_must_leave_something_to_anneal():
    model, _ = _shifted_normal_mean(0.0, n=5)
    with model, pytest.raises(pmb.BDMCInputError, match="every free variable"):
        pmb.calibrate(fix={"mu": 0.0}, progressbar=False)
    with model, pytest.raises(pmb.BDMCInputError, match="not free variables"):
        pmb.calibrate(fix={"sigma": 1.0}, progressbar=False)


def test_fix_outside_a_variables_support_is_named():
    # Before: "Drawing from the prior failed (scale < 0) at the variables ['a']", after a compile.
    import pymc as pm

    with pm.Model() as hierarchy:
        mu, tau = pm.Normal("mu", 0.0, 2.0), pm.HalfNormal("tau", 1.0)
        pm.Normal("y", pm.Normal("a", mu, tau, shape=3), 1.0, observed=np.zeros(3))
    with hierarchy, pytest.raises(pmb.BDMCInputError, match=r"'tau' the value -1\.0, outside"):
        pmb.calibrate(fix={"tau": -1.0}, progressbar=False)
    from pymc_bdmc.evidence.calibration import check_fixed_values

    check_fixed_values(hierarchy, {"tau": 0.5, "mu": -3.0})  # inside: nothing raised


def test_holding_the_hard_parameter_fixed_is_flagged_too():
    # ``fix`` simulates from a model with mu held constant: its certificate says nothing about
    # annealing mu, which is what makes the real data (12 prior sds out) hard. The transfer
    # check sees it.
    import pymc as pm

    model, _ = _shifted_normal_mean(12.0)
    y_obs = np.asarray(model.rvs_to_values[model["y"]].data)
    with pm.Model() as two_parameters:
        mu = pm.Normal("mu", 0.0, 1.0)
        noise = pm.HalfNormal("noise", 0.1)
        pm.Normal("y", mu, 1.0 + noise, observed=y_obs)
    with two_parameters:
        r = pmb.calibrate(tolerance=0.5, n_steps=(10, 20), chains=16, random_seed=3,
                          progressbar=False, base="prior", fix={"mu": 11.7})
    cal = r["calibration"].attrs
    assert cal["plan_transferred"] == 0 and cal["certified"] == 1
    assert cal["real_data_harder"] == 1


def test_after_a_certified_search_real_data_that_look_harder_are_searched(monkeypatch):
    # The plan transfers; where its run's log weights spread far more than the certified
    # run's, sample_ais's own search follows (it starts at the certified length and form).
    # A path from a fitted base goes straight to that search.
    import pymc_bdmc.evidence.calibration as calibration

    def run_with(spread):
        return xr.DataTree.from_dict({"evidence": xr.Dataset(
            {"log_weight_forward": ("chain", spread * np.array([-1.0, 1.0] * 4))})})

    calls = []

    def fake_ais(**kw):
        calls.append(kw)
        return run_with(3.0 if "plan" in kw else 0.2)

    monkeypatch.setattr(calibration, "sample_ais", fake_ais)
    monkeypatch.setattr(calibration.AnnealingPlan, "from_result", lambda result: "the plan")
    certified = run_with(0.1)
    certified["evidence"].attrs.update(kernel="hmc", path_start="prior", n_steps=300)
    search = dict(target_gap=0.5, max_time=60.0)
    real, transferred = calibration._estimate_on_real_data(certified, "model", None, 7,
                                                           {"chains": 32}, search=search)
    assert transferred is False and [("plan" in kw, kw.get("target_gap")) for kw in calls] == [
        (True, None), (False, 0.5)]
    assert calls[-1] == dict(model="model", random_seed=7, chains=32, **search)
    # Spread like the certified run's: the transferred plan's run is the answer.
    monkeypatch.setattr(calibration, "sample_ais", lambda **kw: calls.append(kw) or run_with(0.15))
    calls.clear()
    real, transferred = calibration._estimate_on_real_data(certified, "model", None, 7,
                                                           {"chains": 32}, search=search)
    assert transferred is True and len(calls) == 1 and "plan" in calls[0]
    # From a fitted base: the search at once.
    certified["evidence"].attrs["path_start"] = "fitted gaussian"
    calls.clear()
    calibration._estimate_on_real_data(certified, "model", None, 7, {"chains": 32}, search=search)
    assert calls == [dict(model="model", random_seed=7, chains=32, **search)]


def test_the_real_data_run_takes_the_certified_form_chains_and_length(monkeypatch):
    # A search that certified the other form from a fitted base with more chains: the real
    # data re-tune (a fitted base is refitted, and a fitted path is kept), at the certified
    # length, in that form, with those chains; from the prior, the plan itself transfers.
    import pymc_bdmc.evidence.calibration as calibration

    calls = []
    monkeypatch.setattr(calibration, "sample_ais", lambda **kw: calls.append(kw) or "real")
    monkeypatch.setattr(calibration.AnnealingPlan, "from_result", lambda result: "the plan")
    ev = xr.Dataset(attrs={"kernel": "hmc", "path_start": "fitted gaussian", "n_steps": 2000,
                           "reparameterized": "theta as theta_z", "auto_chains": [32, 64]})
    result = xr.DataTree.from_dict({"evidence": ev})
    real, transferred = calibration._estimate_on_real_data(result, "model", None, 7,
                                                           {"chains": 32})
    assert (real, transferred) == ("real", False)
    assert calls[-1] == dict(n_steps=2000, model="model", random_seed=7, chains=64,
                             reparameterize=True, base="fitted")
    # A base the user chose is theirs.
    calibration._estimate_on_real_data(result, "model", None, 7, {"chains": 32, "base": "prior"})
    assert calls[-1]["base"] == "prior"
    ev.attrs["path_start"] = "prior"
    calibration._estimate_on_real_data(xr.DataTree.from_dict({"evidence": ev}), "model", None,
                                       7, {"chains": 32})
    assert calls[-1] == dict(model="model", plan="the plan", random_seed=7, chains=64)
    # A simulation model with fixed variables is another model: no form is carried over.
    calibration._estimate_on_real_data(xr.DataTree.from_dict({"evidence": ev}), "model",
                                       {"mu": 0.0}, 7, {"chains": 32})
    assert "reparameterize" not in calls[-1] and calls[-1]["n_steps"] == 2000
