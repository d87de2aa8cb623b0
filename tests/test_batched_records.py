"""A batched compilation's recorded choice: loaded next time, the same function to the last bit."""

import logging

import numpy as np
import pytest
from kernel_models import kernel_model, walk_model

from pymc_bdmc.model import density as density_module
from pymc_bdmc.model.cache import compiled_model

LOADED = "Batching choice"


@pytest.fixture(autouse=True)
def _no_helpers(monkeypatch):
    """Choices made in this process, as without helpers (those: test_compile_ahead.py)."""
    monkeypatch.setattr(density_module, "start_compile_ahead", lambda recipe, label: None)


def _compile(model, caplog, **kwargs):
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        return compiled_model(model, cache=False, **kwargs).density


def _assert_same(first, second, n_rows=9):
    x = np.random.default_rng(5).normal(scale=0.5, size=(n_rows, first.n_dim))
    for a, b in zip(first._parts_fn(x), second._parts_fn(x), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("build", "batching"), [(walk_model, "vectorized"),
                                                 (kernel_model, "blockwise")])
def test_a_recorded_choice_is_loaded_without_the_gradients_graph_and_gives_the_same_bits(
        cache_dir, caplog, build, batching):
    first = _compile(build(), caplog)
    assert first.batching == batching and LOADED not in caplog.text
    assert len(list((cache_dir / "batched").glob("*.json"))) == 1
    again = _compile(build(), caplog)
    assert LOADED in caplog.text and again.batching == batching
    assert again._gradient_graph is None  # neither vectorized, nor checked, nor differentiated
    _assert_same(first, again)
    assert again.hot_graph[1][2].ndim == 1  # built where needed (workers, fused kernels)


def test_other_data_or_a_users_mode_choose_again(cache_dir, caplog):
    first = _compile(walk_model(), caplog)
    other = _compile(walk_model(np.linspace(2.0, -1.0, 12)), caplog)
    assert LOADED not in caplog.text  # the choice was checked on the data: checked again
    assert "Rewritten graph loaded" in caplog.text  # the rewrites still come from the cache
    other.set_observed(first.observed_data())
    _assert_same(first, other)
    _compile(walk_model(), caplog, compile_kwargs={"mode": "FAST_COMPILE"})
    assert LOADED not in caplog.text


def test_a_record_whose_graph_is_gone_or_unreadable_means_choosing_again(cache_dir, caplog):
    first = _compile(walk_model(), caplog)
    for pickled in cache_dir.glob("*.pkl"):
        pickled.unlink()
    gone = _compile(walk_model(), caplog)
    assert LOADED not in caplog.text
    _assert_same(first, gone)
    (record,) = (cache_dir / "batched").glob("*.json")
    record.write_text("{not json")
    unreadable = _compile(walk_model(), caplog)
    assert "unusable" in caplog.text and LOADED not in caplog.text
    _assert_same(first, unreadable)
    _compile(walk_model(), caplog)
    assert LOADED in caplog.text  # recorded anew


def test_the_densities_without_gradients_are_not_taken_for_those_with(cache_dir, caplog):
    # Both are keyed by the densities' graph: the record says which function it holds.
    with_gradients = _compile(walk_model(), caplog)
    without = _compile(walk_model(), caplog, gradients=False)
    x = np.random.default_rng(2).normal(scale=0.5, size=(4, without.n_dim))
    parts = without.parts(x)
    np.testing.assert_array_equal(parts.grad_log_prior, 0.0)  # no gradients compiled
    np.testing.assert_allclose(parts.log_prior, with_gradients.parts(x).log_prior, rtol=1e-12)
    again = _compile(walk_model(), caplog)
    assert LOADED in caplog.text and again.parts(x).grad_log_prior.any()


def test_without_the_choosing_code_to_read_the_records_still_key_by_version(monkeypatch):
    from pathlib import Path

    from pymc_bdmc.model import batched_records

    def unreadable(self):
        raise OSError("no source in this installation")

    batched_records._chooser_digest.cache_clear()
    monkeypatch.setattr(Path, "read_bytes", unreadable)
    try:
        assert batched_records._chooser_digest() == "unread"
    finally:
        monkeypatch.undo()
        batched_records._chooser_digest.cache_clear()
    assert len(batched_records._chooser_digest()) == 16
