"""A call keeps the process's objects out of full garbage collections, then unfreezes them."""

import gc

import pymc as pm
import pytest

import pymc_bdmc as pmb
from pymc_bdmc.pipeline import driver, heap


@pytest.fixture
def unfrozen(monkeypatch):
    """A process whose frozen objects (if any) are those frozen before the package's calls."""
    monkeypatch.setattr(heap, "_frozen_before", gc.get_freeze_count())
    return gc.get_freeze_count()


def test_objects_are_frozen_inside_and_unfrozen_after_even_on_error(unfrozen):
    tracked = len(gc.get_objects())
    with pytest.raises(RuntimeError), heap.objects_frozen() as froze:
        assert froze
        # Every object tracked at the start is in the permanent generation now.
        assert gc.get_freeze_count() >= tracked
        raise RuntimeError("the call failed")
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_objects_frozen_by_someone_else_are_left_alone(unfrozen):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with heap.objects_frozen() as froze:
            assert not froze
        assert gc.get_freeze_count() == frozen  # the user's freeze is still in place
    finally:
        gc.unfreeze()


def test_a_disabled_collector_is_left_alone(unfrozen):
    gc.disable()
    try:
        with heap.objects_frozen() as froze:
            assert not froze and gc.get_freeze_count() == unfrozen
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_call_runs_frozen_and_leaves_the_collector_as_it_found_it(unfrozen, monkeypatch):
    seen, original = [], driver._run

    def recording(*args, **kwargs):
        seen.append(gc.get_freeze_count())
        return original(*args, **kwargs)

    monkeypatch.setattr(driver, "_run", recording)
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=[0.2, -0.1])
        pmb.sample_ais(n_steps=10, chains=4, random_seed=1, progressbar=False)
    assert len(seen) == 1 and seen[0] > 1000
    assert gc.get_freeze_count() == 0 and gc.isenabled()
