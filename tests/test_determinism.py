"""Determinism: a seed fixes every bit of a result, and NumPy's global random state is never used.

``conftest.py`` also checks, around every test, that the global state is left untouched.
"""

import ast
import pathlib

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_bdmc as pmb

FAST = dict(n_steps=15, chains=5, progressbar=False)
GROUPS = ("posterior", "sample_stats", "observed_data", "evidence", "annealing")


@pytest.fixture(scope="module")
def model():
    with pm.Model() as m:
        sigma = pm.HalfNormal("sigma", 1.0)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, sigma, observed=np.array([0.4, -0.3, 1.1, 0.2]))
    return m


#: Wall-clock and memory attributes: the only part of a result allowed to differ between
#: identical runs (with every ``time_<stage>``).
TIMING = ("sampling_time", "compile_time", "pilot_time", "created_at", "model_call_seconds",
          "limit_seconds", "distance_to_limit", "peak_memory_mb", "peak_worker_memory_mb")


def _assert_identical(a, b, groups=GROUPS):
    for group in groups:
        left, right = a[group].to_dataset(), b[group].to_dataset()
        for ds in (left, right):
            ds.attrs = {k: v for k, v in ds.attrs.items()
                        if k not in TIMING and not k.startswith("time_")}
        xr.testing.assert_identical(left, right)


def test_same_seed_is_bit_identical_whatever_the_seed_type_and_global_state(model):
    # random_seed=123, SeedSequence(123) and default_rng(123) name the same random streams; a
    # user's global NumPy seed must not matter. BDMC covers simulation, pilot, both AIS runs.
    runs = []
    seeds = (123, np.random.SeedSequence(123), np.random.default_rng(123))
    for global_seed, seed in zip((1, 2, 3), seeds, strict=True):
        state = np.random.get_state()
        np.random.seed(global_seed)
        try:
            with model:
                runs.append(pmb.sample_bdmc(random_seed=seed, **FAST))
        finally:
            np.random.set_state(state)
    for other in runs[1:]:
        _assert_identical(runs[0], other, GROUPS + ("generating_values",))


def test_a_legacy_random_state_seeds_a_run_as_pymc_allows(model):
    # PyMC's samplers accept a RandomState; it cannot spawn streams (NumPy raised TypeError).
    with model:
        a = pmb.sample_bdmc(random_seed=np.random.RandomState(7), **FAST)
        b = pmb.sample_bdmc(random_seed=np.random.RandomState(7), **FAST)
        c = pmb.sample_bdmc(random_seed=np.random.RandomState(8), **FAST)
    _assert_identical(a, b)
    assert float(a["evidence"].lower) != float(c["evidence"].lower)


def test_unseeded_runs_differ_and_leave_the_global_state_alone(model):
    before = np.random.get_state()[1].copy()
    with model:
        a = pmb.sample_ais(random_seed=None, **FAST)
        b = pmb.sample_ais(random_seed=None, **FAST)
    assert float(a["evidence"].lower) != float(b["evidence"].lower)
    np.testing.assert_array_equal(np.random.get_state()[1], before)


def test_the_package_never_calls_numpy_global_random_functions():
    # Only Generator-based randomness: np.random.default_rng / Generator / SeedSequence.
    allowed = {"default_rng", "Generator", "SeedSequence", "BitGenerator", "PCG64"}
    offenders = []
    for path in pathlib.Path(pmb.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "random" and node.attr not in allowed
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id in ("np", "numpy")):
                offenders.append(f"{path.name}:{node.lineno} np.random.{node.attr}")
    assert not offenders, offenders


def _replay(searched, seed):
    """The call that replays a search's result: its recorded length, chains, pilot and form.

    ``pilot_chains`` only where it is not a call's default for those chains (the pilot of a
    search that went on to more chains stays at its first size).
    """
    attrs = searched.attrs
    chains, pilot_chains = int(attrs["chains"]), int(attrs["auto_pilot_chains"][-1])
    return pmb.sample_bdmc(n_steps=int(attrs["n_steps"]), chains=chains,
                           pilot_chains=None if pilot_chains == max(chains, 64) else pilot_chains,
                           reparameterize=bool(attrs["auto_reparameterized"][-1]),
                           random_seed=seed, progressbar=False)["evidence"]


def test_a_search_certified_at_its_first_attempt_is_replayed_by_its_recorded_settings():
    # What the search chose is in the result: the same seed at the recorded length and chains
    # gives the same bounds bit for bit.
    from pymc_bdmc import known_evidence

    with known_evidence.linear_regression(50, 5, seed=1).model:
        searched = pmb.sample_bdmc(random_seed=3, progressbar=False)["evidence"]
        assert list(searched.attrs["auto_n_steps"]) == [searched.attrs["n_steps"]]
        replayed = _replay(searched, 3)
    for bound in ("lower", "upper"):
        assert float(replayed[bound]) == float(searched[bound])


