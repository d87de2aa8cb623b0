"""Coupling from the past for the ferromagnetic first-order Ising model (issue 18).

Draws on small grids are checked by chi-square tests against enumerated distributions, as in
``test_unnormalized_simulators.py``: the statistic is compared with ``dof + 5 sqrt(2 dof)``
(about 5 standard deviations), at fixed seeds; one test shows that the check rejects draws
made at a wrong coupling.
"""

import time

import numpy as np
import pytest
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.cftp import ising_cftp
from pymc_bdmc.unnormalized.ising import IsingSimulator, ising_enumerate, ising_statistics


def _chi_square(observed, expected):
    small = expected < 5  # pool rare cells so the chi-square approximation holds
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    dof = len(obs) - 1
    return ((obs - exp) ** 2 / exp).sum(), dof


def _s1_chi_square(draws, shape, coupling):
    """Chi-square of the draws' s₁ (nearest-neighbour sum) against its enumerated law."""
    stats, log_count = ising_enumerate(shape)
    values, inverse = np.unique(stats[:, 0], return_inverse=True)
    log_p = np.array([logsumexp(log_count[inverse == k] + coupling * v)
                      for k, v in enumerate(values)])
    p = np.exp(log_p - logsumexp(log_p))
    s1 = ising_statistics(draws)[:, 0]
    observed = np.array([(s1 == v).sum() for v in values])
    assert observed.sum() == len(draws)
    return _chi_square(observed, p * len(draws))


@pytest.mark.parametrize("shape, coupling", [((4, 4), 0.4), ((3, 5), 0.7), ((4, 4), 0.0)])
def test_cftp_draws_have_the_enumerated_law_of_s1(shape, coupling):
    draws = ising_cftp(shape, coupling, 20_000, np.random.default_rng(7))
    assert draws.shape == (20_000, *shape) and draws.dtype == np.int64
    chi2, dof = _s1_chi_square(draws, shape, coupling)
    assert chi2 < dof + 5 * np.sqrt(2 * dof), (chi2, dof)


def test_cftp_draws_have_the_exact_law_of_every_field():
    # 3 x 3: all 512 fields, at a coupling in the ordered regime of so small a grid.
    shape, coupling = (3, 3), 0.6
    draws = ising_cftp(shape, coupling, 30_000, np.random.default_rng(8))
    codes = (((draws.reshape(len(draws), 9) + 1) // 2) << np.arange(9)).sum(1)
    fields = (2 * ((np.arange(512)[:, None] >> np.arange(9)) & 1) - 1).reshape(-1, 3, 3)
    log_gamma = coupling * ising_statistics(fields)[:, 0]
    p = np.exp(log_gamma - logsumexp(log_gamma))
    chi2, dof = _chi_square(np.bincount(codes, minlength=512), p * len(draws))
    assert chi2 < dof + 5 * np.sqrt(2 * dof), (chi2, dof)


def test_cftp_chi_square_check_detects_a_wrong_coupling():
    draws = ising_cftp((4, 4), 0.5, 20_000, np.random.default_rng(9))
    chi2, dof = _s1_chi_square(draws, (4, 4), 0.45)
    assert chi2 > dof + 5 * np.sqrt(2 * dof), (chi2, dof)


def test_wide_grid_is_sampled_exactly_by_cftp():
    sim = IsingSimulator((20, 20))  # wider than the transfer matrix allows
    assert sim.exact and sim.cftp
    start = time.perf_counter()
    draws = sim.sample((0.3, 0.0), 20, np.random.default_rng(10))
    assert time.perf_counter() - start < 10.0
    assert draws.shape == (20, 20, 20) and set(np.unique(draws)) == {-1, 1}
    # E[s₁]/pairs at c = 0.3 on 20 x 20 is about 0.36; a loose sanity band, not a test of law.
    per_pair = ising_statistics(draws)[:, 0].mean() / (2 * 20 * 19)
    assert 0.2 < per_pair < 0.5, per_pair
    # Same seed, same draws.
    again = IsingSimulator((20, 20)).sample((0.3, 0.0), 20, np.random.default_rng(10))
    assert np.array_equal(draws, again)


def test_cftp_refuses_what_it_cannot_sample():
    with pytest.raises(BDMCInputError, match="coupling >= 0"):
        ising_cftp((4, 4), -0.2, 3, np.random.default_rng(0))
    with pytest.raises(BDMCInputError, match="coupling >= 0"):
        IsingSimulator((13, 20)).sample((-0.2, 0.0), 1, np.random.default_rng(0))
    with pytest.raises(BDMCInputError, match="did not coalesce within 4 sweeps"):
        ising_cftp((12, 12), 1.0, 2, np.random.default_rng(0), max_sweeps=4)
    with pytest.raises(BDMCInputError, match="exact=False"):
        IsingSimulator((13, 20), "second")
    with pytest.raises(BDMCInputError, match="first-order"):
        IsingSimulator((13, 20)).sample((0.2, 0.1), 1, np.random.default_rng(0))
    # Small grids keep the transfer matrix; exact=False keeps Swendsen-Wang.
    assert not IsingSimulator((12, 40)).cftp and not IsingSimulator((13, 20), exact=False).cftp
