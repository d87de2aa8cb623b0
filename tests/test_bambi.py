"""Bambi models go to every entry point as they are, built or not (the optional extra [bambi])."""

import numpy as np
import pandas as pd
import pytest

import pymc_bdmc as pmb

bmb = pytest.importorskip("bambi")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=30), "z": rng.normal(size=30)})
    df["y"] = 1.0 + 2.0 * df.x + rng.normal(size=30)
    return df


def test_a_bambi_model_runs_as_its_pymc_model(data):
    # The same model, by the Bambi object (not built yet) or by the PyMC model it builds: the
    # same numbers for the same seed, and the Bambi object is built, not otherwise changed.
    unbuilt = bmb.Model("y ~ x", data)
    assert unbuilt.backend is None
    run = dict(n_steps=100, chains=8, random_seed=4, progressbar=False)
    by_bambi = pmb.sample_ais(model=unbuilt, **run)
    assert unbuilt.backend is not None
    by_pymc = pmb.sample_ais(model=unbuilt.backend.model, **run)
    np.testing.assert_array_equal(by_bambi["evidence"]["log_weight_forward"].values,
                                  by_pymc["evidence"]["log_weight_forward"].values)
    bdmc = pmb.sample_bdmc(model=bmb.Model("y ~ x", data), **run)
    assert np.isfinite(float(bdmc["evidence"]["gap"]))


def test_two_formulas_are_calibrated_and_compared(data):
    # calibrate takes the Bambi model as its first argument; the formula without the
    # irrelevant predictor wins, and the comparison carries both certificates.
    results = {f: pmb.calibrate(bmb.Model(f, data), n_steps=[200], chains=16, random_seed=1,
                                progressbar=False)
               for f in ("y ~ x", "y ~ x + z")}
    table = pmb.compare(results)
    assert list(table.index) == ["y ~ x", "y ~ x + z"]
    assert set(table["kind"]) == {"certified lower bound"}
    bf = pmb.bayes_factor(results["y ~ x"], results["y ~ x + z"])
    assert bf.log_bf > 0 and bf.interval[0] <= bf.log_bf <= bf.interval[1]