def test_a_search_on_a_slow_machine_is_replayed_by_its_recorded_settings(monkeypatch):
    # Every clock reading 0.5 s after the last: a machine so slow that the search's budget
    # decides its length. The budget may only decide which attempt is returned, never what an
    # attempt is: the pilot's equilibration before each Gaussian fit stops by a count, not by
    # wall time, so the recorded settings still replay the bounds bit for bit.
    import time

    from pymc_bdmc import known_evidence

    real = time.perf_counter
    start, readings = real(), [0]

    def slow_clock():
        readings[0] += 1
        return start + 0.5 * readings[0]

    with known_evidence.linear_regression(50, 5, seed=1).model:
        monkeypatch.setattr(time, "perf_counter", slow_clock)
        searched = pmb.sample_bdmc(random_seed=3, cores=1, progressbar=False)["evidence"]
        monkeypatch.setattr(time, "perf_counter", real)
        assert readings[0] > 1000  # the budget of 60 s was spent many times over
        replayed = _replay(searched, 3)
    assert np.isfinite(searched.attrs["thermodynamic_length_fitted"])  # a Gaussian was fitted
    for bound in ("lower", "upper"):
        assert float(replayed[bound]) == float(searched[bound])


def test_a_search_whose_pilot_ran_again_larger_is_replayed_by_its_recorded_settings(caplog):
    # A pilot that chooses a dense metric on too few particles runs again on more (here 8 per
    # coordinate, so that a 21-step walk asks for 168); that pilot starts its streams afresh,
    # so a call given its population as `pilot_chains` runs the same pilot.
    import logging

    from pymc_bdmc import known_evidence

    tuning = pmb.Tuning(particles_per_coordinate=8.0, curvature_min_dim=1000)
    with known_evidence.gaussian_random_walk(20, seed=1).model:
        with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
            searched = pmb.sample_bdmc(random_seed=2, tuning=tuning, cores=1,
                                       progressbar=False)["evidence"]
        assert "running it again with 168" in caplog.text
        assert searched.attrs["auto_pilot_chains"][-1] == 168
        replayed = pmb.sample_bdmc(n_steps=int(searched.attrs["n_steps"]),
                                   chains=int(searched.attrs["chains"]), pilot_chains=168,
                                   tuning=tuning, random_seed=2, cores=1,
                                   progressbar=False)["evidence"]
    for bound in ("lower", "upper"):
        assert float(replayed[bound]) == float(searched[bound])


@pytest.mark.parametrize("case", ["more chains, then longer", "other form"])
def test_a_longer_search_is_replayed_by_its_recorded_settings(case):
    # Every attempt draws from the call's streams restarted (pipeline/seeding.py), and a call
    # in the other form simulates its data as written, as the search does: the attempt a
    # search returns is the call with its settings, whichever attempt it was. A tight target
    # makes these searches go on (measured: 100 steps on 32 chains, on 160, then 200 steps;
    # and 100, 200, then 100 steps in the other form).
    from pymc_bdmc import known_evidence

    if case == "other form":
        model, seed, target = known_evidence.eight_schools(centered=True).model, 1, 0.05
    else:
        model, seed, target = known_evidence.linear_regression(50, 5, seed=1).model, 3, 0.01
    with model:
        searched = pmb.sample_bdmc(random_seed=seed, target_gap=target,
                                   progressbar=False)["evidence"]
        attrs = searched.attrs
        assert len(attrs["auto_n_steps"]) > 1
        if case == "other form":
            assert attrs["auto_reparameterized"][-1] and not attrs["auto_reparameterized"][0]
        else:
            assert attrs["auto_chains"][-1] > attrs["auto_chains"][0]
        replayed = _replay(searched, seed)
    for bound in ("lower", "upper"):
        assert float(replayed[bound]) == float(searched[bound])


def test_results_report_the_peak_memory(model):
    with model:
        attrs = pmb.sample_ais(**FAST)["evidence"].attrs
    resident_now = next(int(line.split()[1]) for line in
                        pathlib.Path("/proc/self/status").read_text().splitlines()
                        if line.startswith("VmRSS:")) / 1024  # kB -> MB
    # A high-water mark: at least what this process holds now, and a sane size.
    assert resident_now * 0.99 <= attrs["peak_memory_mb"] < 64 * 1024
    assert attrs["peak_worker_memory_mb"] >= 0.0


def test_a_rewound_stream_draws_again_what_it_first_drew():
    from pymc_bdmc.pipeline.seeding import rewind, streams

    held = streams(7)["pilot"]
    first = held.normal(size=5)
    held.normal(size=3)
    assert rewind(held) is held  # in place: closures holding it see the rewound stream
    np.testing.assert_array_equal(held.normal(size=5), first)


@pytest.mark.parametrize("sampler", [pmb.sample_ais, pmb.calibrate])
def test_a_seed_numpy_cannot_take_is_refused_by_name(model, sampler):
    # Before: NumPy's "TypeError: SeedSequence expects int or sequence of ints".
    with pytest.raises(pmb.BDMCInputError, match=r"`random_seed` must be an int.*got 'a'"):
        sampler(model=model, random_seed="a", progressbar=False)
