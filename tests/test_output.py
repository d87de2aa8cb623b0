"""What a user sees: one progress bar and one INFO line per call, errors that say what to do."""

import logging

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError
from pymc_bdmc.pipeline import driver


@pytest.fixture(scope="module")
def coin():
    with pm.Model() as model:
        p = pm.Beta("p", 1.0, 1.0)
        pm.Binomial("heads", n=20, p=p, observed=9)
    return model


class _Bar:
    """Records the stages of a call's progress bar."""

    made = []

    def __init__(self, enabled):
        self.enabled, self.stages, self.prefix, self.summary = enabled, [], "", None
        _Bar.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description, completed=0, total=None):
        self.stages.append(self.prefix + description)
        return 0

    def advance(self, task=None, advance=1):
        pass

    def update(self, task=None, refresh=False, completed=0):
        pass

    def finish(self, summary):
        self.summary = summary


def test_one_bar_and_one_info_line_per_call(coin, monkeypatch, caplog):
    # A length search of two attempts, and calibrate's two runs, each show on one bar, which
    # ends with the result; the log holds one INFO line per call, and no warnings.
    monkeypatch.setattr(driver, "stage_progress", _Bar)
    monkeypatch.delenv("CI", raising=False)
    _Bar.made.clear()
    with coin, caplog.at_level(logging.INFO, logger="pymc_bdmc"):
        result = pmb.sample_bdmc(chains=8, random_seed=1, target_gap=1e-3, pilot_chains=64,
                                 tuning=pmb.Tuning(first_n_steps=100, max_n_steps=200))
        pmb.calibrate(n_steps=[50], chains=8, random_seed=2)
    assert list(result["evidence"].attrs["auto_n_steps"]) == [100, 200]
    assert len(_Bar.made) == 2
    search, calibrate = _Bar.made
    assert [s for s in search.stages if "Forward" in s] == ["100 steps: Forward AIS",
                                                            "200 steps: Forward AIS"]
    assert search.summary.startswith("Done: gap ")
    assert any(s.startswith("Certifying on simulated data: ") for s in calibrate.stages)
    assert any(s.startswith("Estimating on your data: ") for s in calibrate.stages)
    assert calibrate.summary.startswith("Done: certified")
    # (and, on the model's first run on a machine, one saying why compiling lasts)
    info = [r for r in caplog.records if r.levelno == logging.INFO
            and "first run on this machine" not in r.getMessage()]
    assert len(info) == 2, [r.getMessage() for r in info]
    assert info[0].getMessage().startswith("BDMC (AIS): log p(y*) of simulated data between")
    assert info[1].getMessage().startswith("calibrate: log p(y) >= ")


def test_a_searchs_warnings_are_those_of_the_result_it_returns(coin, monkeypatch, caplog):
    # An attempt that is superseded by a longer one says nothing; the returned one's warnings
    # are logged once. Here every attempt's forward weights are forced to rest on one chain.
    from pymc_bdmc.pipeline import diagnostics

    original = diagnostics.log_ais_diagnostics

    def one_chain(bounds, *args, **kwargs):
        import dataclasses
        return original(dataclasses.replace(bounds, ess_forward=1.0), *args, **kwargs)

    monkeypatch.setattr("pymc_bdmc.methods.vectorized.log_ais_diagnostics", one_chain)
    with coin, caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        pmb.sample_bdmc(chains=8, random_seed=1, target_gap=1e-3, progressbar=False,
                        pilot_chains=64,
                        tuning=pmb.Tuning(first_n_steps=100, max_n_steps=200))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("effective sample size" in m for m in messages) == 1
    assert any("did not certify" in m for m in messages)


def test_outside_a_model_context_the_error_names_model():
    with pytest.raises(BDMCInputError, match="`model=`"):
        pmb.sample_ais(n_steps=10)
    with pytest.raises(BDMCInputError, match="pymc.Model or a bambi.Model"):
        pmb.sample_bdmc(model="not a model")


@pytest.mark.parametrize("call, allowed", [
    (lambda: pmb.sample_bdmc(n_steps="many"), "'auto'"),
    (lambda: pmb.sample_bdmc(method="nuts"), "'ais' or 'smc'"),
    (lambda: pmb.sample_ais(schedule="cosine"), "'adaptive', 'geometric', 'linear', 'sigmoid'"),
    (lambda: pmb.sample_ais(base="posterior"), "'auto', 'prior'"),
    (lambda: pmb.sample_smc_evidence(path="points"), "'tempering' or 'data'"),
    (lambda: pmb.sample_unnormalized_evidence("exact"), "'savis'"),
])
def test_a_bad_value_is_refused_with_the_allowed_ones(coin, call, allowed):
    with coin, pytest.raises(BDMCInputError, match=allowed):
        call()


def test_tuning_fields_are_checked():
    with pytest.raises(BDMCInputError, match="first_n_steps"):
        pmb.Tuning(first_n_steps=0)
    with pytest.raises(BDMCInputError, match="length_unit"):  # a zero unit would divide by it
        pmb.Tuning(length_unit=0)
    with pytest.raises(BDMCInputError, match="Tuning"):
        with pm.Model():
            pm.Normal("y", pm.Normal("mu"), 1.0, observed=np.zeros(2))
            pmb.sample_ais(tuning={"first_n_steps": 10})


def test_compare_given_models_says_to_calibrate_them_first(coin):
    with pytest.raises(BDMCInputError, match=r"pmb.calibrate\(model\)"):
        pmb.compare({"coin": coin, "other": coin})


def test_results_name_pymc_bdmc_without_searching_the_installed_packages(coin, monkeypatch):
    # ArviZ's make_attrs(inference_library=...) looked the version up among the installed
    # distributions for every attempt's result: 65 ms each, a fifth of a small model's call.
    import importlib.metadata

    def version(name):
        raise AssertionError(f"looked up {name}'s version")

    with coin:
        pmb.sample_ais(n_steps=20, chains=4, random_seed=1, progressbar=False)  # compiled once
        monkeypatch.setattr(importlib.metadata, "version", version)
        result = pmb.sample_ais(n_steps=20, chains=4, random_seed=1, progressbar=False)
    attrs = result["posterior"].attrs
    assert attrs["inference_library"] == "pymc_bdmc"
    assert attrs["inference_library_version"] == pmb.__version__
    assert attrs["creation_library"] == "ArviZ"
