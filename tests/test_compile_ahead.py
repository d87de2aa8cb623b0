"""Helper interpreters compiling what is new to this machine: the same functions, once.

The densities of a model new to the machine, and its scale moves' map (ahead, where a second
core may be used); this process then loads them from the caches, as a later process does.
"""

import io
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pymc as pm

from pymc_bdmc.model import compile_ahead, rewrite_cache
from pymc_bdmc.model import density as density_module
from pymc_bdmc.model.batching import BatchedParts
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.pipeline.compile import helpers_allowed
from pymc_bdmc.pipeline.settings import Parallel


def _schools():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=4)
        pm.Normal("y", theta, [15.0, 10.0, 16.0, 11.0], observed=[28.0, 8.0, -3.0, 7.0])
    return model


def _pairs(density):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, density.n_dim))
    return np.concatenate([x, x + 0.3 * rng.normal(size=x.shape)], axis=1)


def test_a_helper_compiles_the_map_once_and_changes_nothing(cache_dir):
    model = _schools()
    density = ModelDensity(model, compile_ahead=True)
    helper = density._ahead
    assert helper is not None  # the map is new to this (empty) cache
    assert helper.wait()
    assert density._scale_map_marker.exists()  # recorded by the helper, once compiled
    moved, log_jacobian = density.location_scale_map(_pairs(density))
    assert density._ahead is None
    alone = ModelDensity(model)  # compiled here, no helper
    assert alone._ahead is None
    reference = alone.location_scale_map(_pairs(alone))
    np.testing.assert_array_equal(moved, reference[0])
    np.testing.assert_array_equal(log_jacobian, reference[1])
    # Recorded as compiled: no helper for the same map again.
    assert ModelDensity(model, compile_ahead=True)._ahead is None


def _without_helpers(monkeypatch, started=None):
    """Start no helper from a density; record what it would have started."""
    def start(recipe, label):
        if started is not None:
            started.append(label)

    monkeypatch.setattr(density_module, "start_compile_ahead", start)


def test_a_helper_needed_at_once_is_waited_for(cache_dir, monkeypatch):
    _without_helpers(monkeypatch)
    density = ModelDensity(_schools())
    assert not density._scale_map_marker.exists()
    recipe = BatchedParts(None, [], {}, density.validation_points(), {},
                          scale_map=density._scale_map(),
                          scale_map_marker=density._scale_map_marker)
    helper = compile_ahead.start(recipe, "the map")
    assert helper.wait()  # through its start, then loaded from the caches
    assert not helper._path.exists()
    assert density._scale_map_marker.exists()


def test_new_densities_are_compiled_by_a_helper_once(cache_dir, monkeypatch):
    started = []

    def start(recipe, label):
        started.append(label)
        return compile_ahead.start(recipe, label)

    monkeypatch.setattr(density_module, "start_compile_ahead", start)
    model = _schools()
    density = ModelDensity(model)
    assert started == ["the densities"]  # and the map after them, in the same helper
    assert density._map_recipe is None and density._scale_map_marker.exists()
    again = ModelDensity(model, compile_ahead=True)
    assert started == ["the densities"]  # both recorded: no helper again
    x = _pairs(density)[:, :density.n_dim]
    mine, theirs = density.parts(x), again.parts(x)
    np.testing.assert_array_equal(mine.log_prior, theirs.log_prior)
    np.testing.assert_array_equal(mine.log_likelihood, theirs.log_likelihood)
    np.testing.assert_array_equal(mine.grad_log_likelihood, theirs.grad_log_likelihood)


class _Unloadable:
    """A recipe the helper cannot unpickle (this test module is not importable there)."""

    def compile_ahead(self):
        raise AssertionError("never called")


def test_a_failing_helper_only_means_compiling_here(cache_dir, monkeypatch):
    helper = compile_ahead.start(_Unloadable(), "nothing")
    assert not helper.wait()
    assert not helper._path.exists()
    assert helper._helper.process.poll() is None  # it waits for the next recipe
    # A density whose helper failed compiles its map itself.
    monkeypatch.setattr(density_module, "start_compile_ahead",
                        lambda recipe, label: compile_ahead.start(_Unloadable(), label))
    density = ModelDensity(_schools(), compile_ahead=True)
    assert not density._ahead.wait()
    moved, _ = density.location_scale_map(_pairs(density))
    assert np.all(np.isfinite(moved)) and density._scale_map_marker.exists()


def test_a_helper_waits_for_the_next_recipe_of_the_same_caches(cache_dir, monkeypatch,
                                                                tmp_path_factory):
    first = compile_ahead.start(_Unloadable(), "nothing")
    assert not first.wait()
    again = compile_ahead.start(_Unloadable(), "nothing again")
    assert again._helper is first._helper  # the same interpreter, waiting since
    assert not again.wait()
    # Killed while idle: the next recipe goes to a new helper.
    first._helper.process.kill()
    first._helper.process.wait()
    third = compile_ahead.start(_Unloadable(), "a third")
    assert third._helper is not first._helper and not third.wait()
    # Other caches: another helper, and the idle one of the former caches is stopped.
    monkeypatch.setattr(rewrite_cache, "CACHE_DIR", tmp_path_factory.mktemp("other"))
    other = compile_ahead.start(_Unloadable(), "elsewhere")
    assert other._helper is not third._helper
    assert third._helper.process.poll() is not None
    assert not other.wait()


