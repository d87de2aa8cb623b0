"""Batched density calls split across two threads give the same numbers to the bit."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from kernel_models import kernel_model
from pytensor.compile.mode import Mode
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

import pymc_bdmc as pmb
from pymc_bdmc.model import threads
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.rewrite_cache import hot_mode
from pymc_bdmc.model.threads import MIN_SPLIT_ROWS, density_threads, gil_releasing


@pytest.fixture(scope="module")
def loop_density():
    density = ModelDensity(kernel_model())
    assert density.batching == "blockwise"
    return density


def _counting_pool(monkeypatch):
    submitted = []
    pool = threads._pool()

    class Counting:
        def submit(self, fn, *args):
            submitted.append(len(args[0]))
            return pool.submit(fn, *args)

    monkeypatch.setattr(threads, "_pool", Counting)
    return submitted


def test_two_threads_give_a_loop_densitys_numbers_to_the_bit(loop_density, monkeypatch):
    submitted = _counting_pool(monkeypatch)
    monkeypatch.setattr(threads, "SPLIT_SECONDS", 0.0)  # split however cheap the call
    x = np.random.default_rng(2).normal(scale=0.5, size=(21, loop_density.n_dim))
    with density_threads(1):
        alone = loop_density.parts(x)
    assert submitted == []
    with density_threads(2):
        for _ in range(3):  # the first calls are timed whole
            loop_density.parts(x)
        assert submitted == []
        shared = loop_density.parts(x)
    assert submitted == [11]  # the second half of the rows went to the helper thread
    for name in ("log_prior", "log_likelihood", "grad_log_prior", "grad_log_likelihood"):
        np.testing.assert_array_equal(getattr(shared, name), getattr(alone, name))
    # Each row is the per-chain function's: the same as that row alone.
    with density_threads(2):
        single = loop_density.parts(x[:1])
    np.testing.assert_array_equal(single.grad_log_likelihood[0], alone.grad_log_likelihood[0])
    assert submitted == [11]  # one row: not split


def test_small_batches_cheap_calls_and_other_contexts_are_not_split(loop_density, monkeypatch):
    submitted = _counting_pool(monkeypatch)
    x = np.random.default_rng(3).normal(scale=0.5, size=(MIN_SPLIT_ROWS - 1, loop_density.n_dim))
    with density_threads(2):
        loop_density.parts(x)
        for _ in range(5):  # this model's calls take far less than SPLIT_SECONDS
            loop_density.parts(np.concatenate([x, x]))
    monkeypatch.setattr(threads, "SPLIT_SECONDS", 0.0)
    loop_density.parts(np.concatenate([x, x]))  # no call context: one thread
    assert submitted == []


def test_vectorized_densities_split_only_without_matrix_products():
    rng = np.random.default_rng(5)
    with pm.Model() as indexed:  # elementwise and indexing: rows independent to the bit
        mu = pm.Normal("mu", 0.0, 1.0, shape=4)
        pm.Normal("y", mu[np.arange(40) % 4], 1.0, observed=rng.normal(size=40))
    with pm.Model() as regression:  # a matrix product over the chains' rows
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        pm.Normal("y", pt.dot(rng.normal(size=(40, 3)), beta), 1.0,
                  observed=rng.normal(size=40))
    elementwise, product = ModelDensity(indexed), ModelDensity(regression)
    assert elementwise.batching == product.batching == "vectorized"
    assert isinstance(elementwise._split_parts, threads.RowSplit)
    assert product._split_parts is None
    x = rng.normal(size=(17, elementwise.n_dim))
    with density_threads(1):
        alone = elementwise.parts(x)
    split = elementwise._split_parts.split(x)
    np.testing.assert_array_equal(split[3], alone.grad_log_likelihood)


def test_the_densities_release_the_gil(loop_density):
    jitted = loop_density._parts_fn.vm.jit_fn
    assert jitted.targetoptions["nogil"] is True
    assert loop_density._split_parts.splits
    # Cached under a key of its own, suffixed once however often the graph is linked.
    key = CACHED_SRC_FUNCTIONS[jitted.py_func]
    assert key.endswith("_nogil") and not key.endswith("_nogil_nogil")
    # Other linkers are left as they are; PyTensor's own default mode is not changed.
    python_mode = Mode(linker="py")
    assert gil_releasing(python_mode) is python_mode
    assert isinstance(hot_mode().linker, threads.GilReleasingNumbaLinker)
    x = pt.vector("x")
    plain = pytensor.function([x], x * 2.0)
    assert not plain.vm.jit_fn.targetoptions.get("nogil")


def test_a_call_on_two_threads_is_a_call_on_one():
    model = kernel_model()
    with model:
        one = pmb.sample_ais(n_steps=20, chains=16, random_seed=4, cores=1, progressbar=False)
        two = pmb.sample_ais(n_steps=20, chains=16, random_seed=4, progressbar=False)
    np.testing.assert_array_equal(one["evidence"]["log_weight_forward"].values,
                                  two["evidence"]["log_weight_forward"].values)


def test_a_solve_against_every_chain_is_not_split():
    # A fixed covariance's factor solved against the stacked chains (a triangular solve with many
    # right-hand sides): LAPACK may block the rows differently for another number of them.
    density = ModelDensity(kernel_model(learn_scale=False))
    assert density.batching == "vectorized"
    assert density._split_parts is None


def test_the_gibbs_terms_split_to_the_bit(monkeypatch):
    # A Gibbs update evaluates the elementwise terms of every chain at each candidate value.
    from count_models import binomial_count_model

    density = ModelDensity(binomial_count_model())
    rows = np.column_stack([np.random.default_rng(7).normal(size=40),
                            np.repeat(np.arange(4.0, 24.0), 2)])
    with density_threads(1):
        alone = density.terms(rows)  # compiles the terms, and checks that they split exactly
    assert density._split_terms is not None
    submitted = _counting_pool(monkeypatch)
    monkeypatch.setattr(threads, "SPLIT_SECONDS", 0.0)
    with density_threads(2):
        for _ in range(4):  # three timed whole, then split
            shared = density.terms(rows)
    assert submitted == [20]
    for a, b in zip(shared, alone, strict=True):
        np.testing.assert_array_equal(a, b)
