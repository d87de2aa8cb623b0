"""Starts restricted to where the data are possible, and the mass estimates both bounds use."""

import numpy as np
import pytest

from pymc_bdmc.model.layout import DensityParts
from pymc_bdmc.pipeline.draws import POSSIBLE_DRAWS, possible_starts

#: The data are possible where a start's first coordinate is below this: P = 0.3 under U(0, 1).
EDGE = 0.3


def _draw(n, rng):
    return rng.uniform(size=(n, 2))


def _parts(x):
    log_lik = np.where(x[:, 0] < EDGE, -1.0, -np.inf)
    return DensityParts(np.zeros(len(x)), log_lik, x, x)


def test_starts_where_the_data_are_possible_are_kept_and_nothing_is_drawn():
    x0 = np.full((5, 2), 0.1)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    x, possible = possible_starts(x0, _parts(x0).log_likelihood, _draw, _parts, rng)
    assert x is x0 and rng.bit_generator.state == state
    assert (possible.forward_offset, possible.reverse_offset, dict(possible.attrs)) == (
        0.0, 0.0, {})


def test_impossible_starts_are_replaced_by_draws_where_the_data_are_possible():
    x0 = np.array([[0.1, 0.5], [0.9, 0.5], [0.2, 0.7], [0.95, 0.1]])
    x, possible = possible_starts(x0, _parts(x0).log_likelihood, _draw, _parts,
                                  np.random.default_rng(1))
    np.testing.assert_array_equal(x[[0, 2]], x0[[0, 2]])  # possible starts kept
    assert np.all(x[[1, 3], 0] < EDGE) and not np.shares_memory(x, x0)
    assert x0[1, 0] == 0.9  # the caller's array is not changed
    attrs = possible.attrs
    assert attrs["possible_starts_redrawn"] == 2
    # The mass estimates are those of negative binomial sampling with r = POSSIBLE_DRAWS.
    m = attrs["possible_start_draws"]
    assert possible.forward_offset == pytest.approx(np.log((POSSIBLE_DRAWS - 1) / (m - 1)))
    assert possible.reverse_offset == pytest.approx(np.log(m / POSSIBLE_DRAWS))


def test_the_mass_estimates_are_unbiased():
    # exp(forward_offset) estimates P and exp(reverse_offset) 1 / P without bias (the exact
    # formulas are pinned above). Over 400 calls the means' standard errors are about 0.0008
    # and 0.009: 4 of each allowed.
    x0 = np.array([[0.9, 0.5]])
    mass, inverse = [], []
    for seed in range(400):
        _, possible = possible_starts(x0, _parts(x0).log_likelihood, _draw, _parts,
                                      np.random.default_rng(seed))
        mass.append(np.exp(possible.forward_offset))
        inverse.append(np.exp(possible.reverse_offset))
    assert np.mean(mass) == pytest.approx(EDGE, abs=4 * np.std(mass) / 20)
    assert np.mean(inverse) == pytest.approx(1 / EDGE, abs=4 * np.std(inverse) / 20)


def test_more_chains_to_replace_than_the_count_draw_as_many():
    x0 = np.full((300, 2), 0.9)
    x, possible = possible_starts(x0, _parts(x0).log_likelihood, _draw, _parts,
                                  np.random.default_rng(2))
    assert np.all(x[:, 0] < EDGE) and len(np.unique(x[:, 1])) == 300
    m = possible.attrs["possible_start_draws"]
    assert possible.forward_offset == pytest.approx(np.log(299 / (m - 1)))


def test_a_mass_too_small_to_estimate_keeps_the_starts_and_warns(monkeypatch, caplog):
    import pymc_bdmc.pipeline.draws as draws

    monkeypatch.setattr(draws, "MAX_POSSIBLE_DRAWS", 2048)
    x0 = np.array([[0.1, 0.5], [0.9, 0.5]])

    def rare(x):  # possible at about 1 in 1000 draws
        return DensityParts(np.zeros(len(x)), np.where(x[:, 0] < 1e-3, -1.0, -np.inf), x, x)

    x, possible = possible_starts(x0, rare(x0).log_likelihood, _draw, rare,
                                  np.random.default_rng(3))
    assert x is x0 and possible.forward_offset == possible.reverse_offset == 0.0
    assert 0 < possible.attrs["possible_start_mass_below"] < 0.01
    assert "carry zero weight" in caplog.text


def test_a_pilots_estimates_from_draws_where_the_data_are_possible_are_unbiased():
    # y ~ Uniform(0, b), b ~ HalfNormal(2): the data are impossible for b below 1.5 (P = 0.45).
    # The pilot draws only where they are possible; its frozen-kernel estimates add the log of
    # that mass, estimated from the same draws, and exp(estimate) averages to p(y). Without it
    # the average would be 1 / P = 2.2 times p(y).
    import pymc as pm
    from scipy import integrate, stats

    from pymc_bdmc.kernels.tuning import tune_plan
    from pymc_bdmc.model.density import ModelDensity
    from pymc_bdmc.model.simulate import ModelSimulator
    from pymc_bdmc.pipeline.draws import PilotDraws
    from pymc_bdmc.pipeline.path_choice import frozen_log_z

    with pm.Model() as model:
        pm.Uniform("y", 0, pm.HalfNormal("b", 2.0), observed=np.array([0.5, 1.5]))
    evidence = np.log(integrate.quad(lambda b: stats.halfnorm.pdf(b, scale=2.0) / b**2,
                                     1.5, np.inf)[0])
    density = ModelDensity(model)
    rng = np.random.default_rng(11)
    draws = PilotDraws(ModelSimulator(model, density.layout), density, rng, possible=True)
    x, parts, log_mass = draws(64)
    assert np.isfinite(parts.log_likelihood).all() and np.exp(log_mass) == pytest.approx(
        0.453, abs=0.1)
    plan, pilot = tune_plan(rng, x, parts, density.parts, schedule="adaptive", n_steps=20)
    w = np.exp([frozen_log_z(rng, plan, pilot, density.parts, draws, n=32) - evidence
                for _ in range(200)])
    assert abs(w.mean() - 1) < 4 * w.std() / np.sqrt(len(w))
