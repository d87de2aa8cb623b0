"""The rules of pmb.compare / pmb.bayes_factor on hand-built results: exact identities.

Which results compare (the same observed data, never BDMC runs on their own simulated data),
the one evidence layout they are read in, intervals that are never inverted, the certificate a
calibrate result carries, and posterior model probabilities with their bounds.
"""

import numpy as np
import pytest
import xarray as xr
from evidence_trees import DATA, calibrated_tree, evidence_tree
from scipy.special import softmax

import pymc_bdmc as pmb
from pymc_bdmc.compare import CERTIFICATE_SE_FACTOR, model_probabilities

# -- which results compare -------------------------------------------------------------------

def test_results_on_different_observed_data_are_refused():
    a, b = evidence_tree(-10.0), evidence_tree(-12.0, data=DATA + np.array([0, 0, 1e-9]))
    with pytest.raises(pmb.BDMCInputError, match="same names and shapes, different values"):
        pmb.bayes_factor(a, b)
    with pytest.raises(pmb.BDMCInputError, match=r"'b': y \(4,\).*pmb\.calibrate"):
        pmb.compare({"a": a, "b": evidence_tree(-12.0, data=np.append(DATA, 1.0))})
    with pytest.raises(pmb.BDMCInputError, match="different observed data"):  # another name
        pmb.compare({"a": a, "b": evidence_tree(-12.0, observed_data=xr.Dataset({"z": ("i", DATA)}),
                                        data=None)})
    # The same values as integers or floats, under other dims, are the same data.
    ints = np.array([1, 0, 3])
    same = evidence_tree(-12.0, data=ints.astype(float),
                         observed_data=xr.Dataset({"y": ("obs", ints)}))
    assert pmb.bayes_factor(evidence_tree(-10.0, data=ints), same).log_bf == pytest.approx(2.0)


@pytest.mark.parametrize("marker", ["algorithm", "generating_values"])
def test_results_on_simulated_data_are_refused(marker):
    # The user's report: two sample_bdmc results gave "log BF = -40.434, decisive". Each refers
    # to data simulated from its own model; even one result against itself is refused.
    if marker == "algorithm":
        bdmc = evidence_tree(-10.0, -9.99, attrs={"algorithm": "bdmc"})
    else:
        bdmc = evidence_tree(-10.0, -9.99, generating_values=xr.Dataset({"mu": 0.3}))
    with pytest.raises(pmb.BDMCInputError, match=r"sample_bdmc results certify an estimator.*"
                                                 r"pmb\.calibrate.*pmb\.sample_ais"):
        pmb.bayes_factor(bdmc, bdmc)
    with pytest.raises(pmb.BDMCInputError, match=r"\['b'\]"):
        pmb.compare({"a": evidence_tree(-11.0), "b": bdmc})


def test_results_without_observed_data_are_taken_on_trust():
    # A hand-built tree records no data: it is compared unchecked with any other result.
    bf = pmb.bayes_factor(evidence_tree(-10.0, data=None), evidence_tree(-12.0))
    assert bf.log_bf == 2.0
    other = evidence_tree(-12.0, data=DATA + 1)
    assert pmb.bayes_factor(evidence_tree(-10.0, data=None), other).log_bf == 2.0


def test_one_layout_and_no_fallbacks():
    # compare reads lower/upper/lower_se/upper_se from every result; an evidence group in
    # another layout (the old un-normalised one: relative_se, no upper) is refused, not guessed.
    old = xr.DataTree.from_dict({"evidence": xr.Dataset({"lower": -3.0, "relative_se": 0.1})})
    with pytest.raises(pmb.BDMCInputError, match=r"lacks \['upper', 'lower_se', 'upper_se'\]"):
        pmb.compare({"old": old, "new": evidence_tree(-4.0)})
    with pytest.raises(pmb.BDMCInputError, match="no `evidence` group"):
        pmb.bayes_factor(xr.DataTree(), evidence_tree(-4.0))


# -- intervals ----------------------------------------------------------------------------------

def test_crossed_bounds_give_an_interval_spanning_both():
    # upper < lower by noise (a negative gap): the interval is [upper, lower], never inverted.
    crossed, other = evidence_tree(-40.434, -40.435), evidence_tree(-10.0, -9.0)
    bf = pmb.bayes_factor(crossed, other)
    assert bf.log_bf == pytest.approx(-40.4345 - (-9.5))
    assert bf.interval == pytest.approx((-40.435 - (-9.0), -40.434 - (-10.0)))
    assert bf.interval[0] <= bf.log_bf <= bf.interval[1]
    assert pmb.bayes_factor(crossed, crossed).interval == pytest.approx((-0.001, 0.001))
    table = pmb.compare({"crossed": crossed, "other": other})
    assert table.loc["crossed", ["lower", "upper"]].tolist() == [-40.435, -40.434]


