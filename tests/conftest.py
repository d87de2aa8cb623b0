import logging
import os

import numpy as np
import pytensor
import pytest

# PyTensor records on every variable it builds the 8 Python frames that built it, for its
# error messages. Building graphs is much of what these tests cost (measured: 9 % of the CPU of
# test_scale_moves.py and test_reparameterize.py), and the traces only help to debug a failing
# graph, so tests build without them. The graphs, and so the numbers, are the same.
# PYTENSOR_FLAGS=traceback__limit=8 (or any value) brings them back.
if "traceback__limit" not in os.environ.get("PYTENSOR_FLAGS", ""):
    pytensor.config.traceback__limit = 0


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the slow tests (long statistical tests and examples)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow test: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    """An empty directory of this package's disk caches (rewritten graphs, batching choices)."""
    from pymc_bdmc.model import rewrite_cache

    monkeypatch.setattr(rewrite_cache, "CACHE_DIR", tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def dask_client():
    """A local Dask cluster of 2 worker processes, shared by a module's tests that use Dask.

    Starting one (two fresh Python processes importing PyMC) costs ~7 s of CPU; each test still
    sends its own model's chains to it. Module scope, not session: an idle cluster is not free
    (~10 % of a core at Dask's defaults, ~3 % with the diagnostics below turned off, which do
    not touch the tasks), so it lives only as long as the module that uses it. Not the default
    client: only tests that pass it as ``executor`` use it.
    """
    distributed = pytest.importorskip("distributed")
    import dask

    quiet = {"distributed.worker.profile.enabled": False,
             "distributed.admin.system-monitor.gil.enabled": False,
             "distributed.admin.tick.interval": "1s"}
    with dask.config.set(quiet), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(autouse=True)
def _global_numpy_state_untouched():
    """The library must never draw from (or reseed) NumPy's global random state."""
    before = np.random.get_state()[1].copy()
    yield
    assert np.array_equal(before, np.random.get_state()[1]), "global NumPy RNG state changed"


@pytest.fixture(autouse=True)
def _quiet_logs():
    logging.getLogger("pymc_bdmc").setLevel(logging.WARNING)
    yield
