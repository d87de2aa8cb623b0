"""The exchange algorithm (issue 18): its posterior against the enumerated one.

Fixed seeds; posterior means are compared within 4 batch-means standard errors, and each test
asserts that those errors are small enough to matter.
"""

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.exchange import exchange_sampler
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    enumerated_log_partition,
    ising_enumerate,
    ising_natural,
    ising_statistics,
)


def _batch_means_se(x, batches=30):
    means = np.array([b.mean() for b in np.array_split(x, batches)])
    return means.std(ddof=1) / np.sqrt(batches)


def test_exchange_posterior_matches_enumeration():
    shape, prior = (4, 4), stats.norm(0.2, 0.5)
    sim = IsingSimulator(shape)
    y = sim.sample([0.35, 0.0], 1, np.random.default_rng(0))[0]
    s_y = ising_statistics(y)
    grid = np.linspace(-3.0, 4.0, 7001)
    log_post = (prior.logpdf(grid) + grid * s_y[0]
                - enumerated_log_partition(*ising_enumerate(shape), ising_natural(grid)))
    w = np.exp(log_post - logsumexp(log_post))
    mean, sd = w @ grid, np.sqrt(w @ grid**2 - (w @ grid) ** 2)

    chain = exchange_sampler(sim, s_y, lambda t: ising_natural(t[0]),
                             lambda t: prior.logpdf(t[0]), [0.0], 6000,
                             np.random.default_rng(1), step_size=0.3)
    draws = chain.theta[:, 0]
    se = _batch_means_se(draws)
    assert chain.exact and 0.2 < chain.acceptance_rate < 0.9
    assert se < 0.25 * sd
    assert abs(draws.mean() - mean) < 4 * se, (draws.mean(), mean, se)
    assert draws.std() == pytest.approx(sd, rel=0.1)
    # The pilot and the fitted proposal the importance samplers use.
    assert chain.pilot() == pytest.approx([draws.mean()])
    q = chain.proposal(scale=1.5)
    assert np.sqrt(q.cov[0, 0]) == pytest.approx(1.5 * draws.std(ddof=1), rel=1e-9)


def test_exchange_with_two_couplings_and_a_bounded_prior():
    # Second order with separate couplings, uniform prior on [-1, 1]^2: proposals outside are
    # rejected without simulating, and every draw stays inside.
    sim = IsingSimulator((3, 4), "second")
    y = sim.sample([0.3, -0.1], 1, np.random.default_rng(2))[0]
    chain = exchange_sampler(sim, ising_statistics(y), lambda t: t,
                             lambda t: 0.0 if np.all(np.abs(t) <= 1) else -np.inf,
                             [0.0, 0.0], 300, np.random.default_rng(3), step_size=[0.4, 0.4],
                             burn_in=50)
    assert chain.theta.shape == (300, 2) and np.all(np.abs(chain.theta) <= 1)
    assert 0.05 < chain.acceptance_rate < 0.95
    assert chain.proposal(df=5).rvs(size=4, random_state=0).shape == (4, 2)


def test_exchange_refuses_bad_input():
    sim = IsingSimulator((3, 3))
    rng = np.random.default_rng(0)
    with pytest.raises(BDMCInputError, match="outside the prior"):
        exchange_sampler(sim, np.zeros(2), lambda t: ising_natural(t[0]),
                         lambda t: -np.inf, [0.0], 10, rng)
    with pytest.raises(BDMCInputError, match="shape"):
        exchange_sampler(sim, np.zeros(3), lambda t: ising_natural(t[0]),
                         lambda t: 0.0, [0.0], 10, rng)
