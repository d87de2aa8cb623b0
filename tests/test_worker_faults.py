"""A worker that dies, or a pool that fails as it starts, costs time, never the call or its numbers.

Every group of chains (and every step-method chain) carries its own random streams, so a group
whose worker failed is run again in this process with the same result. The fake executors
below fail the way a killed pool does: ``submit`` raising (the pool or fork server died as it
started: ``EOFError: unexpected EOF`` was seen) or the future raising when collected.
"""

from concurrent.futures import Executor, Future

import numpy as np
import pymc as pm
import pytest

import pymc_bdmc as pmb


class _Failing(Executor):
    """Two 'workers' that fail at ``submit`` or when a result is collected."""

    _max_workers = 2

    def __init__(self, when: str):
        self.when = when

    def submit(self, fn, *args, **kwargs):
        if self.when == "submit":
            raise EOFError("unexpected EOF")
        future = Future()
        future.set_exception(EOFError("unexpected EOF") if self.when == "eof"
                             else ConnectionResetError("worker killed"))
        return future


@pytest.fixture(scope="module")
def model():
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", mu, sigma, observed=np.array([0.3, -0.4, 1.1, 0.5]))
    return m


@pytest.mark.parametrize("when", ["submit", "eof", "reset"])
def test_a_failed_worker_gives_the_in_process_numbers(model, when, caplog):
    run = dict(n_steps=30, chains=16, random_seed=5, progressbar=False, model=model)
    here = pmb.sample_bdmc(cores=1, **run)
    with caplog.at_level("WARNING", logger="pymc_bdmc"):
        faulty = pmb.sample_bdmc(executor=_Failing(when), **run)
    for name in ("log_weight_forward", "log_weight_reverse"):
        np.testing.assert_array_equal(faulty["evidence"][name].values,
                                      here["evidence"][name].values)
    assert "running" in caplog.text and "in this process" in caplog.text


def test_a_failed_worker_of_step_methods_gives_the_in_process_numbers(model):
    run = dict(n_steps=10, chains=4, random_seed=6, progressbar=False, model=model)
    with model:
        step = pm.Metropolis()
    here = pmb.sample_bdmc(cores=1, step=step, **run)
    with model:
        step = pm.Metropolis()
    faulty = pmb.sample_bdmc(executor=_Failing("eof"), step=step, **run)
    np.testing.assert_array_equal(faulty["evidence"]["log_weight_forward"].values,
                                  here["evidence"]["log_weight_forward"].values)