def test_intervals_are_never_inverted_and_contain_the_point_value():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lower = rng.normal(-20, 5, size=4)
        upper = lower + rng.normal(0, 0.5, size=4)  # about half of them crossed
        upper[rng.random(4) < 0.3] = np.nan  # lower bounds alone
        results = {f"m{i}": evidence_tree(lo, hi) for i, (lo, hi) in enumerate(zip(lower, upper))}
        table = pmb.compare(results)
        assert (table["lower"] <= table["log_evidence"]).all()
        assert (table["log_evidence"] <= table["upper"]).all()
        assert (table["log_bf_lower"] <= table["log_bf"]).all()
        assert (table["log_bf"] <= table["log_bf_upper"]).all()
        bf = pmb.bayes_factor(results["m0"], results["m1"])
        assert bf.interval[0] <= bf.log_bf <= bf.interval[1]


# -- certificates -------------------------------------------------------------------------------

def test_certified_calibrate_results_carry_their_certificate():
    a = calibrated_tree(-10.0, gap=0.03, gap_se=0.02)
    b = calibrated_tree(-13.0, gap=-0.05, gap_se=0.01)
    allow_a, allow_b = 0.03 + CERTIFICATE_SE_FACTOR * 0.02, 0.05 + CERTIFICATE_SE_FACTOR * 0.01
    bf = pmb.bayes_factor(a, b)
    assert bf.log_bf == 3.0
    assert bf.interval == pytest.approx((3.0 - allow_b, 3.0 + allow_a))
    assert bf.kinds == ("certified lower bound", "certified lower bound")
    assert [c.gap for c in bf.certificates] == [0.03, -0.05]
    text = str(bf)
    assert "interval [2.930, 3.070]" in text and "from a certified lower bound" in text
    assert "upper side = lower + 0.070" in text and "not a bound on them" in text
    table = pmb.compare({"b": b, "a": a})
    assert table.loc["a", "upper"] == pytest.approx(-10.0 + allow_a)
    assert table.loc["b", "kind"] == "certified lower bound"
    assert table.loc["b", "log_bf_upper"] == pytest.approx(-13.0 + allow_b - (-10.0))


@pytest.mark.parametrize("certified, harder, note", [(0, 0, "not certified"),
                                                     (1, 1, "real data look harder")])
def test_calibrations_that_do_not_hold_stay_one_sided(certified, harder, note):
    a = calibrated_tree(-10.0, certified=certified, harder=harder)
    bf = pmb.bayes_factor(a, calibrated_tree(-13.0))
    assert bf.kinds == ("lower bound", "certified lower bound")
    assert bf.interval[1] == np.inf and np.isfinite(bf.interval[0])
    assert note in str(bf)
    assert pmb.compare({"a": a})["upper"].iloc[0] == np.inf


# -- posterior model probabilities --------------------------------------------------------------

def test_model_probabilities_from_the_evidences():
    results = {"a": evidence_tree(-10.0, -9.8), "b": evidence_tree(-11.0, -10.9),
               "c": evidence_tree(-14.0)}
    table = pmb.compare(results)
    points = np.array([-9.9, -10.95, -14.0])
    np.testing.assert_allclose(table["probability"], softmax(points), rtol=1e-12)
    # Bounds: model i at its lower end against the others at their upper ends, and reverse.
    lo_a = np.exp(-10.0) / (np.exp(-10.0) + np.exp(-10.9) + np.inf)  # c is unbounded above
    assert table.loc["a", "probability_lower"] == lo_a == 0.0
    hi_a = np.exp(-9.8) / (np.exp(-9.8) + np.exp(-11.0) + np.exp(-14.0))
    assert table.loc["a", "probability_upper"] == pytest.approx(hi_a, rel=1e-12)
    assert table.loc["c", "probability_upper"] == 1.0
    assert (table["probability_lower"] <= table["probability"]).all()
    assert (table["probability"] <= table["probability_upper"]).all()
    # A prior multiplies the posterior odds by the prior odds.
    prior = pmb.compare(results, prior={"a": 1.0, "b": 3.0, "c": 1.0})
    odds = prior.loc["b", "probability"] / prior.loc["a", "probability"]
    assert odds == pytest.approx(3.0 * np.exp(-10.95 + 9.9), rel=1e-12)


def test_model_probabilities_of_one_model_and_of_sandwiches():
    np.testing.assert_array_equal(model_probabilities([-3.0], [-3.1], [-2.9]), [[1.0]] * 3)
    p, lo, hi = model_probabilities([0.0, 0.0], [-1.0, -1.0], [1.0, 1.0])
    np.testing.assert_allclose(p, [0.5, 0.5])
    np.testing.assert_allclose(lo, [1 / (1 + np.e**2)] * 2)
    np.testing.assert_allclose(hi, [1 / (1 + np.e**-2)] * 2)


@pytest.mark.parametrize("prior, match", [
    ({"a": 1.0}, r"missing \['b'\]"),
    ({"a": 1.0, "b": 1.0, "z": 1.0}, r"unknown \['z'\]"),
    ({"a": 1.0, "b": 0.0}, "positive"),
    ([0.5, 0.5], "mapping"),
])
def test_bad_priors_are_refused(prior, match):
    with pytest.raises(pmb.BDMCInputError, match=match):
        pmb.compare({"a": evidence_tree(-1.0), "b": evidence_tree(-2.0)}, prior=prior)
