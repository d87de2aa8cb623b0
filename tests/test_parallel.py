"""Batches, worker processes, executors and the compile cache: same seed, same numbers."""

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc.algorithms.ais import ais_forward, merge_runs
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.cache import clear_cache, compiled_model
from pymc_bdmc.parallel.streams import ChainBlocks

FAST = {"mode": "FAST_RUN"}
RUN = dict(n_steps=40, chains=20, random_seed=11, progressbar=False, compile_kwargs=FAST)


@pytest.fixture(scope="module")
def regression():
    # A dot product (BLAS) and a scale parameter whose checks can fail in divergent proposals.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        w = pm.Normal("w", 0.0, 1.0, shape=4)
        pm.Normal("y", pm.math.dot(X, w), s, observed=rng.normal(size=30))
    return model


def _per_chain(result):
    ev = result["evidence"]
    return {k: ev[k].values for k in ("log_weight_forward", "log_weight_reverse") if k in ev}


def _assert_same_chains(a, b):
    # The same random numbers reach every chain however the chains are split, so the runs agree
    # to round-off: BLAS may sum a batched matrix product in another order for another number of
    # rows (bit-identical on some machines, 1 ulp apart on others). A chain that took another
    # path would differ by far more than this tolerance.
    left, right = _per_chain(a), _per_chain(b)
    assert left.keys() == right.keys()
    for key in left:
        np.testing.assert_allclose(left[key], right[key], rtol=1e-12, atol=0, err_msg=key)
    np.testing.assert_allclose(a["posterior"]["w"].values, b["posterior"]["w"].values,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(float(a["evidence"]["lower"]), float(b["evidence"]["lower"]),
                               rtol=1e-12)


# -- streams -------------------------------------------------------------------------------


def test_blocks_draw_the_same_numbers_together_or_apart():
    whole = ChainBlocks.spawn(np.random.default_rng(3), 20)
    apart = ChainBlocks.spawn(np.random.default_rng(3), 20)
    assert whole.sizes == (8, 8, 4)
    together = whole.generator()
    first, rest = apart.subset(0, 1).generator(), apart.subset(1, 3).generator()
    for _ in range(3):
        np.testing.assert_array_equal(
            together.standard_normal((20, 5)),
            np.concatenate([first.standard_normal((8, 5)), rest.standard_normal((12, 5))]),
        )
        np.testing.assert_array_equal(
            together.uniform(0.5, 1.5, 20),
            np.concatenate([first.uniform(0.5, 1.5, 8), rest.uniform(0.5, 1.5, 12)]),
        )
    with pytest.raises(ValueError, match="one row per chain"):
        together.uniform(size=19)
    with pytest.raises(ValueError, match="one row per chain"):
        together.standard_normal()


@pytest.mark.parametrize("max_chains, n_groups, expected", [
    (None, 1, [(0, 4)]),
    (None, 2, [(0, 2), (2, 4)]),
    (None, 3, [(0, 2), (2, 4)]),
    (16, 1, [(0, 2), (2, 4)]),
    (5, 1, [(0, 1), (1, 2), (2, 3), (3, 4)]),  # a block is never cut
    (None, 10, [(0, 1), (1, 2), (2, 3), (3, 4)]),
])
def test_groups_are_whole_blocks_covering_every_chain(max_chains, n_groups, expected):
    blocks = ChainBlocks.spawn(np.random.default_rng(0), 30)
    assert blocks.groups(max_chains, n_groups) == expected


def test_merged_split_runs_equal_the_whole_run(regression):
    density = compiled_model(regression, compile_kwargs=FAST).density  # shared with the runs
    n = 15
    plan = AnnealingPlan(np.linspace(0, 1, n + 1) ** 3, np.full(n + 1, 0.2),
                         np.ones((n + 1, density.n_dim)), 3, 0.5, 2)
    x0 = 0.5 * np.random.default_rng(1).normal(size=(20, density.n_dim))

    def run(groups):
        blocks = ChainBlocks.spawn(np.random.default_rng(5), 20)
        runs = []
        for first, stop in groups:
            x = x0[blocks.chain_slice(first, stop)]
            runs.append(ais_forward(blocks.subset(first, stop).generator(), x, density.parts(x),
                                    plan.betas, plan.transition(density.parts)))
        return merge_runs(runs)

    whole, split = run([(0, 3)]), run([(0, 1), (1, 3)])
    # to round-off, as in _assert_same_chains (the model has a batched matrix product)
    np.testing.assert_allclose(whole.log_weight, split.log_weight, rtol=1e-12, atol=0)
    np.testing.assert_allclose(whole.x, split.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(whole.failed_step, split.failed_step)
    np.testing.assert_allclose(whole.acceptance_rate, split.acceptance_rate, rtol=1e-12)
    np.testing.assert_allclose(whole.mean_log_weight, split.mean_log_weight, rtol=1e-12)
    np.testing.assert_array_equal(whole.n_divergent, split.n_divergent)


# -- drivers -------------------------------------------------------------------------------


def test_batches_and_worker_processes_give_the_same_chains(regression):
    with regression:
        reference = pmb.sample_bdmc(cores=1, **RUN)
        batched = pmb.sample_bdmc(cores=1, chains_per_batch=8, **RUN)
        with ProcessPoolExecutor(2) as pool:
            pooled = pmb.sample_bdmc(executor=pool, **RUN)
        local = pmb.sample_bdmc(cores=2, **RUN)
    assert reference["evidence"].attrs["chain_groups"] == 1
    assert batched["evidence"].attrs["chain_groups"] == 3
    assert local["evidence"].attrs["workers"] == "2 local processes"
    for other in (batched, pooled, local):
        _assert_same_chains(reference, other)
    # the workers' model evaluations are counted too
    assert pooled["evidence"].attrs["model_evaluations"] >= reference["evidence"].attrs[
        "model_evaluations"]


def _mixture_logp(value, mu):
    # a user-defined density: its logp dispatch lives in this process only
    return pm.math.logaddexp(pm.logp(pm.Normal.dist(mu, 1.0), value),
                             pm.logp(pm.Normal.dist(-mu, 1.0), value)) - np.log(2.0)


def test_custom_distributions_run_in_worker_processes():
    # Workers receive the compiled densities' graph, not the model: a CustomDist's logp is
    # registered when the model is built and does not survive pickling the model.
    rng = np.random.default_rng(4)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        pm.CustomDist("y", mu, logp=_mixture_logp, observed=rng.normal(size=10) + 1.0)
        here = pmb.sample_ais(cores=1, **RUN)
        with ProcessPoolExecutor(2) as pool:
            there = pmb.sample_ais(executor=pool, **RUN)
    # an elementwise model: no BLAS, so the split is bit-identical
    np.testing.assert_array_equal(here["evidence"]["log_weight_forward"].values,
                                  there["evidence"]["log_weight_forward"].values)


def test_threaded_executors_compile_one_thread_at_a_time():
    # PyTensor compilation is not thread-safe (pymc-devs/pymc#7819). Each thread of a threaded
    # executor compiles the densities (and the fused kernel) for its own chains, under one lock.
    # The chains agree to round-off, as in _assert_same_chains: the kernels multiply the chains
    # by a dense metric's factor (and a fitted base's), and those products of 20 rows and of 10
    # rounded one log weight of 20 a ulp apart (3.6e-15, on a fresh clone's test run, both
    # with the fitted base and from the prior). A compilation garbled by another thread would
    # be far off.
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.Gamma("tau", 2.0, 2.0)
        pm.Normal("y", mu, 1.0 / pm.math.sqrt(tau), observed=np.linspace(-1.0, 2.0, 12))
        here = pmb.sample_bdmc(cores=1, fused_kernel=True, **RUN)
        with ThreadPoolExecutor(2) as pool:
            there = pmb.sample_bdmc(executor=pool, fused_kernel=True, **RUN)
    assert there["evidence"].attrs["workers"] == "ThreadPoolExecutor (2 workers)"
    assert there["evidence"].attrs["chain_groups"] == 2
    for key in ("log_weight_forward", "log_weight_reverse"):
        np.testing.assert_allclose(there["evidence"][key].values, here["evidence"][key].values,
                                   rtol=1e-12, atol=0, err_msg=key)


def test_workers_that_cannot_start_leave_the_chains_in_this_process(regression, caplog):
    # The tasks carry their own streams, so the fallback gives the same numbers.
    pool = ThreadPoolExecutor(2)
    pool.shutdown()
    with regression:
        here = pmb.sample_ais(cores=1, **RUN)
        with caplog.at_level("WARNING", logger="pymc_bdmc"):
            fallback = pmb.sample_ais(executor=pool, **RUN)
    assert "running the chains in this process" in caplog.text
    np.testing.assert_array_equal(here["evidence"]["log_weight_forward"].values,
                                  fallback["evidence"]["log_weight_forward"].values)


def test_a_local_dask_cluster_gives_the_same_chains(regression, dask_client):
    with regression:
        reference = pmb.sample_ais(cores=1, **RUN)
        on_dask = pmb.sample_ais(executor=dask_client, **RUN)
    assert on_dask["evidence"].attrs["workers"].startswith("Dask cluster (2")
    _assert_same_chains(reference, on_dask)


def test_discrete_models_give_the_same_chains_on_workers_with_compiled_gibbs_updates():
    # Workers rebuild the Gibbs kernel's compiled color update from the pickled graph.
    from pymc_bdmc.testbed import binary_attributes

    problem = binary_attributes(5, 3, n_attributes=2, discrete=True, seed=3)
    run = dict(n_steps=30, chains=16, random_seed=2, progressbar=False)
    with problem.model:
        here = pmb.sample_bdmc(cores=1, fused_kernel=False, **run)
        there = pmb.sample_bdmc(cores=2, fused_kernel=True, **run)
    assert there["evidence"].attrs["gibbs_compiled"]
    assert there["evidence"].attrs["workers"] == "2 local processes"
    for key in ("log_weight_forward", "log_weight_reverse"):
        np.testing.assert_allclose(there["evidence"][key].values, here["evidence"][key].values,
                                   rtol=1e-9, err_msg=key)


SMC_RUN = dict(method="smc", n_steps=12, particles=16, chains=4, random_seed=5,
               progressbar=False, compile_kwargs=FAST)


def test_smc_populations_give_the_same_numbers_in_batches_processes_and_on_dask(regression,
                                                                               dask_client):
    # Each population draws from its own streams and resamples with them, so the split of
    # populations into groups (in batches here, on worker processes, on a Dask cluster)
    # changes nothing but round-off.
    with regression:
        reference = pmb.sample_bdmc(cores=1, **SMC_RUN)
        batched = pmb.sample_bdmc(cores=1, chains_per_batch=32, **SMC_RUN)
        local = pmb.sample_bdmc(cores=2, **SMC_RUN)
        on_dask = pmb.sample_bdmc(executor=dask_client, **SMC_RUN)
    assert reference["evidence"].attrs["chain_groups"] == 1
    assert batched["evidence"].attrs["chain_groups"] == 2
    assert local["evidence"].attrs["workers"] == "2 local processes"
    for other in (batched, local, on_dask):
        _assert_same_chains(reference, other)
        np.testing.assert_allclose(float(other["evidence"]["upper"]),
                                   float(reference["evidence"]["upper"]), rtol=1e-12)


def test_bad_parallel_arguments_are_refused_before_sampling(regression):
    with regression:
        for kwargs, match in (({"cores": 0}, "`cores`"), ({"cores": 1.5}, "`cores`"),
                              ({"executor": object()}, "`executor` must be"),
                              ({"chains_per_batch": 0}, "chains_per_batch")):
            with pytest.raises(BDMCInputError, match=match):
                pmb.sample_bdmc(**{**RUN, **kwargs})
        smc = {**RUN, "chains": 2, "method": "smc", "n_steps": 5}
        with ThreadPoolExecutor(1) as pool, pytest.raises(BDMCInputError, match="path='data'"):
            pmb.sample_bdmc(path="data", executor=pool, **smc)
        with pytest.raises(BDMCInputError, match="path='data'"):
            pmb.sample_smc_evidence(path="data", cores=2, n_steps=5, chains=2, progressbar=False)
        with pytest.raises(BDMCInputError, match="fused_kernel"):
            pmb.sample_bdmc(fused_kernel=True, **smc)


# -- compile cache -------------------------------------------------------------------------


def test_a_model_is_compiled_once_and_follows_its_data():
    clear_cache()
    rng = np.random.default_rng(2)
    with pm.Model() as model:
        y = pm.Data("y_data", rng.normal(size=5))
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    first = compiled_model(model, compile_kwargs=FAST)
    assert not first.reused and first.compile_time > 0
    again = compiled_model(model, compile_kwargs=FAST)
    assert again.reused and again.compile_time == 0 and again.density is first.density
    # a BDMC run conditions the density on simulated data; the next call sees the model's own
    with model:
        bdmc = pmb.sample_bdmc(n_steps=10, chains=4, random_seed=1, progressbar=False,
                               compile_kwargs=FAST)
        assert bdmc["evidence"].attrs["compile_time"] == 0
        new_data = rng.normal(size=5)
        pm.set_data({"y_data": new_data})
        ais = pmb.sample_ais(n_steps=10, chains=4, random_seed=1, progressbar=False,
                             compile_kwargs=FAST)
    np.testing.assert_array_equal(ais["observed_data"]["y"].values, new_data)
    # other compile settings, or a changed structure, compile afresh
    assert not compiled_model(model, compile_kwargs={"mode": "FAST_COMPILE"}).reused
    with model:
        pm.Normal("extra", 0.0, 1.0)
    assert not compiled_model(model, compile_kwargs=FAST).reused