def test_a_helper_stops_at_the_end_of_its_input_or_when_idle(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a.pkl\n\nb.pkl\n"))
    assert list(compile_ahead._recipe_paths()) == [Path("a.pkl"), Path("b.pkl")]
    read, write = os.pipe()
    os.write(write, b"a.pkl\n")
    monkeypatch.setattr(sys, "stdin", os.fdopen(read))
    monkeypatch.setattr(compile_ahead, "IDLE_SECONDS", 0.2)
    started = time.perf_counter()
    assert list(compile_ahead._recipe_paths()) == [Path("a.pkl")]  # then nothing came: idle
    assert time.perf_counter() - started < 5
    os.close(write)
    # PYMC_BDMC_HELPER_IDLE=0: one recipe, then it exits; this process keeps none idle.
    monkeypatch.setattr(sys, "stdin", io.StringIO("a.pkl\nb.pkl\n"))
    monkeypatch.setattr(compile_ahead, "IDLE_SECONDS", 0.0)
    assert list(compile_ahead._recipe_paths()) == [Path("a.pkl")]
    helper = compile_ahead.start(_Unloadable(), "nothing")
    assert not helper.wait()
    assert helper._helper.process.poll() is not None


def test_the_idle_wait_is_read_from_the_environment(monkeypatch, caplog):
    for text, seconds in (("", 300.0), ("0", 0.0), ("12.5", 12.5)):
        monkeypatch.setenv(compile_ahead.IDLE_VARIABLE, text)
        assert compile_ahead._idle_seconds() == seconds
    for text in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(compile_ahead.IDLE_VARIABLE, text)
        caplog.clear()
        assert compile_ahead._idle_seconds() == 300.0
        assert "is not a number of seconds" in caplog.text


class _Unpicklable:
    """A recipe that cannot be pickled (a custom operation holding a lock, say)."""

    def __init__(self):
        self.lock = threading.Lock()

    def compile_ahead(self):
        raise AssertionError("never called")


def test_a_recipe_that_does_not_pickle_starts_no_helper(cache_dir):
    before = set(Path(tempfile.gettempdir()).glob("pymc_bdmc_ahead_*"))
    assert compile_ahead.start(_Unpicklable(), "nothing") is None
    assert set(Path(tempfile.gettempdir()).glob("pymc_bdmc_ahead_*")) == before


def test_no_map_helper_ahead_without_a_second_local_core(cache_dir, monkeypatch):
    assert not helpers_allowed(Parallel(cores=1))
    assert helpers_allowed(Parallel(cores=2))
    assert not helpers_allowed(Parallel(cores=4, executor=object()))
    assert helpers_allowed(Parallel(cores=None)) == ((os.cpu_count() or 1) > 1)
    started = []
    _without_helpers(monkeypatch, started)
    density = ModelDensity(_schools())
    assert started == ["the densities"]  # not the map: not asked for
    assert density._map_recipe is not None  # compiled by a helper where first needed
    with pm.Model() as no_groups:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=[0.1, 0.3])
    started.clear()
    assert ModelDensity(no_groups, compile_ahead=True)._map_recipe is None
    assert started == ["the densities"]


def test_no_helper_with_the_cache_off(monkeypatch):
    monkeypatch.setattr(rewrite_cache, "CACHE_DIR", "off")
    assert ModelDensity(_schools(), compile_ahead=True)._ahead is None


# A model new to an empty machine-wide cache, its densities evaluated in a new interpreter.
FIRST_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import pymc as pm
    from pymc_bdmc.model.density import ModelDensity

    if sys.argv[1:] == ["after-another"]:  # its helper has compiled another model before
        with pm.Model() as another:
            slope = pm.Normal("slope", 0.0, 1.0)
            pm.StudentT("z", nu=4.0, mu=slope * np.arange(5.0), sigma=1.0, observed=np.ones(5))
        ModelDensity(another)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=4)
        pm.Normal("y", theta, [15.0, 10.0, 16.0, 11.0], observed=[28.0, 8.0, -3.0, 7.0])
    density = ModelDensity(model)
    x = np.random.default_rng(1).normal(size=(16, density.n_dim))
    parts = density.parts(x)
    print([float(v) for v in (*parts.log_prior, *parts.log_likelihood)])
""")


def test_a_first_run_gives_the_numbers_of_every_later_run(tmp_path):
    """Numba's code compiled in a process rounds otherwise than the same code loaded later.

    So a helper compiles what is new, and the first run loads it as later runs do.
    """
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path}"}
    env.pop("PYMC_BDMC_REWRITE_CACHE", None)  # under that compile directory

    def run(*args, env=env) -> str:
        proc = subprocess.run([sys.executable, "-c", FIRST_RUN, *args], capture_output=True,
                              text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    first = run()
    assert (tmp_path / "pymc_bdmc_rewrites" / "batched").is_dir()  # compiled, recorded
    assert run() == first
    # Compiled on another empty cache by a helper that compiled another model first: the
    # same code (a helper waits for the next model new to the machine).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run("after-another",
               env={**env, "PYTENSOR_FLAGS": f"base_compiledir={elsewhere}"}) == first
